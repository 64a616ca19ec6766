"""Helpers shared by the CPU benchmark scripts: machine metadata, interleaved timing, JSON output."""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def machine_info(backends: list[Any]) -> dict[str, Any]:
    """Host, CPU, library and device versions, so results from different machines are not mixed up."""
    import pyopencl

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {
        "host": platform.node(),
        "os": platform.platform(),
        "cpu": cpu,
        "cpus_available": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pyopencl": pyopencl.VERSION_TEXT,
        "backends": [b.describe() for b in backends],
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    try:
        import gymnasium

        info["gymnasium"] = gymnasium.__version__
    except ImportError:
        pass
    return info


def round_orders(names: list[str], repeats: int, seed: int = 0) -> list[list[str]]:
    """The order of ``names`` in each of ``repeats`` rounds: shuffled afresh every round (seeded), as the suite's
    timing does. A rotation gives every case every position but keeps it behind the same neighbour in nearly
    every round, so whatever that neighbour leaves behind (its buffers in the caches and TLB, a thread pool it
    woke, freed pages) lands on the same case each time: a fixed bias that no number of rounds averages out."""
    rng = random.Random(seed)
    orders = []
    for _ in range(repeats):
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    return orders


def interleaved(cases: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each case, the cases taking turns in every repeat (in an order shuffled per repeat,
    :func:`round_orders`) so that drift in the machine's load (a shared 2-core box) and a neighbour's leftovers
    hit all of them alike. Each case is called once untimed first."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for order in round_orders(list(cases), repeats):
        for name in order:
            fn = cases[name]
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def rate_summary(rates: list[float]) -> dict[str, float]:
    """Median and 10th-90th percentile (portkern.portability.metrics.spread) of one case's per-round rates."""
    from portkern.portability.metrics import spread

    lo, hi = spread(sorted(rates))
    return {"median": statistics.median(rates), "p10": lo, "p90": hi}


def paired_ratio(a: list[float], b: list[float]) -> dict[str, Any]:
    """Case ``a``'s rate over case ``b``'s, timed in the same rounds: the ratio of medians, the median and
    10th-90th percentile of the per-round ratios, and the verdict (faster / slower beyond that interval)."""
    per_round = rate_summary([x / y for x, y in zip(a, b)])
    result = "faster" if per_round["p10"] > 1 else "slower" if per_round["p90"] < 1 else "within noise"
    return {"ratio_of_medians": statistics.median(a) / statistics.median(b), "per_round": per_round, "result": result}


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
