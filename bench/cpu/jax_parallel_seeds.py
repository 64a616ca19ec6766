"""Many policies per device: the jax training stack with K seeds at once (one vmapped program per chunk of
updates, as ``portkern train --stack jax --parallel-seeds K`` runs them) against the same seeds one at a time
(``portkern train --stack jax``), interleaved round by round on one machine.

A round is K seeds: each trained alone, and the K trained at once as one batch; the order of the two flips
every round (ABBA), so a drift in the machine's load hits both alike. Each line of the output (JSON lines) is
one single-seed run or one batch: wall seconds (setup included, as ``portkern train`` counts H), the
process's CPU seconds over the same span (what a contended machine cannot inflate), the update at which
each seed converged, and device seconds per converged policy (a single run's wall time; a batch's wall time
over its converged policies). The last line sums up: medians with [min-max] of both, per update and per
policy. Programs are compiled before the first round (untimed, as ``portkern train``'s prime), once per
process; ``--rounds`` and ``--first-round`` let rounds run as separate, shorter invocations.

    python bench/cpu/jax_parallel_seeds.py --task CartPole-v1 --k 8 --rounds 3 --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _rng(xs: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(xs), 4), "range": [round(min(xs), 4), round(max(xs), 4)], "n": len(xs)}


def machine() -> dict[str, Any]:
    import jax

    from portkern.identity import cpu_model, machine_label

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"machine": machine_label(), "cpu": cpu_model(), "cores": os.cpu_count(),
            "python": platform.python_version(), "jax": jax.__version__,
            "jax_devices": [str(d) for d in jax.devices()], "load_avg": load}  # fmt: skip


def summarise(singles: list[dict[str, Any]], batches: list[dict[str, Any]], task: str, k: int) -> dict[str, Any]:
    """Medians [min-max]: single runs over converged seeds, batches over batches; and whether K at once beat one
    at a time per converged policy (median against median; the ranges say whether that is beyond the spread)."""
    ok = [r for r in singles if r["converged"]]
    done = [b for b in batches if b["converged"]]
    summary: dict[str, Any] = {"kind": "summary", "task": task, "k": k, "rounds": len(batches),
                               "single_converged": f"{len(ok)} of {len(singles)}",
                               "batch_converged": f"{sum(b['converged'] for b in batches)} of {k * len(batches)}"}
    if ok and done:
        summary.update({
            "single_device_seconds_per_policy": _rng([r["device_seconds_per_policy"] for r in ok]),
            "batch_device_seconds_per_policy": _rng([b["device_seconds_per_policy"] for b in done]),
            "single_cpu_seconds_per_policy": _rng([r["cpu_s"] for r in ok]),
            "batch_cpu_seconds_per_policy": _rng([b["cpu_seconds_per_policy"] for b in done]),
            "single_ms_per_update": _rng([r["ms_per_update"] for r in singles]),
            "batch_ms_per_seed_update": _rng([b["ms_per_seed_update"] for b in batches]),
            "single_updates_to_converge": _rng([r["updates"] for r in ok]),
            "batch_updates_run": _rng([b["batch_updates"] for b in batches]),
        })  # fmt: skip
        s = summary["single_device_seconds_per_policy"]["median"]
        b = summary["batch_device_seconds_per_policy"]["median"]
        summary["batch_over_single"] = round(b / s, 3)
        summary["target_met"] = b < s
        # Paired by round: the batch against the median of the same K seeds trained one at a time, next to it.
        rounds = []
        for bt in done:
            same = [r["device_seconds_per_policy"] for r in ok if r["round"] == bt["round"]]
            if same:
                rounds.append({"round": bt["round"], "single_median": round(statistics.median(same), 4),
                               "batch": bt["device_seconds_per_policy"],
                               "ratio": round(bt["device_seconds_per_policy"] / statistics.median(same), 3)})
        summary["paired_by_round"] = rounds
        if rounds:
            summary["paired_ratio"] = _rng([r["ratio"] for r in rounds])
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="CartPole-v1", help="a pinned task (default CartPole-v1)")
    p.add_argument("--k", type=int, default=8, help="seeds per batch, trained at once (default 8)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of K seeds (default 3)")
    p.add_argument("--first-round", type=int, default=0, help="index of the first round (its seeds: round x K + 1 ..)")
    p.add_argument("--chunk", type=int, default=None,
                   help="updates per compiled call of a batch (default: the stack's)")
    p.add_argument("--device", default=None, help="jax device ('cpu', 'gpu', 'cuda:0'); default: JAX's")
    p.add_argument("--no-spread", action="store_true",
                   help="on a CPU, keep JAX's one CPU device (default: one per core, the K seeds spread over them, as "
                        "`portkern train --parallel-seeds K` starts JAX)")
    p.add_argument("--out", default=None, help="append the JSON lines to this file too (default: stdout only)")
    p.add_argument("--summarise", nargs="+", default=None, metavar="JSONL",
                   help="no runs: sum up the single and batch lines of these files (several invocations' rounds)")
    args = p.parse_args(argv)
    if args.summarise:
        lines = [json.loads(x) for f in args.summarise for x in open(f) if x.strip()]
        print(json.dumps(summarise([x for x in lines if x["kind"] == "single"],
                                   [x for x in lines if x["kind"] == "batch" and x["k"] == args.k], args.task, args.k),
                         indent=1))  # fmt: skip
        return 0
    if args.k < 2:
        p.error(f"--k: expected an integer >= 2 (K = 1 is the single-seed side), got {args.k}")
    if args.rounds < 1 or args.first_round < 0:
        p.error("--rounds: expected >= 1; --first-round: expected >= 0")
    from portkern.train import config, jax_batch, runner
    from portkern.train.stacks import parse_stack

    if not args.no_spread:  # before anything starts JAX
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        jax_batch.spread_cpu_devices(cores)

    task = config.task(args.task)
    spec = parse_stack("jax" + (f"@{args.device}" if args.device else ""))
    chunk = args.chunk or jax_batch.CHUNK
    out = open(args.out, "a") if args.out else None

    def emit(rec: dict[str, Any]) -> None:
        line = json.dumps(rec)
        print(line, flush=True)
        if out is not None:
            out.write(line + "\n")
            out.flush()

    t0 = time.perf_counter()
    runner.prime(task, spec)
    prime_single = time.perf_counter() - t0
    prime_batch = jax_batch.prime_parallel(task, args.k, args.device, chunk)
    emit({"kind": "setup", "task": args.task, "k": args.k, "chunk": chunk, "spread": not args.no_spread,
          "prime_single_s": round(prime_single, 3),
          "prime_batch_s": round(prime_batch, 3), **machine()})  # fmt: skip

    def single(seed: int, rnd: int) -> dict[str, Any]:
        c0 = _cpu_s()
        r, _ = runner.train_one(task, spec, seed)
        return {"kind": "single", "round": rnd, "seed": seed, "converged": r.converged, "updates": r.updates,
                "wall_s": r.wall_s, "cpu_s": round(_cpu_s() - c0, 3),
                "ms_per_update": round(1e3 * r.wall_s / r.updates, 3),
                "device_seconds_per_policy": r.device_seconds_per_policy}  # fmt: skip

    def batch(seeds: list[int], rnd: int) -> dict[str, Any]:
        c0 = _cpu_s()
        rs, _ = jax_batch.train_batch(task, spec, seeds, chunk, result_class=runner.RunResult)
        cpu, r0 = _cpu_s() - c0, rs[0]
        n_conv = sum(r.converged for r in rs)
        return {"kind": "batch", "round": rnd, "seeds": seeds, "k": len(seeds), "converged": n_conv,
                "converged_updates": {str(r.seed): r.updates for r in rs if r.converged},
                "batch_updates": r0.batch_updates, "wall_s": r0.wall_s, "cpu_s": round(cpu, 3),
                "ms_per_update": round(1e3 * r0.wall_s / r0.batch_updates, 3),
                "ms_per_seed_update": round(1e3 * r0.wall_s / r0.batch_updates / len(seeds), 3),
                "device_seconds_per_policy": r0.device_seconds_per_policy if r0.converged else
                next((r.device_seconds_per_policy for r in rs if r.converged), None),
                "cpu_seconds_per_policy": round(cpu / n_conv, 4) if n_conv else None, "spread_over": r0.spread_over,
                "phases": r0.phases}  # fmt: skip

    singles, batches = [], []
    for rnd in range(args.first_round, args.first_round + args.rounds):
        seeds = list(range(rnd * args.k + 1, (rnd + 1) * args.k + 1))
        order = ("single", "batch") if rnd % 2 == 0 else ("batch", "single")
        for kind in order:
            if kind == "single":
                for s in seeds:
                    singles.append(single(s, rnd))
                    emit(singles[-1])
            else:
                batches.append(batch(seeds, rnd))
                emit(batches[-1])
    summary = summarise(singles, batches, args.task, args.k)
    summary["load_avg_end"] = machine()["load_avg"]
    emit(summary)
    if out is not None:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
