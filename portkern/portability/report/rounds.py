"""What every section of the report model shares: the kernels and backends of a run in report order, the status
of a cell, the cases compared (the fastest passing case per backend at a common size), and the per-round
arithmetic of paired ratios, their intervals and verdicts."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

import numpy as np

from ...runs import Record
from .. import metrics
from ..names import BACKEND_ORDER, BASE_KERNELS, kernel_rank, rollout_parts


def _kernels(records: list[Record]) -> list[str]:
    seen = {r.kernel for r in records if r.kernel != "copy"}
    # KERNEL_ORDER's order, a kernel's structural variants (step:Chain-v0/links=10) after it, by value.
    return sorted(seen, key=kernel_rank) or list(BASE_KERNELS)


def _status(rs: list[Record]) -> tuple[str, float | None, str]:
    """(status, worst error, reason) of the records of one cell: fail over pass over unsupported."""
    rs = [r for r in rs if r.status != "invalid-config"]
    status = max((r.status for r in rs), key=lambda s: {"fail": 3, "pass": 2, "unsupported": 1}[s], default="not run")
    bad = [r for r in rs if r.status == status]
    err = max((r.max_error for r in bad if r.max_error is not None), default=None)
    reason = "not in these runs"
    if bad:
        reason = f"{bad[0].kernel}: {bad[0].reason}" if rollout_parts(bad[0].kernel) and status != "pass" else bad[0].reason
    return status, err, reason


def _order(backends: set[str]) -> list[str]:
    return [b for b in BACKEND_ORDER if b in backends] + sorted(backends - set(BACKEND_ORDER))


# ---- per-round arithmetic ----------------------------------------------------------------------


def _ratio_rounds(a: Record | None, b: Record | None) -> np.ndarray | None:
    """Per-round T_a / T_b (round r with round r)."""
    if a is None or b is None:
        return None
    m = metrics.aligned([a.round_rates, b.round_rates])
    return None if m is None else m[:, 0] / m[:, 1]


def _iv(values: np.ndarray | None) -> list[float] | None:
    s = metrics.spread(values)
    return None if s is None else [s[0], s[1]]


def _paired(a: Record | None, b: Record | None) -> bool:
    return bool(a and b and a.round_group and a.round_group == b.round_group)


def _figure(rounds: np.ndarray | None, fallback: float | None) -> tuple[float | None, list[float] | None]:
    """(point, interval) of a ratio: the median and 10th-90th percentile of its per-round values, or
    ``fallback`` (the ratio of the throughputs) and no interval when there are no rounds."""
    if rounds is None or not np.isfinite(rounds).any():
        return fallback, None
    return float(np.median(rounds[np.isfinite(rounds)])), _iv(rounds)


def _word(verdict: str) -> str:
    return {"higher": "faster", "lower": "slower"}.get(verdict, verdict)


def _compare(a: Record | None, b: Record | None) -> dict[str, Any]:
    """T_a / T_b (the median of the paired per-round ratios) with its interval and verdict ("faster": a
    beyond noise, "slower", "within noise", "no interval")."""
    ta, tb = (a.items_per_s if a else None), (b.items_per_s if b else None)
    ratio, iv = _figure(_ratio_rounds(a, b), ta / tb if ta and tb else None)
    v = metrics.verdict(tuple(iv) if iv else None)
    return {"ratio": ratio if ta and tb else None, "interval": iv, "paired": _paired(a, b), "verdict": _word(v)}


def _pick(recs: list[Record]) -> tuple[dict[str, Record], int | None]:
    """Per backend, its fastest passing record at the largest size all passing backends measured."""
    by_backend: dict[str, dict[int, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        if r.status == "pass" and r.items_per_s:
            by_backend[r.backend][r.size].append(r)
    if not by_backend:
        return {}, None
    common = set.intersection(*(set(s) for s in by_backend.values()))
    size = max(common) if common else None
    out = {}
    for b, sizes in by_backend.items():
        pick = sizes[size] if size is not None else sizes[max(sizes)]
        out[b] = max(pick, key=lambda r: r.items_per_s or 0.0)
    return out, size


def _best(recs: Mapping[str, Record]) -> str | None:
    """The fastest of several cases: by paired rounds when they all have them (the highest median of the
    per-round efficiency T_r / max T_r), else by throughput. Medians of unpaired throughputs can rank
    two cases the other way round from their paired rounds on a noisy machine; the paired ranking is
    the one the ratios use."""
    if not recs:
        return None
    names = list(recs)
    m = metrics.aligned([recs[n].round_rates for n in names])
    if m is None:
        return max(names, key=lambda n: recs[n].items_per_s or 0.0)
    score = np.median(m / m.max(axis=1, keepdims=True), axis=0)
    return max(names, key=lambda n: (score[names.index(n)], recs[n].items_per_s or 0.0))


def _measured_on(device: str, *recs: Record | None) -> str:
    """Where a comparison was measured: its device, or the bare hardware when every record in it was
    measured there (then the same comparison shows on every driver-device of that hardware)."""
    origins = {r.origin for r in recs if r is not None}
    return origins.pop() if len(origins) == 1 and "" not in origins else device


def _near_best(r: Record | None, best: Record | None, is_best: bool) -> bool | None:
    """Whether r is within noise of the best (True for the best itself); None when it has no interval."""
    if r is None:
        return None
    if is_best:
        return True
    v = _compare(r, best)["verdict"]
    return None if v == "no interval" else v != "slower"


def _harmonic_rounds(vectors: list[np.ndarray | None]) -> np.ndarray | None:
    m = metrics.aligned(vectors)
    if m is None:
        return None
    with np.errstate(divide="ignore"):
        return m.shape[1] / np.sum(1.0 / m, axis=1)
