"""A prepared case: one launch of the kernel under test, its parity check against the reference, its items
and compulsory bytes; and the parity comparison every case uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..metrics import device_hours_per_billion_steps

SEED = 0
PARITY_STEPS = 3  # from a seeded reset: far from every termination threshold, so flags are exact
RTOL, ATOL = 1e-4, 1e-5  # float32 parity: libm ulp differences and reduction order, nothing more
#: What a case's throughput is the time of (recorded per case as ``rate_basis``).
RATE_BASIS = "median of interleaved rounds"


@dataclass
class Parity:
    status: str  # "pass" | "fail" | "unsupported"
    max_error: float | None = None
    reason: str = ""


@dataclass
class Prepared:
    run: Callable[[], None]  # one launch, not synchronised
    check: Callable[[], Parity]
    items: int  # env steps, elements or rows per launch
    bytes: int  # compulsory traffic per launch: each array read or written once
    unit: str
    shape: tuple[int, ...] = field(default=())
    info: dict[str, Any] = field(default_factory=dict)  # case facts for extra_info (a rollout's path, T, N...)

    def rates(self, seconds: float, basis: str = RATE_BASIS) -> dict[str, Any]:
        """Throughputs of one launch that took ``seconds``; rollouts add env-steps/s and device-hours per 1e9 steps."""
        return rates(self.items, self.bytes, seconds, rollout=bool(self.info.get("path")), basis=basis)


def rates(items: int, nbytes: int, seconds: float, rollout: bool = False, basis: str = RATE_BASIS) -> dict[str, Any]:
    """items/s and bytes/s of a launch that took ``seconds``; a rollout adds env-steps/s and device-hours per 1e9 steps."""
    out: dict[str, Any] = {"items_per_s": items / seconds, "bytes_per_s": nbytes / seconds, "rate_basis": basis}
    if rollout:
        out["env_steps_per_s"] = out["items_per_s"]
        out["device_hours_per_1e9_steps"] = device_hours_per_billion_steps(out["items_per_s"])
    return out


def _compare(parts: list[tuple[str, np.ndarray, np.ndarray]], rtol: float = RTOL, atol: float = ATOL) -> Parity:
    worst, problems = 0.0, []
    for name, got, want in parts:
        if got.shape != want.shape:
            problems.append(f"{name}: shape {got.shape} != {want.shape}")
        elif want.dtype == np.bool_:
            bad = int(np.count_nonzero(got != want))
            if bad:
                problems.append(f"{name}: {bad} of {want.size} flags differ")
        else:
            g, w = got.astype(np.float64), want.astype(np.float64)
            err = np.abs(g - w)
            worst = max(worst, float(np.nanmax(err)) if err.size else 0.0)
            over = ~(err <= atol + rtol * np.abs(w))  # NaN counts as over
            if over.any():
                problems.append(f"{name}: {int(over.sum())} of {w.size} values off (max abs error {np.nanmax(err):.3g})")
    if problems:
        return Parity("fail", worst, "; ".join(problems))
    return Parity("pass", worst)
