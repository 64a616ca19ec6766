"""Stable-Baselines3 PPO on CartPole-v1, side by side: portkern's VecEnv vs SB3's usual Gymnasium route.

Both runs use the same PPO hyperparameters (RL Zoo's tuned CartPole-v1 set), seed and torch threads;
each trains until the mean return of the last 20 finished episodes is >= 475 (Gymnasium's reward
threshold) or the step budget runs out, and the script prints env steps and wall time for each:

* portkern: ``portkern.sb3.make_vec_env("CartPole-v1", 8)``, a ``VecMonitor`` over one batched env;
* Gymnasium: ``stable_baselines3.common.env_util.make_vec_env("CartPole-v1", 8)``, SB3's
  ``DummyVecEnv`` of ``Monitor``-wrapped Gymnasium ``CartPoleEnv``s (SB3 takes its own ``VecEnv``,
  not a Gymnasium ``VectorEnv``).

    pip install -e ".[sb3]" && python examples/sb3_cartpole.py
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

from portkern.sb3 import make_vec_env as portkern_make_vec_env

TARGET = 475.0  # Gymnasium's CartPole-v1 reward threshold
WINDOW = 20  # finished episodes averaged for the solved check (as examples/ppo.py)


def linear(start: float):
    """RL Zoo's lin_<x>: SB3 passes the remaining progress, 1 -> 0."""
    return lambda progress: progress * start


def hyperparameters() -> dict:
    """RL Zoo (rl-baselines3-zoo hyperparams/ppo.yml) CartPole-v1 with n_envs 8."""
    return dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                learning_rate=linear(1e-3), clip_range=linear(0.2))  # fmt: skip


class StopWhenSolved(BaseCallback):
    """Stops training once the last WINDOW finished episodes average >= TARGET; records when."""

    def __init__(self) -> None:
        super().__init__()
        self.t0 = time.perf_counter()
        self.solved_at: tuple[int, float] | None = None
        self.mean = float("nan")

    def _on_step(self) -> bool:
        episodes = [ep["r"] for ep in self.model.ep_info_buffer]
        if len(episodes) >= WINDOW:
            self.mean = float(np.mean(episodes[-WINDOW:]))
            if self.mean >= TARGET:
                self.solved_at = (self.num_timesteps, time.perf_counter() - self.t0)
                return False
        return True


def run(name: str, make, args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    env = make()
    model = PPO("MlpPolicy", env, seed=args.seed, device="cpu", **hyperparameters())
    callback = StopWhenSolved()
    callback.t0 = t0  # wall time includes building the env and the model
    model.learn(args.total_timesteps, callback=callback)
    wall = time.perf_counter() - t0
    steps, at = callback.solved_at or (model.num_timesteps, wall)
    return {"name": name, "solved": callback.solved_at is not None, "steps": steps, "wall_s": at,
            "mean": callback.mean}  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=300_000, help="step budget per run")
    p.add_argument("--backend", default="numpy", help="portkern backend stepping the envs")
    p.add_argument("--torch-threads", type=int, default=1, help="tiny MLPs: more threads only add sync overhead")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.num_envs
    torch.set_num_threads(args.torch_threads)
    # Warm-up outside the timings: the first PPO in a process pays torch's lazy initialisation.
    PPO("MlpPolicy", sb3_make_vec_env("CartPole-v1", 1), n_steps=64, batch_size=64, n_epochs=1,
        device="cpu").learn(64)  # fmt: skip
    runs = [
        run(f"portkern ({args.backend})", lambda: portkern_make_vec_env("CartPole-v1", n, seed=args.seed,
                                                                         backend=args.backend), args),
        run("Gymnasium (SB3 DummyVecEnv)", lambda: sb3_make_vec_env("CartPole-v1", n, seed=args.seed), args),
    ]  # fmt: skip
    print(f"\nSB3 PPO on CartPole-v1, {n} envs, seed {args.seed}, solved = mean return of the last {WINDOW} "
          f"episodes >= {TARGET:g}")  # fmt: skip
    for r in runs:
        state = "solved" if r["solved"] else "NOT solved"
        print(f"  {r['name']:<28} {state:<10} {r['steps']:>8,d} env steps  {r['wall_s']:6.1f} s  "
              f"(mean return {r['mean']:.1f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
