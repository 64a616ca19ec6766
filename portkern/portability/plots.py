"""Report plots: Sewall et al.'s cascade plot of efficiency across devices, and a bar chart of ratios."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import metrics


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or GPU machines
    import matplotlib.pyplot as plt

    return plt


def cascade(rep: dict[str, Any], mix: str, path: Path) -> None:
    """Per backend: devices sorted by efficiency (top) and PP of the first i of them (bottom)."""
    plt = _plt()
    w = rep["workloads"][mix]
    devices = list(rep["devices"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for b, pp in w["pp"].items():
        effs = sorted((w["devices"][d].get(b, {}).get("app_eff", 0.0) for d in devices), reverse=True)
        xs = range(1, len(effs) + 1)
        cum = [metrics.pennycook_pp({str(j): e for j, e in enumerate(effs[:i])}) for i in xs]
        (line,) = top.plot(xs, effs, marker="o", label=f"{b} (PP {pp:.2f})")
        bottom.plot(xs, cum, marker="s", color=line.get_color())
    top.set_ylabel("application efficiency")
    top.set_ylim(0, 1.05)
    top.set_title(f"Cascade: workload {mix!r} over {len(devices)} device(s)")
    top.legend(fontsize=8)
    bottom.set_ylabel("PP of first i")
    bottom.set_xlabel("devices, best first (per backend)")
    bottom.set_ylim(0, 1.05)
    bottom.set_xticks(range(1, len(devices) + 1))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ratios(rep: dict[str, Any], path: Path) -> None:
    """Performant portability ratio per kernel, one bar per backend@device."""
    plt = _plt()
    kernels = rep["kernels"]
    series = sorted({(r["backend"], r["device"]) for r in rep["efficiency"]})
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(kernels)), 4.5))
    width = 0.8 / max(1, len(series))
    for j, (b, d) in enumerate(series):
        vals = [next((r["ratio"] for r in rep["efficiency"] if (r["backend"], r["device"], r["kernel"]) == (b, d, k)),
                     0.0) for k in kernels]  # fmt: skip
        ax.bar([i + j * width for i in range(len(kernels))], vals, width, label=f"{b}@{d}")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(kernels))])
    ax.set_xticklabels([k.removeprefix("step:") for k in kernels], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("throughput / baseline")
    ax.set_title("Performant portability ratio (baseline: native, else best on the device)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_all(rep: dict[str, Any], out: Path) -> list[Path]:
    paths = [out / "ratios.png"]
    ratios(rep, paths[0])
    for mix in rep["workloads"]:
        paths.append(out / f"cascade-{mix}.png")
        cascade(rep, mix, paths[-1])
    return paths
