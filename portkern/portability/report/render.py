"""report.md and the tables the CLI prints: the headline tables, the sections, the definitions."""

from __future__ import annotations

import json
from typing import Any, Mapping

from .. import training
from . import gpu_bench, port_readiness
from ..names import PATHS, STACK_CLASSES
from .format import host_once, _cell, _fmt, _span, _table, _verdict_text, _with, _x


def headline(rep: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The tables a person reads first (also printed by the CLI): summary, functional matrix, ratios, PP."""
    tables: dict[str, tuple[list[str], list[list[str]]]] = {}
    gpu = gpu_bench.tables(rep["gpu_bench"]) if rep.get("gpu_bench") else {}
    if "functional" not in rep:  # training files or GPU measurements only
        return {**training_tables(rep), **gpu}
    cols = list(rep["functional"])
    fkernels = rep.get("functional_kernels", rep["kernels"])
    if rep.get("summary"):
        note = [["**Indicative only** (a --quick run): " + ", ".join(rep["quick"])]] if rep.get("quick") else []
        tables[SUMMARY_TITLE] = (["finding"], note + [[f"**{f['title']}**: {f['text']}"] for f in rep["summary"]])
    cd = rep.get("cross_device") or {}
    if cd.get("workloads"):
        tables[CROSS_DEVICE_TITLE] = (
            ["workload", "device", "best backend", "throughput [interval]", "vs fastest device"],
            [[m, cd["devices"][r["device"]]["name"], r["best_backend"],
              _with(r["steps_per_s"] if w["env_steps_phase"] else r["W"],
                    r.get("steps_per_s_interval" if w["env_steps_phase"] else "W_interval")),
              _vs_fastest(r).replace(" paired,", "").replace(" unpaired,", " (unpaired)")]
             for m, w in cd["workloads"].items() for r in w["devices"]])  # fmt: skip
    func = (["kernel"] + [c + (" (sim)" if rep["functional"][c]["simulator"] else "") for c in cols],
            [[k] + [_cell(rep["functional"][c]["kernels"][k]) for c in cols] for k in fkernels]
            + [["**share**"] + [_fmt(rep["functional"][c]["share"], True) for c in cols]])  # fmt: skip
    if rep.get("port_readiness"):  # compile-level columns beside the ones that ran: never merged into a share
        pr, vendors = rep["port_readiness"], list(port_readiness.BUILD_COLUMNS)
        func = (func[0] + [f"{v} (builds, not run)" for v in vendors],
                [row + ([port_readiness.builds_cell(pr, v, row[0]) for v in vendors] if i < len(fkernels) else
                        ["–"] * len(vendors)) for i, row in enumerate(func[1])])  # fmt: skip
    tables["Functional portability"] = func
    ratio_rows = [[r["kernel"], r["backend"], r["device"], r["status"], str(r["size"] or "–"),
                   _with(r["items_per_s"], r.get("items_per_s_interval")),
                   _with(r["app_eff"], r.get("app_eff_interval"), True), _with(r["ratio"], r.get("ratio_interval"), True),
                   f"{r['baseline'] or '–'}{'' if r['baseline_is_native'] else ' (best)'}", _verdict_text(r),
                   _fmt(r["arch_eff"], True) + (" (cache)" if (r["arch_eff_raw"] or 0) > 1 else "")]
                  for r in rep["efficiency"]]  # fmt: skip
    tables["Application efficiency and performant portability ratio"] = (
        ["kernel", "backend", "device", "parity", "size", "items/s [interval]", "app. eff. [interval]",
         "ratio [interval]", "baseline", "vs baseline", "arch. eff."], ratio_rows)  # fmt: skip
    backends = list(rep["pp"])
    piv = rep.get("pp_interval", {})
    tables["Pennycook PP (application efficiency)"] = (
        ["PP over " + ", ".join(rep["devices"]) or "PP"] + backends,
        [[k] + [_with(rep["pp"][b][k], piv.get(b, {}).get(k), True) for b in backends] for k in rep["kernels"]]
        + [[f"workload: {m}"] + [_with(w["pp"].get(b), w.get("pp_interval", {}).get(b), True) for b in backends]
           for m, w in rep["workloads"].items()])  # fmt: skip
    if rep.get("data_paths", {}).get("rows"):
        tables[DATA_PATHS_TITLE] = data_paths_table(rep)
    tables.update(training_tables(rep))
    tables.update(gpu)
    return tables


def training_tables(rep: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """One table per (task, hardware) of the training section."""
    return {f"{training.TITLE}: {g['task']} on {g['hardware_key']}": training.table(g)
            for g in (rep.get("training") or {}).get("groups", [])}


def _training_only_markdown(rep: dict[str, Any]) -> str:
    if not rep.get("training"):  # GPU measurements (bench/gpu/gpu_bench.py) and/or a port-check only
        out = ["# portkern portability report", "", f"Files: {', '.join(rep['sources'])}. No bench runs or training "
               "files among the inputs: this report has the GPU measurements and/or the port readiness only."]  # fmt: skip
        out += gpu_bench.markdown(rep["gpu_bench"]) if rep.get("gpu_bench") else []
        out += port_readiness.markdown(rep["port_readiness"]) if rep.get("port_readiness") else []
        return "\n".join(out) + "\n"
    out = ["# portkern portability report", "", f"Training files: {', '.join(rep['sources'])} (machines: "
           f"{rep['machines']}). No bench runs among the inputs: this report has the training section only.", ""]
    found = training.finding(rep["training"])
    if found:
        out += [f"## {SUMMARY_TITLE}", "", f"1. **{found['title']}**: {found['text']}", ""]
    out += training.markdown(rep["training"])
    return _closing(rep, out)


SUMMARY_TITLE = "Summary"
CROSS_DEVICE_TITLE = "Cross-device: which device runs it fastest"


def _vs_fastest(e: Mapping[str, Any]) -> str:
    if e["verdict"] == "fastest":
        return "**fastest**"
    fig = f"{_x(e['vs_fastest'])} [{_span(e.get('vs_fastest_interval'), False, 'x')}]"
    how = "paired" if e.get("paired") else "unpaired"
    word = {"slower": "slower (beyond noise)", "faster": "faster (beyond noise)"}.get(e["verdict"], e["verdict"])
    return f"{fig} {how}, {word}"


def cross_device_workload_table(rep: dict[str, Any], mix: str) -> tuple[list[str], list[list[str]]]:
    """One workload on every device: its best backend, env-steps/s of the whole loop, the ratio to the fastest
    device, each backend; with prices, the cost per million env steps."""
    cd = rep["cross_device"]
    w = cd["workloads"][mix]
    priced = "prices" in cd
    steps = w.get("env_steps_phase")
    head = ["device", "best backend", ("env-steps/s [interval]" if steps else "workload units/s [interval]"),
            "vs fastest device [interval]"] + (["cost / 1e6 env steps [interval]"] if priced and steps else []) + [
            "each backend: throughput, vs fastest"]  # fmt: skip
    rows = []
    for row in w["devices"]:
        fig = "steps_per_s" if steps else "W"
        each = "; ".join(f"{b} {_with(e[fig], e.get(fig + '_interval'))}, {_x(e['vs_fastest'])}"
                         for b, e in row["backends"].items())
        cells = [cd["devices"][row["device"]]["name"], row["best_backend"], _with(row[fig], row.get(fig + "_interval")),
                 _vs_fastest(row)]
        if priced and steps:
            c = row.get("cost_per_1e6_steps")
            cells.append("no price given" if c is None else f"{c:.3g} [{_span(row.get('cost_per_1e6_steps_interval'))}]")
        rows.append(cells + [each])
    return head, rows


def cross_device_kernel_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Every kernel on every device: best backend, items/s, the ratio to the fastest device, each backend."""
    cd = rep["cross_device"]
    rows = []
    for k in cd["kernels"]:
        for row in k["devices"]:
            each = "; ".join(f"{b} {_fmt(e['items_per_s'])}, {_x(e['vs_fastest'])}" for b, e in row["backends"].items()
                             if len(row["backends"]) > 1)
            size = str(k["size"]) if k["same_size"] else f"{row['size']} (sizes differ)"
            rows.append([k["kernel"], size, cd["devices"][row["device"]]["name"], row["best_backend"],
                         _with(row["items_per_s"], row.get("items_per_s_interval")), _vs_fastest(row), each or "–"])
    return ["kernel", "size", "device", "best backend", "items/s [interval]", "vs fastest device [interval]",
            "other backends there: items/s, vs fastest"], rows


def cross_device_markdown(rep: dict[str, Any]) -> list[str]:
    cd = rep.get("cross_device")
    out = ["", f"## {CROSS_DEVICE_TITLE}", ""]
    if not cd or not cd["kernels"]:
        return out + ["Nothing timed in these runs."]
    names = [f"{i['name']} (`{d}`)" for d, i in cd["devices"].items()]
    out += [f"Every device timed in these runs ({len(names)}: {'; '.join(names)}), each kernel and workload at one "
            "size, ranked against the fastest device. A device is hardware plus driver; the host frameworks "
            "(NumPy, torch on the CPU) are the host device, listed once. The ratio to the fastest device has a "
            "**paired** interval when both ran in the same interleaved rounds (devices of one machine) and an "
            "**unpaired**, wider one otherwise (different machines: lo_a / hi_b to hi_a / lo_b of their "
            "throughput intervals); an interval that includes 1 is within noise. Plot: cross-device.png."]
    if "prices" in cd:
        out += ["", "Prices per device-hour: " + ", ".join(f"{cd['devices'][d]['name']} {v:g}"
                                                            for d, v in cd["prices"].items() if d in cd["devices"])
                + "; cost per 1e6 env steps = price x 1e6 / (env-steps/s x 3600) [from the env-steps/s interval]."]
    for m in cd["workloads"]:
        w = cd["workloads"][m]
        mix = ", ".join(f"{k} {100 * v:.0f}%" for k, v in w["phases"].items())
        out += ["", f"**Workload {m}** ({mix}): " + ("env-steps/s of the whole loop (every phase, the reference of "
                                                   "each phase the fastest on any device)" if w["env_steps_phase"]
                                                   else "workload units/s (Definitions, workload)"), ""]
        out += _table(*cross_device_workload_table(rep, m))
    if cd.get("policy_costs"):
        out += ["", "**Cost per converged policy** (the training files: price x H, the device-hours per converged "
                "policy, median over converged seeds [their min–max])", ""]
        out += _table(["task", "stack", "device", "H, device-hours [range]", "price / device-hour",
                       "cost per policy [range]", "converged"],
                      [[r["task"], r["stack"], cd["devices"].get(r["device"], {}).get("name", r["device"]),
                        f"{r['H_h']:.3g} [{r['H_h_range'][0]:.3g}–{r['H_h_range'][1]:.3g}]", f"{r['rate']:g}",
                        f"{r['cost_per_policy']:.3g} [{r['cost_per_policy_range'][0]:.3g}–"
                        f"{r['cost_per_policy_range'][1]:.3g}]", f"{r['converged']} of {r['runs']}"]
                       for r in cd["policy_costs"]])  # fmt: skip
    out += ["", "**Kernels**", ""] + _table(*cross_device_kernel_table(rep))
    return out
DATA_PATHS_TITLE = "Data paths: host round-trip, device per-step, fused"


def data_paths_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = (["device", "backend", "env", "policy", "N x T"] + [f"{p} steps/s" for p in PATHS]
              + [f"{p} device-h / 1e9 steps" for p in PATHS] + ["fused / host", "device / host"])  # fmt: skip
    rows = []
    for r in host_once(rep["data_paths"]["rows"]):
        rows.append([r["device"], r["backend"], r["env"], r["policy"], f"{r['N'] or '–'} x {r['T'] or '–'}"]
                    + [_with(v["steps_per_s"], v.get("steps_per_s_interval")) if v["status"] == "pass"
                       else _cell({**v, "max_error": None}) for v in (r["paths"][p] for p in PATHS)]
                    + [_fmt(r["paths"][p]["device_hours_per_1e9_steps"]) for p in PATHS]
                    + [f"{_x(r['fused_vs_host'])} [{_span(r.get('fused_vs_host_interval'), False, 'x')}]"
                       if r["fused_vs_host"] else "–",
                       f"{_x(r['device_vs_host'])} [{_span(r.get('device_vs_host_interval'), False, 'x')}]"
                       if r["device_vs_host"] else "–"])  # fmt: skip
    return header, rows


def spectrum_table(rep: dict[str, Any], device: str) -> tuple[list[str], list[list[str]]]:
    rows = [r for r in rep.get("spectrum", {}).get("rows", []) if r["device"] == device]
    classes = [c for c in STACK_CLASSES if any(c in r["classes"] for r in rows)]
    classes += sorted({c for r in rows for c in r["classes"]} - set(classes))
    body = []
    for r in rows:
        cells = []
        for c in classes:
            v = r["classes"].get(c)
            if v is None:
                cells.append("–")
                continue
            who = v["backend"] + (f" {v['path']}" if v["path"] else "")
            rel = "**best**" if v["verdict"] == "best" else (
                f"{_with(v['vs_best'], v['vs_best_interval'], True)}"
                + (" (within noise)" if v["verdict"] == "within noise of the best" else ""))  # fmt: skip
            cells.append(f"{_fmt(v['items_per_s'])} ({who}): {rel}")
        body.append([r["kernel"], str(r["size"])] + cells)
    return ["kernel", "size"] + [f"{c}: best items/s (who): vs best class" for c in classes], body


def _size_class(r: Mapping[str, Any]) -> str:
    """A re-tune row's size class and the sizes searched there (source / target when they differ)."""
    if not r.get("size_class"):
        return "–"  # a report from before size classes
    sizes = f"{r['source_size']}" + ("" if r["target_size"] == r["source_size"] else f" / {r['target_size']}")
    return f"{r['size_class']} ({sizes})"


def mix_note(origin: Mapping[str, Any] | None) -> str:
    """Beside a workload's shares: where they were measured, the share of the wall time they cover, what is out."""
    if not origin or origin.get("kind") != "measured":
        return " (a given mix: not measured)" if origin else ""
    seeds = ",".join(str(x) for x in origin.get("seeds") or [])
    cov = origin.get("covered")
    return (f". Measured: kernel phases of the {origin.get('stack')} stack's training on {origin.get('task')} "
            f"({origin.get('file')}, seeds {seeds}, {origin.get('basis')}), covering "
            f"{'?' if cov is None else f'{100 * cov:.1f}%'} of its wall time; left out: {origin.get('excluded')}.")


def markdown(rep: dict[str, Any]) -> str:
    if "functional" not in rep:
        return _training_only_markdown(rep)
    out = ["# portkern portability report", ""]
    if rep.get("quick"):
        out += [f"> **Indicative only.** {', '.join(rep['quick'])} "
                f"{'is a' if len(rep['quick']) == 1 else 'are'} `--quick` run{'s' if len(rep['quick']) > 1 else ''}: "
                "small sizes, few and short rounds on a possibly shared machine. Read the intervals, not the "
                "points; act on a full `portkern bench` run.", ""]  # fmt: skip
    left = {p: m["left_out"]["left_out"] for p, m in rep.get("runs", {}).items()
            if (m.get("left_out") or {}).get("left_out")}  # fmt: skip
    for p, cases in left.items():  # a quick run's subset, said where its figures are read
        kinds = sorted({f"{(c['kernel'].split(':') + ['', ''])[2]} path on {c['backend']}" for c in cases})
        out += [f"> **A subset.** {p} left out {len(cases)} case(s) that repeat another (the same code at the same "
                f"size): the {', '.join(kinds)}; each is listed with the case it repeats under `left_out` in that "
                "file.", ""]  # fmt: skip
    out += [f"Runs: {', '.join(rep['sources'])} (machines: {rep['machines']}).", ""]
    old = [p for p, m in rep.get("runs", {}).items() if m.get("schema") == "portkern-bench/1"]
    if old:
        out += [f"Older runs without per-round data (no intervals, best-of times): {', '.join(old)}.", ""]
    out += [f"## {SUMMARY_TITLE}", ""]
    if rep.get("summary"):
        out += [f"{i}. **{f['title']}**: {f['text']}" for i, f in enumerate(rep["summary"], 1)]
        out += ["", "Intervals are the 10th–90th percentile of the figure over interleaved rounds (Definitions); "
                "\"within noise\" means the interval of the paired ratio includes 1 and no winner is named."]
    else:
        out += ["Nothing timed in these runs."]
    out += cross_device_markdown(rep)
    out += ["", "## Devices", ""]
    out += _table(["device", "label", "kind", "vendor", "copy bandwidth (B/s)", "backends", "includes", "baseline"],
                  [[d, i["device_label"], i["kind"], i["vendor"], _fmt(i["ceiling_bytes_per_s"]),
                    ", ".join(i["backends"]), ", ".join(i.get("includes", [])) or "–", i["baseline"]]
                   for d, i in rep["devices"].items()])  # fmt: skip
    if rep["simulators"]:
        out += ["", "Functional-only devices (simulators and correctness harnesses: parity checked, never timed, not "
                "in PP): " + ", ".join(f"{d} ({i['device_label']})" for d, i in rep["simulators"].items())]
    if rep["unavailable"]:
        out += ["", "Backends not available in these runs (not measured; on a device in the set they make PP 0):", ""]
        out += [f"* {u['backend']} on {u['machine']}: {u['reason']}" for u in rep["unavailable"]]
    for title, (header, rows) in headline(rep).items():
        if title in (DATA_PATHS_TITLE, SUMMARY_TITLE, CROSS_DEVICE_TITLE) or title.startswith(training.TITLE):
            continue
        out += ["", f"## {title}", ""] + _table(header, rows)
    out += ["", "## Workload throughput penalty", "",
            "One computation for both tables: W(b) per backend (Definitions, workload); **ratio** is against the "
            "device's baseline and **penalty** = 1 - ratio; **app. eff.** is against the fastest backend for the "
            "workload and is what the PP table's workload row averages. They are the same number unless a native "
            "baseline is slower than the best backend."]
    for m, w in rep["workloads"].items():
        out += ["", f"**{m}**: " + ", ".join(f"{k} {100 * s:.0f}%" for k, s in w["shares"].items())
                + mix_note(w.get("origin")), ""]
        out += _table(["device", "backend", "ratio [interval]", "throughput penalty [interval]", "app. eff. [interval]",
                       "vs baseline"],
                      [[d, b, _with(v["ratio"], v.get("ratio_interval"), True),
                        _fmt(v["penalty"], True) + (f" [{_span(v['penalty_interval'], True)}]" if v["ratio"] else ""),
                        _with(v["app_eff"], v.get("app_eff_interval"), True),
                        _verdict_text(v) + (f" ({w['baseline'][d]})" if v["verdict"] not in ("baseline",) else "")]
                       for d, per in w["devices"].items() for b, v in per.items()])  # fmt: skip
    out += ["", "## Stack-class spectrum", ""]
    sp = rep.get("spectrum", {})
    if sp.get("rows"):
        out += ["Per device, the best throughput each stack class reached (which backend and data path) and its "
                "ratio to the best class [interval]. Plot: spectrum.png."]
        for d in dict.fromkeys(r["device"] for r in sp["rows"]):
            out += ["", f"**{d}**", ""] + _table(*spectrum_table(rep, d))
    else:
        out += ["No stack classes recorded in these runs (schema 1 runs predate them)."]
    out += ["", "## Data paths", ""]
    dp = rep.get("data_paths", {})
    if dp.get("rows"):
        out += [("Env-steps/s of one T-step rollout with the state coming back to the host every step (host), "
                 "resident on the device with one launch per step (device), and with the policy fused into the "
                 "env kernel (fused); device-hours per 1e9 env steps are GPU-hours on a GPU. Plot: "
                 "data-paths.png."), ""]
        out += _table(*data_paths_table(rep))
        if dp.get("spread"):
            out += ["", "Stack spread on one device (fastest backend and path / slowest):", ""]
            out += [f"* {s['device']}, {s['env']} ({s['policy']} policy, N = {s['N']}): {s['fastest']['backend']} "
                    f"{s['fastest']['path']} {_fmt(s['fastest']['steps_per_s'])} steps/s vs {s['slowest']['backend']} "
                    f"{s['slowest']['path']} {_fmt(s['slowest']['steps_per_s'])} steps/s: **{_x(s['factor'])}** "
                    f"[{_span(s.get('factor_interval'), False, 'x')}]"
                    for s in dp["spread"]]  # fmt: skip
    else:
        out += ["No rollout cases in these runs (bench/test_rollout_paths.py; `portkern bench` runs them)."]
    if rep.get("training"):
        out += [""] + training.markdown(rep["training"])
    out += ["", "## Re-tune penalty", ""]
    if rep["retune"]:
        out += _table(["backend", "kernel", "size class", "tuned on", "run on", "config", "target's best", "penalty"],
                      [[r["backend"], r["kernel"], _size_class(r), r["source"], r["target"], json.dumps(r["config"]),
                        json.dumps(r["target_best_config"]),
                        (_fmt(r["penalty"], True) if r["penalty"] is not None else "–")
                        + (f" [{100 * r['penalty_interval'][0]:.1f}–{100 * r['penalty_interval'][1]:.1f}%]"
                           if r.get("penalty_interval") else "")
                        + (" (within noise)" if r.get("verdict") == "within noise" else "")
                        + (f" † {r['note']}" if r["note"] else "")] for r in rep["retune"]])  # fmt: skip
    else:
        out += ["No pair of devices with a knob search for the same backend in these runs: run `portkern tune` "
                "on two or more devices and pass all the run files."]
    return _closing(rep, out)


def _closing(rep: dict[str, Any], out: list[str]) -> str:
    """The report's last sections after what ran: the GPU measurements, the port readiness (compiled, not
    run), the plots and the definitions; the whole markdown."""
    if rep.get("gpu_bench"):
        out += gpu_bench.markdown(rep["gpu_bench"])
    if rep.get("port_readiness"):  # compiled, not run: after everything that ran
        out += port_readiness.markdown(rep["port_readiness"])
    out += plots_markdown(rep)
    out += ["", "## Definitions", ""] + [f"* **{k}**: {v}" for k, v in rep["definitions"].items()]
    return "\n".join(out) + "\n"


def plots_markdown(rep: dict[str, Any]) -> list[str]:
    """Every plot written beside report.md, each with its one-line caption."""
    from .plots import plot_files  # matplotlib is imported only when a plot is drawn

    files = plot_files(rep)
    if not files:
        return []
    return ["", "## Plots", ""] + [f"* `{name}`: {caption}\n\n  ![{name}]({name})" for name, caption, _ in files]
