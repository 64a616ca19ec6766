"""Many policies per device: the jax training stack with K seeds in one vmapped program against K = 1.

Prints one JSON line per K: the batch's wall seconds (setup and compile included, as ``portkern train``
counts H), the update at which each seed converged, and device-seconds per converged policy (the batch's
wall time over its converged policies). Compile happens once per process and K in a priming batch of
other seeds, so every measured batch starts warm, as ``portkern train``'s runs do after ``prime``.

    python bench/cpu/jax_parallel_seeds.py --task CartPole-v1 --k 1,8 --seeds 1,2,3,4,5,6,7,8
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="CartPole-v1")
    p.add_argument("--k", default="1,8", help="comma-separated batch sizes (policies per device)")
    p.add_argument("--seeds", default="1,2,3,4,5,6,7,8", help="seeds; each K trains them in batches of K")
    p.add_argument("--device", default=None, help="jax device ('cpu', 'gpu', 'cuda:0'); default: JAX's")
    args = p.parse_args(argv)
    from portkern.train import config, jax_ppo

    try:
        ks = [int(x) for x in args.k.split(",")]
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        p.error("--k and --seeds: expected comma-separated integers")
    if any(k < 1 for k in ks):
        p.error(f"--k: expected batch sizes >= 1, got {args.k}")
    task = config.task(args.task)
    for k in ks:
        if len(seeds) % k:
            p.error(f"--seeds: {len(seeds)} seeds do not split into batches of {k}")
        # Prime: one update of other seeds compiles this K's programs (the same shapes; the budget is no part
        # of the compiled program).
        one = config.task(args.task, total_timesteps=task.ppo.batch_size)
        jax_ppo.train_parallel(one, [10_000 + s for s in range(k)], args.device)
        for i in range(0, len(seeds), k):
            r = jax_ppo.train_parallel(task, seeds[i:i + k], args.device)
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
