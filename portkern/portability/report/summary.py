"""The report's summary: up to three findings a reader should take away, each with its interval."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .format import _fmt, _span, _x


def _pct_iv(x: float | None, iv: list[float] | None) -> str:
    return f"{_fmt(x, True)} [{_span(iv, True)}]"


def _x_iv(x: float | None, iv: list[float] | None) -> str:
    return f"{_x(x)} [{_span(iv, False, 'x')}]"


def summary(rep: dict[str, Any]) -> list[dict[str, str]]:
    """Up to three findings, each with its interval: the first workload, the kernels, the data paths."""
    out: list[dict[str, str]] = []
    if rep["workloads"] and rep["devices"]:
        m, w = next(iter(rep["workloads"].items()))
        parts = []
        for d, per in w["devices"].items():
            base = w["baseline"].get(d)
            if not base:
                parts.append(f"on {d} no backend runs every phase")
                continue
            others = [f"{b} {_pct_iv(v['ratio'], v['ratio_interval'])} of it ({_says(v['verdict'])})"
                      if v["ratio"] else f"{b} does not run every phase" for b, v in per.items() if b != base]
            parts.append(f"on {d} the baseline is {base}" + (": " + "; ".join(others) if others else " (alone)"))
        mix = ", ".join(f"{k.removeprefix('step:')} {100 * s / sum(w['shares'].values()):.0f}%" for k, s in w["shares"].items())
        out.append({"title": f"Workload {m!r} ({mix})", "text": "; ".join(parts) + "."})
    if rep["efficiency"]:
        parts = []
        for d in rep["devices"]:
            rows = [r for r in rep["efficiency"] if r["device"] == d and r["items_per_s"]]
            kernels = sorted({r["kernel"] for r in rows}, key=rep["kernels"].index)
            wins: dict[str, int] = defaultdict(int)
            tied = 0
            unranked = 0
            for k in kernels:
                kr = [r for r in rows if r["kernel"] == k]
                if len(kr) < 2:
                    continue
                top = max(kr, key=lambda r: r["items_per_s"])
                if any(r["within_noise_of_best"] is None for r in kr):
                    unranked += 1
                elif sum(1 for r in kr if r["within_noise_of_best"]) > 1:
                    tied += 1
                else:
                    wins[top["backend"]] += 1
            losers = [r for r in rows if r["within_noise_of_best"] is False]
            worst = min(losers, key=lambda r: r["app_eff"], default=None)
            compared = sum(wins.values()) + tied + unranked
            if not compared:
                continue
            text = (f"on {d}, of {compared} kernels with two or more backends, "
                    + ", ".join(f"{b} is fastest beyond noise in {n}" for b, n in sorted(wins.items(), key=lambda x: -x[1]))
                    + "".join(f", {n} {what}" for n, what in ((tied, "are within noise between the fastest two"),
                                                               (unranked, "have no interval (an old run)")) if n))
            text = text.replace("backends, , ", "backends, ")  # fmt: skip
            if worst:
                text += (f"; the largest gap: {worst['kernel']} with {worst['backend']} at "
                         f"{_pct_iv(worst['app_eff'], worst['app_eff_interval'])} of the best")
            parts.append(text)
        if parts:
            out.append({"title": "Kernels", "text": "; ".join(parts) + "."})
    dp = rep.get("data_paths", {}).get("rows") or []
    fused = [r for r in dp if r["fused_vs_host"]]
    if fused:
        parts = []
        for d in dict.fromkeys(r["device"] for r in fused):
            best = max((r for r in fused if r["device"] == d), key=lambda r: r["fused_vs_host"])
            low = min((r for r in fused if r["device"] == d), key=lambda r: r["fused_vs_host"])
            parts.append(f"on {d}, fused over host round-trip reaches {_x_iv(best['fused_vs_host'], best['fused_vs_host_interval'])} "
                         f"({best['backend']}, {best['env']}, {best['policy']} policy, N = {best['N']}) and is lowest at "
                         f"{_x_iv(low['fused_vs_host'], low['fused_vs_host_interval'])} ({low['backend']}, {low['env']}, "
                         f"{low['policy']})")  # fmt: skip
        out.append({"title": "Data paths", "text": "; ".join(parts) + "."})
    return out[:3]


def _says(verdict: str) -> str:
    return {"faster": "faster beyond noise", "slower": "slower beyond noise", "within noise": "within noise",
            "no interval": "no interval: an old run", "does not run": "does not run"}.get(verdict, verdict)  # fmt: skip
