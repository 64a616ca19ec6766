"""What a run records about itself: the run-file schema, portkern's version and a fingerprint of the code it
measured."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ... import __version__
from ..._kernels import kernel_dir
from ...runs import SCHEMA


def code_fingerprint() -> dict[str, str]:
    """Short hashes of the code a run measured: every backend module, the kernel sources, the rest of
    the package. Two runs compared with different fingerprints measured different code (a backend
    edited in between), and the comparison says so."""
    pkg = Path(__file__).resolve().parents[2]

    def digest(paths: list[Path]) -> str:
        h = hashlib.sha256()
        for f in sorted(paths):
            h.update(str(f.relative_to(f.parents[1])).encode())
            h.update(f.read_bytes())
        return h.hexdigest()[:12]

    out = {f"backend:{f.stem}": digest([f]) for f in sorted((pkg / "backends").glob("*.py"))
           if not f.stem.startswith("_") and f.stem not in ("base", "registry")}  # fmt: skip
    kernels = []
    for api in ("opencl", "cuda"):
        try:
            kernels += [f for f in kernel_dir(api).glob("*") if f.is_file()]
        except FileNotFoundError:  # a wheel without one API's sources: nothing of it to fingerprint
            pass
    out["kernels"] = digest(kernels)
    out["backends (shared)"] = digest([f for f in (pkg / "backends").rglob("*.py")
                                       if f.stem.startswith("_") or f.stem in ("base", "registry")])  # fmt: skip
    # Reporting code (everything in portability/ but the suite and the kernel names) changes no measurement.
    out["portkern (rest)"] = digest([f for f in pkg.rglob("*.py") if "backends" not in f.parts
                                     and ("portability" not in f.parts or "suite" in f.parts
                                          or f.name == "names.py")])  # fmt: skip
    conftest = pkg.parent / "bench" / "conftest.py"
    if conftest.is_file():
        out["bench suite"] = digest([conftest])
    return out


_CODE_AT_START: dict[str, str] = {}


def run_info() -> dict[str, Any]:
    """Schema, version, and the code fingerprint taken the first time this is asked (the start of a run)."""
    if not _CODE_AT_START:
        _CODE_AT_START.update(code_fingerprint())
    return {"schema": SCHEMA, "portkern": __version__, "code": dict(_CODE_AT_START)}


def _cpu_lines() -> dict[str, list[int]] | None:
    """/proc/stat's ``cpu`` lines by name (``cpu``: the machine, ``cpuN``: each CPU), their first eight fields
    (user nice system idle iowait irq softirq steal, in ticks); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            rows = [line.split() for line in f if line.startswith("cpu")]
        return {r[0]: [int(x) for x in r[1:9]] for r in rows if len(r) >= 9}
    except (OSError, ValueError):
        return None


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time so far, /proc/stat's first line (user nice system idle iowait irq softirq steal,
    in ticks); None where there is no /proc/stat."""
    return (_cpu_lines() or {}).get("cpu")


def cpu_ticks_each() -> list[list[int]] | None:
    """Each CPU's time so far, /proc/stat's ``cpuN`` lines (the fields of :func:`cpu_ticks`), in the file's
    order; None where there is no /proc/stat."""
    lines = _cpu_lines() or {}
    return [v for k, v in lines.items() if k[3:].isdigit()] or None


def _stolen(start: list[int], end: list[int]) -> tuple[int, int]:
    """Ticks stolen and ticks in all between two readings of one ``cpu`` line."""
    d = [b - a for a, b in zip(start, end)]
    return d[7], sum(d)


def cpu_steal(start: list[int] | None, end: list[int] | None) -> float | None:
    """The share of the machine's CPU time between two :func:`cpu_ticks` readings that the hypervisor gave
    to other guests (steal): on a shared VM, what slows a run's cases, and not necessarily alike (a threaded
    runtime's parallel region waits for its stolen core); None without both readings."""
    if not start or not end:
        return None
    stolen, total = _stolen(start, end)
    return round(stolen / total, 4) if total > 0 else None


def worst_cpu_steal(start: list[list[int]] | None, end: list[list[int]] | None,
                    min_ticks: int = 0) -> float | None:  # fmt: skip
    """The largest share of one CPU's ticks between two :func:`cpu_ticks_each` readings that the hypervisor
    stole, counting only a CPU that lost at least ``min_ticks`` ticks (0 otherwise); None without both
    readings. A threaded runtime's parallel region waits for its slowest thread, so one stolen vCPU slows a
    threaded backend's launches and not a one-thread backend's: the machine's average hides it."""
    if not start or not end or len(start) != len(end):
        return None
    worst = 0.0
    for a, b in zip(start, end):
        stolen, total = _stolen(a, b)
        if total > 0 and stolen >= max(min_ticks, 1):
            worst = max(worst, stolen / total)
    return round(worst, 4)
