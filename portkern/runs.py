"""The bench run-file format: loading, validating and merging run files (pytest-benchmark JSON with a
``portkern`` section), as ``portkern bench`` and ``portkern tune`` write them.

The suite writes the schema named here; the report and the tuned-defaults cache (portkern.tuning) read it.
Nothing here needs a backend: a run file is read anywhere."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._jsonfile import read_json

SCHEMA = "portkern-bench/2"  # 2: per-round timings of interleaved groups, device identity, stack class
#: Older schemas still read: /1 has no per-round timings (best-of time only: no intervals).
READABLE = ("portkern-bench/1", SCHEMA)
STATUSES = ("pass", "fail", "unsupported", "invalid-config")


class RunFileError(ValueError):
    """A run file that is not a usable portkern bench run; the message names the file and the problem."""


@dataclass
class Record:
    """One kernel case of one run: its parity outcome and, when timed, its best time."""

    kernel: str
    backend: str
    device_key: str
    size: int
    status: str
    config: dict[str, Any] = field(default_factory=dict)
    max_error: float | None = None
    reason: str = ""
    min_s: float | None = None
    items: int | None = None
    bytes: int | None = None
    source: str = ""
    #: Seconds per launch of each interleaved round (schema 2); round r pairs with round r of every
    #: other case of the same ``round_group``. None in older runs: best-of time only, no interval.
    round_s: tuple[float, ...] | None = None
    round_group: str = ""
    stack_class: str = ""  # "" in older runs
    hardware_key: str = ""  # the physical device; device_key adds the driver layer (an OpenCL platform)
    origin: str = ""  # set by the report when a bare-hardware record is compared on a driver-device

    @property
    def round_rates(self) -> np.ndarray | None:
        """items/s of each round, or None without per-round data."""
        if not self.items or not self.round_s:
            return None
        return self.items / np.asarray(self.round_s, dtype=np.float64)

    @property
    def items_per_s(self) -> float | None:
        """The case's throughput: the median over its interleaved rounds (the best-of time in older runs)."""
        rates = self.round_rates
        if rates is not None:
            return float(np.median(rates))
        return self.items / self.min_s if self.items and self.min_s else None

    @property
    def bytes_per_s(self) -> float | None:
        t = self.items_per_s
        return self.bytes * t / self.items if self.bytes and self.items and t else None

    @property
    def config_key(self) -> str:
        return json.dumps(self.config, sort_keys=True)


@dataclass
class Run:
    path: str
    machine: str
    devices: dict[str, dict[str, Any]]  # device_key -> identity (label, kind, vendor, machine, hardware_key)
    available: dict[str, list[str]]  # device_key -> backends that ran there
    unavailable: list[dict[str, str]]  # {"machine", "backend", "reason"}
    records: list[Record]
    #: Per source file: its mode ("quick", "full", sizes), rounds and load average (empty for old runs).
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def quick(self) -> list[str]:
        """The source files that are ``--quick`` runs (indicative only)."""
        return [p for p, m in self.meta.items() if m.get("sizes") == "quick"]


def _fail(path: str, what: str) -> RunFileError:
    return RunFileError(f"{path}: {what}")


def load_run(path: str | Path) -> Run:
    """Read and check one run file; raises RunFileError naming the file and what is wrong with it."""
    p = str(path)
    data = read_json(p, lambda what: _fail(p, what))
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise _fail(p, "not a pytest-benchmark JSON file (no 'benchmarks' list)")
    pk = data.get("portkern")
    mi = data.get("machine_info", {}).get("portkern") if isinstance(data.get("machine_info"), dict) else None
    if not isinstance(pk, dict) or not isinstance(mi, dict):
        raise _fail(p, "a pytest-benchmark file but not a portkern run (no 'portkern' section): "
                       "make runs with `portkern bench` or `pytest bench --benchmark-json=FILE`")  # fmt: skip
    if pk.get("schema") not in READABLE:
        raise _fail(p, f"unsupported portkern run schema {pk.get('schema')!r} (this portkern reads "
                       f"{' and '.join(map(repr, READABLE))})")  # fmt: skip
    if not isinstance(pk.get("cases"), list) or not isinstance(mi.get("devices"), list):
        raise _fail(p, "the portkern section has no 'cases' or 'devices' list")
    times = {}
    for i, bench in enumerate(data["benchmarks"]):
        try:
            cid, t = bench["extra_info"]["case_id"], float(bench["stats"]["min"])
        except (KeyError, TypeError, ValueError):
            raise _fail(p, f"benchmarks[{i}] lacks extra_info.case_id or stats.min") from None
        if not isinstance(cid, str):
            raise _fail(p, f"benchmarks[{i}].extra_info.case_id must be a string, got {cid!r}")
        if not t > 0:
            raise _fail(p, f"benchmarks[{i}] ({cid}) has a non-positive time {t}")
        times[cid] = t
    machine = str(mi.get("machine", "?"))
    devices, available = {}, {}
    for d in mi["devices"]:
        try:
            key = d["device_key"]
            if not isinstance(key, str) or not isinstance(d.get("backend"), (str, type(None))):
                raise TypeError("device_key and backend are strings")
            devices[key] = {k: d[k] for k in ("device_label", "kind", "vendor", "machine")}
            devices[key]["hardware_key"] = str(d.get("hardware_key") or key)
            devices[key]["platform"] = str(d.get("platform") or "")
        except (KeyError, TypeError):
            raise _fail(p, "machine_info.portkern.devices has an entry without device_key/label/kind/vendor") from None
        available.setdefault(key, [])
        if d.get("backend") not in available[key]:
            available[key].append(d.get("backend"))
    if not isinstance(mi.get("backends", []), list):
        raise _fail(p, "machine_info.portkern.backends must be a list")
    unavailable = [{"machine": machine, "backend": str(b.get("name", "?")), "reason": str(b.get("reason", ""))}
                   for b in mi.get("backends", []) if isinstance(b, dict) and not b.get("available")]  # fmt: skip
    records = []
    for i, c in enumerate(pk["cases"]):
        try:
            if c.get("device_key") is None:  # an unavailable backend: nothing measured, reason kept above
                continue
            status = c["status"]
            if status not in STATUSES:
                raise ValueError(status)
            for field in ("max_error", "items", "bytes"):  # numbers or null: the report compares and divides them
                v = c.get(field)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise TypeError(field)
            records.append(Record(
                kernel=str(c["kernel"]), backend=str(c["backend"]), device_key=str(c["device_key"]),
                size=int(c["size"]), status=status, config=dict(c.get("config") or {}),
                max_error=c.get("max_error"), reason=str(c.get("reason") or ""), min_s=times.get(c["case_id"]),
                items=c.get("items"), bytes=c.get("bytes"), source=p,
                round_s=_rounds(c.get("round_s")), round_group=str(c.get("round_group") or ""),
                stack_class=str(c.get("stack_class") or ""),
                hardware_key=str(c.get("hardware_key") or c["device_key"]),
            ))  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError):
            raise _fail(p, f"portkern.cases[{i}] is malformed (needs kernel, backend, device_key, size, "
                           f"status in {STATUSES}, case_id)") from None  # fmt: skip
        if records[-1].device_key not in devices:
            raise _fail(p, f"portkern.cases[{i}] names device {records[-1].device_key!r}, absent from machine_info")
    if not data["benchmarks"] and not any(r.round_s for r in records):
        # Nothing timed: a report of it would show PP 0 and empty ratios as if measured. A run whose
        # cases all ran on simulators (parity only) is still a functional-portability record.
        timed = [r for r, c in zip(records, (c for c in pk["cases"] if c.get("device_key") is not None))
                 if r.status == "pass" and not c.get("simulator")]  # fmt: skip
        if not records:
            raise _fail(p, "no benchmarks and no cases: the run measured nothing (every backend unavailable or "
                           "filtered out?); nothing to report")  # fmt: skip
        if timed:
            raise _fail(p, f"no benchmarks: {len(timed)} case(s) passed parity on a timed device but the file has "
                           "no timing for any of them (an emptied or cut-short file?); nothing to report")  # fmt: skip
    meta = {p: {"sizes": pk.get("sizes"), "tune": pk.get("tune"), "schema": pk.get("schema"), "code": pk.get("code"),
                "code_end": pk.get("code_end"),
                "timing": pk.get("timing"), "loadavg": pk.get("loadavg"), "cpu_steal": pk.get("cpu_steal"),
                "wall_s": pk.get("wall_s"), "retimed_visits": pk.get("retimed_visits"), "datetime": data.get("datetime"),
                "left_out": pk.get("left_out")}}  # a quick run's cases left out as repeats of others
    return Run(p, machine, devices, available, unavailable, records, meta)


def _rounds(value: Any) -> tuple[float, ...] | None:
    if value is None:
        return None
    rounds = tuple(float(x) for x in value)
    if not rounds or not all(x > 0 for x in rounds):
        raise ValueError("round_s")
    return rounds


_PRIORITY = {"fail": 3, "pass": 2, "unsupported": 1, "invalid-config": 0}


def merge(runs: list[Run]) -> Run:
    """One run from many: devices are (machine, device) pairs, so different machines never collide.

    The same case measured twice keeps the faster (median) throughput, with its rounds; a failure in any
    run makes the case fail.
    """
    if not runs:
        raise ValueError("merge: no runs given")
    devices: dict[str, dict[str, Any]] = {}
    available: dict[str, list[str]] = {}
    unavailable: list[dict[str, str]] = []
    best: dict[tuple[Any, ...], Record] = {}
    meta: dict[str, dict[str, Any]] = {}
    for run in runs:
        meta.update(run.meta)
        devices.update(run.devices)
        for key, names in run.available.items():
            available.setdefault(key, [])
            available[key] += [n for n in names if n not in available[key]]
        unavailable += [u for u in run.unavailable if u not in unavailable]
        for r in run.records:
            k = (r.device_key, r.backend, r.kernel, r.size, r.config_key)
            old = best.get(k)
            if old is None:
                best[k] = r
                continue
            keep = max((old, r), key=lambda x: (_PRIORITY[x.status], x.items_per_s or 0.0))
            if _PRIORITY[old.status] == _PRIORITY[r.status] == _PRIORITY["pass"]:
                keep = old if (old.items_per_s or 0) >= (r.items_per_s or 0) else r
            best[k] = keep
    return Run(", ".join(r.path for r in runs), ", ".join(sorted({r.machine for r in runs})), devices,
               available, unavailable, list(best.values()), meta)  # fmt: skip
