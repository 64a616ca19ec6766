"""The training section of report.md: per-stack tables, the summary's training finding, definitions."""

from __future__ import annotations

from typing import Any, Mapping

#: Phase order of the share columns (the order a reader asks "where do the hours go").
SHARE_PHASES = ("act", "env", "adv", "update", "move", "other", "setup")
#: Segment order of the phase plot: a run's timeline, setup first; untimed gaps last.
PLOT_PHASES = ("setup", "act", "env", "adv", "update", "move", "other", "untimed")
TITLE = "Training: device-hours per converged policy"
FUSED_NOTE = ("Fused stacks (mode fused) step the env and act inside one kernel launch per rollout: their \"env\" "
              "phase includes in-kernel acting, and their \"act\" is only the log-probs and values recomputed in "
              "PyTorch from the stored obs and actions.")  # fmt: skip


def _g(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}" if abs(x) >= 10 ** digits else f"{x:.{digits}g}"


def _steps(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def _rng(iv: list[float] | None, fmt: Any = _g) -> str:
    """" [lo–hi]"; nothing without a range or when it is one value (one seed)."""
    return "" if iv is None or iv[0] == iv[1] else f" [{fmt(iv[0])}–{fmt(iv[1])}]"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def not_converged_text(s: Mapping[str, Any]) -> str:
    reasons = ", ".join(f"{k}" + (f" x{n}" if n > 1 else "") for k, n in s["stop_reasons"].items())
    best = s["best_return"]
    return f"not converged ({reasons}, best return {'–' if best is None else f'{best:.1f}'})"


def table(group: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The per-stack table of one (task, hardware) group."""
    header = (["stack", "device (driver)", "converged", "H device-s [range]", "H device-h [range]",
               "env steps to converge [range]", "env-steps/s [range]"]
              + [f"{p} share" for p in SHARE_PHASES] + ["untimed"])  # fmt: skip
    rows = []
    for s in group["stacks"]:
        dev = "; ".join(d["device_key"] + (f" ({d['driver']})" if d["driver"] else "") for d in s["devices"])
        conv = f"{s['converged']} of {s['runs']}"
        others = {k: n for k, n in s["stop_reasons"].items() if k != "converged"}
        if s["converged"] and others:
            conv += " (" + ", ".join(f"{n} {k}" for k, n in others.items()) + ")"
        if s["converged"]:
            h = [_g(s["H_s"]) + _rng(s["H_s_range"]), _g(s["H_h"]) + _rng(s["H_h_range"]),
                 _steps(s["steps_to_converge"]) + _rng(s["steps_to_converge_range"], _steps)]  # fmt: skip
        else:
            h = [not_converged_text(s), "–", "–"]
        shares = [_share(s, p) for p in SHARE_PHASES] + [_pct(s["phase_shares"].get("untimed"))]
        rows.append([s["stack"], dev, conv, *h, _steps(s["steps_per_s"]) + _rng(s["steps_per_s_range"], _steps),
                     *shares])  # fmt: skip
    return header, rows


#: Phases a K-seed batch runs fused in one compiled program per chunk of updates (their time is its "fused").
FUSED_PHASES = ("act", "env", "adv", "update")


def _share(s: Mapping[str, Any], phase: str) -> str:
    """A share cell; a K-seed batch's fused phases say so instead of a 0 they never measured."""
    if phase in FUSED_PHASES and s["phase_shares"].get("fused"):
        return "fused"
    return _pct(s["phase_shares"].get(phase))


def k_table(group: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """H per converged policy against K, the seeds sharing the device at once (rows of summary.h_against_k)."""
    header = ["stack", "K (seeds at once)", "batches", "converged", "H device-s per policy [range]",
              "vs smallest K", "fused share"]  # fmt: skip
    rows = [[r["stack"], str(r["k"]), str(r["batches"]), f"{r['converged']} of {r['runs']}",
             _g(r["H_s"]) + _rng(r["H_s_range"]), "–" if r["vs_smallest_k"] is None else f"{r['vs_smallest_k']:.3g}x",
             _pct(r["fused_share"]) if r["fused_share"] else "–"]
            for r in group.get("h_against_k") or []]  # fmt: skip
    return header, rows


def plot_name(task: str) -> str:
    return f"train-phases-{safe_name(task)}.png"


def safe_name(text: str) -> str:
    """A file-name part: letters, digits, '.', '_' and '-' kept, anything else a '-'."""
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in text)


def finding(tr: Mapping[str, Any]) -> dict[str, str] | None:
    """The report summary's training finding: per task and hardware, the fastest and slowest stack by median H
    and the factor with its seed range (None without two converged stacks anywhere)."""
    parts = []
    for g in tr.get("groups", []):
        f = g.get("factor")
        if not f:
            continue
        by = {s["stack"]: s for s in g["stacks"]}
        fast, slow = by[f["fastest"]], by[f["slowest"]]
        lo, hi = f["range"]
        noise = "; within the seeds' spread" if lo <= 1 else ""
        parts.append(f"{g['task']} on {g['hardware_key']}: {f['fastest']} {_g(fast['H_s'])} device-s "
                     f"[{_g(fast['H_s_range'][0])}–{_g(fast['H_s_range'][1])}] per converged policy, {f['slowest']} "
                     f"{_g(slow['H_s'])} [{_g(slow['H_s_range'][0])}–{_g(slow['H_s_range'][1])}]: "
                     f"{f['value']:.3g}x [{lo:.3g}–{hi:.3g}x]{noise}")  # fmt: skip
    if not parts:
        return None
    return {"title": "Training (device-hours per converged policy, fastest vs slowest stack)", "text": "; ".join(parts) + "."}


def markdown(tr: Mapping[str, Any]) -> list[str]:
    """The report.md section."""
    defs = tr["device_hour"] if isinstance(tr["device_hour"], list) else [tr["device_hour"]]
    out = [f"## {TITLE}", ""]
    out += ["H, as the training file" + (" defines" if len(defs) == 1 else "s define") + " it: "
            + " / ".join(defs), ""]
    out += [f"Per task and hardware (a CPU device-hour is the whole processor's hour; a GPU's, one GPU's), one row "
            "per stack: converged seeds k of n; H, the median over converged seeds, with its range (min–max over "
            "those seeds); env steps to converge likewise; env-steps/s (env steps / wall time, setup and updates "
            "included) median and range over all seeds; phase shares = the median over seeds of phase seconds / "
            "wall time (converged seeds; all seeds where none converged). The factor is the slowest converged "
            "stack's median H / the fastest's, its range from the extreme seeds (min slowest / max fastest to "
            f"max slowest / min fastest). {FUSED_NOTE}", ""]  # fmt: skip
    for src in tr["sources"]:
        h = src["host"]
        out.append(f"* {src['file']}: written {src['created']} by portkern {src['portkern_version']}, config "
                   f"{src['config'].get('source')} version {src['config'].get('version')}; host {h.get('machine')} "
                   f"({h.get('cpu')}, {h.get('cores')} cores), load average {h.get('load_avg')} at the start, "
                   f"{h.get('load_avg_end')} at the end; {src['order']}.")  # fmt: skip
    for g in tr["groups"]:
        out += ["", f"### {g['task']} on {g['hardware_key']} ({g['hardware_label']}, {g['kind']})", ""]
        out += [f"Converged: the mean return of the last {g['solve_window']} finished episodes reaches "
                f"{g['target']:g}. Plot: {plot_name(g['task'])}.", ""]
        out += _md_table(*table(g))
        f = g["factor"]
        out.append("")
        if f:
            lo, hi = f["range"]
            span = f" [{lo:.3g}–{hi:.3g}x]" if f"{lo:.3g}" != f"{hi:.3g}" else " (no spread over the seeds)"
            verdict = ("" if lo > 1 else " The range reaches 1x: the seeds' spread in env steps to converge is as "
                       "large as the stacks' difference, so no stack converges faster beyond it with these seeds.")
            out.append(f"Factor slowest / fastest stack: **{f['value']:.3g}x**{span} ({f['slowest']} slowest, "
                       f"{f['fastest']} fastest, by median H).{verdict}")
            tf = g.get("throughput_factor")
            if tf:
                tlo, thi = tf["range"]
                tv = "" if tlo > 1 else " (the range reaches 1x: within the seeds' spread)"
                out.append(f"At the same rollout volume (env-steps/s, every seed): {tf['fastest']} "
                           f"**{tf['value']:.3g}x** {tf['slowest']} [{tlo:.3g}–{thi:.3g}x]{tv}.")
        else:
            out.append("No factor between stacks: fewer than two stacks converged here.")
        if g.get("h_against_k"):
            out += ["", "H per converged policy against K, the seeds trained at once on the device (`portkern train "
                    "--parallel-seeds K`): a K-seed batch's H is its wall time / its converged policies (a seed "
                    "that converged early trains on until the batch ends; an unconverged seed adds time and no "
                    "policy); its phases run fused, one compiled program per chunk of updates.", ""]
            out += _md_table(*k_table(g))
        primes = [f"{s['stack']} {s['prime_s']:.3g} s" for s in g["stacks"] if s.get("prime_s") is not None]
        if primes:
            out += ["", "One-off build, compile and warm-up per stack before the runs (untimed by them, not in H): "
                    + ", ".join(primes) + "."]
        if g["untimed_over_tolerance"]:
            out += ["", "**Untimed gaps above the file's tolerance** (the phases miss part of the wall time): "
                    + ", ".join(f"{u['stack']} seed {u['seed']} {_pct(u['untimed_share'])}"
                                for u in g["untimed_over_tolerance"]) + "."]  # fmt: skip
    return out


DEFINITIONS = {
    "device-hours per converged policy (H)": "wall-clock seconds of one training run from the start of setup to "
        "the end of the update at which the policy converged, / 3600, with the device held for all of it (the "
        "training file's own definition is quoted in the training section); median over converged seeds.",
    "converged": "the mean return of the last solve_window finished episodes reaches the task's target "
                 "(portkern/data/train_configs.json, versioned); a run stops unconverged at its step or time budget.",
    "phase share": "seconds a training run spent in one phase (setup, act, env, adv, update, move, other; each "
                   "timed with a device synchronise) / its wall time; untimed = the gaps between phases. " + FUSED_NOTE,
    "stack factor": "per task and hardware, the slowest converged stack's median H / the fastest's.",
    "K (parallel seeds)": "seeds trained at once on one device (`portkern train --parallel-seeds K`, stack label "
                          "NAME/K); their H is the batch's wall time / its converged policies.",
}  # fmt: skip
