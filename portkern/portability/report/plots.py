"""Report plots: Sewall et al.'s cascade plot of efficiency across devices, a bar chart of ratios, the stack-class
spectrum and the data paths (error bars: the 10th-90th percentile over interleaved rounds)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .. import metrics
from ..training.render import PLOT_PHASES, _g, plot_name, safe_name


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
        rows = [next((r for r in rep["efficiency"] if (r["backend"], r["device"], r["kernel"]) == (b, d, k)), None)
                for k in kernels]  # fmt: skip
        vals = [(r or {}).get("ratio") or 0.0 for r in rows]
        ivs = [(r or {}).get("ratio_interval") for r in rows]
        err = [[max(0.0, v - iv[0]) if iv and v else 0.0 for v, iv in zip(vals, ivs)],
               [max(0.0, iv[1] - v) if iv and v else 0.0 for v, iv in zip(vals, ivs)]]  # per-round 10th-90th pct
        ax.bar([i + j * width for i in range(len(kernels))], vals, width, yerr=err, capsize=2,
               error_kw={"lw": 0.7}, label=f"{b}@{d}")  # fmt: skip
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(kernels))])
    ax.set_xticklabels([k.removeprefix("step:") for k in kernels], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("throughput / baseline")
    ax.set_title("Performant portability ratio (baseline: native, else best on the device); "
                 "bars: 10th-90th pct of rounds", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PATH_COLOURS = {"host": "#c44e52", "device": "#dd8452", "fused": "#4c72b0"}


def data_paths(rep: dict[str, Any], path: Path) -> None:
    """Env-steps/s of the host, device and fused paths (log scale): one panel per env and policy,
    one group of three bars per backend@device."""
    plt = _plt()
    rows = rep["data_paths"]["rows"]
    panels = list(dict.fromkeys((r["env"], r["policy"]) for r in rows))
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), squeeze=False)
    paths = list(PATH_COLOURS)
    for ax, (env, policy) in zip(axes.flat, panels):
        group = [r for r in rows if (r["env"], r["policy"]) == (env, policy)]
        width = 0.8 / len(paths)
        for j, p in enumerate(paths):
            xs = [i + (j - 1) * width for i in range(len(group))]
            vals = [r["paths"][p]["steps_per_s"] or 0.0 for r in group]
            ax.bar(xs, vals, width, color=PATH_COLOURS[p], label=p)
            for x, r in zip(xs, group):
                if not r["paths"][p]["steps_per_s"]:  # failed or not run: say so instead of a missing bar
                    ax.annotate(r["paths"][p]["status"], (x, 1), xycoords=("data", "axes fraction"), xytext=(0, -2),
                                textcoords="offset points", rotation=90, ha="center", va="top", fontsize=6)
        ax.set_yscale("log")
        measured = [v["steps_per_s"] for r in group for v in r["paths"].values() if v["steps_per_s"]]
        if measured:  # bars start a decade below the slowest path, so every bar shows
            ax.set_ylim(bottom=10 ** (math.floor(math.log10(min(measured))) - 1), top=max(measured) * 3)
        for i, r in enumerate(group):
            if r["fused_vs_host"]:
                ax.annotate(f"{r['fused_vs_host']:.3g}x", (i + width, r["paths"]["fused"]["steps_per_s"]),
                            xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([f"{r['backend']}\n{r['device'][:24]}" for r in group], fontsize=7)
        sizes = {(r["N"], r["T"]) for r in group}
        n, t = next(iter(sizes))
        ax.set_title(f"{env}, {policy} policy" + (f" (N={n}, T={t})" if len(sizes) == 1 and n else ""), fontsize=9)
        ax.set_ylabel("env-steps/s (fused/host above)")
        ax.grid(axis="y", which="major", lw=0.4, alpha=0.5)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, title="data path", title_fontsize=7)
    fig.suptitle("Rollout data paths: host round-trip, device per-step, fused (log scale)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


CLASS_COLOURS = {"fused custom": "#4c72b0", "custom kernels": "#55a868", "framework compiled": "#dd8452",
                 "framework eager": "#c44e52"}  # fmt: skip


def spectrum(rep: dict[str, Any], path: Path) -> None:
    """Per device: each kernel's best throughput of each stack class / the best class's (log scale), with
    the per-round interval as error bars."""
    plt = _plt()
    rows = rep["spectrum"]["rows"]
    devices = list(dict.fromkeys(r["device"] for r in rows))
    fig, axes = plt.subplots(len(devices), 1, figsize=(max(7.0, 0.55 * max(len([r for r in rows if r["device"] == d])
                                                                          for d in devices) + 2), 3.8 * len(devices)),
                             squeeze=False)  # fmt: skip
    for ax, d in zip(axes.flat, devices):
        group = [r for r in rows if r["device"] == d]
        classes = [c for c in CLASS_COLOURS if any(c in r["classes"] for r in group)]
        classes += sorted({c for r in group for c in r["classes"]} - set(classes))
        width = 0.8 / max(1, len(classes))
        for j, c in enumerate(classes):
            xs, vals, lo, hi = [], [], [], []
            for i, r in enumerate(group):
                v = r["classes"].get(c)
                if not v or not v["vs_best"]:
                    continue
                iv = v["vs_best_interval"] or [v["vs_best"], v["vs_best"]]
                xs.append(i + (j - (len(classes) - 1) / 2) * width)
                vals.append(v["vs_best"])
                lo.append(max(0.0, v["vs_best"] - iv[0]))
                hi.append(max(0.0, iv[1] - v["vs_best"]))
            ax.bar(xs, vals, width, yerr=[lo, hi], capsize=2, error_kw={"lw": 0.7},
                   color=CLASS_COLOURS.get(c), label=c)  # fmt: skip
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([r["kernel"].removeprefix("step:") for r in group], rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("best of class / best class")
        ax.set_title(f"Stack-class spectrum on {d}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PHASE_COLOURS = {"setup": "#8c8c8c", "act": "#dd8452", "env": "#4c72b0", "adv": "#55a868", "update": "#c44e52",
                 "move": "#8172b3", "other": "#937860", "untimed": "#e5e5e5"}  # fmt: skip


def train_phases(rep: dict[str, Any], task: str, path: Path) -> None:
    """Per hardware (one panel each) and stack (one bar each): the median seconds per phase over the converged
    seeds (all seeds where none converged), stacked in a run's order, so the reader sees where the hours go."""
    plt = _plt()
    groups = [g for g in rep["training"]["groups"] if g["task"] == task]
    heights = [max(1.6, 0.45 * len(g["stacks"]) + 1.0) for g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, sum(heights) + 1.1), squeeze=False,
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    labels = rep["training"].get("phases", {})
    for ax, g in zip(axes.flat, groups):
        stacks = g["stacks"]
        ys = list(range(len(stacks)))[::-1]  # first stack on top
        left = [0.0] * len(stacks)
        for phase in PLOT_PHASES:
            vals = [s["phase_seconds"].get(phase) or 0.0 for s in stacks]
            if not any(vals):
                continue
            head = labels.get(phase, phase).split(" (")[0]
            ax.barh(ys, vals, left=left, color=PHASE_COLOURS.get(phase), edgecolor="white", linewidth=0.4,
                    label=phase if head == phase else f"{phase}: {head}")
            left = [a + b for a, b in zip(left, vals)]
        for y, s, x in zip(ys, stacks, left):
            text = (f"H {_g(s['H_s'])} s ({s['converged']}/{s['runs']})" if s["converged"]
                    else f"not converged ({s['runs']} seeds)")  # fmt: skip
            ax.annotate(text, (x, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
        ax.set_yticks(ys)
        ax.set_yticklabels([f"{s['stack']}\n{s['mode']}" for s in stacks], fontsize=7)
        ax.set_xlim(0, max(left + [1e-9]) * 1.25)
        ax.set_xlabel("device-seconds per run (median per phase; converged seeds, else all)", fontsize=8)
        ax.set_title(f"{task} on {g['hardware_key']} ({g['hardware_label']})", fontsize=9)
        ax.grid(axis="x", lw=0.4, alpha=0.5)
    handles = {lab: h for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels())}
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center", ncol=4, frameon=False)
    fig.suptitle(f"{task}: where a training run's seconds go (fused stacks: env includes in-kernel acting)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.7 / (sum(heights) + 1.1), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_all(rep: dict[str, Any], out: Path) -> list[Path]:
    paths: list[Path] = []
    for task in dict.fromkeys(g["task"] for g in (rep.get("training") or {}).get("groups", [])):
        paths.append(out / plot_name(task))
        train_phases(rep, task, paths[-1])
    if "functional" not in rep:  # training files only: no bench plots
        return paths
    paths.append(out / "ratios.png")
    ratios(rep, paths[-1])
    if rep.get("spectrum", {}).get("rows"):
        paths.append(out / "spectrum.png")
        spectrum(rep, paths[-1])
    if rep.get("data_paths", {}).get("rows"):
        paths.append(out / "data-paths.png")
        data_paths(rep, paths[-1])
    for mix in rep["workloads"]:
        paths.append(out / f"cascade-{safe_name(mix)}.png")
        cascade(rep, mix, paths[-1])
    return paths
