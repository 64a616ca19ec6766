"""How a report writes its figures: numbers, percentages and intervals as text, markdown tables, and JSON."""

from __future__ import annotations

import math
from typing import Any


def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.3g}"


def _span(iv: list[float] | None, pct: bool = False, unit: str = "") -> str:
    """An interval as "lo–hi" (percent without the sign, or with ``unit``); "n/a" without one."""
    if iv is None:
        return "n/a"
    if pct:
        return f"{100 * iv[0]:.1f}–{100 * iv[1]:.1f}"
    return f"{iv[0]:.3g}–{iv[1]:.3g}{unit}"


def _with(x: float | None, iv: list[float] | None, pct: bool = False) -> str:
    """A figure with its interval: "63.4% [55.0–70.1]"; the bare figure when there is nothing measured."""
    if not x:
        return _fmt(x, pct) if x is not None else "–"
    if iv is not None and iv[0] == iv[1] == x:
        return _fmt(x, pct)  # the reference itself (the best, or the baseline)
    return f"{_fmt(x, pct)} [{_span(iv, pct)}]"


def _x(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}x"


def _cell(c: dict[str, Any]) -> str:
    if c["status"] == "pass":
        return "pass"
    if c["status"] == "fail":
        reason = c.get("reason") or ""
        return f"**FAIL** ({'max err ' + _fmt(c['max_error']) if c.get('max_error') is not None else reason[:40]})"
    return c["status"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _verdict_text(r: dict[str, Any]) -> str:
    v = r["verdict"]
    if v in ("faster", "slower"):
        return f"**{v}** (beyond noise)"
    return v



def host_once(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Data-path rows with a host framework's (NumPy, torch on the CPU) shown once, under the hardware it ran
    on, instead of once per driver-device of that hardware (the model keeps every row: the comparisons of
    each driver-device use them)."""
    seen, out = set(), []
    for r in rows:
        where = r.get("measured_on", r["device"])
        if where != r["device"]:
            key = (where, r["backend"], r["env"], r["policy"])
            if key in seen:
                continue
            seen.add(key)
            r = {**r, "device": where}
        out.append(r)
    return out


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
