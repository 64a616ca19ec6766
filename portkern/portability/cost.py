"""The lock-in cost model: what staying on the locked platform costs over a program of policies."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..backends._opencl_devices import known_platform_ids, platform_id

SENSITIVITY_RATIOS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class CostInputs:
    gpu_hours: float  # H: GPU-hours per converged policy on the locked platform
    locked_rate: float  # price per GPU-hour on the locked platform
    portable_rate: float  # price per GPU-hour on the portable platform
    policies: float  # P: expected number of policies trained
    retune_hours: float  # engineering hours to port and re-tune
    hourly_rate: float  # price of one engineering hour
    ratio: float  # portable throughput / locked throughput (1 - throughput penalty)

    def __post_init__(self) -> None:
        for name in ("gpu_hours", "locked_rate", "portable_rate", "policies", "retune_hours", "hourly_rate"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name.replace('_', '-')}: expected a finite number >= 0, got {v!r}")
        if not (math.isfinite(self.ratio) and self.ratio > 0):
            raise ValueError(f"ratio: expected a number > 0 (a port that does not run has no cost), got {self.ratio!r}")


def lockin(c: CostInputs) -> dict[str, float]:
    """docs/ARCHITECTURE.md: premium = locked_rate*H*P - portable_rate*(H/ratio)*P - switching cost."""
    locked = c.locked_rate * c.gpu_hours * c.policies
    portable = c.portable_rate * (c.gpu_hours / c.ratio) * c.policies
    switching = c.retune_hours * c.hourly_rate
    saving_per_policy = c.locked_rate * c.gpu_hours - c.portable_rate * c.gpu_hours / c.ratio
    break_even = switching / saving_per_policy if saving_per_policy > 0 else math.inf
    return {"locked_cost": locked, "portable_cost": portable, "switching_cost": switching,
            "premium": locked - portable - switching, "saving_per_policy": saving_per_policy,
            "break_even_policies": break_even}  # fmt: skip


REPORT_SCHEMAS = ("portkern-report/1", "portkern-report/2")  # 1: no intervals


def ratio_from_report(path: str | Path, backend: str, device: str, workload: str | None,
                      kernel: str | None) -> tuple[float, tuple[float, float] | None, str]:  # fmt: skip
    """(ratio, its interval or None, where it came from) of ``backend`` on ``device`` for a workload (or one
    kernel), from a report.json (or its folder)."""
    p = Path(path)
    p = p / "report.json" if p.is_dir() else p
    try:
        rep = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: not a readable report.json ({exc})") from None
    if not isinstance(rep, dict) or rep.get("schema") not in REPORT_SCHEMAS:
        raise ValueError(f"{p}: not a portkern report (schema {rep.get('schema') if isinstance(rep, dict) else None!r})")
    ratio, interval, source = _find(rep, backend, device, workload, kernel)
    if rep.get("quick"):
        source += "; indicative only: from a --quick run"
    return ratio, interval, source


def _find(rep: dict[str, Any], backend: str, device: str, workload: str | None,
          kernel: str | None) -> tuple[float, tuple[float, float] | None, str]:  # fmt: skip
    keys = list(rep["devices"])
    if device.strip().lower() in known_platform_ids():  # an OpenCL implementation: its platform, as device= does
        match = [k for k in keys if platform_id(str(rep["devices"][k].get("platform") or "")) == device.strip().lower()]
    else:
        match = [k for k in keys if k == device] or [k for k in keys if device.lower() in k.lower()]
    if len(match) != 1:
        raise ValueError(f"--device {device!r}: expected one of {', '.join(keys)} (or a unique substring, or an "
                         f"OpenCL implementation such as pocl or intel)")
    d = match[0]
    if kernel:
        row = next((r for r in rep["efficiency"] if (r["kernel"], r["backend"], r["device"]) == (kernel, backend, d)), None)
        if row is None:
            raise ValueError(f"--kernel {kernel!r} / --backend {backend!r}: not measured on {d}")
        source = f"{kernel} with {backend} on {d} vs {row['baseline']}"
        if row["baseline"] == backend:
            others = [r["backend"] for r in rep["efficiency"] if (r["kernel"], r["device"]) == (kernel, d)
                      and r["backend"] != backend and r.get("ratio")]  # fmt: skip
            source += "; " + _itself(backend, d, others)
        return row["ratio"], _pair(row.get("ratio_interval")), source
    workload = workload or next(iter(rep["workloads"]))
    if workload not in rep["workloads"]:
        raise ValueError(f"--workload {workload!r}: expected one of {', '.join(rep['workloads'])}")
    per = rep["workloads"][workload]["devices"][d]
    if backend not in per:
        raise ValueError(f"--backend {backend!r}: not measured on {d}; measured: {', '.join(per)}")
    base = (rep["workloads"][workload].get("baseline") or {}).get(d) or rep["devices"][d]["baseline"]
    source = f"workload {workload!r} with {backend} on {d} vs {base}"
    if base == backend:
        source += "; " + _itself(backend, d, [b for b, v in per.items() if b != backend and v.get("ratio")])
    return per[backend]["ratio"], _pair(per[backend].get("ratio_interval")), source


#: How a ratio source says the ratio compares a backend on a device with itself (render() turns it into a warning).
ITSELF = "compares it with itself"


def _itself(backend: str, device: str, others: list[str]) -> str:
    return (f"{backend} is the baseline on {device}, so the ratio {ITSELF} (1 by definition, not a measured port): "
            + (f"give --backend {' or '.join(others)} to cost a move between backends there, or "
               if others else "no other backend ran there; ")
            + "use a report where the locked platform and the port were both measured")


def _pair(iv: Any) -> tuple[float, float] | None:
    if not iv or not all(isinstance(x, (int, float)) and x > 0 for x in iv):
        return None  # no interval (an older report), or a port that does not run at one end
    return float(iv[0]), float(iv[1])


def ranges(c: CostInputs, interval: tuple[float, float] | None,
           h_range: tuple[float, float] | None = None) -> dict[str, tuple[float, float]] | None:  # fmt: skip
    """Premium, portable cost and break-even as (min, max) over the corners of the H range x the ratio's
    interval (each is monotone in H and in the ratio, so the corners bound it); None without either."""
    if interval is None and h_range is None:
        return None
    qs = interval or (c.ratio, c.ratio)
    hs = h_range or (c.gpu_hours, c.gpu_hours)
    corners = [lockin(CostInputs(**{**asdict(c), "gpu_hours": h, "ratio": q})) for h in hs for q in qs]
    out: dict[str, tuple[float, float]] = {}
    if interval is not None:
        out["ratio"] = (interval[0], interval[1])
    if h_range is not None:
        out["gpu_hours"] = (h_range[0], h_range[1])
    for k in ("premium", "portable_cost", "break_even_policies"):
        vals = [x[k] for x in corners]
        out[k] = (min(vals), max(vals))
    if h_range is not None:
        vals = [x["locked_cost"] for x in corners]
        out["locked_cost"] = (min(vals), max(vals))
    return out


def _money(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:,.2f}"


def _range(pair: tuple[float, float], unit: str = "") -> str:
    return f"{_money(pair[0])}{unit} to {_money(pair[1])}{unit}"


def render(c: CostInputs, source: str, interval: tuple[float, float] | None = None,
           h_range: tuple[float, float] | None = None, h_source: str | None = None,
           interval_note: str = "10th-90th pct of interleaved rounds", unit: str = "GPU-hours") -> str:  # fmt: skip
    r = lockin(c)
    rg = ranges(c, interval, h_range)
    warn = warning(source)
    iv = (f" [interval {interval[0]:.4g} to {interval[1]:.4g}: {interval_note}]" if interval
          else " (no interval: given by hand or an older report)")  # fmt: skip
    over = "the H range x the ratio's interval" if h_range else "the ratio's interval"
    head = []
    if h_source is not None:
        head = [f"H = {c.gpu_hours:.4g} {unit} per converged policy"
                + (f" [range {h_range[0]:.4g} to {h_range[1]:.4g}]" if h_range else "") + f" ({h_source})"]
    if warn:
        head = [f"warning: {warn}", ""] + head
    lines = head + [
        f"ratio = {c.ratio:.4g}{iv} (throughput penalty {1 - c.ratio:.1%}; "
        + "; ".join(part if ITSELF not in part else "see the warning above" for part in source.split("; ")) + ")",
        "",
        "premium = locked_rate x H x P - portable_rate x (H / ratio) x P - retune_hours x hourly_rate",
        f"        = {c.locked_rate:g} x {c.gpu_hours:g} x {c.policies:g} - {c.portable_rate:g} x ({c.gpu_hours:g} / "
        f"{c.ratio:.4g}) x {c.policies:g} - {c.retune_hours:g} x {c.hourly_rate:g}",
        f"        = {_money(r['locked_cost'])} - {_money(r['portable_cost'])} - {_money(r['switching_cost'])}",
        f"        = {_money(r['premium'])}",
        "",
        f"locked cost      {_money(r['locked_cost'])}"
        + (f"; range {_range(rg['locked_cost'])}" if rg and "locked_cost" in rg else ""),
        f"portable cost    {_money(r['portable_cost'])}  ({c.gpu_hours / c.ratio:,.4g} {unit} per policy)"
        + (f"; range {_range(rg['portable_cost'])}" if rg and h_range else ""),
        f"switching cost   {_money(r['switching_cost'])}",
        f"lock-in premium  {_money(r['premium'])}  ({'staying locked costs more' if r['premium'] > 0 else 'porting does not pay'})"
        + (f"; range {_range(rg['premium'])} over {over}" if rg else ""),
        f"break-even       {_money(r['break_even_policies'])} policies  "
        f"(= switching / (locked_rate x H - portable_rate x H / ratio))"
        + (f"; range {_range(rg['break_even_policies'])} policies" if rg else ""),
        "",
        "sensitivity over the ratio:",
        f"{'ratio':>7} {'portable cost':>16} {'premium':>16} {'break-even P':>14}",
    ]
    for q in _sensitivity(c.ratio):
        # The headline's row is computed from the exact ratio (a rounded one moved its break-even), and marked.
        s = r if q == c.ratio else lockin(CostInputs(**{**asdict(c), "ratio": q}))
        lines.append(f"{q:7.3g} {_money(s['portable_cost']):>16} {_money(s['premium']):>16} "
                     f"{_money(s['break_even_policies']):>14}" + ("  <- this ratio" if q == c.ratio else ""))  # fmt: skip
    return "\n".join(lines)


def _sensitivity(ratio: float) -> list[float]:
    """The grid of ratios and the ratio itself, exactly (a grid point it equals is not repeated)."""
    return sorted({*(q for q in SENSITIVITY_RATIOS if not math.isclose(q, ratio, rel_tol=1e-12)), ratio})


def warning(source: str) -> str | None:
    """What the reader must know before the figures: a ratio that compares a backend on a device with itself."""
    return next((part for part in source.split("; ") if ITSELF in part), None)


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    # Strict JSON has no Infinity: a break-even that is never reached is null.
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def as_json(c: CostInputs, source: str, interval: tuple[float, float] | None = None,
            h_range: tuple[float, float] | None = None, h_source: str | None = None,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    rg = ranges(c, interval, h_range)
    out = {"inputs": asdict(c), "ratio_source": source, **_finite(lockin(c)),
           "ranges": {k: [None if math.isinf(x) else x for x in v] for k, v in rg.items()} if rg else None,
           "sensitivity": {str(q): _finite(lockin(CostInputs(**{**asdict(c), "ratio": q})))
                           for q in SENSITIVITY_RATIOS}}  # fmt: skip
    if h_source is not None:
        out["gpu_hours_source"] = h_source
    if warning(source):
        out["warning"] = warning(source)
    if extra:
        out.update(extra)
    return out
