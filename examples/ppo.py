"""PPO (CleanRL style, PyTorch on CPU) on a device-resident portkern env, with a wall-time breakdown."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

import portkern
from portkern import buffer, step

PHASES = {
    "setup": "setup (env build, kernel compile, model init, reset)",
    "act": "acting (policy/value forward, incl. bootstrap values)",
    "env": "environment stepping",
    "adv": "advantage computation (portkern.buffer.gae)",
    "update": "update (PPO epochs)",
    "move": "data movement (device<->host, numpy<->torch)",
}
# Gymnasium's reward thresholds, so the script does not need Gymnasium installed.
TARGETS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0, "MountainCar-v0": -110.0}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    a = p.add_argument
    a("--env-id", default="CartPole-v1", help="a portkern env with discrete actions")
    a("--backend", default="numpy", help="portkern backend stepping the envs")
    a("--device", default=None, help="backend device (default: the backend's default)")
    a("--seed", type=int, default=1)
    a("--num-envs", type=int, default=32)
    a("--num-steps", type=int, default=64, help="rollout length per env per update")
    a("--total-timesteps", type=int, default=1_000_000, help="env-step budget, also the lr annealing horizon")
    a("--max-seconds", type=float, default=600.0, help="wall-time budget")
    a("--lr", type=float, default=1e-3, help="CleanRL uses 2.5e-4 for batches 4x smaller")
    a("--no-anneal-lr", dest="anneal_lr", action="store_false")
    a("--gamma", type=float, default=0.99)
    a("--gae-lambda", type=float, default=0.95)
    a("--num-minibatches", type=int, default=4)
    a("--update-epochs", type=int, default=4)
    a("--no-norm-adv", dest="norm_adv", action="store_false")
    a("--clip-coef", type=float, default=0.2)
    a("--no-clip-vloss", dest="clip_vloss", action="store_false")
    a("--ent-coef", type=float, default=0.01)
    a("--vf-coef", type=float, default=0.5)
    a("--max-grad-norm", type=float, default=0.5)
    a("--target-kl", type=float, default=None)
    a("--target-return", type=float, default=None, help="solved threshold (default: Gymnasium's)")
    a("--solve-window", type=int, default=20, help="finished episodes averaged for the solved check")
    a("--torch-threads", type=int, default=1, help="tiny MLPs: more threads only add sync overhead")
    a("--log-every", type=int, default=10, help="print progress every N updates (0: never)")
    return p.parse_args(argv)


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    """CleanRL's separate 64-64 tanh actor and critic."""

    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )  # fmt: skip
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, n_actions), std=0.01),
        )  # fmt: skip

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def act(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action, log_prob, entropy, value)``; samples an action unless one is given."""
        # No argument checks: at these batch sizes they cost more than the 64-unit forward itself.
        dist = Categorical(logits=self.actor(x), validate_args=False)
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(x)


class PhaseTimer:
    """Accumulates wall seconds per phase."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t0


@dataclass
class UpdateStats:
    update: int
    global_step: int
    mean_return: float  # over episodes finished in this update's rollout (nan if none)
    pg_loss: float
    v_loss: float
    entropy: float
    approx_kl: float


@dataclass
class Result:
    solved: bool
    global_step: int
    wall_s: float
    mean_return: float  # over the last solve_window finished episodes
    episodes: int
    phases: dict[str, float]
    updates: list[UpdateStats] = field(default_factory=list)
    compile_s: float = 0.0  # torch_compile backend: seconds of calls that compiled (inside the phases)


def train(args: argparse.Namespace) -> Result:
    torch.set_num_threads(args.torch_threads)
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    timer = PhaseTimer()
    with timer("setup"):
        env = step.make(args.env_id, args.num_envs, backend=args.backend, device=args.device, seed=args.seed)
    if not env.spec.is_discrete:
        raise SystemExit(f"--env-id: this PPO handles discrete actions only; {args.env_id} has a Box action")
    backend = env.backend
    T, N, D = args.num_steps, args.num_envs, env.spec.obs_dim
    batch_size = T * N
    minibatch_size = batch_size // args.num_minibatches
    num_updates = max(1, args.total_timesteps // batch_size)
    target = args.target_return if args.target_return is not None else TARGETS.get(args.env_id, math.inf)

    with timer("setup"):
        next_obs = env.reset()
        # The torch backends return torch tensors on the env's device: the agent, the rollout
        # storage and the advantages then live there too, and nothing crosses between libraries.
        zero_copy = isinstance(next_obs, torch.Tensor)
        device = next_obs.device if zero_copy else torch.device("cpu")
        agent = Agent(D, env.spec.discrete_actions).to(device)
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.lr, eps=1e-5)

    # Rollout storage: torch tensors; on the host path their NumPy views share memory, so filling one fills the other.
    obs_buf = torch.zeros((T, N, D), device=device)
    final_obs_buf = torch.zeros((T, N, D), device=device)
    actions_buf = torch.zeros((T, N), dtype=torch.long, device=device)
    logprobs_buf = torch.zeros((T, N), device=device)
    values_buf = torch.zeros((T, N), device=device)
    rewards_buf = torch.zeros((T, N), device=device)
    terminated_buf = torch.zeros((T, N), dtype=torch.bool, device=device)
    truncated_buf = torch.zeros((T, N), dtype=torch.bool, device=device)
    if not zero_copy:
        obs_np, final_obs_np, values_np = obs_buf.numpy(), final_obs_buf.numpy(), values_buf.numpy()
        rewards_np, terminated_np, truncated_np = rewards_buf.numpy(), terminated_buf.numpy(), truncated_buf.numpy()

    episode_return = torch.zeros(N, dtype=torch.float64, device=device)
    recent: deque[float] = deque(maxlen=args.solve_window)
    episodes, global_step, solved = 0, 0, False
    updates: list[UpdateStats] = []

    for update in range(1, num_updates + 1):
        if args.anneal_lr:
            optimizer.param_groups[0]["lr"] = args.lr * (1.0 - (update - 1.0) / num_updates)
        finished: list[float] = []
        for t in range(T):
            if zero_copy:
                # Same-device tensor copies into the rollout storage (the env reuses its buffers) are
                # part of acting and stepping: nothing here is data movement between libraries.
                with timer("act"), torch.no_grad():
                    obs_buf[t] = next_obs
                    action, logprob, _, value = agent.act(obs_buf[t])
                    actions_buf[t], logprobs_buf[t], values_buf[t] = action, logprob, value
                with timer("env"):
                    next_obs, reward, terminated, truncated = env.step(action.to(torch.int32))
                    rewards_buf[t], terminated_buf[t], truncated_buf[t] = reward, terminated, truncated
                    final_obs_buf[t] = env.final_obs
                    backend.synchronize()
            else:
                with timer("move"):
                    obs_np[t] = portkern.to_numpy(next_obs)  # copy: the env reuses its obs buffer
                with timer("act"), torch.no_grad():
                    action, logprob, _, value = agent.act(obs_buf[t])
                with timer("move"):
                    actions_buf[t] = action
                    logprobs_buf[t] = logprob
                    values_buf[t] = value
                    host_actions = action.numpy().astype(np.int32)
                with timer("env"):
                    next_obs, reward, terminated, truncated = env.step(host_actions)
                    backend.synchronize()  # charge asynchronous kernels to stepping, not to the next copy
                with timer("move"):
                    rewards_np[t] = portkern.to_numpy(reward)
                    terminated_np[t] = portkern.to_numpy(terminated)
                    truncated_np[t] = portkern.to_numpy(truncated)
                    # same_step autoreset: final_obs is every env's post-step obs (pre-reset where it finished).
                    final_obs_np[t] = portkern.to_numpy(env.final_obs)
            episode_return += rewards_buf[t]
            done = terminated_buf[t] | truncated_buf[t]
            if done.any():
                finished.extend(episode_return[done].tolist())
                episode_return[done] = 0.0
        global_step += batch_size
        episodes += len(finished)
        recent.extend(finished)

        with timer("act"), torch.no_grad():
            # V(obs each step reached): gae zeroes it where the step terminated, keeps it where it truncated.
            next_values = agent.value(final_obs_buf.reshape(-1, D)).reshape(T, N)
        if zero_copy:
            with timer("adv"):
                b_advantages, b_returns = buffer.gae(
                    rewards_buf, values_buf, next_values, terminated_buf, truncated_buf,
                    gamma=args.gamma, lam=args.gae_lambda, backend=backend,
                )  # fmt: skip
                backend.synchronize()
            b_advantages, b_returns = b_advantages.reshape(-1), b_returns.reshape(-1)
        else:
            with timer("move"):
                next_values_np = next_values.numpy()
            with timer("adv"):
                advantages, returns = buffer.gae(
                    rewards_np, values_np, next_values_np, terminated_np, truncated_np,
                    gamma=args.gamma, lam=args.gae_lambda, backend=backend,
                )  # fmt: skip
                backend.synchronize()
            with timer("move"):
                b_advantages = torch.from_numpy(portkern.to_numpy(advantages)).reshape(-1)
                b_returns = torch.from_numpy(portkern.to_numpy(returns)).reshape(-1)

        with timer("update"):
            stats = ppo_update(
                agent, optimizer, args, obs_buf.reshape(-1, D), actions_buf.reshape(-1),
                logprobs_buf.reshape(-1), values_buf.reshape(-1), b_advantages, b_returns, minibatch_size,
            )  # fmt: skip
        mean_return = float(np.mean(finished)) if finished else math.nan
        updates.append(UpdateStats(update, global_step, mean_return, *stats))
        window_mean = float(np.mean(recent)) if recent else math.nan
        solved = len(recent) == args.solve_window and window_mean >= target
        elapsed = time.perf_counter() - t_start
        if args.log_every and (update % args.log_every == 0 or solved):
            print(
                f"update {update:4d}  step {global_step:8d}  return(last {len(recent)}) {window_mean:7.1f}  "
                f"SPS {global_step / elapsed:8.0f}  pg {stats[0]:+.3f}  v {stats[1]:.3f}  kl {stats[3]:.4f}",
                flush=True,
            )
        if solved or elapsed >= args.max_seconds:
            break

    wall = time.perf_counter() - t_start
    phases = dict(timer.seconds, other=max(0.0, wall - sum(timer.seconds.values())))
    final = float(np.mean(recent)) if recent else math.nan
    compile_s = sum(getattr(backend, "compile_seconds", {}).values())
    return Result(solved, global_step, wall, final, episodes, phases, updates, compile_s)


def ppo_update(
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    args: argparse.Namespace,
    b_obs: torch.Tensor,
    b_actions: torch.Tensor,
    b_logprobs: torch.Tensor,
    b_values: torch.Tensor,
    b_advantages: torch.Tensor,
    b_returns: torch.Tensor,
    minibatch_size: int,
) -> tuple[float, float, float, float]:
    """CleanRL's clipped-objective epochs over shuffled minibatches: ``(pg, v, entropy, approx_kl)``."""
    batch_size = b_obs.shape[0]
    pg_loss = v_loss = entropy_loss = approx_kl = torch.zeros(())
    for _ in range(args.update_epochs):
        perm = torch.randperm(batch_size, device=b_obs.device)
        for start in range(0, batch_size, minibatch_size):
            mb = perm[start : start + minibatch_size]
            _, newlogprob, entropy, newvalue = agent.act(b_obs[mb], b_actions[mb])
            logratio = newlogprob - b_logprobs[mb]
            ratio = logratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1) - logratio).mean()
            mb_adv = b_advantages[mb]
            if args.norm_adv:
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(
                -mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
            ).mean()
            if args.clip_vloss:
                v_unclipped = (newvalue - b_returns[mb]) ** 2
                v_delta = torch.clamp(newvalue - b_values[mb], -args.clip_coef, args.clip_coef)
                v_clipped = b_values[mb] + v_delta
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_returns[mb]) ** 2).mean()
            else:
                v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
            entropy_loss = entropy.mean()
            loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
        if args.target_kl is not None and approx_kl > args.target_kl:
            break
    return pg_loss.item(), v_loss.item(), entropy_loss.item(), approx_kl.item()


def report(args: argparse.Namespace, result: Result) -> str:
    total = result.wall_s
    lines = ["", "phase breakdown (wall seconds, share of total):"]
    for key, seconds in result.phases.items():
        label = PHASES.get(key, "other (episode bookkeeping, logging)")
        lines.append(f"  {label:<56} {seconds:8.2f} s  {100 * seconds / total:5.1f} %")
    if result.compile_s:
        label = "of which compiling (torch.compile, in the phases above)"
        lines.append(f"  {label:<56} {result.compile_s:8.2f} s  {100 * result.compile_s / total:5.1f} %")
    lines += [
        f"env steps: {result.global_step}  episodes: {result.episodes}  wall time: {total:.1f} s  "
        f"({result.global_step / total:.0f} steps/s)",
        f"final mean return (last {args.solve_window} finished episodes): {result.mean_return:.1f}",
        f"{'SOLVED' if result.solved else 'NOT SOLVED'}: {args.env_id} "
        f"(target {args.target_return if args.target_return is not None else TARGETS.get(args.env_id)})",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = train(args)
    print(report(args, result))
    return 0  # solved, or the requested budget ran out: both are successful runs


if __name__ == "__main__":
    sys.exit(main())
