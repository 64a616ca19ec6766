"""Milliseconds per PPO update of one portkern training stack, split by phase: a short run at a fixed number of
updates (primed first, so no compile is timed), for A/B comparisons of the training code between two checkouts
on one machine.

    python bench/cpu/train_per_update.py --stack torch_compile --config default --updates 80

``--task`` is a pinned task (default CartPole-v1). ``--config pinned`` is its pinned settings; ``default`` (CartPole-v1
only) is PureJaxRL's own settings (4 envs x 128 steps,
lr 2.5e-4; bench/cpu/purejaxrl_peer.py). The budget is cut to ``--updates`` updates (the lr anneals over them), and
a run that converges earlier stops there: compare the milliseconds per update, not the totals. Prints one JSON
line: the stack, the config, the CPU model, ms per update (wall less setup) and each phase's ms per update.
To A/B two versions, alternate runs with ``PYTHONPATH`` pointing at each checkout.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stack", required=True, help="a portkern train stack spec, e.g. torch_compile, opencl+fused@intel")
    p.add_argument("--task", default="CartPole-v1", help="a pinned task (default CartPole-v1)")
    p.add_argument("--config", choices=("pinned", "default"), default="pinned")
    p.add_argument("--updates", type=int, default=80, help="updates to run (default 80)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.updates < 1:
        p.error(f"--updates: expected an integer >= 1, got {args.updates}")
    if args.config == "default" and args.task != "CartPole-v1":
        p.error(f"--config default: PureJaxRL's settings are CartPole-v1's, not {args.task}'s; use --config pinned")

    from portkern.identity import cpu_model
    from portkern.train import config, runner
    from portkern.train.stacks import parse_stack

    from purejaxrl_peer import default_overrides, purejaxrl_config  # this folder: the same "default" config

    overrides = {}
    if args.config == "default":
        overrides = default_overrides(purejaxrl_config("default", None))
        del overrides["total_timesteps"]  # cut to --updates below
    batch = config.task(args.task, **overrides).ppo.batch_size
    task = config.task(args.task, **overrides, total_timesteps=args.updates * batch)
    spec = parse_stack(args.stack)
    runner.prime(task, spec)
    r, _ = runner.train_one(task, spec, args.seed)
    setup = r.phases.get("setup", 0.0)
    print(json.dumps({"task": args.task, "stack": r.stack, "config": args.config, "cpu": cpu_model(), "seed": args.seed,
                      "updates": r.updates, "ms_per_update": round((r.wall_s - setup) / r.updates * 1e3, 3),
                      "phases_ms_per_update": {k: round(v / r.updates * 1e3, 3) for k, v in r.phases.items()},
                      "update_share": round(r.phases.get("update", 0.0) / r.wall_s, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
