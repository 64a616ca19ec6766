"""Two runs of one machine, compared: where their verdicts agree, where one is within noise, and any
contradiction (consistency.md/.json)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

from ...runs import load_run
from .. import metrics
from .format import _fmt, _json_default, _span, _table
from .model import build


def _verdicts(rep: dict[str, Any]) -> dict[tuple[str, ...], dict[str, Any]]:
    """Every ranked comparison in a report: kernel pairs, workload pairs and data-path factors."""
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    # Keyed by where each comparison was measured: a bare-hardware one (NumPy vs torch) shows on every
    # driver-device of that hardware but counts once.
    for p in rep.get("pairs", []):
        out[("kernel", p.get("measured_on", p["device"]), p["kernel"], f"{p['a']} / {p['b']}")] = p
    for m, w in rep["workloads"].items():
        for p in w.get("pairs", []):
            out[("workload", p["device"], m, f"{p['a']} / {p['b']}")] = p
    for r in rep.get("data_paths", {}).get("rows", []):
        for path in ("fused", "device"):
            if r.get(f"{path}_vs_host"):
                iv = r.get(f"{path}_vs_host_interval")
                v = metrics.verdict(tuple(iv) if iv else None)
                where = r.get("measured_on", r["device"])
                out[("data path", where, f"{r['env']} ({r['policy']}) {r['backend']}", f"{path} / host")] = {
                    "ratio": r[f"{path}_vs_host"], "interval": iv,
                    "verdict": {"higher": "faster", "lower": "slower"}.get(v, v)}  # fmt: skip
    return out


def compare(rep_a: dict[str, Any], rep_b: dict[str, Any]) -> dict[str, Any]:
    """Each comparison both reports rank: agreement, one within noise, contradiction (A faster in one, slower
    in the other, both beyond noise), and whether their intervals overlap."""
    va, vb = _verdicts(rep_a), _verdicts(rep_b)
    rows, counts = [], defaultdict(int)
    for key in [k for k in va if k in vb]:
        a, b = va[key], vb[key]
        ranked = {x for x in (a["verdict"], b["verdict"]) if x in ("faster", "slower")}
        if a["verdict"] == "no interval" or b["verdict"] == "no interval":
            outcome = "no interval"
        elif len(ranked) == 2:
            outcome = "contradiction"
        elif a["verdict"] == b["verdict"]:
            outcome = "agree, beyond noise" if ranked else "agree, within noise"
        else:
            outcome = "one within noise"
        ia, ib = a.get("interval"), b.get("interval")
        overlap = bool(ia and ib and ia[0] <= ib[1] and ib[0] <= ia[1])
        counts[outcome] += 1
        counts["intervals overlap"] += overlap
        rows.append({"kind": key[0], "device": key[1], "what": key[2], "ratio_of": key[3], "a": a, "b": b,
                     "outcome": outcome, "intervals_overlap": overlap})  # fmt: skip
    return {"a": rep_a["sources"], "b": rep_b["sources"], "runs": {**rep_a.get("runs", {}), **rep_b.get("runs", {})},
            "compared": len(rows), "counts": dict(counts), "contradictions": counts["contradiction"],
            "rows": rows, "only_in_a": len(set(va) - set(vb)), "only_in_b": len(set(vb) - set(va)),
            "summary_a": rep_a.get("summary", []), "summary_b": rep_b.get("summary", [])}  # fmt: skip


def _machine_state(m: dict[str, Any]) -> str:
    """The suite's wall time, the CPU share the hypervisor took during it and the visits it retimed for a burst of
    steal, where the run recorded them."""
    parts = []
    if m.get("wall_s") is not None:
        parts.append(f"suite {m['wall_s']:.0f} s")
    if m.get("cpu_steal") is not None:
        parts.append(f"CPU steal {100 * m['cpu_steal']:.1f} %")
    if m.get("retimed_visits"):
        parts.append(f"{m['retimed_visits']} visit(s) timed again for a burst of steal on one CPU")
    return "; " + ", ".join(parts) if parts else ""


def compare_markdown(cmp: dict[str, Any]) -> str:
    def fig(x: dict[str, Any]) -> str:
        return f"{_fmt(x['ratio'])} [{_span(x.get('interval'))}] {x['verdict']}"

    out = ["# Two runs compared", "",
           f"Made by `portkern report {' '.join(cmp['a'] + cmp['b'])} --compare --out FILE.md`.", "",
           f"* A: {', '.join(cmp['a'])}", f"* B: {', '.join(cmp['b'])}", ""]  # fmt: skip
    for path, m in cmp["runs"].items():
        t = m.get("timing") or {}
        out.append(f"* {path}: {m.get('sizes')} sizes, {t.get('rounds', '?')} rounds per group in up to "
                   f"{t.get('visits_max', 1)} visits, written {m.get('datetime', '?')}, load average "
                   f"{json.dumps(m.get('loadavg') or {})}{_machine_state(m)}")  # fmt: skip
    codes = [m.get("code") for m in cmp["runs"].values()]
    if len(codes) == 2 and all(codes):
        changed = sorted(k for k in set(codes[0]) | set(codes[1]) if codes[0].get(k) != codes[1].get(k))
        out += ["", "Same code in both runs." if not changed else
                f"**The runs measured different code**: {', '.join(changed)} changed between them; their "
                "comparisons measure the edit as well as the noise."]  # fmt: skip
    for path, m in cmp["runs"].items():
        if m.get("code") and m.get("code_end") and m["code"] != m["code_end"]:
            moved = sorted(k for k in m["code"] if m["code"].get(k) != m["code_end"].get(k))
            out += ["", f"**{path} measured code that changed while it ran**: {', '.join(moved)}."]
    verdict = ("**No contradiction**" if not cmp["contradictions"] else f"**{cmp['contradictions']} contradiction(s)**")
    out += ["", f"{verdict}: of {cmp['compared']} comparisons both runs made (kernel pairs, workload pairs, data-path "
            "factors), none is ranked one way beyond noise in A and the other way beyond noise in B." if not
            cmp["contradictions"] else f"{verdict} among {cmp['compared']} comparisons (listed below).", ""]
    out += _table(["outcome", "comparisons"], [[k, str(v)] for k, v in sorted(cmp["counts"].items())])
    out += ["", "A contradiction is a pair ranked faster beyond noise in one run and slower beyond noise in the other; "
            "\"one within noise\" is a ranking one run could not confirm (not a contradiction); \"intervals overlap\" "
            "counts comparisons whose two intervals share a value.", ""]
    for title, key in (("Summary of A", "summary_a"), ("Summary of B", "summary_b")):
        out += [f"## {title}", ""] + [f"{i}. **{f['title']}**: {f['text']}" for i, f in enumerate(cmp[key], 1)] + [""]
    shown = [r for r in cmp["rows"] if r["outcome"] in ("contradiction", "one within noise") or r["kind"] == "workload"]
    out += ["## Comparisons that differ between the runs, and every workload comparison", ""]
    out += _table(["kind", "device", "what", "ratio", "A", "B", "outcome"],
                  [[r["kind"], r["device"], r["what"], r["ratio_of"], fig(r["a"]), fig(r["b"]), r["outcome"]]
                   for r in sorted(shown, key=lambda r: (r["outcome"] != "contradiction", r["kind"], r["device"],
                                                         r["what"]))])  # fmt: skip
    return "\n".join(out) + "\n"


def write_comparison(run_a: str, run_b: str, out: str | Path,
                     mixes: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:  # fmt: skip
    """Compare two runs (each reported on its own) into ``out``: a .md file (with a .json beside it) or a folder."""
    rep_a, rep_b = build(load_run(run_a), mixes), build(load_run(run_b), mixes)
    cmp = compare(rep_a, rep_b)
    path = Path(out)
    md = path if path.suffix == ".md" else path / "consistency.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(compare_markdown(cmp))
    md.with_suffix(".json").write_text(json.dumps(cmp, indent=1, default=_json_default))
    return cmp
