"""PPO (CleanRL style, PyTorch) on a device-resident portkern env, with a wall-time breakdown.

The PPO itself is the package's measurement instrument (``portkern.train``); this script runs one task on one
stack with any of its settings overridden. ``portkern train`` runs the pinned tasks over stacks and seeds.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Sequence

from portkern.train import config
from portkern.train.ppo import PHASES
from portkern.train.runner import RunResult, train_one
from portkern.train.stacks import parse_stack

PPO_FLAGS = ("num_envs", "num_steps", "lr", "gamma", "gae_lambda", "num_minibatches", "update_epochs", "clip_coef",
             "ent_coef", "vf_coef", "max_grad_norm", "torch_threads", "solve_window")  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    a = p.add_argument
    a("--env-id", default="CartPole-v1", help="a pinned task of portkern/data/train_configs.json")
    a("--backend", default="numpy", help="portkern backend stepping the envs (torch: resident, zero-copy)")
    a("--device", default=None, help="backend device (default: the backend's default)")
    a("--fused", action="store_true", help="collect each rollout in one launch with the in-kernel MLP")
    a("--gymnasium", action="store_true", help="step Gymnasium's SyncVectorEnv instead of a portkern backend")
    a("--seed", type=int, default=1)
    a("--total-timesteps", type=int, default=None, help="env-step budget, also the lr annealing horizon")
    a("--max-seconds", type=float, default=None, help="wall-time budget")
    a("--target-return", type=float, default=None, help="solved threshold (default: the task's)")
    for name in PPO_FLAGS:
        a("--" + name.replace("_", "-"), type=int if name in config._INT else float, default=None,
          help="default: the task's pinned value")  # fmt: skip
    a("--log-every", type=int, default=10, help="print progress every N updates (0: never)")
    a("--no-anneal-lr", dest="anneal_lr", action="store_const", const=False, default=None)
    a("--no-norm-adv", dest="norm_adv", action="store_const", const=False, default=None)
    a("--no-clip-vloss", dest="clip_vloss", action="store_const", const=False, default=None)
    return p.parse_args(argv)


def task_of(args: argparse.Namespace) -> config.TaskConfig:
    over = {k: getattr(args, k) for k in (*PPO_FLAGS, "anneal_lr", "norm_adv", "clip_vloss") if getattr(args, k) is not None}
    for k, field in (("total_timesteps", "total_timesteps"), ("max_seconds", "max_seconds"), ("target_return", "target")):
        if getattr(args, k) is not None:
            over[field] = getattr(args, k)
    return config.task(args.env_id, **over)


def stack_of(args: argparse.Namespace) -> str:
    if args.gymnasium:
        return "gymnasium"
    return args.backend + ("+fused" if args.fused else "") + (f"@{args.device}" if args.device else "")


def train(args: argparse.Namespace) -> RunResult:
    count = [0]

    def progress(steps: int, budget: int, mean: float) -> None:
        count[0] += 1
        if args.log_every and count[0] % args.log_every == 0:
            print(f"update {count[0]:4d}  step {steps:8d} of {budget}  return(window) {mean:7.1f}", flush=True)

    return train_one(task_of(args), parse_stack(stack_of(args)), args.seed, progress)[0]


def report(args: argparse.Namespace, result: RunResult) -> str:
    task = task_of(args)
    total = result.wall_s
    lines = ["", f"{args.env_id} on {result.stack} ({result.device_key}), seed {result.seed}",
             "phase breakdown (wall seconds, share of total):"]  # fmt: skip
    for key, seconds in result.phases.items():
        lines.append(f"  {seconds:8.2f} s  {100 * seconds / total:5.1f} %  {PHASES[key]}")
    lines.append(f"  {result.untimed_s:8.2f} s  {100 * result.untimed_s / total:5.1f} %  untimed (between phases)")
    if result.compile_s:
        label = "of which compiling (torch.compile, in the phases above)"
        lines.append(f"  {result.compile_s:8.2f} s  {100 * result.compile_s / total:5.1f} %  {label}")
    target = task.target
    lines += [
        f"env steps: {result.env_steps}  episodes: {result.episodes}  wall time: {total:.1f} s  "
        f"({result.steps_per_s:.0f} steps/s)",
        f"final mean return (last {task.ppo.solve_window} finished episodes): {result.final_return:.1f}",
        f"{'SOLVED' if result.converged else 'NOT SOLVED'}: {args.env_id} (target {target:g}; {result.stop_reason})",
    ]
    if result.converged and math.isfinite(result.wall_s):
        lines.append(f"device-hours per converged policy: {result.wall_s / 3600:.3g}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = train(args)
    print(report(args, result))
    return 0  # solved, or the requested budget ran out: both are successful runs


if __name__ == "__main__":
    sys.exit(main())
