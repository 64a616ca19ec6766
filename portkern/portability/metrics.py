"""Portability metrics, pure functions over throughputs (items/s): the vocabulary of docs/ARCHITECTURE.md in code."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def functional_share(statuses: Sequence[str]) -> float:
    """Share of kernels that pass parity; ``fail`` and ``unsupported`` count as 0, never as missing."""
    if not statuses:
        raise ValueError("functional_share: no kernels given")
    return sum(s == "pass" for s in statuses) / len(statuses)


def application_efficiency(throughput: float | None, best: float) -> float:
    """e(k, b, d) = throughput of b on d / best throughput of any backend on d; 0 when b does not run there."""
    if not throughput or throughput <= 0:
        return 0.0
    if best <= 0:
        raise ValueError(f"application_efficiency: best throughput must be > 0, got {best}")
    if throughput > best * (1 + 1e-12):
        raise ValueError(f"application_efficiency: throughput {throughput} exceeds the best {best}")
    return min(1.0, throughput / best)


def architectural_efficiency(bytes_per_s: float | None, ceiling: float) -> tuple[float, float]:
    """(achieved / ceiling clipped to [0, 1], raw ratio): above 1 the working set stays in cache."""
    if not bytes_per_s or bytes_per_s <= 0:
        return 0.0, 0.0
    if ceiling <= 0:
        raise ValueError(f"architectural_efficiency: ceiling must be > 0, got {ceiling}")
    raw = bytes_per_s / ceiling
    return min(1.0, raw), raw


def pennycook_pp(efficiencies: Mapping[str, float | None]) -> float:
    """Harmonic mean of e over the device set; 0 if any device is unsupported (None or 0)."""
    if not efficiencies:
        raise ValueError("pennycook_pp: the device set is empty")
    values = list(efficiencies.values())
    if any(e is None or e <= 0 for e in values):
        return 0.0
    return len(values) / sum(1.0 / e for e in values)  # type: ignore[operator]


def workload_ratio(shares: Mapping[str, float], ratios: Mapping[str, float | None]) -> float:
    """Throughput ratio of a workload whose phases take time ``shares`` on the baseline.

    A phase with per-kernel ratio r takes share/r of the baseline's time, so the workload ratio is
    1 / sum(share_i / r_i) (a weighted harmonic mean); any phase that does not run makes it 0.
    """
    total = sum(shares.values())
    if total <= 0 or any(w < 0 for w in shares.values()):
        raise ValueError(f"workload_ratio: shares must be >= 0 with a positive sum, got {dict(shares)}")
    time = 0.0
    for phase, w in shares.items():
        r = ratios.get(phase)
        if w == 0:
            continue
        if r is None or r <= 0:
            return 0.0
        time += (w / total) / r
    return 1.0 / time


def throughput_penalty(ratio: float) -> float:
    """p = 1 - ratio (negative when the port is faster than the baseline)."""
    return 1.0 - ratio


def device_hours_per_billion_steps(steps_per_s: float | None) -> float | None:
    """Hours of the device (GPU-hours on a GPU) that 1e9 env steps take at ``steps_per_s``: 1e9 / rate / 3600."""
    if not steps_per_s or steps_per_s <= 0:
        return None
    return 1e9 / steps_per_s / 3600.0


def retune_penalty(t_source_config_on_target: float | None, t_best_on_target: float) -> float:
    """1 - T(config tuned on source, run on target) / T(best config on target), T a throughput.

    In [0, 1) whenever the source's configuration runs on the target; 1 when it cannot run there.
    """
    if t_best_on_target <= 0:
        raise ValueError(f"retune_penalty: best target throughput must be > 0, got {t_best_on_target}")
    if not t_source_config_on_target or t_source_config_on_target <= 0:
        return 1.0
    return max(0.0, 1.0 - t_source_config_on_target / t_best_on_target)


# ---- intervals from interleaved rounds ---------------------------------------------------------
#: The interval of a figure: these quantiles of the figure evaluated round by round.
INTERVAL_QUANTILES = (0.10, 0.90)
INTERVAL_METHOD = (
    "every figure (a throughput, a ratio, an efficiency, a workload ratio, PP, a path factor) is also "
    "evaluated round by round: round r of each case of an interleaved group pairs with round r of "
    "the others (pairing is what interleaving buys: drift hits both alike); rounds of different "
    "groups pair by index (independent samples; a group with fewer rounds wraps around). The "
    "interval is the 10th to 90th percentile of those per-round values; the point is the figure "
    "computed from median throughputs. Runs without per-round data (schema 1): no interval (n/a)."
)


def aligned(vectors: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """[R, k] per-round values of k cases (round r of each), R the longest; None if any has no rounds."""
    if not vectors or any(v is None or len(v) == 0 for v in vectors):
        return None
    n = max(len(v) for v in vectors)  # type: ignore[arg-type]
    return np.stack([np.resize(np.asarray(v, dtype=np.float64), n) for v in vectors], axis=1)  # type: ignore[arg-type]


def spread(values: np.ndarray | Sequence[float] | None) -> tuple[float, float] | None:
    """The interval of per-round values: (10th, 90th percentile); None without values."""
    if values is None:
        return None
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    lo, hi = np.quantile(v, INTERVAL_QUANTILES)
    return float(lo), float(hi)


def verdict(interval: tuple[float, float] | None, neutral: float = 1.0) -> str:
    """A ratio's verdict: "higher"/"lower" only when its whole interval is beyond ``neutral``, else "within noise"."""
    if interval is None:
        return "no interval"
    lo, hi = interval
    if lo > neutral:
        return "higher"
    if hi < neutral:
        return "lower"
    return "within noise"
