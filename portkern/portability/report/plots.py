"""Report plots: Sewall et al.'s cascade plot of efficiency across devices, a bar chart of ratios, the stack-class
spectrum and the data paths (error bars: the 10th-90th percentile over interleaved rounds)."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Callable

from .. import metrics
from .format import host_once
from ..training.render import PLOT_PHASES, _g, plot_name, safe_name


#: Every plot is drawn this wide (inches x DPI = 1,500 px): readable on a page without zooming; what does not fit
#: is faceted (one panel per device, workload or env) rather than shrunk.
WIDTH_IN, DPI = 15.0, 100
#: One colour per backend in every plot (matplotlib's default cycle otherwise gives a backend a different
#: colour in each plot, by the order it happens to be drawn in).
BACKEND_COLOURS = {"cupy": "#76b900", "numba": "#00a3a3", "opencl": "#4c72b0", "torch_compile": "#8172b3",
                   "torch": "#dd8452", "numpy": "#c44e52", "jax": "#937860", "cuda_host": "#55a868"}  # fmt: skip
_SPARE = ("#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")
#: Data paths and stack classes are told apart by hatching, so colour always means the backend.
PATH_HATCHES = {"host": "////", "device": "..", "fused": ""}
CLASS_HATCHES = {"fused custom": "", "custom kernels": "..", "framework compiled": "xx", "framework eager": "////"}


def colour(backend: str) -> str:
    """The backend's colour in every plot (an unknown backend: a spare colour fixed by its name)."""
    return BACKEND_COLOURS.get(backend) or _SPARE[sum(map(ord, backend)) % len(_SPARE)]


def wrap(label: str, width: int = 24) -> str:
    """A tick label on lines of at most ``width`` characters: the whole device name, never cut."""
    return textwrap.fill(label, width, break_long_words=True, break_on_hyphens=False)


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or GPU machines
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    fig.savefig(path, dpi=DPI)  # no bbox "tight": it would change the width away from WIDTH_IN
    _plt().close(fig)


def _legend_handles(backends: list[str], hatches: dict[str, str] | None = None, title: str = "") -> list[Any]:
    from matplotlib.patches import Patch

    out = [Patch(facecolor=colour(b), label=b) for b in backends]
    for name, h in (hatches or {}).items():
        out.append(Patch(facecolor="white", edgecolor="black", hatch=h, label=f"{title}{name}"))
    return out


def _short(kernel: str) -> str:
    """A kernel as a tick label: "CartPole-v1" for its step, "rollout CartPole-v1:fused" for a rollout."""
    return kernel.removeprefix("step:").replace("rollout:", "rollout ", 1)


def _device_names(rep: dict[str, Any]) -> dict[str, str]:
    """Report device key -> the name a reader knows it by (the label, with its driver)."""
    return {d: str(i.get("device_label") or d) for d, i in rep["devices"].items()}


def cascade(rep: dict[str, Any], mix: str, path: Path) -> None:
    """Per backend: application efficiency on each device (top) and PP of the first i devices (bottom), the
    devices in one order for every backend (highest mean efficiency first), named on the axis."""
    plt = _plt()
    w = rep["workloads"][mix]
    names = _device_names(rep)
    devices = sorted(rep["devices"], key=lambda d: -sum(v.get("app_eff", 0.0) for v in w["devices"][d].values()))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(WIDTH_IN * 0.7, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})  # fmt: skip
    xs = list(range(1, len(devices) + 1))
    for b, pp in w["pp"].items():
        effs = [w["devices"][d].get(b, {}).get("app_eff", 0.0) for d in devices]
        cum = [metrics.pennycook_pp({str(j): e for j, e in enumerate(effs[:i])}) for i in xs]
        top.plot(xs, effs, marker="o", color=colour(b), label=f"{b} (PP {pp:.2f})")
        bottom.plot(xs, cum, marker="s", color=colour(b))
    top.set_ylabel("application efficiency")
    top.set_ylim(0, 1.05)
    top.set_title(f"Cascade: workload {mix!r} over {len(devices)} device(s)")
    top.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5))
    bottom.set_ylabel("PP of the first i devices")
    bottom.set_xlabel("device (highest mean efficiency over the backends first)")
    bottom.set_ylim(0, 1.05)
    bottom.set_xticks(xs)
    bottom.set_xticklabels([wrap(names[d], 30) for d in devices], fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def ratios(rep: dict[str, Any], path: Path) -> None:
    """Performant portability ratio per kernel: one panel per device, one bar per backend (its colour)."""
    plt = _plt()
    kernels = rep["kernels"]
    names = _device_names(rep)
    devices = list(dict.fromkeys(r["device"] for r in rep["efficiency"])) or list(rep["devices"])
    backends = [b for b in BACKEND_COLOURS if any(r["backend"] == b for r in rep["efficiency"])]
    backends += sorted({r["backend"] for r in rep["efficiency"]} - set(backends))
    fig, axes = plt.subplots(len(devices), 1, figsize=(WIDTH_IN, 1.2 + 3.4 * len(devices)), squeeze=False)
    for ax, d in zip(axes.flat, devices):
        here = [b for b in backends if any(r["backend"] == b and r["device"] == d for r in rep["efficiency"])]
        width = 0.8 / max(1, len(here))
        for j, b in enumerate(here):
            rows = [next((r for r in rep["efficiency"] if (r["backend"], r["device"], r["kernel"]) == (b, d, k)), None)
                    for k in kernels]  # fmt: skip
            vals = [(r or {}).get("ratio") or 0.0 for r in rows]
            ivs = [(r or {}).get("ratio_interval") for r in rows]
            err = [[max(0.0, v - iv[0]) if iv and v else 0.0 for v, iv in zip(vals, ivs)],
                   [max(0.0, iv[1] - v) if iv and v else 0.0 for v, iv in zip(vals, ivs)]]  # per-round 10th-90th pct
            ax.bar([i + (j - (len(here) - 1) / 2) * width for i in range(len(kernels))], vals, width, yerr=err,
                   capsize=2, error_kw={"lw": 0.7}, color=colour(b), label=b)  # fmt: skip
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(kernels)))
        ax.set_xticklabels([_short(k) for k in kernels], rotation=35,
                           ha="right", fontsize=8)  # fmt: skip
        ax.set_ylabel("throughput / baseline")
        ax.set_title(f"{names.get(d, d)} ({d})", fontsize=10, loc="left")
        ax.grid(axis="y", lw=0.4, alpha=0.5)
    fig.legend(handles=_legend_handles(backends), loc="upper right", ncol=len(backends), fontsize=9, frameon=False)
    fig.suptitle("Performant portability ratio per kernel (baseline: native, else the best on the device); "
                 "bars: 10th-90th pct of rounds", fontsize=11, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    _save(fig, path)


def data_paths(rep: dict[str, Any], path: Path) -> None:
    """Env-steps/s of the host, device and fused paths (log scale): one panel per env and policy, one group
    of three bars (hatched by path, coloured by backend) per backend and device."""
    plt = _plt()
    rows = host_once(rep["data_paths"]["rows"])
    names = {**_device_names(rep), **{d: i["name"] for d, i in (rep.get("cross_device") or {}).get("devices", {}).items()}}
    panels = list(dict.fromkeys((r["env"], r["policy"]) for r in rows))
    cols = min(3, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(WIDTH_IN, 1.0 + 4.2 * nrows), squeeze=False)
    paths = list(PATH_HATCHES)
    for ax, (env, policy) in zip(axes.flat, panels):
        group = [r for r in rows if (r["env"], r["policy"]) == (env, policy)]
        width = 0.8 / len(paths)
        for j, p in enumerate(paths):
            xs = [i + (j - 1) * width for i in range(len(group))]
            vals = [r["paths"][p]["steps_per_s"] or 0.0 for r in group]
            ax.bar(xs, vals, width, color=[colour(r["backend"]) for r in group], hatch=PATH_HATCHES[p],
                   edgecolor="black", linewidth=0.3)  # fmt: skip
            for x, r in zip(xs, group):
                if not r["paths"][p]["steps_per_s"]:  # failed or not run: say so instead of a missing bar
                    ax.annotate(r["paths"][p]["status"], (x, 1), xycoords=("data", "axes fraction"), xytext=(0, -2),
                                textcoords="offset points", rotation=90, ha="center", va="top", fontsize=7)
        ax.set_yscale("log")
        measured = [v["steps_per_s"] for r in group for v in r["paths"].values() if v["steps_per_s"]]
        if measured:  # bars start a decade below the slowest path, so every bar shows
            ax.set_ylim(bottom=10 ** (math.floor(math.log10(min(measured))) - 1), top=max(measured) * 3)
        for i, r in enumerate(group):
            if r["fused_vs_host"]:
                ax.annotate(f"{r['fused_vs_host']:.3g}x", (i + width, r["paths"]["fused"]["steps_per_s"]),
                            xytext=(0, 2), textcoords="offset points", ha="center", fontsize=8)
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([f"{r['backend']}\n{wrap(names.get(r['device'], r['device']), 22)}" for r in group],
                           fontsize=7)  # fmt: skip
        sizes = {(r["N"], r["T"]) for r in group}
        n, t = next(iter(sizes))
        ax.set_title(f"{env}, {policy} policy" + (f" (N={n}, T={t})" if len(sizes) == 1 and n else ""), fontsize=10)
        ax.set_ylabel("env-steps/s (fused/host above)")
        ax.grid(axis="y", which="major", lw=0.4, alpha=0.5)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    fig.legend(handles=_legend_handles(backends, PATH_HATCHES, "path: "), loc="upper right",
               ncol=len(backends) + len(paths), fontsize=9, frameon=False)  # fmt: skip
    fig.suptitle("Rollout data paths: host round-trip, device per-step, fused (log scale)", fontsize=11, x=0.01,
                 ha="left")  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    _save(fig, path)


def spectrum(rep: dict[str, Any], path: Path) -> None:
    """Per device: each kernel's best throughput of each stack class / the best class's (log scale), with
    the per-round interval as error bars; hatched by class, coloured by the backend that reached it."""
    plt = _plt()
    rows = rep["spectrum"]["rows"]
    names = _device_names(rep)
    devices = list(dict.fromkeys(r["device"] for r in rows))
    fig, axes = plt.subplots(len(devices), 1, figsize=(WIDTH_IN, 1.2 + 3.6 * len(devices)), squeeze=False)
    for ax, d in zip(axes.flat, devices):
        group = [r for r in rows if r["device"] == d]
        classes = [c for c in CLASS_HATCHES if any(c in r["classes"] for r in group)]
        classes += sorted({c for r in group for c in r["classes"]} - set(classes))
        width = 0.8 / max(1, len(classes))
        for j, c in enumerate(classes):
            xs, vals, lo, hi, cols = [], [], [], [], []
            for i, r in enumerate(group):
                v = r["classes"].get(c)
                if not v or not v["vs_best"]:
                    continue
                iv = v["vs_best_interval"] or [v["vs_best"], v["vs_best"]]
                xs.append(i + (j - (len(classes) - 1) / 2) * width)
                vals.append(v["vs_best"])
                lo.append(max(0.0, v["vs_best"] - iv[0]))
                hi.append(max(0.0, iv[1] - v["vs_best"]))
                cols.append(colour(v["backend"]))
            ax.bar(xs, vals, width, yerr=[lo, hi], capsize=2, error_kw={"lw": 0.7}, color=cols,
                   hatch=CLASS_HATCHES.get(c, "--"), edgecolor="black", linewidth=0.3)  # fmt: skip
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(group)))
        ax.set_xticklabels([_short(r["kernel"]) for r in group], rotation=35,
                           ha="right", fontsize=8)  # fmt: skip
        ax.set_ylabel("best of class / best class")
        ax.set_title(f"Stack-class spectrum on {names.get(d, d)} ({d})", fontsize=10, loc="left")
    backends = list(dict.fromkeys(v["backend"] for r in rows for v in r["classes"].values()))
    fig.legend(handles=_legend_handles(backends, CLASS_HATCHES), loc="upper right", ncol=4, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / fig.get_figheight()))
    _save(fig, path)


def _cross_panels(rep: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(title, unit, device rows) of each panel of cross-device.png: the workloads, then the step and buffer
    kernels (the rollouts are in data-paths.png)."""
    cd = rep.get("cross_device") or {"workloads": {}, "kernels": []}
    panels = [(f"workload {m}", "env-steps/s" if w["env_steps_phase"] else "workload units/s", w["devices"])
              for m, w in cd["workloads"].items()]  # fmt: skip
    return panels + [(k["kernel"], "items/s", k["devices"]) for k in cd["kernels"]
                     if not k["kernel"].startswith("rollout:")]  # fmt: skip


def cross_device(rep: dict[str, Any], path: Path) -> None:
    """One panel per workload and per step/buffer kernel: every device's throughput with its best backend (its
    colour), the interval as an error bar, and its ratio to the fastest device written beside the bar."""
    plt = _plt()
    cd = rep["cross_device"]
    panels = _cross_panels(rep)
    devices = list(cd["devices"])
    cols = 3
    nrows = -(-len(panels) // cols)
    height = 0.5 + 0.42 * len(devices)
    fig, axes = plt.subplots(nrows, cols, figsize=(WIDTH_IN, 0.9 + (height + 0.9) * nrows), squeeze=False,
                             sharey=True)  # fmt: skip
    ys = list(range(len(devices)))[::-1]  # first device on top
    for ax, (title, unit, rows) in zip(axes.flat, panels):
        by = {r["device"]: r for r in rows}
        fig_key = "steps_per_s" if unit == "env-steps/s" else ("W" if unit.startswith("workload") else "items_per_s")
        top = max((r[fig_key] or 0.0 for r in rows), default=0.0)
        for y, d in zip(ys, devices):
            r = by.get(d)
            if r is None or not r[fig_key]:
                ax.annotate("not run", (0, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
                continue
            iv = r.get(fig_key + "_interval") or [r[fig_key], r[fig_key]]
            ax.barh(y, r[fig_key], 0.7, xerr=[[max(0.0, r[fig_key] - iv[0])], [max(0.0, iv[1] - r[fig_key])]],
                    color=colour(r["best_backend"]), capsize=2, error_kw={"lw": 0.7})  # fmt: skip
            note = "fastest" if r["verdict"] == "fastest" else f"{r['vs_fastest']:.2g}x"
            if r[fig_key] > 0.15 * top:  # inside the bar; a short bar has it after its error bar instead
                ax.annotate(note, (top * 0.02, y), va="center", fontsize=8, color="white", fontweight="bold")
            else:
                ax.annotate(note, (iv[1], y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(unit, fontsize=8)
        ax.grid(axis="x", lw=0.4, alpha=0.5)
    for ax in axes[:, 0]:
        ax.set_yticks(ys)
        ax.set_yticklabels([wrap(cd["devices"][d]["name"], 26) for d in devices], fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    backends = list(dict.fromkeys(r["best_backend"] for _, _, rows in panels for r in rows))
    fig.legend(handles=_legend_handles(backends), loc="upper right", ncol=len(backends), fontsize=9, frameon=False,
               title="best backend on the device", title_fontsize=9)  # fmt: skip
    fig.suptitle("Which device runs it fastest (bar: best backend there; inside: ratio to the fastest device)",
                 fontsize=11, x=0.01, ha="left")  # fmt: skip
    # Fixed margins rather than tight_layout, which costs seconds on a dozen panels (the test suite draws this).
    h = fig.get_figheight()
    fig.subplots_adjust(left=0.13, right=0.99, top=1 - 0.9 / h, bottom=0.55 / h, wspace=0.08,
                        hspace=0.9 / (height + 0.9) + 0.35)  # fmt: skip
    _save(fig, path)


PHASE_COLOURS = {"setup": "#8c8c8c", "act": "#dd8452", "env": "#4c72b0", "adv": "#55a868", "update": "#c44e52",
                 "move": "#8172b3", "other": "#937860", "untimed": "#e5e5e5"}  # fmt: skip


def train_phases(rep: dict[str, Any], task: str, path: Path) -> None:
    """Per hardware (one panel each) and stack (one bar each): the median seconds per phase over the converged
    seeds (all seeds where none converged), stacked in a run's order, so the reader sees where the hours go."""
    plt = _plt()
    groups = [g for g in rep["training"]["groups"] if g["task"] == task]
    heights = [max(1.6, 0.45 * len(g["stacks"]) + 1.0) for g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(WIDTH_IN * 0.75, sum(heights) + 1.1), squeeze=False,
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
    _save(fig, path)


def plot_files(rep: dict[str, Any]) -> list[tuple[str, str, Callable[[Path], None]]]:
    """Every plot the report has: (file name, its one-line caption for report.md, how to draw it). One list
    for the drawing and the captions, so no plot is drawn that report.md does not name."""
    out: list[tuple[str, str, Callable[[Path], None]]] = []
    for task in dict.fromkeys(g["task"] for g in (rep.get("training") or {}).get("groups", [])):
        out.append((plot_name(task), f"{task}: where a training run's device-seconds go, per stack and hardware.",
                    lambda p, t=task: train_phases(rep, t, p)))  # fmt: skip
    if "functional" not in rep:  # training files only: no bench plots
        return out
    if _cross_panels(rep):
        out.append(("cross-device.png", "Which device runs each workload and step/buffer kernel fastest: throughput "
                    "of its best backend with the interval, ratio to the fastest device.",
                    lambda p: cross_device(rep, p)))  # fmt: skip
    out.append(("ratios.png", "Performant portability ratio of every kernel, one panel per device, one bar per "
                "backend, with the interval of its rounds.", lambda p: ratios(rep, p)))  # fmt: skip
    if rep.get("spectrum", {}).get("rows"):
        out.append(("spectrum.png", "Stack-class spectrum: the best of each stack class against the best class, "
                    "per kernel and device (hatching: class, colour: backend).", lambda p: spectrum(rep, p)))
    if rep.get("data_paths", {}).get("rows"):
        out.append(("data-paths.png", "Rollout data paths (host round-trip, device per-step, fused) in env-steps/s, "
                    "one panel per env and policy (hatching: path, colour: backend).", lambda p: data_paths(rep, p)))
    for mix in rep["workloads"]:
        out.append((f"cascade-{safe_name(mix)}.png", f"Cascade of workload {mix!r}: application efficiency of each "
                    "backend on each device (named on the axis) and the PP of the first i devices.",
                    lambda p, m=mix: cascade(rep, m, p)))  # fmt: skip
    return out


def plot_all(rep: dict[str, Any], out: Path) -> list[Path]:
    paths: list[Path] = []
    for name, _, draw in plot_files(rep):
        paths.append(out / name)
        draw(paths[-1])
    return paths
