"""Training runs (``portkern train``, schema portkern-train/1) in the report and the cost model.

* :func:`load_train` reads and checks one training file.
* :func:`summarise` turns training files into the report's ``training`` section: per task and hardware,
  device-hours per converged policy (H) per stack, env steps to converge, env-steps/s, phase shares and the
  factor between the fastest and the slowest stack.
* :func:`cost_from_train` picks H (locked stack) and the throughput ratio (portable / locked env-steps/s)
  for ``portkern cost --train``.
* :func:`mixes_from_train` derives the report's default workload mixes from the measured phases;
  ``python -m portkern.portability.training derive-mixes TRAIN.json --stack numpy --out FILE`` writes them.

Nothing here imports torch or a backend: a report is built anywhere from the files alone.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

TRAIN_SCHEMA = "portkern-train/1"  # as written by portkern.train.runner (not imported: it needs torch)
MIXES_SCHEMA = "portkern-mixes/1"
#: Phase order of the share columns (the order a reader asks "where do the hours go").
SHARE_PHASES = ("act", "env", "adv", "update", "move", "other", "setup")
#: Segment order of the phase plot: a run's timeline, setup first; untimed gaps last.
PLOT_PHASES = ("setup", "act", "env", "adv", "update", "move", "other", "untimed")
TITLE = "Training: device-hours per converged policy"
FUSED_NOTE = ("Fused stacks (mode fused) step the env and act inside one kernel launch per rollout: their \"env\" "
              "phase includes in-kernel acting, and their \"act\" is only the log-probs and values recomputed in "
              "PyTorch from the stored obs and actions.")  # fmt: skip
#: What the measured workload mixes leave out (the report says it beside the workload table).
MIX_EXCLUDED = ("the PPO's forward passes (acting and update), backward pass and optimizer step, data movement, "
                "setup and bookkeeping: they are not portkern kernels")  # fmt: skip

_TOP_KEYS = {
    "schema": str, "portkern_version": str, "created": str, "command": str, "config": dict, "device_hour": str,
    "phases": dict, "update_parts": dict, "untimed_tolerance": (int, float), "host": dict, "order": str,
    "prime_s": dict, "devices": dict, "runs": list,
}  # fmt: skip
_RUN_KEYS = {
    "task": str, "stack": str, "mode": str, "backend": str, "device_key": str, "hardware_key": str,
    "agent_device": str, "seed": int, "converged": bool, "stop_reason": str, "env_steps": int,
    "steps_to_converge": (int, type(None)), "updates": int, "wall_s": (int, float),
    "device_hours": (int, float, type(None)), "steps_per_s": (int, float), "final_return": (int, float, type(None)),
    "episodes": int, "phases": dict, "update_parts": dict, "untimed_s": (int, float), "compile_s": (int, float),
    "losses": dict, "losses_finite": bool, "curve": list,
}  # fmt: skip


class TrainFileError(ValueError):
    """A file that is not a usable portkern training run; the message names the file and the problem."""


def _type_name(t: Any) -> str:
    names = [x.__name__ for x in (t if isinstance(t, tuple) else (t,))]
    return " or ".join({"NoneType": "null", "str": "a string", "int": "an integer", "float": "a number",
                        "bool": "true/false", "dict": "an object", "list": "a list"}.get(n, n) for n in names)  # fmt: skip


def _is(value: Any, t: Any) -> bool:
    types = t if isinstance(t, tuple) else (t,)
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a number here
    return isinstance(value, types)


def _mistyped(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    """The first key of ``spec`` whose value in ``obj`` is not of the declared type(s), or None."""
    return next((k for k, t in spec.items() if not _is(obj[k], t)), None)


def is_train_file(path: str | Path) -> bool:
    """Whether ``path`` is meant as a training file: a JSON object whose ``schema`` names portkern-train.

    Unreadable or non-JSON files answer False; the bench-run loader then names the problem.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("portkern-train")


def load_train(path: str | Path) -> dict[str, Any]:
    """Read and check one ``portkern train`` file; raises TrainFileError naming the file and the problem."""
    p = str(path)

    def fail(what: str) -> TrainFileError:
        return TrainFileError(f"{p}: {what}")

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise fail(f"cannot read it ({exc.strerror or exc})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); truncated?") from None
    if not isinstance(doc, dict):
        raise fail(f"expected a JSON object of schema {TRAIN_SCHEMA!r} (written by `portkern train`), "
                   f"got {type(doc).__name__}")  # fmt: skip
    if doc.get("schema") != TRAIN_SCHEMA:
        raise fail(f"not a portkern training file of schema {TRAIN_SCHEMA!r} (written by `portkern train`): "
                   f"its schema is {doc.get('schema')!r}")  # fmt: skip
    missing = [k for k in _TOP_KEYS if k not in doc]
    if missing:
        raise fail(f"missing top-level keys {missing}; a {TRAIN_SCHEMA} file has {', '.join(_TOP_KEYS)}")
    bad = _mistyped(doc, _TOP_KEYS)
    if bad:
        raise fail(f"'{bad}' must be {_type_name(_TOP_KEYS[bad])}, got {type(doc[bad]).__name__}")
    tasks = doc["config"].get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise fail("'config.tasks' must be a non-empty object of env id -> task settings")
    for env_id, t in tasks.items():
        if not isinstance(t, dict) or not isinstance(t.get("ppo"), dict) or not _is(t.get("target"), (int, float)):
            raise fail(f"'config.tasks.{env_id}' must be an object with 'target' (a number) and 'ppo' (an object)")
    if not doc["runs"]:
        raise fail("'runs' is empty: the file holds no training run")
    phases = list(doc["phases"])
    parts = list(doc["update_parts"])
    for i, r in enumerate(doc["runs"]):
        where = f"runs[{i}]"
        if not isinstance(r, dict):
            raise fail(f"{where} must be an object, got {type(r).__name__}")
        missing = [k for k in _RUN_KEYS if k not in r]
        if missing:
            raise fail(f"{where} lacks {missing}")
        bad = _mistyped(r, _RUN_KEYS)
        if bad:
            raise fail(f"{where}.{bad} must be {_type_name(_RUN_KEYS[bad])}, got {r[bad]!r}")
        where = f"{where} ({r['task']} {r['stack']} seed {r['seed']})"
        if r["task"] not in tasks:
            raise fail(f"{where}: task {r['task']!r} is not in config.tasks ({', '.join(tasks)})")
        if r["device_key"] not in doc["devices"]:
            raise fail(f"{where}: device_key {r['device_key']!r} is not in 'devices' ({', '.join(doc['devices'])})")
        if not (math.isfinite(r["wall_s"]) and r["wall_s"] > 0):
            raise fail(f"{where}.wall_s must be a number > 0, got {r['wall_s']!r}")
        if not (math.isfinite(r["steps_per_s"]) and r["steps_per_s"] >= 0):
            raise fail(f"{where}.steps_per_s must be a number >= 0, got {r['steps_per_s']!r}")
        for name, keys, got in (("phases", phases, r["phases"]), ("update_parts", parts, r["update_parts"])):
            lacking = [k for k in keys if k not in got]
            if lacking:
                raise fail(f"{where}.{name} lacks {lacking} (the file's '{name}' lists {', '.join(keys)})")
            bad = {k: v for k, v in got.items() if not (_is(v, (int, float)) and math.isfinite(v) and v >= 0)}
            if bad:
                raise fail(f"{where}.{name}: seconds must be numbers >= 0, got {bad}")
        if r["converged"]:
            if not (r["steps_to_converge"] and r["steps_to_converge"] > 0) or r["device_hours"] is None:
                raise fail(f"{where}: converged, so steps_to_converge must be an integer > 0 and device_hours a "
                           f"number; got {r['steps_to_converge']!r} and {r['device_hours']!r}")  # fmt: skip
        elif r["device_hours"] is not None or r["steps_to_converge"] is not None:
            raise fail(f"{where}: not converged, so device_hours and steps_to_converge must be null")
    return doc


# ---- figures ---------------------------------------------------------------------------------------
def _median(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return float(statistics.median(xs)) if xs else None


def _range(xs: Iterable[float]) -> list[float] | None:
    xs = list(xs)
    return [float(min(xs)), float(max(xs))] if xs else None


def basis(runs: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], str]:
    """The runs shares and phase seconds are taken over: the converged seeds, or all seeds if none converged."""
    ok = [r for r in runs if r["converged"]]
    return (ok, "converged seeds") if ok else (list(runs), "all seeds (none converged)")


def phase_shares(runs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Median over ``runs`` of phase seconds / wall_s, for every phase and ``untimed``."""
    keys = list(runs[0]["phases"]) if runs else []
    out = {k: _median(r["phases"][k] / r["wall_s"] for r in runs) for k in keys}
    out["untimed"] = _median(r["untimed_s"] / r["wall_s"] for r in runs)
    return out  # type: ignore[return-value]


def _best_return(runs: Sequence[Mapping[str, Any]]) -> float | None:
    """The best window-mean return any of ``runs`` reached (its curve; the final one without a curve)."""
    vals = [c[3] for r in runs for c in r.get("curve") or [] if len(c) > 3 and c[3] is not None]
    vals += [r["final_return"] for r in runs if r.get("final_return") is not None]
    return max(vals) if vals else None


def _driver(identity: Mapping[str, Any]) -> str:
    return " ".join(x for x in (str(identity.get("platform") or ""), str(identity.get("driver") or "")) if x)


def stack_figures(runs: Sequence[Mapping[str, Any]], devices: Mapping[str, Mapping[str, Any]],
                  prime_s: Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """One stack's figures over its seeds (``runs`` all of one task, stack and hardware)."""
    ok = [r for r in runs if r["converged"]]
    base, basis_name = basis(runs)
    wall_ok = [r["wall_s"] for r in ok]
    h_s = _median(wall_ok)
    keys = list(base[0]["phases"])
    first = runs[0]
    devs = []
    for key in dict.fromkeys(r["device_key"] for r in runs):
        ident = devices.get(key, {})
        devs.append({"device_key": key, "device_label": ident.get("device_label", ""), "driver": _driver(ident)})
    return {
        "stack": first["stack"], "mode": first["mode"], "backend": first["backend"], "devices": devs,
        "runs": len(runs), "converged": len(ok), "seeds": [r["seed"] for r in runs],
        "converged_seeds": [r["seed"] for r in ok], "files": sorted({r.get("_file", "") for r in runs}),
        "H_s": h_s, "H_s_range": _range(wall_ok),
        "H_h": None if h_s is None else h_s / 3600, "H_h_range": _range(w / 3600 for w in wall_ok),
        "steps_to_converge": _median(r["steps_to_converge"] for r in ok),
        "steps_to_converge_range": _range(r["steps_to_converge"] for r in ok),
        "steps_per_s": _median(r["steps_per_s"] for r in runs),
        "steps_per_s_range": _range(r["steps_per_s"] for r in runs),
        "basis": basis_name,
        "phase_seconds": {**{k: _median(r["phases"][k] for r in base) for k in keys},
                          "untimed": _median(r["untimed_s"] for r in base)},
        "phase_shares": phase_shares(base),
        "update_part_shares": {k: _median(r["update_parts"][k] / r["wall_s"] for r in base)
                               for k in base[0]["update_parts"]},
        "wall_s": _median(r["wall_s"] for r in base),
        "stop_reasons": dict(Counter(r["stop_reason"] for r in runs)),
        "best_return": _best_return(runs),
        "prime_s": None if prime_s is None else prime_s.get(first["stack"]),
    }  # fmt: skip


def factor(stacks: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Median H of the slowest converged stack / the fastest's, with the range from the extreme seeds
    (min slowest / max fastest .. max slowest / min fastest); None with fewer than two converged stacks."""
    conv = [s for s in stacks if s["converged"]]
    if len(conv) < 2:
        return None
    order = sorted(conv, key=lambda s: s["H_s"])  # two different stacks even when their medians tie
    fast, slow = order[0], order[-1]
    return {"value": slow["H_s"] / fast["H_s"],
            "range": [slow["H_s_range"][0] / fast["H_s_range"][1], slow["H_s_range"][1] / fast["H_s_range"][0]],
            "slowest": slow["stack"], "fastest": fast["stack"]}  # fmt: skip


def throughput_factor(stacks: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The same rollout volume: the fastest stack's median env-steps/s / the slowest's (every seed, converged or
    not), with the range from the extreme seeds; free of the seeds' luck in env steps to converge."""
    ok = [s for s in stacks if s.get("steps_per_s")]
    if len(ok) < 2:
        return None
    order = sorted(ok, key=lambda s: s["steps_per_s"])
    slow, fast = order[0], order[-1]
    return {"value": fast["steps_per_s"] / slow["steps_per_s"],
            "range": [fast["steps_per_s_range"][0] / slow["steps_per_s_range"][1],
                      fast["steps_per_s_range"][1] / slow["steps_per_s_range"][0]],
            "slowest": slow["stack"], "fastest": fast["stack"]}  # fmt: skip


def _task_key(t: Mapping[str, Any]) -> str:
    """What makes two files' runs of a task comparable: the convergence target and the PPO settings."""
    return json.dumps({"target": t.get("target"), "ppo": t.get("ppo")}, sort_keys=True)


def pooled(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every run of every file (tagged with its file) and every device identity; raises ValueError when a
    task's pinned settings differ between files (their policies would not be the same converged policy)."""
    runs: list[dict[str, Any]] = []
    devices: dict[str, Any] = {}
    seen: dict[str, tuple[str, str]] = {}
    for path, doc in docs:
        for env_id, t in doc["config"]["tasks"].items():
            key = _task_key(t)
            if env_id in seen and seen[env_id][1] != key:
                raise ValueError(f"{path}: task {env_id}'s pinned settings (target, PPO) differ from those in "
                                 f"{seen[env_id][0]}: their policies are not the same converged policy; report "
                                 "them separately")  # fmt: skip
            seen.setdefault(env_id, (path, key))
        devices.update(doc["devices"])
        runs += [{**r, "_file": path} for r in doc["runs"]]
    return runs, devices


def summarise(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The report's ``training`` section from (path, loaded file) pairs."""
    runs, devices = pooled(docs)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["task"], r["hardware_key"]), []).append(r)
    tasks = {env_id: t for _, doc in docs for env_id, t in doc["config"]["tasks"].items()}
    prime: dict[str, dict[str, float]] = {}
    for _, doc in docs:
        for task, per in doc["prime_s"].items():
            prime.setdefault(task, {}).update(per)
    out_groups = []
    for (task, hw), rs in groups.items():
        by_stack: dict[str, list[dict[str, Any]]] = {}
        for r in rs:
            by_stack.setdefault(r["stack"], []).append(r)
        stacks = [stack_figures(v, devices, prime.get(task)) for v in by_stack.values()]
        ident = devices.get(hw) or devices.get(rs[0]["device_key"], {})
        t = tasks[task]
        over = [{"stack": r["stack"], "seed": r["seed"], "untimed_share": r["untimed_s"] / r["wall_s"]}
                for r in rs if r["untimed_s"] / r["wall_s"] > _tolerance(docs, r["_file"])]  # fmt: skip
        out_groups.append({
            "task": task, "hardware_key": hw, "hardware_label": ident.get("device_label", hw),
            "kind": ident.get("kind", ""), "target": t.get("target"),
            "solve_window": (t.get("ppo") or {}).get("solve_window"), "stacks": stacks, "factor": factor(stacks),
            "throughput_factor": throughput_factor(stacks),
            "untimed_over_tolerance": over,
        })  # fmt: skip
    defs = list(dict.fromkeys(doc["device_hour"] for _, doc in docs))
    return {
        "sources": [{"file": p, "created": d["created"], "portkern_version": d["portkern_version"],
                     "config": {k: d["config"].get(k) for k in ("source", "version")}, "host": d["host"],
                     "order": d["order"], "untimed_tolerance": d["untimed_tolerance"]} for p, d in docs],
        "device_hour": defs[0] if len(defs) == 1 else defs,
        "phases": {k: v for _, d in docs for k, v in d["phases"].items()},
        "update_parts": {k: v for _, d in docs for k, v in d["update_parts"].items()},
        "groups": out_groups,
    }  # fmt: skip


def _tolerance(docs: Sequence[tuple[str, Mapping[str, Any]]], path: str) -> float:
    return float(next(d["untimed_tolerance"] for p, d in docs if p == path))


# ---- rendering (report.md) ---------------------------------------------------------------------------
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
        shares = [_pct(s["phase_shares"].get(p)) for p in SHARE_PHASES] + [_pct(s["phase_shares"].get("untimed"))]
        rows.append([s["stack"], dev, conv, *h, _steps(s["steps_per_s"]) + _rng(s["steps_per_s_range"], _steps),
                     *shares])  # fmt: skip
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
}  # fmt: skip


# ---- cost --train -----------------------------------------------------------------------------------
def _choices(runs: Sequence[Mapping[str, Any]]) -> str:
    pairs = dict.fromkeys(f"{r['stack'].partition('@')[0]}@{r['device_key']}" for r in runs)
    return ", ".join(pairs)


def select(runs: Sequence[Mapping[str, Any]], spec: str, option: str) -> tuple[str, str, list[dict[str, Any]]]:
    """(stack, device_key, runs) of ``STACK@DEVICE``: STACK the runs' stack label before any '@', DEVICE a
    case-insensitive unique substring of their device_key (optional when the stack ran on one device). A spec
    that is a run's whole stack label (``opencl+fused@pocl``, as given to ``portkern train --stack``) picks
    that stack's runs when they are on one device."""
    spec = spec.strip()
    labelled = [r for r in runs if r["stack"] == spec and "@" in spec]
    if labelled and len({r["device_key"] for r in labelled}) == 1:
        return spec.partition("@")[0], labelled[0]["device_key"], labelled
    stack, _, device = spec.partition("@")
    stack, device = stack.strip(), device.strip()
    if not stack:
        raise ValueError(f"{option} {spec!r}: expected STACK@DEVICE (e.g. numpy@cpu); valid: {_choices(runs)}")
    mine = [r for r in runs if r["stack"].partition("@")[0] == stack]
    if not mine:
        raise ValueError(f"{option} {spec!r}: no run of stack {stack!r} in the training files; valid: {_choices(runs)}")
    keys = list(dict.fromkeys(r["device_key"] for r in mine))
    if device:
        match = [k for k in keys if k.lower() == device.lower()] or [k for k in keys if device.lower() in k.lower()]
    else:
        match = keys
    if len(match) != 1:
        why = (f"device {device!r} matches {len(match)} of its devices" if device
               else f"stack {stack!r} ran on {len(keys)} devices: name one")  # fmt: skip
        raise ValueError(f"{option} {spec!r}: {why}; valid: " + ", ".join(f"{stack}@{k}" for k in keys))
    return stack, match[0], [r for r in mine if r["device_key"] == match[0]]


def cost_from_train(paths: Sequence[str], locked: str, portable: str, task: str | None = None) -> dict[str, Any]:
    """H, its range, the ratio and its interval for ``portkern cost --train``, with where each came from.

    H = the locked stack's median device-hours per converged policy (range: min–max over its converged
    seeds); ratio = the portable stack's median env-steps/s / the locked stack's (all seeds), interval
    [min portable / max locked, max portable / min locked].
    """
    docs = [(str(p), load_train(p)) for p in paths]
    runs, _ = pooled(docs)
    l_stack, l_dev, l_runs = select(runs, locked, "--locked")
    p_stack, p_dev, p_runs = select(runs, portable, "--portable")
    both = [t for t in dict.fromkeys(r["task"] for r in l_runs) if any(r["task"] == t for r in p_runs)]
    if task is not None:
        if task not in both:
            raise ValueError(f"--task {task!r}: expected a task both stacks ran; both ran: {', '.join(both) or 'none'}")
    elif len(both) == 1:
        task = both[0]
    else:
        raise ValueError(f"--task: expected one of {', '.join(both)} (both stacks ran these)" if both else
                         f"--locked {locked!r} and --portable {portable!r} share no task in the training files")
    l_runs = [r for r in l_runs if r["task"] == task]
    p_runs = [r for r in p_runs if r["task"] == task]
    ok = [r for r in l_runs if r["converged"]]
    if not ok:
        s = {"stop_reasons": dict(Counter(r["stop_reason"] for r in l_runs)), "best_return": _best_return(l_runs)}
        raise ValueError(f"--locked {locked!r}: {l_stack} on {l_dev} never converged on {task} "
                         f"({not_converged_text(s)}); H is undefined without a converged policy")  # fmt: skip
    hours = [r["wall_s"] / 3600 for r in ok]
    l_sps = [r["steps_per_s"] for r in l_runs]
    p_sps = [r["steps_per_s"] for r in p_runs]
    if not (min(l_sps) > 0 and min(p_sps) > 0):
        raise ValueError(f"{task}: a run with 0 env-steps/s; no throughput ratio")
    h = float(statistics.median(hours))
    ratio = float(statistics.median(p_sps) / statistics.median(l_sps))
    files = sorted({r["_file"] for r in l_runs + p_runs})
    p_ok = sum(r["converged"] for r in p_runs)

    def seeds(rs: Sequence[Mapping[str, Any]]) -> str:
        return ",".join(str(r["seed"]) for r in rs)

    return {
        "task": task, "files": files,
        "locked": {"stack": l_stack, "device_key": l_dev, "seeds": [r["seed"] for r in l_runs],
                   "converged_seeds": [r["seed"] for r in ok], "steps_per_s": float(statistics.median(l_sps)),
                   "steps_per_s_range": _range(l_sps)},
        "portable": {"stack": p_stack, "device_key": p_dev, "seeds": [r["seed"] for r in p_runs],
                     "converged_seeds": [r["seed"] for r in p_runs if r["converged"]],
                     "steps_per_s": float(statistics.median(p_sps)), "steps_per_s_range": _range(p_sps)},
        "gpu_hours": h, "gpu_hours_range": (min(hours), max(hours)),
        "ratio": ratio, "ratio_interval": (min(p_sps) / max(l_sps), max(p_sps) / min(l_sps)),
        "h_source": (f"locked {l_stack} on {l_dev}, {task}: median device-hours per converged policy over converged "
                     f"seeds {seeds(ok)} of {seeds(l_runs)}, range min–max over them; {', '.join(files)}"),
        "ratio_source": (f"median env-steps/s of portable {p_stack} on {p_dev} ({statistics.median(p_sps):,.0f}, seeds "
                         f"{seeds(p_runs)}; {p_ok} of {len(p_runs)} converged) / locked {l_stack} on {l_dev} "
                         f"({statistics.median(l_sps):,.0f}, seeds {seeds(l_runs)}), {task}; {', '.join(files)}"),
    }  # fmt: skip


# ---- workload mixes from measured phases ----------------------------------------------------------
def _repo_root() -> Path:
    return Path(__file__).resolve().parent.parent.parent


def source_name(path: str | Path) -> tuple[str, bool]:
    """(how a mixes file names its source, whether that is a path in this checkout): relative to the repository
    root when the file is inside it, else its bare name (no path of one machine goes into a shipped file)."""
    p = Path(path).resolve()
    try:
        return p.relative_to(_repo_root()).as_posix(), True
    except ValueError:
        return p.name, False


def mixes_from_train(doc: Mapping[str, Any] | str | Path, stack: str = "numpy",
                     source: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Per task, the mix ``train:<task>`` of the kernel phases of ``stack``'s training runs: step:<task> = env
    share, gae = adv share, normalize and gather = their update_parts shares; each the median over the stack's
    converged seeds (all seeds if none converged) of seconds / wall_s, renormalised to sum 1. The sum before
    renormalising (the covered share of the wall time) and the seeds are kept under ``source``.

    ``doc`` is a loaded training file or its path; ``source`` names it in the result.
    """
    in_repo = None
    if not isinstance(doc, Mapping):
        source, in_repo = source_name(doc) if source is None else (source, None)
        doc = load_train(doc)
    runs = [r for r in doc["runs"] if r["stack"] == stack]
    if not runs:
        raise ValueError(f"--stack {stack!r}: no runs of that stack in {source or 'the training file'}; stacks: "
                         f"{', '.join(dict.fromkeys(r['stack'] for r in doc['runs']))}")  # fmt: skip
    mixes: dict[str, dict[str, float]] = {}
    tasks: dict[str, Any] = {}
    for task in dict.fromkeys(r["task"] for r in runs):
        rs, basis_name = basis([r for r in runs if r["task"] == task])
        raw = {
            f"step:{task}": _median(r["phases"]["env"] / r["wall_s"] for r in rs),
            "gae": _median(r["phases"]["adv"] / r["wall_s"] for r in rs),
            "normalize": _median(r["update_parts"]["normalize"] / r["wall_s"] for r in rs),
            "gather": _median(r["update_parts"]["gather"] / r["wall_s"] for r in rs),
        }
        covered = sum(raw.values())  # type: ignore[arg-type]
        if not covered > 0:
            raise ValueError(f"{source}: {stack} on {task} spent no time in its kernel phases; no mix")
        name = f"train:{task}"
        mixes[name] = {k: v / covered for k, v in raw.items()}  # type: ignore[operator]
        tasks[task] = {"mix": name, "device_key": rs[0]["device_key"], "seeds": [r["seed"] for r in rs],
                       "basis": basis_name, "covered": covered, "unnormalised": raw}  # fmt: skip
    src: dict[str, Any] = {
        "file": source, "stack": stack, "created": doc.get("created"),
        "config": {k: doc["config"].get(k) for k in ("source", "version")},
        "rule": ("per task: step:<task> = env phase, gae = adv phase, normalize and gather = the update parts of the "
                 "same names; each the median over the stack's converged seeds (all seeds if none converged) of "
                 "seconds / wall time, renormalised to sum 1; covered = the sum before renormalising"),
        "excluded": MIX_EXCLUDED,
        "derive": f"python -m portkern.portability.training derive-mixes {source} --stack {stack} --out FILE",
        "tasks": tasks,
    }  # fmt: skip
    if in_repo is not None:
        src["in_repo"] = in_repo
    return {"schema": MIXES_SCHEMA, "source": src, "mixes": mixes}


def read_mixes(data: Any, where: str) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """(mixes, source) of a portkern-mixes/1 document; the kernels are checked by the report (parse_mix)."""
    if not isinstance(data, dict) or data.get("schema") != MIXES_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: expected a workload-mixes file of schema {MIXES_SCHEMA!r}, got {got!r}")
    mixes, source = data.get("mixes"), data.get("source")
    if not isinstance(mixes, dict) or not mixes or not isinstance(source, dict):
        raise ValueError(f"{where}: expected 'mixes' (a non-empty object of name -> {{kernel: share}}) and "
                         "'source' (an object)")  # fmt: skip
    return mixes, source


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m portkern.portability.training",
                                 description="Training files for the portability report.")  # fmt: skip
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("derive-mixes", help="workload mixes (portkern-mixes/1) from a training file's phases")
    d.add_argument("train", help="a portkern train JSON (portkern-train/1)")
    d.add_argument("--stack", default="numpy", help="the stack whose phases give the shares (default: numpy)")
    d.add_argument("--out", default=None, help="the mixes file to write (default: print it)")
    args = ap.parse_args(argv)
    try:
        doc = mixes_from_train(args.train, args.stack)
        try:
            from . import report
        except (RuntimeError, ValueError):  # the shipped file being replaced is unreadable: write a new one
            report = None  # type: ignore[assignment]
        if report is not None:
            report.check_mixes(doc["mixes"], args.train)  # every kernel one the report knows
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(doc, indent=1) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {len(doc['mixes'])} mix(es) ({', '.join(doc['mixes'])}) from {doc['source']['file']} "
              f"to {args.out}", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
