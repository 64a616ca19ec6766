"""portkern's Gymnasium envs against Gymnasium's own, as the RL tools use them: one env at a time.

1. ``gymnasium.utils.performance.benchmark_step`` (steps/s of ``env.step(env.action_space.sample())``
   with resets, through ``gymnasium.make``'s wrappers) on ``portkern/<id>`` and ``<id>``, the two taking
   turns for ``--rounds`` rounds in one process: median steps/s, the min..max spread, and the median of
   the per-round ratios.
2. Vector envs at N = 1..16, microseconds per ``step`` (pre-drawn actions), interleaved: portkern's batch
   on numpy (``gymnasium.make_vec("portkern/<id>", N)``), Gymnasium's ``SyncVectorEnv`` of portkern's
   single env (``vectorization_mode="sync"``) and Gymnasium's ``SyncVectorEnv`` of its own env.

    PYTHONPATH=. python bench/cpu/gym_single.py [--rounds 7] [--duration 0.5] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import gymnasium as gym
import numpy as np
from _common import interleaved, machine_info, median, write_json
from gymnasium.utils.performance import benchmark_step

import portkern  # noqa: F401  (registers portkern/<id>)
from portkern import envs
from portkern.backends.numpy import NumpyBackend

ENV_IDS = tuple(envs.gymnasium_envs())  # the envs Gymnasium has its own of, to compare with
VECTOR_NS = (1, 2, 4, 8, 16)


def single(env_id: str, rounds: int, duration: float) -> dict:
    ours, theirs = gym.make(f"portkern/{env_id}"), gym.make(env_id)
    ours.action_space.seed(0), theirs.action_space.seed(0)
    p, g = [], []
    for _ in range(rounds):  # alternate, so drift in the machine's load hits both alike
        g.append(benchmark_step(theirs, target_duration=duration))
        p.append(benchmark_step(ours, target_duration=duration))
    ratios = [a / b for a, b in zip(p, g)]
    return {
        "env": env_id, "portkern_steps_s": median(p), "gymnasium_steps_s": median(g),
        "portkern_range": [min(p), max(p)], "gymnasium_range": [min(g), max(g)],
        "ratio_median": median(ratios), "ratio_range": [min(ratios), max(ratios)],
    }  # fmt: skip


def vector(env_id: str, n: int, steps: int, repeats: int) -> dict:
    ours = gym.make_vec(f"portkern/{env_id}", n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = gym.make_vec(env_id, n, vectorization_mode="sync")
        ours_sync = gym.make_vec(f"portkern/{env_id}", n, vectorization_mode="sync")
    ours.reset(seed=0), theirs.reset(seed=0), ours_sync.reset(seed=0)
    theirs.action_space.seed(0)
    actions = [theirs.action_space.sample() for _ in range(steps)]

    def run(env):
        def go():
            for a in actions:
                env.step(a)

        return go

    t = interleaved({"portkern": run(ours), "portkern_sync": run(ours_sync), "sync": run(theirs)}, repeats)
    us = {k: median(v) / steps * 1e6 for k, v in t.items()}
    return {"env": env_id, "n": n, "portkern_us_per_step": us["portkern"], "sync_us_per_step": us["sync"],
            "portkern_sync_us_per_step": us["portkern_sync"],
            "portkern_range_us": [min(t["portkern"]) / steps * 1e6, max(t["portkern"]) / steps * 1e6],
            "sync_range_us": [min(t["sync"]) / steps * 1e6, max(t["sync"]) / steps * 1e6]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="alternating benchmark_step rounds per env")
    ap.add_argument("--duration", type=float, default=0.5, help="seconds per benchmark_step call")
    ap.add_argument("--vector-steps", type=int, default=200, help="steps per timed vector call")
    ap.add_argument("--vector-repeats", type=int, default=5)
    ap.add_argument("--no-vector", action="store_true", help="only the single-env comparison")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if args.rounds < 1 or args.duration <= 0:
        ap.error("--rounds must be >= 1 and --duration > 0")
    rows = [single(e, args.rounds, args.duration) for e in ENV_IDS]
    print(f"benchmark_step, {args.rounds} alternating rounds of {args.duration} s (median [min..max] steps/s)")
    print(f"{'env':26s} {'portkern':>26s} {'gymnasium':>26s} {'ratio':>18s}")
    for r in rows:
        pr, gr, rr = r["portkern_range"], r["gymnasium_range"], r["ratio_range"]
        print(f"{r['env']:26s} {r['portkern_steps_s']:>9,.0f} [{pr[0]:,.0f}..{pr[1]:,.0f}]"
              f" {r['gymnasium_steps_s']:>9,.0f} [{gr[0]:,.0f}..{gr[1]:,.0f}]"
              f" {r['ratio_median']:5.2f} [{rr[0]:.2f}..{rr[1]:.2f}]")  # fmt: skip
    vec = []
    if not args.no_vector:
        print("\nvector env step, us per step (median of interleaved repeats): portkern's batch, SyncVectorEnv of "
              "portkern's single env, SyncVectorEnv of Gymnasium's env")
        for e in ENV_IDS:
            for n in VECTOR_NS:
                v = vector(e, n, args.vector_steps, args.vector_repeats)
                vec.append(v)
                print(f"{e:26s} N={n:<3d} batch {v['portkern_us_per_step']:8.1f}  "
                      f"portkern sync {v['portkern_sync_us_per_step']:8.1f}  gymnasium sync {v['sync_us_per_step']:8.1f}")
    if args.out:
        info = machine_info([NumpyBackend()])
        path = write_json(args.out, {"machine": info, "benchmark_step": rows, "vector": vec,
                                     "summary": {"ratio_median_min": statistics.median([r["ratio_median"] for r in rows])}})  # fmt: skip
        print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
