"""Helpers shared by the CPU benchmark scripts: machine metadata, interleaved timing, JSON output."""

from __future__ import annotations

import json
import os
import platform
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


def interleaved(cases: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each case, the cases taking turns in every repeat so that drift in the
    machine's load (a shared 2-core box) hits all of them alike. Each case is called once untimed first."""
    for fn in cases.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path
