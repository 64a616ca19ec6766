"""The merged portability report: functional matrix, efficiencies, ratios, PP, data paths, workload and re-tune penalties."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

from . import metrics
from .runs import Record, Run, load_run, merge

REPORT_SCHEMA = "portkern-report/1"
ENV_ORDER = ("CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Acrobot-v1")
BASE_KERNELS = tuple(f"step:{e}" for e in ENV_ORDER) + ("gae", "discounted_returns", "normalize", "gather")
#: Rollout data paths (suite.PATHS; not imported: it needs the backends) and policies.
PATHS = ("host", "device", "fused")
POLICIES = ("random", "mlp")
#: One kernel per data path in the efficiency tables: rollout:<env>:<path>[:mlp].
ROLLOUT_KERNELS = tuple(f"rollout:{e}:{p}{'' if pol == 'random' else ':' + pol}"
                        for pol in POLICIES for e in ENV_ORDER for p in PATHS)  # fmt: skip
KERNEL_ORDER = BASE_KERNELS + ROLLOUT_KERNELS
BACKEND_ORDER = ("cupy", "numba", "opencl", "numpy")
#: The native backend of a vendor's devices, in order of preference (both compile CUDA for NVIDIA).
NATIVE = {"NVIDIA": ("cupy", "numba")}
#: Default workloads as time shares of each phase on the baseline. Only portkern's kernels are phases:
#: the policy network's forward/backward is outside them, so these are the kernel part of an RL loop.
DEFAULT_MIXES: dict[str, dict[str, float]] = {
    "physics-heavy": {"step:Acrobot-v1": 0.80, "gae": 0.10, "normalize": 0.05, "gather": 0.05},
    "update-heavy": {"step:CartPole-v1": 0.20, "gae": 0.25, "discounted_returns": 0.05, "normalize": 0.20,
                     "gather": 0.30},
}  # fmt: skip

DEFINITIONS = {
    "throughput": "T = items per launch / best (minimum) time over pytest-benchmark rounds; items are env steps, "
                  "buffer elements or gathered rows. Only compared between backends on the same device "
                  "(device = machine + device), never across devices.",
    "functional portability": "share of the kernels in these runs that build, run and pass parity against the "
                              "NumPy reference on that device (the 9 step and buffer kernels, and rollout:<env> "
                              "once per env: it passes only when every data path and policy of that env passes); "
                              "fail, unsupported and not run count 0.",
    "application efficiency": "e(k,b,d) = T(k,b,d) / max over backends T(k,.,d), at the largest size every passing "
                              "backend on d measured; 0 when k fails or does not run.",
    "performant portability ratio": "T(k,b,d) / T(k,baseline,d); baseline = the native backend (CUDA via CuPy, "
                                    "else Numba-CUDA, on NVIDIA); on a device with no native backend, the best "
                                    "backend measured on d for that kernel (for a workload: the fastest backend "
                                    "of each phase combined).",
    "architectural efficiency": "compulsory bytes/s (each array read or written once) / the device's copy bandwidth "
                                "(read+write bytes/s of a large device-to-device copy measured in the same run), "
                                "clipped to 1 (above 1 the working set stays in cache).",
    "PP": "Pennycook, Sewall & Lee 2016: harmonic mean of application efficiency over every device in the runs; 0 "
          "when the backend fails or does not run on any of them.",
    "throughput penalty": "p = 1 - ratio per kernel; for a workload with baseline time shares w_i, "
                          "ratio = 1 / sum_i(w_i / ratio_i), p = 1 - ratio (0 ratio if any phase does not run).",
    "re-tune penalty": "1 - T(config tuned on source, run on target) / T(best config found on target), T the "
                       "throughput at the target's tuning size; in [0, 1) when the source's config runs on the "
                       "target, 1 (marked) when it cannot.",
    "data paths": "one rollout of T steps of N envs with a policy choosing actions (VectorEnv.rollout), three ways: "
                  "host = the obs come back to the host every step, the policy runs there (NumPy) and the "
                  "actions go down; device = the env state stays on the device, one kernel launch per step "
                  "with the policy in the kernel; fused = the policy inside the env kernel, up to "
                  "steps_per_launch steps per launch (default all T). Parity: the host path against the NumPy "
                  "reference; the device and fused paths against the host path's buffer on the same device, "
                  "every field bit for bit with the random policy. The table compares the paths at the largest N "
                  "all three passed, each at its best configuration in a tune run (report.json has them). In the "
                  "efficiency and PP tables each "
                  "rollout:<env>:<path>[:mlp] is its own kernel (backends compared path for path, never one "
                  "path against another); in the functional matrix the paths of one env count as one kernel "
                  "rollout:<env>; rollouts are in no default workload mix (their env stepping would count twice "
                  "next to the step phase).",
    "env-steps/s": "N x T / the best (minimum) time of one rollout, which ends with a device synchronise.",
    "device-hours per 1e9 steps": "1e9 / env-steps/s / 3600: GPU-hours per billion env steps on a GPU; on a CPU "
                                  "device, hours of the whole processor (every core the backend uses).",
    "path factor": "env-steps/s of the fused (or device) path / the host path's, same backend, device, env, "
                   "policy and N; the stack spread is the fastest (backend, path) / the slowest on one device.",
}  # fmt: skip


def _kernels(records: list[Record]) -> list[str]:
    seen = {r.kernel for r in records if r.kernel != "copy"}
    return [k for k in KERNEL_ORDER if k in seen] + sorted(seen - set(KERNEL_ORDER)) or list(BASE_KERNELS)


def rollout_parts(kernel: str) -> tuple[str, str, str] | None:
    """(env, path, policy) of ``rollout:<env>:<path>[:mlp]``; None for any other kernel."""
    parts = kernel.split(":")
    if parts[0] != "rollout" or len(parts) not in (3, 4) or parts[2] not in PATHS:
        return None
    return parts[1], parts[2], parts[3] if len(parts) == 4 else "random"


def functional_kernel(kernel: str) -> str:
    """The functional matrix's kernel: ``rollout:<env>`` for every path and policy of an env's rollouts."""
    rp = rollout_parts(kernel)
    return f"rollout:{rp[0]}" if rp else kernel


def _status(rs: list[Record]) -> tuple[str, float | None, str]:
    """(status, worst error, reason) of the records of one cell: fail over pass over unsupported."""
    rs = [r for r in rs if r.status != "invalid-config"]
    status = max((r.status for r in rs), key=lambda s: {"fail": 3, "pass": 2, "unsupported": 1}[s], default="not run")
    bad = [r for r in rs if r.status == status]
    err = max((r.max_error for r in bad if r.max_error is not None), default=None)
    reason = "not in these runs"
    if bad:
        reason = f"{bad[0].kernel}: {bad[0].reason}" if rollout_parts(bad[0].kernel) and status != "pass" else bad[0].reason
    return status, err, reason


def _order(backends: set[str]) -> list[str]:
    return [b for b in BACKEND_ORDER if b in backends] + sorted(backends - set(BACKEND_ORDER))


def parse_mix(text: str) -> dict[str, dict[str, float]]:
    """``--mix`` value: a JSON file of {name: {kernel: share}} or ``name=kernel:share,kernel:share``."""
    if "=" in text and not Path(text).exists():
        name, _, body = text.partition("=")
        try:
            phases = {k: float(v) for k, v in (p.rsplit(":", 1) for p in body.split(",") if p)}
        except ValueError:
            raise ValueError(f"--mix: expected name=kernel:share,..., got {text!r}") from None
        mixes = {name.strip(): phases}
    else:
        if not Path(text).is_file():
            raise ValueError(f"--mix {text}: no such file; expected FILE.json of {{name: {{kernel: share}}}} or "
                             f"name=kernel:share,... (the built-in mixes {', '.join(DEFAULT_MIXES)} are always "
                             "reported)")  # fmt: skip
        try:
            mixes = json.loads(Path(text).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--mix {text}: not a readable JSON file of {{name: {{kernel: share}}}} ({exc})") from None
        if not isinstance(mixes, dict):
            raise ValueError(f"--mix {text}: expected a JSON object {{name: {{kernel: share}}}}, got {type(mixes).__name__}")
    for name, phases in mixes.items():
        if not isinstance(phases, dict) or not phases:
            raise ValueError(f"--mix {name!r}: expected {{kernel: share}}, got {phases!r}")
        unknown = set(phases) - set(KERNEL_ORDER)
        if unknown:
            raise ValueError(f"--mix {name!r}: unknown kernels {sorted(unknown)}; valid: {', '.join(BASE_KERNELS)} "
                             f"and rollout:<env>:<host|device|fused>[:mlp]")  # fmt: skip
        if any(not (isinstance(w, (int, float)) and w >= 0) for w in phases.values()) or sum(phases.values()) <= 0:
            raise ValueError(f"--mix {name!r}: shares must be numbers >= 0 with a positive sum, got {phases}")
    return mixes


def _throughputs(recs: list[Record]) -> tuple[dict[str, float], dict[str, float], int | None]:
    """Best passing throughput (and bytes/s) per backend at the largest size all passing backends measured."""
    by_backend: dict[str, dict[int, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        if r.status == "pass" and r.items_per_s:
            by_backend[r.backend][r.size].append(r)
    if not by_backend:
        return {}, {}, None
    common = set.intersection(*(set(s) for s in by_backend.values()))
    size = max(common) if common else None
    t, bw = {}, {}
    for b, sizes in by_backend.items():
        pick = sizes[size] if size is not None else sizes[max(sizes)]
        best = max(pick, key=lambda r: r.items_per_s or 0.0)
        t[b], bw[b] = best.items_per_s or 0.0, best.bytes_per_s or 0.0
    return t, bw, size


def build(run: Run, mixes: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Everything the report says, as plain data (report.json; what ``portkern cost`` reads)."""
    mixes = dict(DEFAULT_MIXES if mixes is None else mixes)
    recs = run.records
    kernels = _kernels(recs)
    fkernels = list(dict.fromkeys(functional_kernel(k) for k in kernels))
    real = {k: d for k, d in run.devices.items() if d["kind"] != "simulator"}
    by_cell: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in recs:
        by_cell[(r.backend, r.device_key, r.kernel)].append(r)
    # --- functional matrix: every backend that ran on every device (simulators included, marked)
    columns = [(b, d) for d in run.devices for b in _order(set(run.available.get(d, [])))]
    functional: dict[str, Any] = {}
    for b, d in columns:
        cells = {}
        for fk in fkernels:
            rs = [r for k in kernels if functional_kernel(k) == fk for r in by_cell[(b, d, k)]]
            status, err, reason = _status(rs)
            cells[fk] = {"status": status, "max_error": err, "reason": reason}
        share = metrics.functional_share([c["status"] for c in cells.values()])
        functional[f"{b}@{d}"] = {"backend": b, "device": d, "simulator": run.devices[d]["kind"] == "simulator",
                                  "kernels": cells, "share": share}  # fmt: skip
    # --- per device: ceiling, baseline, efficiencies and ratios
    devices_out: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    backends_all = _order({b for d in real for b in run.available.get(d, [])})
    for d, info in real.items():
        copies = [r.bytes_per_s for r in recs if r.device_key == d and r.kernel == "copy" and r.bytes_per_s]
        ceiling = max(copies, default=None)
        natives = [b for b in NATIVE.get(info["vendor"], ()) if b in run.available.get(d, [])]
        baseline_rule = (f"native: {natives[0]}" if natives else
                         f"best available (no native backend for {info['vendor']} devices in these runs)")  # fmt: skip
        devices_out[d] = {**info, "ceiling_bytes_per_s": ceiling, "baseline": baseline_rule,
                          "backends": run.available.get(d, [])}  # fmt: skip
        for k in kernels:
            t, bw, size = _throughputs([r for r in recs if r.device_key == d and r.kernel == k])
            best = max(t.values(), default=0.0)
            base_name = next((b for b in natives if t.get(b)), None) or (max(t, key=t.get) if t else None)
            base = t.get(base_name, 0.0) if base_name else 0.0
            for b in run.available.get(d, []):
                status = _status(by_cell[(b, d, k)])[0]
                tb = t.get(b) if status == "pass" else None
                arch, arch_raw = (metrics.architectural_efficiency(bw.get(b), ceiling) if ceiling and tb
                                  else (None, None))  # fmt: skip
                rows.append({
                    "kernel": k, "device": d, "backend": b, "status": status, "size": size,
                    "items_per_s": tb, "bytes_per_s": bw.get(b) if tb else None,
                    "app_eff": metrics.application_efficiency(tb, best) if best else 0.0,
                    "ratio": (tb / base) if (tb and base) else 0.0, "baseline": base_name,
                    "baseline_is_native": base_name in natives, "arch_eff": arch, "arch_eff_raw": arch_raw,
                })  # fmt: skip
    # --- Pennycook PP over every device in the runs
    def eff(k: str, b: str, d: str, field: str = "app_eff") -> float:
        row = next((x for x in rows if x["kernel"] == k and x["backend"] == b and x["device"] == d), None)
        return (row or {}).get(field) or 0.0

    pp = {b: {k: metrics.pennycook_pp({d: eff(k, b, d) for d in real}) if real else 0.0 for k in kernels}
          for b in backends_all}  # fmt: skip
    pp_arch = {b: {k: metrics.pennycook_pp({d: eff(k, b, d, "arch_eff") for d in real}) if real else 0.0
                   for k in kernels} for b in backends_all}  # fmt: skip
    # --- workloads: per device and backend, the time-weighted ratio over phases
    workloads: dict[str, Any] = {}
    for m, shares in mixes.items():
        per_dev: dict[str, Any] = {}
        for d in real:
            ratios = {b: metrics.workload_ratio(shares, {k: eff(k, b, d, "ratio") for k in shares})
                      for b in run.available.get(d, [])}  # fmt: skip
            top = max(ratios.values(), default=0.0)
            per_dev[d] = {b: {"ratio": r, "penalty": metrics.throughput_penalty(r),
                              "app_eff": (r / top) if top else 0.0} for b, r in ratios.items()}  # fmt: skip
        pp_w = {b: metrics.pennycook_pp({d: per_dev[d].get(b, {}).get("app_eff", 0.0) for d in real}) if real
                else 0.0 for b in backends_all}  # fmt: skip
        workloads[m] = {"shares": dict(shares), "devices": per_dev, "pp": pp_w}
    return {
        "schema": REPORT_SCHEMA, "sources": run.path.split(", "), "machines": run.machine,
        "definitions": DEFINITIONS, "kernels": kernels, "functional_kernels": fkernels, "devices": devices_out,
        "simulators": {d: i for d, i in run.devices.items() if i["kind"] == "simulator"},
        "unavailable": run.unavailable, "functional": functional, "efficiency": rows,
        "pp": pp, "pp_arch": pp_arch, "workloads": workloads, "retune": retune(recs, real),
        "data_paths": data_paths(recs, real, run.available),
    }  # fmt: skip


def data_paths(recs: list[Record], devices: Mapping[str, Any], available: Mapping[str, list[str]]) -> dict[str, Any]:
    """Per device, backend, env and policy: env-steps/s and device-hours per 1e9 steps of each data path,
    at the largest N all three paths passed, the fused/host and device/host factors, and per device the
    spread between the fastest and slowest (backend, path) stack."""
    groups: dict[tuple[str, str, str, str], dict[str, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        rp = rollout_parts(r.kernel)
        if rp and r.device_key in devices:
            env, path, policy = rp
            groups[(r.device_key, r.backend, env, policy)][path].append(r)

    def order(key: tuple[str, str, str, str]) -> tuple[Any, ...]:
        d, b, env, policy = key
        rank = {x: i for i, x in enumerate(_order(set(available.get(d, [])) | {b}))}
        return (list(devices).index(d), rank[b], ENV_ORDER.index(env) if env in ENV_ORDER else len(ENV_ORDER), env,
                POLICIES.index(policy) if policy in POLICIES else len(POLICIES), policy)  # fmt: skip

    rows = []
    for key in sorted(groups, key=order):
        d, b, env, policy = key
        per = groups[key]
        ok = {p: {r.size for r in per[p] if r.status == "pass" and r.items_per_s} for p in PATHS}
        common = set.intersection(*ok.values())
        size = max(common) if common else None
        paths: dict[str, Any] = {}
        for p in PATHS:
            status = _status(per[p])[0]
            at = [r for r in per[p] if r.status == "pass" and r.items_per_s and r.size == size]
            best = max(at, key=lambda r: r.items_per_s or 0.0, default=None)
            sps = best.items_per_s if best else None
            paths[p] = {"status": status, "steps_per_s": sps,
                        "device_hours_per_1e9_steps": metrics.device_hours_per_billion_steps(sps),
                        "config": best.config if best else None}  # fmt: skip
        t = next((r.items // r.size for p in PATHS for r in per[p] if r.size == size and r.items), None)
        host = paths["host"]["steps_per_s"]
        vs_host = {p: paths[p]["steps_per_s"] / host if host and paths[p]["steps_per_s"] else None for p in PATHS}
        rows.append({"device": d, "backend": b, "env": env, "policy": policy, "N": size, "T": t, "paths": paths,
                     "fused_vs_host": vs_host["fused"], "device_vs_host": vs_host["device"]})  # fmt: skip
    spread = []
    stacks: dict[tuple[str, str, str, int], list[tuple[float, str, str]]] = defaultdict(list)
    for row in rows:
        for p, v in row["paths"].items():
            if v["steps_per_s"]:
                stacks[(row["device"], row["env"], row["policy"], row["N"])].append((v["steps_per_s"], row["backend"], p))
    for (d, env, policy, n), st in stacks.items():
        if len(st) < 2:
            continue
        (hi, hb, hp), (lo, lb, lp) = max(st), min(st)
        spread.append({"device": d, "env": env, "policy": policy, "N": n, "factor": hi / lo,
                       "fastest": {"backend": hb, "path": hp, "steps_per_s": hi},
                       "slowest": {"backend": lb, "path": lp, "steps_per_s": lo}})  # fmt: skip
    return {"rows": rows, "spread": spread}


def retune(recs: list[Record], devices: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Re-tune penalty for each backend, kernel and ordered pair of devices that were both tuned."""
    space: dict[tuple[str, str, str], dict[str, Record]] = {}
    for (b, k, d), group in _group(recs, devices).items():
        size = max(r.size for r in group)
        at = {r.config_key: r for r in group if r.size == size}
        if len(at) > 1:  # a search ran here (more than one configuration measured)
            space[(b, k, d)] = at
    out = []
    for (b, k, src), src_space in space.items():
        tuned = max((r for r in src_space.values() if r.status == "pass"), key=lambda r: r.items_per_s or 0.0,
                    default=None)  # fmt: skip
        if tuned is None:
            continue
        for (b2, k2, tgt), tgt_space in space.items():
            if (b2, k2) != (b, k) or tgt == src:
                continue
            best = max((r.items_per_s or 0.0 for r in tgt_space.values() if r.status == "pass"), default=0.0)
            if best <= 0:
                continue
            there = tgt_space.get(tuned.config_key)
            if there is None:
                note, t = "source configuration not in the target's search", None
            else:
                t = there.items_per_s if there.status == "pass" else 0.0
                note = "" if there.status == "pass" else f"does not run on target ({there.status}: {there.reason})"
            out.append({
                "backend": b, "kernel": k, "source": src, "target": tgt, "config": tuned.config,
                "target_best_config": max((r for r in tgt_space.values() if r.status == "pass"),
                                          key=lambda r: r.items_per_s or 0.0).config,
                "penalty": None if t is None else metrics.retune_penalty(t, best), "note": note,
            })  # fmt: skip
    return out


def _group(recs: list[Record], devices: Mapping[str, Any]) -> dict[tuple[str, str, str], list[Record]]:
    g: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in recs:
        if r.device_key in devices and r.kernel != "copy":
            g[(r.backend, r.kernel, r.device_key)].append(r)
    return g


# ---- rendering ---------------------------------------------------------------------------------
def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.3g}"


def _cell(c: dict[str, Any]) -> str:
    if c["status"] == "pass":
        return "pass"
    if c["status"] == "fail":
        return f"**FAIL** ({'max err ' + _fmt(c['max_error']) if c['max_error'] is not None else c['reason'][:40]})"
    return c["status"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def headline(rep: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The tables a person reads first (also printed by the CLI): functional matrix, ratios, PP."""
    cols = list(rep["functional"])
    fkernels = rep.get("functional_kernels", rep["kernels"])
    func = (["kernel"] + [c + (" (sim)" if rep["functional"][c]["simulator"] else "") for c in cols],
            [[k] + [_cell(rep["functional"][c]["kernels"][k]) for c in cols] for k in fkernels]
            + [["**share**"] + [_fmt(rep["functional"][c]["share"], True) for c in cols]])  # fmt: skip
    ratio_rows = [[r["kernel"], r["backend"], r["device"], r["status"], str(r["size"] or "–"),
                   _fmt(r["items_per_s"]), _fmt(r["app_eff"], True), _fmt(r["ratio"], True),
                   f"{r['baseline'] or '–'}{'' if r['baseline_is_native'] else ' (best)'}",
                   _fmt(r["arch_eff"], True) + (" (cache)" if (r["arch_eff_raw"] or 0) > 1 else "")]
                  for r in rep["efficiency"]]  # fmt: skip
    ratios = (["kernel", "backend", "device", "parity", "size", "items/s", "app. eff.", "ratio", "baseline",
               "arch. eff."], ratio_rows)  # fmt: skip
    backends = list(rep["pp"])
    pp = (["PP over " + ", ".join(rep["devices"]) or "PP"] + backends,
          [[k] + [_fmt(rep["pp"][b][k], True) for b in backends] for k in rep["kernels"]]
          + [[f"workload: {m}"] + [_fmt(w["pp"].get(b), True) for b in backends] for m, w in rep["workloads"].items()])
    tables = {"Functional portability": func, "Application efficiency and performant portability ratio": ratios,
              "Pennycook PP (application efficiency)": pp}  # fmt: skip
    if rep.get("data_paths", {}).get("rows"):
        tables[DATA_PATHS_TITLE] = data_paths_table(rep)
    return tables


DATA_PATHS_TITLE = "Data paths: host round-trip, device per-step, fused"


def _x(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}x"


def data_paths_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = (["device", "backend", "env", "policy", "N x T"] + [f"{p} steps/s" for p in PATHS]
              + [f"{p} device-h / 1e9 steps" for p in PATHS] + ["fused / host", "device / host"])  # fmt: skip
    rows = []
    for r in rep["data_paths"]["rows"]:
        rows.append([r["device"], r["backend"], r["env"], r["policy"], f"{r['N'] or '–'} x {r['T'] or '–'}"]
                    + [_fmt(v["steps_per_s"]) if v["status"] == "pass" else _cell({**v, "max_error": None})
                       for v in (r["paths"][p] for p in PATHS)]
                    + [_fmt(r["paths"][p]["device_hours_per_1e9_steps"]) for p in PATHS]
                    + [_x(r["fused_vs_host"]), _x(r["device_vs_host"])])  # fmt: skip
    return header, rows


def markdown(rep: dict[str, Any]) -> str:
    out = ["# portkern portability report", "", f"Runs: {', '.join(rep['sources'])} (machines: {rep['machines']}).", ""]
    out += ["## Devices", ""]
    out += _table(["device", "label", "kind", "vendor", "copy bandwidth (B/s)", "backends", "baseline"],
                  [[d, i["device_label"], i["kind"], i["vendor"], _fmt(i["ceiling_bytes_per_s"]),
                    ", ".join(i["backends"]), i["baseline"]] for d, i in rep["devices"].items()])  # fmt: skip
    if rep["simulators"]:
        out += ["", "Simulator devices (functional-only: parity checked, never timed, not in PP): "
                + ", ".join(f"{d} ({i['device_label']})" for d, i in rep["simulators"].items())]
    if rep["unavailable"]:
        out += ["", "Backends not available in these runs (not measured; on a device in the set they make PP 0):", ""]
        out += [f"* {u['backend']} on {u['machine']}: {u['reason']}" for u in rep["unavailable"]]
    for title, (header, rows) in headline(rep).items():
        if title == DATA_PATHS_TITLE:
            continue
        out += ["", f"## {title}", ""] + _table(header, rows)
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
                    f"{s['slowest']['path']} {_fmt(s['slowest']['steps_per_s'])} steps/s: **{_x(s['factor'])}**"
                    for s in dp["spread"]]  # fmt: skip
    else:
        out += ["No rollout cases in these runs (bench/test_rollout_paths.py; `portkern bench` runs them)."]
    out += ["", "## Workload throughput penalty", ""]
    for m, w in rep["workloads"].items():
        out += ["", f"**{m}**: " + ", ".join(f"{k} {100 * s:.0f}%" for k, s in w["shares"].items()), ""]
        out += _table(["device", "backend", "ratio", "throughput penalty", "app. eff."],
                      [[d, b, _fmt(v["ratio"], True), _fmt(v["penalty"], True), _fmt(v["app_eff"], True)]
                       for d, per in w["devices"].items() for b, v in per.items()])  # fmt: skip
    out += ["", "## Re-tune penalty", ""]
    if rep["retune"]:
        out += _table(["backend", "kernel", "tuned on", "run on", "config", "target's best", "penalty"],
                      [[r["backend"], r["kernel"], r["source"], r["target"], json.dumps(r["config"]),
                        json.dumps(r["target_best_config"]),
                        (_fmt(r["penalty"], True) if r["penalty"] is not None else "–")
                        + (f" † {r['note']}" if r["note"] else "")] for r in rep["retune"]])  # fmt: skip
    else:
        out += ["No pair of devices with a knob search for the same backend in these runs: run `portkern tune` "
                "on two or more devices and pass all the run files."]
    out += ["", "## Definitions", ""] + [f"* **{k}**: {v}" for k, v in rep["definitions"].items()]
    return "\n".join(out) + "\n"


def write(run_paths: list[str], out_dir: str | Path, mixes: Mapping[str, Mapping[str, float]] | None = None,
          extra_files: Mapping[str, str] | None = None, source_names: list[str] | None = None) -> dict[str, Any]:
    """Load and check every run first, then write report.md/json and plots into a temp dir in ``out_dir``
    and move them into place.

    ``source_names`` replaces the run paths in the report (a run copied into ``out_dir`` is
    named where it ends up, not where it was written first).
    """
    runs = [load_run(p) for p in run_paths]  # raises before anything is written
    rep = build(merge(runs), mixes)
    if source_names is not None:
        rep["sources"] = list(source_names)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Inside out: the one folder the caller checked is writable, and the same filesystem for replace().
    tmp = Path(tempfile.mkdtemp(prefix=".portkern-report-", dir=out))
    try:
        (tmp / "report.json").write_text(json.dumps(rep, indent=1, default=_json_default))
        (tmp / "report.md").write_text(markdown(rep))
        from .plots import plot_all

        plot_all(rep, tmp)
        for name, src in (extra_files or {}).items():
            shutil.copyfile(src, tmp / name)
        for f in tmp.iterdir():  # same filesystem: each file lands whole or not at all
            f.replace(out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")
