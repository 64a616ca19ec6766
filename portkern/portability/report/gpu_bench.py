"""The GPU measurements of bench/gpu/gpu_bench.py in a report: one section per file, its figures as written.

gpu_bench.py times what a lent GPU has minutes for (the copy ceiling, a CartPole step and GAE per backend,
the rollout data paths, Chain-v0 stepping), each the best of a few rounds in one run: a figure without an
interval, which the section says. Its JSON is told apart from bench runs and training files by its
``schema`` (or, in files written before the schema, by its sections).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .format import _fmt, _table

SCHEMA = "portkern-gpu-bench/1"
TITLE = "GPU measurements"
METHOD = ("bench/gpu/gpu_bench.py: each figure is the best of its rounds (3, one for the host path) in one run, "
          "no interval; bytes/s counts what the kernel must move (CartPole 82 B per env-step, GAE 22 B per "
          "element) against the device's copy ceiling")  # fmt: skip


def _read(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def is_gpu_bench_file(path: str | Path) -> bool:
    """Whether ``path`` holds gpu_bench.py's JSON (its schema, or the copy and step sections of older files)."""
    data = _read(path)
    if not isinstance(data, dict):
        return False
    if data.get("schema") == SCHEMA:
        return True
    return (
        "copy_bandwidth" in data and "machine" in data and any(k.startswith("cartpole_step_") for k in data)
    )


def _device(data: dict[str, Any]) -> str:
    """The device the run measured (bench/gpu/run_gpu.sh's device section), else nvidia-smi's name of the GPU,
    else the device of the first section that ran."""
    named = (data.get("device") or {}).get("name") if isinstance(data.get("device"), dict) else None
    if named:
        return str(named)
    smi = str((data.get("machine") or {}).get("nvidia_smi", ""))
    if smi and not smi.startswith("unavailable"):
        return smi.split(",")[0].strip()
    for entry in data.values():
        if isinstance(entry, dict) and entry.get("device"):
            return str(entry["device"])
    return "unknown device"


def _failure(entry: dict[str, Any]) -> str | None:
    if "error" in entry:
        return f"failed: {entry['error']}"
    if "skipped" in entry:
        return f"skipped: {entry['skipped']}"
    if "not_applicable" in entry:
        return f"not applicable: {entry['not_applicable']}"
    return None


def summarise_file(path: str | Path) -> dict[str, Any]:
    """One gpu_bench.py file as the report's rows (every section, failures and skips included)."""
    data = _read(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a gpu_bench.py JSON file")
    machine = data.get("machine") or {}
    ceiling = (data.get("copy_bandwidth") or {}).get("bytes_per_s")
    steps, gae, rollouts, chain, other = [], [], [], [], []
    for key, entry in data.items():
        if not isinstance(entry, dict) or key in ("machine", "copy_bandwidth", "device"):
            continue
        why = _failure(entry)
        if key.startswith("cartpole_step_"):
            backend = key.removeprefix("cartpole_step_")
            steps.append({"backend": backend, "why": why, **({} if why else {
                "num_envs": entry["num_envs"], "env_steps_per_s": entry["steps_per_s"],
                "bytes_per_s": entry["bytes_per_s"], "of_copy": entry.get("fraction_of_copy_bandwidth")})})  # fmt: skip
        elif key.startswith("gae_"):
            backend = key.removeprefix("gae_")
            gae.append({"backend": backend, "why": why, **({} if why else {
                "T": entry["T"], "N": entry["N"], "seconds": entry["seconds"], "bytes_per_s": entry["bytes_per_s"],
                "of_copy": entry.get("fraction_of_copy_bandwidth")})})  # fmt: skip
        elif key.startswith("rollout_"):
            rollouts.append({"section": key, "env": entry.get("env", key.split("_")[1]), "why": why, **({} if why else {
                "backend": entry["backend"], "path": entry["path"], "policy": entry["policy"],
                "mlp_build": entry.get("mlp_build"), "num_envs": entry["num_envs"], "T": entry["T"],
                "env_steps_per_s": entry["env_steps_per_s"], "of_copy": entry.get("fraction_of_copy_bandwidth")})})  # fmt: skip
        elif key.startswith("chain_step_"):
            chain.append({"section": key, "why": why, **({} if why else {
                "backend": entry["backend"], "links": entry["links"], "num_envs": entry["num_envs"],
                "env_steps_per_s": entry["env_steps_per_s"], "of_copy": entry.get("fraction_of_copy_bandwidth")})})  # fmt: skip
        else:
            other.append({"section": key, "why": why, "value": None if why else entry})
    return {"source": str(path), "device": _device(data), "started": data.get("started"),
            "finished": data.get("finished"), "machine": machine, "copy_bytes_per_s": ceiling,
            "device_info": data.get("device") if isinstance(data.get("device"), dict) else {},
            "steps": steps, "gae": gae, "rollouts": rollouts, "chain": chain, "other": other}  # fmt: skip


def summarise(paths: list[str]) -> dict[str, Any]:
    return {"method": METHOD, "files": [summarise_file(p) for p in paths]}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _rollout_path(r: dict[str, Any]) -> str:
    return r["path"] + (f" ({r['mlp_build']} build)" if r.get("mlp_build") else "")


def tables(summary: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Per file: the step, GAE, rollout and Chain-v0 tables (failures and skipped sections as rows of their own)."""
    out: dict[str, tuple[list[str], list[list[str]]]] = {}
    for f in summary["files"]:
        where = f"{f['device']}, {f['started'] or '?'}"
        out[f"{TITLE}: CartPole-v1 step on {where}"] = (
            ["backend", "envs", "env-steps/s", "bytes/s", "of copy ceiling"],
            [[s["backend"], s["why"], "", "", ""] if s["why"] else
             [s["backend"], f"{s['num_envs']:,}", _fmt(s["env_steps_per_s"]), _fmt(s["bytes_per_s"]), _pct(s["of_copy"])]
             for s in f["steps"]])  # fmt: skip
        out[f"{TITLE}: GAE on {where}"] = (
            ["backend", "T x N", "ms", "bytes/s", "of copy ceiling"],
            [[g["backend"], g["why"], "", "", ""] if g["why"] else
             [g["backend"], f"{g['T']} x {g['N']:,}", f"{1e3 * g['seconds']:.3g}", _fmt(g["bytes_per_s"]),
              _pct(g["of_copy"])] for g in f["gae"]])  # fmt: skip
        done = [r for r in f["rollouts"] if not r["why"]]
        if done:
            out[f"{TITLE}: rollouts on {where}"] = (
                ["env", "backend", "path", "policy", "envs x T", "env-steps/s", "buffer bytes of copy ceiling"],
                [[r["env"], r["backend"], _rollout_path(r), r["policy"], f"{r['num_envs']:,} x {r['T']}",
                  _fmt(r["env_steps_per_s"]), _pct(r.get("of_copy"))] for r in done])  # fmt: skip
        chain = [c for c in f["chain"] if not c["why"]]
        if chain:
            out[f"{TITLE}: Chain-v0 step on {where}"] = (
                ["backend", "links", "envs", "env-steps/s", "state bytes of copy ceiling"],
                [[c["backend"], str(c["links"]), f"{c['num_envs']:,}", _fmt(c["env_steps_per_s"]), _pct(c.get("of_copy"))]
                 for c in chain],  # fmt: skip
            )
    return out


def markdown(summary: dict[str, Any]) -> list[str]:
    out = ["", f"## {TITLE}", "", f"Method: {summary['method']}."]
    for f in summary["files"]:
        smi = f["machine"].get("nvidia_smi", "nvidia-smi not recorded")
        out += ["", (f"**{f['source']}**: {f['device']} ({smi}), {f['started'] or '?'} to "
                     f"{f['finished'] or 'not finished'}; copy ceiling {_fmt(f['copy_bytes_per_s'])} B/s.")]  # fmt: skip
        d = f.get("device_info") or {}
        if d:  # its own ceilings, measured in the run (bench/gpu/gpu_bench.py --device-info)
            parts = [f"{k} {_fmt(d[v])}{u}" for k, v, u in (
                ("memory", "memory_bytes", " B"), ("SMs", "sms", ""), ("max SM clock", "sm_clock_khz", " kHz"),
                ("memory clock", "memory_clock_khz", " kHz"), ("theoretical memory bandwidth",
                 "memory_bytes_per_s_theoretical", " B/s"), ("measured fp32 peak", "fp32_flops_per_s", " flop/s"),
                ("measured fp64 peak", "fp64_flops_per_s", " flop/s")) if d.get(v)]  # fmt: skip
            if d.get("copy_of_theoretical"):
                parts.append(f"copy ceiling {_pct(d['copy_of_theoretical'])} of theoretical")
            out += ["", f"Device {d.get('name', '?')}: " + ", ".join(parts) + "."]
        by_why: dict[str, list[str]] = {}
        for r in [*f["rollouts"], *f["chain"], *f["other"]]:
            if r["why"]:
                by_why.setdefault(r["why"], []).append(r["section"])
        for why, sections in by_why.items():
            shown = ", ".join(sections[:6]) + (f" and {len(sections) - 6} more" if len(sections) > 6 else "")
            out += ["", f"Without a figure, {why}: {len(sections)} section(s) ({shown})."]
    for title, (header, rows) in tables(summary).items():
        out += ["", f"**{title.removeprefix(TITLE + ': ')}**", ""]
        out += _table(header, rows)
    return out
