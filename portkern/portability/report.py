"""The merged portability report: summary, functional matrix, efficiencies and ratios with intervals, PP,
workload penalties, the stack-class spectrum, data paths and re-tune penalties."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from . import metrics, training
from .runs import Record, Run, load_run, merge

REPORT_SCHEMA = "portkern-report/2"  # 2: intervals, verdicts, summary, spectrum, driver-devices
ENV_ORDER = ("CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Acrobot-v1")
BASE_KERNELS = tuple(f"step:{e}" for e in ENV_ORDER) + ("gae", "discounted_returns", "normalize", "gather")
#: Rollout data paths (suite.PATHS; not imported: it needs the backends) and policies.
PATHS = ("host", "device", "fused")
POLICIES = ("random", "mlp")
#: One kernel per data path in the efficiency tables: rollout:<env>:<path>[:mlp].
ROLLOUT_KERNELS = tuple(f"rollout:{e}:{p}{'' if pol == 'random' else ':' + pol}"
                        for pol in POLICIES for e in ENV_ORDER for p in PATHS)  # fmt: skip
KERNEL_ORDER = BASE_KERNELS + ROLLOUT_KERNELS
BACKEND_ORDER = ("cupy", "numba", "opencl", "torch_compile", "torch", "numpy")
#: Stack classes (DESIGN.md), deepest first; a backend declares its own (Backend.stack_class).
STACK_CLASSES = ("fused custom", "custom kernels", "framework compiled", "framework eager")
#: The native backend of a vendor's devices, in order of preference (both compile CUDA for NVIDIA).
NATIVE = {"NVIDIA": ("cupy", "numba")}
#: The shipped workload mixes: time shares of portkern's kernel phases measured in training runs (``portkern
#: train``; python -m portkern.portability.training derive-mixes writes the file). The PPO's forward, backward and
#: optimizer step, data movement and setup are not portkern kernels: the mixes are the kernel part of an RL loop.
MIXES_FILE = "data/workload_mixes.json"


def _shipped_mixes() -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    from importlib import resources

    where = f"portkern/{MIXES_FILE}"
    try:
        data = json.loads(resources.files("portkern").joinpath(MIXES_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RuntimeError(f"{where}: the shipped workload mixes cannot be read ({exc}); reinstall portkern") from None
    mixes, source = training.read_mixes(data, where)
    check_mixes(mixes, where)
    return {k: dict(v) for k, v in mixes.items()}, source

DEFINITIONS = {
    "throughput": "T = items per launch / the median over the case's interleaved rounds of the seconds per "
                  "launch (each round: enough back-to-back synchronised launches to last a few ms); items are "
                  "env steps, buffer elements or gathered rows. Runs of schema 1 (before interleaving): the best "
                  "(minimum) time, no interval. Only compared between backends on the same device, never across "
                  "devices.",
    "interleaved rounds": "every case of one comparison kernel (a kernel, or all three data paths of one rollout) "
                          "at one size on one piece of hardware - every backend, driver and knob configuration - "
                          "is timed in the same rounds: each round runs every case's launches in short runs "
                          "spread evenly over the round, in an order shuffled every round, so a shared machine's "
                          "drift hits them alike. A group's rounds come in visits spread over the run (one at the "
                          "first test of each of its backends and drivers, at most 3), so they sample the run's "
                          "changing load rather than one moment of it.",
    "interval": metrics.INTERVAL_METHOD,
    "within noise": "two results are ranked only when the interval of their paired per-round ratio lies wholly "
                    "above or below 1 (\"faster\"/\"slower\", \"beyond noise\"); otherwise they are within noise "
                    "of each other and no winner is named. An application efficiency whose interval reaches "
                    "100% is within noise of the best.",
    "indicative run": "a `--quick` run (small sizes, few rounds, short slots): its figures show the shape, and "
                      "its intervals are wide; act on a full run.",
    "device": "hardware plus driver: an OpenCL platform is part of the device, so one CPU under PoCL and under "
              "Intel's runtime is two devices (same hardware, different driver). Backends without a driver layer "
              "(NumPy and torch on the host CPU; CuPy, Numba and torch on an NVIDIA GPU) run on the hardware "
              "itself and are compared on every driver-device of that hardware (listed under 'includes'), so "
              "each driver-device's efficiencies have them beside it; hardware with no driver-device is a "
              "device of its own. The kind (cpu, gpu, accelerator) is what the backend's API reports.",
    "functional portability": "share of the kernels in these runs that build, run and pass parity against the "
                              "NumPy reference on that device (the 9 step and buffer kernels, and rollout:<env> "
                              "once per env: it passes only when every data path and policy of that env passes); "
                              "fail, unsupported and not run count 0.",
    "application efficiency": "e(k,b,d) = T(k,b,d) / T(k,best,d), best = the backend with the highest T for k on "
                              "d, at the largest size every passing backend on d measured; 0 when k fails or does "
                              "not run. Interval: per round, T_r(k,b,d) / T_r(k,best,d).",
    "performant portability ratio": "T(k,b,d) / T(k,baseline,d); baseline = the native backend (CUDA via CuPy, "
                                    "else Numba-CUDA, on NVIDIA); on a device with no native backend, the best "
                                    "backend measured on d for that kernel (there ratio = application efficiency).",
    "architectural efficiency": "compulsory bytes/s (each array read or written once) / the device's copy bandwidth "
                                "(read+write bytes/s of a large device-to-device copy measured in the same run), "
                                "clipped to 1 (above 1 the working set stays in cache).",
    "PP": "Pennycook, Sewall & Lee 2016: harmonic mean of application efficiency over every device in the runs; 0 "
          "when the backend fails or does not run on any of them. Interval: the harmonic mean per round.",
    "workload": "phases i with time shares w_i (summing to 1) on the device's reference, the fastest measured "
                "implementation of each phase there. A backend's workload throughput is W(b) = 1 / sum_i(w_i x "
                "T(i,fastest) / T(i,b)) (0 if a phase does not run), the same formula per round for the interval. "
                "ratio = W(b) / W(baseline), baseline as for kernels (native, else the backend with the highest "
                "W); throughput penalty p = 1 - ratio; app. eff. = W(b) / max W, the figure the PP table "
                "averages. Ratio and app. eff. are the same number unless a native baseline is slower than the "
                "best backend. The default mixes train:<task> are measured: the shares of portkern's kernel "
                "phases (step:<task> = env stepping, gae = advantages, normalize and gather = those parts of the "
                "update) in the wall time of `portkern train` runs of one stack (portkern/data/workload_mixes.json "
                "names the file, stack and seeds), renormalised to sum 1; the covered share (their sum before "
                f"renormalising) is given beside each table. Left out: {training.MIX_EXCLUDED}.",
    "throughput penalty": "p = 1 - ratio, per kernel and per workload (negative when the port is faster).",
    "stack class": "how deep a stack's kernels go (DESIGN.md): framework eager (NumPy, torch), framework compiled "
                   "(torch.compile), custom kernels (OpenCL, CuPy, Numba; one launch per step), fused custom "
                   "(fused rollouts of custom-kernel backends); declared by each backend (Backend.stack_class) "
                   "and recorded per case.",
    "spectrum": "per device and kernel (rollouts: all three data paths of one env and policy together), the best "
                "throughput each stack class reached, and its ratio to the best class, with the per-round interval.",
    "re-tune penalty": "1 - T(config tuned on source, run on target) / T(best config found on target), T the "
                       "throughput at the target's tuning size; in [0, 1) when the source's config runs on the "
                       "target, 1 (marked) when it cannot. Interval: 1 - the per-round ratio of the two "
                       "configurations, timed in the same interleaved rounds on the target; \"within noise\" "
                       "when it reaches 0 (the source's configuration is not slower beyond noise).",
    "data paths": "one rollout of T steps of N envs with a policy choosing actions (VectorEnv.rollout), three ways: "
                  "host = the obs come back to the host every step, the policy runs there (NumPy) and the "
                  "actions go down; device = the env state stays on the device, one kernel launch per step "
                  "with the policy in the kernel; fused = the policy inside the env kernel, up to "
                  "steps_per_launch steps per launch (default all T). Parity: the host path against the NumPy "
                  "reference; the device and fused paths against the host path's buffer on the same device, "
                  "every field bit for bit with the random policy (torch_compile, whose compiled paths round differently: "
                  "floats to the float32 tolerance for the first 3 steps, then within 1e-3, flags exactly). "
                  "The three paths of one (env, policy, N) are "
                  "one interleaved group, so path factors are paired. The table compares the paths at the "
                  "largest N all three passed, each at its best configuration in a tune run. In the efficiency "
                  "and PP tables each rollout:<env>:<path>[:mlp] is its own kernel (backends compared path for "
                  "path); in the functional matrix the paths of one env count as one kernel rollout:<env>; "
                  "rollouts are in no default workload mix (their env stepping would count twice next to the "
                  "step phase).",
    "env-steps/s": "N x T / the median time of one rollout, which ends with a device synchronise.",
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
    """``--mix`` value: a JSON file of {name: {kernel: share}} (or a portkern-mixes/1 file, as
    ``python -m portkern.portability.training derive-mixes`` writes) or ``name=kernel:share,kernel:share``."""
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
        if "schema" in mixes:
            mixes = training.read_mixes(mixes, f"--mix {text}")[0]
    check_mixes(mixes, "--mix")
    return mixes


def check_mixes(mixes: Mapping[str, Any], where: str) -> None:
    """Every mix a non-empty {kernel: share} of known kernels, shares >= 0 with a positive sum."""
    for name, phases in mixes.items():
        if not isinstance(phases, dict) or not phases:
            raise ValueError(f"{where} {name!r}: expected {{kernel: share}}, got {phases!r}")
        unknown = set(phases) - set(KERNEL_ORDER)
        if unknown:
            raise ValueError(f"{where} {name!r}: unknown kernels {sorted(unknown)}; valid: {', '.join(BASE_KERNELS)} "
                             f"and rollout:<env>:<host|device|fused>[:mlp]")  # fmt: skip
        if any(not (isinstance(w, (int, float)) and w >= 0) for w in phases.values()) or sum(phases.values()) <= 0:
            raise ValueError(f"{where} {name!r}: shares must be numbers >= 0 with a positive sum, got {phases}")


DEFAULT_MIXES, DEFAULT_MIXES_SOURCE = _shipped_mixes()


def mix_origin(name: str, shares: Mapping[str, float]) -> dict[str, Any]:
    """Where a mix came from: measured (a shipped mix, unchanged) with its source and covered share, or given."""
    if name in DEFAULT_MIXES and dict(shares) == DEFAULT_MIXES[name]:
        src = DEFAULT_MIXES_SOURCE
        task = next((t for t, v in src.get("tasks", {}).items() if v.get("mix") == name), None)
        info = src.get("tasks", {}).get(task, {})
        return {"kind": "measured", "file": src.get("file"), "stack": src.get("stack"), "task": task,
                "seeds": info.get("seeds"), "basis": info.get("basis"), "covered": info.get("covered"),
                "excluded": src.get("excluded", training.MIX_EXCLUDED)}  # fmt: skip
    return {"kind": "given", "file": None, "covered": None}


# ---- per-round arithmetic ----------------------------------------------------------------------


def _ratio_rounds(a: Record | None, b: Record | None) -> np.ndarray | None:
    """Per-round T_a / T_b (round r with round r)."""
    if a is None or b is None:
        return None
    m = metrics.aligned([a.round_rates, b.round_rates])
    return None if m is None else m[:, 0] / m[:, 1]


def _iv(values: np.ndarray | None) -> list[float] | None:
    s = metrics.spread(values)
    return None if s is None else [s[0], s[1]]


def _paired(a: Record | None, b: Record | None) -> bool:
    return bool(a and b and a.round_group and a.round_group == b.round_group)


def _figure(rounds: np.ndarray | None, fallback: float | None) -> tuple[float | None, list[float] | None]:
    """(point, interval) of a ratio: the median and 10th-90th percentile of its per-round values, or
    ``fallback`` (the ratio of the throughputs) and no interval when there are no rounds."""
    if rounds is None or not np.isfinite(rounds).any():
        return fallback, None
    return float(np.median(rounds[np.isfinite(rounds)])), _iv(rounds)


def _word(verdict: str) -> str:
    return {"higher": "faster", "lower": "slower"}.get(verdict, verdict)


def _compare(a: Record | None, b: Record | None) -> dict[str, Any]:
    """T_a / T_b (the median of the paired per-round ratios) with its interval and verdict ("faster": a
    beyond noise, "slower", "within noise", "no interval")."""
    ta, tb = (a.items_per_s if a else None), (b.items_per_s if b else None)
    ratio, iv = _figure(_ratio_rounds(a, b), ta / tb if ta and tb else None)
    v = metrics.verdict(tuple(iv) if iv else None)
    return {"ratio": ratio if ta and tb else None, "interval": iv, "paired": _paired(a, b), "verdict": _word(v)}


# ---- devices: hardware + driver, host frameworks folded into every driver-device -----------------
def report_devices(run: Run) -> dict[str, dict[str, Any]]:
    """The devices the report compares on: driver-devices, and hardware with no driver-device.

    A record on bare hardware (no driver layer: NumPy, torch, CuPy, Numba) is compared on every
    driver-device of that hardware (``includes``); hardware without a driver-device is a device itself.
    """
    real = {k: d for k, d in run.devices.items() if d["kind"] != "simulator"}
    drivers: dict[str, list[str]] = defaultdict(list)
    for k, d in real.items():
        if d.get("hardware_key", k) != k:
            drivers[d["hardware_key"]].append(k)
    out: dict[str, dict[str, Any]] = {}
    for k, d in real.items():
        hw = d.get("hardware_key", k)
        if k == hw and drivers.get(hw):
            continue  # folded into its driver-devices
        includes = [hw] if k != hw and hw in real else []
        backends = list(run.available.get(k, []))
        for inc in includes:
            backends += [b for b in run.available.get(inc, []) if b not in backends]
        out[k] = {**d, "includes": includes, "backends": backends}
    return out


def _device_records(run: Run, devices: Mapping[str, Mapping[str, Any]]) -> list[Record]:
    """Timed-device records, re-keyed to the report device they are compared on (a folded one to each)."""
    out = []
    for r in run.records:
        for d, info in devices.items():
            if r.device_key == d or r.device_key in info["includes"]:
                out.append(r if r.device_key == d else dataclasses.replace(r, device_key=d, origin=r.device_key))
    return out


def _pick(recs: list[Record]) -> tuple[dict[str, Record], int | None]:
    """Per backend, its fastest passing record at the largest size all passing backends measured."""
    by_backend: dict[str, dict[int, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        if r.status == "pass" and r.items_per_s:
            by_backend[r.backend][r.size].append(r)
    if not by_backend:
        return {}, None
    common = set.intersection(*(set(s) for s in by_backend.values()))
    size = max(common) if common else None
    out = {}
    for b, sizes in by_backend.items():
        pick = sizes[size] if size is not None else sizes[max(sizes)]
        out[b] = max(pick, key=lambda r: r.items_per_s or 0.0)
    return out, size


def _best(recs: Mapping[str, Record]) -> str | None:
    """The fastest of several cases: by paired rounds when they all have them (the highest median of the
    per-round efficiency T_r / max T_r), else by throughput. Medians of unpaired throughputs can rank
    two cases the other way round from their paired rounds on a noisy machine; the paired ranking is
    the one the ratios use."""
    if not recs:
        return None
    names = list(recs)
    m = metrics.aligned([recs[n].round_rates for n in names])
    if m is None:
        return max(names, key=lambda n: recs[n].items_per_s or 0.0)
    score = np.median(m / m.max(axis=1, keepdims=True), axis=0)
    return max(names, key=lambda n: (score[names.index(n)], recs[n].items_per_s or 0.0))


def _measured_on(device: str, *recs: Record | None) -> str:
    """Where a comparison was measured: its device, or the bare hardware when every record in it was
    measured there (then the same comparison shows on every driver-device of that hardware)."""
    origins = {r.origin for r in recs if r is not None}
    return origins.pop() if len(origins) == 1 and "" not in origins else device


def _near_best(r: Record | None, best: Record | None, is_best: bool) -> bool | None:
    """Whether r is within noise of the best (True for the best itself); None when it has no interval."""
    if r is None:
        return None
    if is_best:
        return True
    v = _compare(r, best)["verdict"]
    return None if v == "no interval" else v != "slower"


def _harmonic_rounds(vectors: list[np.ndarray | None]) -> np.ndarray | None:
    m = metrics.aligned(vectors)
    if m is None:
        return None
    with np.errstate(divide="ignore"):
        return m.shape[1] / np.sum(1.0 / m, axis=1)


def build(run: Run, mixes: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Everything the report says, as plain data (report.json; what ``portkern cost`` reads)."""
    mixes = dict(DEFAULT_MIXES if mixes is None else mixes)
    recs = run.records
    kernels = _kernels(recs)
    fkernels = list(dict.fromkeys(functional_kernel(k) for k in kernels))
    # --- functional matrix: every backend that ran on every device it ran on (simulators included, marked)
    raw_cell: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in recs:
        raw_cell[(r.backend, r.device_key, r.kernel)].append(r)
    columns = [(b, d) for d in run.devices for b in _order(set(run.available.get(d, [])))]
    functional: dict[str, Any] = {}
    for b, d in columns:
        cells = {}
        for fk in fkernels:
            rs = [r for k in kernels if functional_kernel(k) == fk for r in raw_cell[(b, d, k)]]
            status, err, reason = _status(rs)
            cells[fk] = {"status": status, "max_error": err, "reason": reason}
        share = metrics.functional_share([c["status"] for c in cells.values()])
        functional[f"{b}@{d}"] = {"backend": b, "device": d, "simulator": run.devices[d]["kind"] == "simulator",
                                  "kernels": cells, "share": share}  # fmt: skip
    # --- per report device: ceiling, baseline, efficiencies and ratios with intervals
    real = report_devices(run)
    drecs = _device_records(run, real)
    by_cell: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in drecs:
        by_cell[(r.backend, r.device_key, r.kernel)].append(r)
    picked: dict[tuple[str, str], dict[str, Record]] = {}  # (device, kernel) -> backend -> record
    devices_out: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    vec: dict[tuple[str, str, str], np.ndarray | None] = {}  # (kernel, backend, device) -> per-round e
    backends_all = _order({b for d in real.values() for b in d["backends"]})
    for d, info in real.items():
        copies = [r.bytes_per_s for r in drecs if r.device_key == d and r.kernel == "copy" and r.bytes_per_s]
        ceiling = max(copies, default=None)
        natives = [b for b in NATIVE.get(info["vendor"], ()) if b in info["backends"]]
        baseline_rule = (f"native: {natives[0]}" if natives else
                         f"best available (no native backend for {info['vendor']} devices in these runs)")  # fmt: skip
        devices_out[d] = {**info, "ceiling_bytes_per_s": ceiling, "baseline": baseline_rule}
        for k in kernels:
            pick, size = _pick([r for r in drecs if r.device_key == d and r.kernel == k])
            picked[(d, k)] = pick
            best_name = _best(pick)
            base_name = next((b for b in natives if b in pick), None) or best_name
            best, base = pick.get(best_name or ""), pick.get(base_name or "")
            for b in info["backends"]:
                status = _status(by_cell[(b, d, k)])[0]
                r = pick.get(b) if status == "pass" else None
                tb = r.items_per_s if r else None
                arch, arch_raw = (metrics.architectural_efficiency(r.bytes_per_s, ceiling) if ceiling and r
                                  else (None, None))  # fmt: skip
                e_rounds = _ratio_rounds(r, best)
                vec[(k, b, d)] = e_rounds if r else np.zeros(1)
                vs_base = _compare(r, base)
                e = 1.0 if b == best_name else min(1.0, _figure(e_rounds, None)[0] or (
                    metrics.application_efficiency(tb, best.items_per_s) if (best and tb) else 0.0))  # fmt: skip
                rows.append({
                    "kernel": k, "device": d, "backend": b, "status": status, "size": size,
                    "stack_class": r.stack_class if r else None,
                    "items_per_s": tb, "items_per_s_interval": _iv(r.round_rates) if r else None,
                    "bytes_per_s": r.bytes_per_s if r else None,
                    "app_eff": e if tb else 0.0,
                    "app_eff_interval": _iv(e_rounds) if r else None,
                    "ratio": vs_base["ratio"] or 0.0, "ratio_interval": vs_base["interval"] if r else None,
                    "verdict": ("baseline" if b == base_name else vs_base["verdict"]) if r else status,
                    "within_noise_of_best": _near_best(r, best, b == best_name),
                    "paired": vs_base["paired"], "baseline": base_name, "baseline_is_native": base_name in natives,
                    "arch_eff": arch, "arch_eff_raw": arch_raw,
                })  # fmt: skip
            names = [b for b in _order(set(pick))]
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    pairs.append({"device": d, "kernel": k, "a": a, "b": b, **_compare(pick[a], pick[b]),
                                  "measured_on": _measured_on(d, pick[a], pick[b])})  # fmt: skip

    # --- Pennycook PP over every device in the runs
    def eff(k: str, b: str, d: str, field: str = "app_eff") -> float:
        row = next((x for x in rows if x["kernel"] == k and x["backend"] == b and x["device"] == d), None)
        return (row or {}).get(field) or 0.0

    pp, pp_iv = {}, {}
    for b in backends_all:
        pp[b], pp_iv[b] = {}, {}
        for k in kernels:
            pp[b][k] = metrics.pennycook_pp({d: eff(k, b, d) for d in real}) if real else 0.0
            pp_iv[b][k] = ([0.0, 0.0] if not pp[b][k] else
                           _iv(_harmonic_rounds([vec.get((k, b, d)) for d in real])))  # fmt: skip
    pp_arch = {b: {k: metrics.pennycook_pp({d: eff(k, b, d, "arch_eff") for d in real}) if real else 0.0
                   for k in kernels} for b in backends_all}  # fmt: skip
    workloads = {m: {**workload(shares, real, picked, backends_all), "origin": mix_origin(m, shares)}
                 for m, shares in mixes.items()}  # fmt: skip
    rep = {
        "schema": REPORT_SCHEMA, "sources": run.path.split(", "), "machines": run.machine,
        "quick": run.quick, "runs": run.meta, "interval_method": metrics.INTERVAL_METHOD,
        "definitions": DEFINITIONS, "kernels": kernels, "functional_kernels": fkernels, "devices": devices_out,
        "simulators": {d: i for d, i in run.devices.items() if i["kind"] == "simulator"},
        "unavailable": run.unavailable, "functional": functional, "efficiency": rows, "pairs": pairs,
        "pp": pp, "pp_interval": pp_iv, "pp_arch": pp_arch, "workloads": workloads,
        "retune": retune(recs, {d: i for d, i in run.devices.items() if i["kind"] != "simulator"}),
        "data_paths": data_paths(drecs, real), "spectrum": spectrum(drecs, real),
    }  # fmt: skip
    rep["summary"] = summary(rep)
    return rep


def workload(shares: Mapping[str, float], devices: Mapping[str, Any], picked: Mapping[tuple[str, str], dict[str, Record]],
             backends_all: list[str]) -> dict[str, Any]:  # fmt: skip
    """One mix on every device: W(b), its ratio to the baseline, penalty and app. eff., with intervals."""
    total = sum(shares.values())
    phases = {k: w / total for k, w in shares.items() if w > 0}
    per_dev: dict[str, Any] = {}
    baselines: dict[str, str | None] = {}
    pairs: list[dict[str, Any]] = []
    eff_rounds: dict[tuple[str, str], np.ndarray | None] = {}
    for d, info in devices.items():
        ref = {k: max((r.items_per_s or 0.0 for r in picked.get((d, k), {}).values()), default=0.0) for k in phases}
        w_point: dict[str, float] = {}
        phase_recs: dict[str, dict[str, Record]] = {}
        for b in info["backends"]:
            recs = {k: picked.get((d, k), {}).get(b) for k in phases}
            if any(r is None or not ref[k] for k, r in recs.items()):
                w_point[b] = 0.0
                continue
            phase_recs[b] = recs  # type: ignore[assignment]
            w_point[b] = metrics.workload_ratio(phases, {k: r.items_per_s / ref[k] for k, r in recs.items()})  # type: ignore[union-attr]

        def w_rounds(b: str, against: str, phase_recs: dict[str, dict[str, Record]] = phase_recs,
                     ref: dict[str, float] = ref) -> np.ndarray | None:  # fmt: skip
            """Per round, W(b) / W(against) = 1 / sum_i(s_i / rho_i,r): s_i the time share of phase i on
            ``against`` (fixed, from the medians), rho_i,r the paired per-round ratio of phase i."""
            rb, ra = phase_recs[b], phase_recs[against]
            t = {k: phases[k] * ref[k] / ra[k].items_per_s for k in phases}  # type: ignore[operator]
            share = np.array([t[k] / sum(t.values()) for k in phases])
            m = metrics.aligned([_ratio_rounds(rb[k], ra[k]) for k in phases])
            return None if m is None else 1.0 / np.sum(share / m, axis=1)
        natives = [b for b in NATIVE.get(info["vendor"], ()) if w_point.get(b)]
        best = max(w_point, key=w_point.get) if any(w_point.values()) else None  # type: ignore[arg-type]
        if best is not None:  # paired, as for kernels: a backend that beats it in most rounds is the best
            beats = {b: float(np.median(v)) for b in phase_recs if b != best and (v := w_rounds(b, best)) is not None}
            best = max(beats, key=beats.get) if beats and max(beats.values()) > 1.0 else best  # type: ignore[arg-type]
        base = natives[0] if natives else best
        baselines[d] = base
        out = {}
        for b, wb in w_point.items():
            if not (wb and base and best):
                out[b] = {"W": wb, "ratio": 0.0, "ratio_interval": [0.0, 0.0], "penalty": 1.0,
                          "penalty_interval": [1.0, 1.0], "app_eff": 0.0, "app_eff_interval": [0.0, 0.0],
                          "verdict": "does not run"}  # fmt: skip
                eff_rounds[(b, d)] = np.zeros(1)
                continue
            ratio, r_iv = (1.0, [1.0, 1.0]) if b == base else _figure(w_rounds(b, base), wb / w_point[base])
            e_rounds = w_rounds(b, best)
            eff_rounds[(b, d)] = e_rounds
            e, e_iv = (1.0, [1.0, 1.0]) if b == best else _figure(e_rounds, wb / w_point[best])
            v = metrics.verdict(tuple(r_iv) if r_iv else None)
            out[b] = {"W": wb, "ratio": ratio, "ratio_interval": r_iv, "penalty": metrics.throughput_penalty(ratio),
                      "penalty_interval": [1 - r_iv[1], 1 - r_iv[0]] if r_iv else None,
                      "app_eff": min(1.0, e or 0.0), "app_eff_interval": e_iv,
                      "verdict": "baseline" if b == base else _word(v)}  # fmt: skip
        per_dev[d] = out
        names = [b for b in _order(set(w_point)) if w_point[b]]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                ratio, iv = _figure(w_rounds(a, b), w_point[a] / w_point[b])
                v = metrics.verdict(tuple(iv) if iv else None)
                pairs.append({"device": d, "a": a, "b": b, "ratio": ratio, "interval": iv, "verdict": _word(v)})
    pp = {b: metrics.pennycook_pp({d: per_dev[d].get(b, {}).get("app_eff", 0.0) for d in devices}) if devices
          else 0.0 for b in backends_all}  # fmt: skip
    pp_iv = {b: ([0.0, 0.0] if not pp[b] else _iv(_harmonic_rounds([eff_rounds.get((b, d)) for d in devices])))
             for b in backends_all}  # fmt: skip
    return {"shares": dict(shares), "devices": per_dev, "baseline": baselines, "pp": pp, "pp_interval": pp_iv,
            "pairs": pairs}  # fmt: skip


def spectrum(recs: list[Record], devices: Mapping[str, Any]) -> dict[str, Any]:
    """Per device and kernel (rollouts: env and policy), the best throughput of each stack class and its
    ratio to the best class, with intervals. Classes come from the records (Backend.stack_class)."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    unclassed = 0
    for r in recs:
        if r.kernel == "copy" or r.status != "pass" or not r.items_per_s:
            continue
        if not r.stack_class:
            unclassed += 1
            continue
        rp = rollout_parts(r.kernel)
        name = f"rollout:{rp[0]}" + ("" if rp[2] == "random" else f":{rp[2]}") if rp else r.kernel
        groups[(r.device_key, name)].append(r)
    order = [k for k in BASE_KERNELS] + [f"rollout:{e}{m}" for m in ("", ":mlp") for e in ENV_ORDER]
    rows = []
    for (d, name), rs in sorted(groups.items(), key=lambda x: (list(devices).index(x[0][0]),
                                order.index(x[0][1]) if x[0][1] in order else len(order), x[0][1])):  # fmt: skip
        by_class: dict[str, dict[int, list[Record]]] = defaultdict(lambda: defaultdict(list))
        for r in rs:
            by_class[r.stack_class][r.size].append(r)
        common = set.intersection(*(set(s) for s in by_class.values()))
        if not common:
            continue
        size = max(common)
        best_of = {c: max(s[size], key=lambda r: r.items_per_s or 0.0) for c, s in by_class.items()}
        top = best_of[_best(best_of)]  # type: ignore[index]
        classes = {}
        for c in sorted(best_of, key=lambda c: STACK_CLASSES.index(c) if c in STACK_CLASSES else len(STACK_CLASSES)):
            r = best_of[c]
            cmp = _compare(r, top)
            rp = rollout_parts(r.kernel)
            classes[c] = {"backend": r.backend, "path": rp[1] if rp else None, "items_per_s": r.items_per_s,
                          "items_per_s_interval": _iv(r.round_rates), "vs_best": cmp["ratio"],
                          "vs_best_interval": cmp["interval"],
                          "verdict": "best" if r is top else ("within noise of the best"
                                                              if cmp["verdict"] != "slower" else "slower")}  # fmt: skip
        rows.append({"device": d, "kernel": name, "size": size, "classes": classes, "best": top.stack_class})
    return {"rows": rows, "unclassified_records": unclassed}


def data_paths(recs: list[Record], devices: Mapping[str, Any]) -> dict[str, Any]:
    """Per device, backend, env and policy: env-steps/s and device-hours per 1e9 steps of each data path,
    at the largest N all three paths passed, the fused/host and device/host factors with intervals, and per
    device the spread between the fastest and slowest (backend, path) stack."""
    groups: dict[tuple[str, str, str, str], dict[str, list[Record]]] = defaultdict(lambda: defaultdict(list))
    for r in recs:
        rp = rollout_parts(r.kernel)
        if rp and r.device_key in devices:
            env, path, policy = rp
            groups[(r.device_key, r.backend, env, policy)][path].append(r)

    def order(key: tuple[str, str, str, str]) -> tuple[Any, ...]:
        d, b, env, policy = key
        rank = {x: i for i, x in enumerate(_order(set(devices[d]["backends"]) | {b}))}
        return (list(devices).index(d), rank[b], ENV_ORDER.index(env) if env in ENV_ORDER else len(ENV_ORDER), env,
                POLICIES.index(policy) if policy in POLICIES else len(POLICIES), policy)  # fmt: skip

    rows = []
    chosen: dict[tuple[str, str, str, int | None], list[tuple[Record, str, str]]] = defaultdict(list)
    for key in sorted(groups, key=order):
        d, b, env, policy = key
        per = groups[key]
        ok = {p: {r.size for r in per[p] if r.status == "pass" and r.items_per_s} for p in PATHS}
        common = set.intersection(*ok.values())
        size = max(common) if common else None
        paths: dict[str, Any] = {}
        best: dict[str, Record | None] = {}
        for p in PATHS:
            status, _, reason = _status(per[p])
            at = [r for r in per[p] if r.status == "pass" and r.items_per_s and r.size == size]
            best[p] = max(at, key=lambda r: r.items_per_s or 0.0, default=None)
            sps = best[p].items_per_s if best[p] else None
            reason = reason.removeprefix(f"{per[p][0].kernel}: ") if per[p] else reason
            paths[p] = {"status": status, "reason": "" if status == "pass" else reason, "steps_per_s": sps,
                        "steps_per_s_interval": _iv(best[p].round_rates) if best[p] else None,
                        "device_hours_per_1e9_steps": metrics.device_hours_per_billion_steps(sps),
                        "config": best[p].config if best[p] else None}  # fmt: skip
            if best[p]:
                chosen[(d, env, policy, size)].append((best[p], b, p))
        t = next((r.items // r.size for p in PATHS for r in per[p] if r.size == size and r.items), None)
        fused, device = _compare(best["fused"], best["host"]), _compare(best["device"], best["host"])
        rows.append({"device": d, "backend": b, "env": env, "policy": policy, "N": size, "T": t, "paths": paths,
                     "measured_on": _measured_on(d, *(x for x in best.values() if x is not None)),
                     "fused_vs_host": fused["ratio"], "fused_vs_host_interval": fused["interval"],
                     "device_vs_host": device["ratio"], "device_vs_host_interval": device["interval"]})  # fmt: skip
    spread = []
    for (d, env, policy, n), st in chosen.items():
        if len(st) < 2:
            continue
        (hi, hb, hp), (lo, lb, lp) = (max(st, key=lambda x: x[0].items_per_s or 0.0),
                                      min(st, key=lambda x: x[0].items_per_s or 0.0))  # fmt: skip
        cmp = _compare(hi, lo)
        spread.append({"device": d, "env": env, "policy": policy, "N": n, "factor": cmp["ratio"],
                       "factor_interval": cmp["interval"],
                       "fastest": {"backend": hb, "path": hp, "steps_per_s": hi.items_per_s},
                       "slowest": {"backend": lb, "path": lp, "steps_per_s": lo.items_per_s}})  # fmt: skip
    return {"rows": rows, "spread": spread}


# ---- the summary: what a reader should take away -----------------------------------------------
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
            best_rec = max((r for r in tgt_space.values() if r.status == "pass"), key=lambda r: r.items_per_s or 0.0,
                           default=None)  # fmt: skip
            best = (best_rec.items_per_s or 0.0) if best_rec is not None else 0.0
            if best <= 0:
                continue
            there = tgt_space.get(tuned.config_key)
            interval = None
            if there is None:
                note, t = "source configuration not in the target's search", None
            else:
                t = there.items_per_s if there.status == "pass" else 0.0
                note = "" if there.status == "pass" else f"does not run on target ({there.status}: {there.reason})"
                if there.status == "pass" and there.round_group and there.round_group == best_rec.round_group:
                    # Both configurations ran in the same interleaved rounds on the target: pair them.
                    pair = metrics.aligned([there.round_rates, best_rec.round_rates])
                    if pair is not None:
                        interval = metrics.spread(1.0 - pair[:, 0] / pair[:, 1])
            out.append({
                "backend": b, "kernel": k, "source": src, "target": tgt, "config": tuned.config,
                "target_best_config": best_rec.config,
                "penalty": None if t is None else metrics.retune_penalty(t, best), "note": note,
                "penalty_interval": interval,
                "verdict": ("no interval" if interval is None else
                            "beyond noise" if interval[0] > 0 else "within noise"),
            })  # fmt: skip
    return out


def _group(recs: list[Record], devices: Mapping[str, Any]) -> dict[tuple[str, str, str], list[Record]]:
    g: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in recs:
        if r.device_key in devices and r.kernel != "copy":
            g[(r.backend, r.kernel, r.device_key)].append(r)
    return g


# ---- rendering ---------------------------------------------------------------------------------


# ---- rendering ---------------------------------------------------------------------------------
def _fmt(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.3g}"


def _span(iv: list[float] | None, pct: bool = False, unit: str = "") -> str:
    """An interval as "lo–hi" (percent without the sign, or with ``unit``); "n/a" without one."""
    if iv is None:
        return "n/a"
    if pct:
        return f"{100 * iv[0]:.1f}–{100 * iv[1]:.1f}"
    return f"{iv[0]:.3g}–{iv[1]:.3g}{unit}"


def _with(x: float | None, iv: list[float] | None, pct: bool = False) -> str:
    """A figure with its interval: "63.4% [55.0–70.1]"; the bare figure when there is nothing measured."""
    if not x:
        return _fmt(x, pct) if x is not None else "–"
    if iv is not None and iv[0] == iv[1] == x:
        return _fmt(x, pct)  # the reference itself (the best, or the baseline)
    return f"{_fmt(x, pct)} [{_span(iv, pct)}]"


def _x(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}x"


def _cell(c: dict[str, Any]) -> str:
    if c["status"] == "pass":
        return "pass"
    if c["status"] == "fail":
        reason = c.get("reason") or ""
        return f"**FAIL** ({'max err ' + _fmt(c['max_error']) if c.get('max_error') is not None else reason[:40]})"
    return c["status"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _verdict_text(r: dict[str, Any]) -> str:
    v = r["verdict"]
    if v in ("faster", "slower"):
        return f"**{v}** (beyond noise)"
    return v


def headline(rep: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The tables a person reads first (also printed by the CLI): summary, functional matrix, ratios, PP."""
    tables: dict[str, tuple[list[str], list[list[str]]]] = {}
    if "functional" not in rep:  # training files only
        return training_tables(rep)
    cols = list(rep["functional"])
    fkernels = rep.get("functional_kernels", rep["kernels"])
    if rep.get("summary"):
        note = [["**Indicative only** (a --quick run): " + ", ".join(rep["quick"])]] if rep.get("quick") else []
        tables[SUMMARY_TITLE] = (["finding"], note + [[f"**{f['title']}**: {f['text']}"] for f in rep["summary"]])
    func = (["kernel"] + [c + (" (sim)" if rep["functional"][c]["simulator"] else "") for c in cols],
            [[k] + [_cell(rep["functional"][c]["kernels"][k]) for c in cols] for k in fkernels]
            + [["**share**"] + [_fmt(rep["functional"][c]["share"], True) for c in cols]])  # fmt: skip
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
    return tables


def training_tables(rep: dict[str, Any]) -> dict[str, tuple[list[str], list[list[str]]]]:
    """One table per (task, hardware) of the training section."""
    return {f"{training.TITLE}: {g['task']} on {g['hardware_key']}": training.table(g)
            for g in (rep.get("training") or {}).get("groups", [])}


def _training_only_markdown(rep: dict[str, Any]) -> str:
    out = ["# portkern portability report", "", f"Training files: {', '.join(rep['sources'])} (machines: "
           f"{rep['machines']}). No bench runs among the inputs: this report has the training section only.", ""]
    found = training.finding(rep["training"])
    if found:
        out += [f"## {SUMMARY_TITLE}", "", f"1. **{found['title']}**: {found['text']}", ""]
    out += training.markdown(rep["training"])
    out += ["", "## Definitions", ""] + [f"* **{k}**: {v}" for k, v in rep["definitions"].items()]
    return "\n".join(out) + "\n"


SUMMARY_TITLE = "Summary"
DATA_PATHS_TITLE = "Data paths: host round-trip, device per-step, fused"


def data_paths_table(rep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = (["device", "backend", "env", "policy", "N x T"] + [f"{p} steps/s" for p in PATHS]
              + [f"{p} device-h / 1e9 steps" for p in PATHS] + ["fused / host", "device / host"])  # fmt: skip
    rows = []
    for r in rep["data_paths"]["rows"]:
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
        if title in (DATA_PATHS_TITLE, SUMMARY_TITLE) or title.startswith(training.TITLE):
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
        out += _table(["backend", "kernel", "tuned on", "run on", "config", "target's best", "penalty"],
                      [[r["backend"], r["kernel"], r["source"], r["target"], json.dumps(r["config"]),
                        json.dumps(r["target_best_config"]),
                        (_fmt(r["penalty"], True) if r["penalty"] is not None else "–")
                        + (f" [{100 * r['penalty_interval'][0]:.1f}–{100 * r['penalty_interval'][1]:.1f}%]"
                           if r.get("penalty_interval") else "")
                        + (" (within noise)" if r.get("verdict") == "within noise" else "")
                        + (f" † {r['note']}" if r["note"] else "")] for r in rep["retune"]])  # fmt: skip
    else:
        out += ["No pair of devices with a knob search for the same backend in these runs: run `portkern tune` "
                "on two or more devices and pass all the run files."]
    out += ["", "## Definitions", ""] + [f"* **{k}**: {v}" for k, v in rep["definitions"].items()]
    return "\n".join(out) + "\n"


# ---- two runs of one machine, compared: do their verdicts contradict? ---------------------------
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
                   f"{json.dumps(m.get('loadavg') or {})}")  # fmt: skip
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


def build_all(paths: list[str], mixes: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """The report of any mix of bench run files and training files (told apart by the training file's
    ``schema``); training files add the ``training`` section, and alone make a report of it only."""
    kinds = [training.is_train_file(p) for p in paths]
    runs = [load_run(p) for p, t in zip(paths, kinds) if not t]
    trains = [(str(p), training.load_train(p)) for p, t in zip(paths, kinds) if t]
    tr = training.summarise(trains) if trains else None
    if runs:
        rep = build(merge(runs), mixes)
        if tr is not None:
            rep["training"] = tr
            rep["sources"] = [str(p) for p in paths]
            rep["definitions"] = {**rep["definitions"], **training.DEFINITIONS}
            found = training.finding(tr)
            if found:  # the biggest input of the cost model comes first; still three findings
                rep["summary"] = [found, *rep["summary"]][:3]
        return rep
    machines = sorted({str(d["host"].get("machine", "?")) for _, d in trains})
    return {"schema": REPORT_SCHEMA, "sources": [str(p) for p in paths], "machines": ", ".join(machines),
            "quick": [], "runs": {}, "definitions": dict(training.DEFINITIONS), "training": tr}  # fmt: skip


def write(run_paths: list[str], out_dir: str | Path, mixes: Mapping[str, Mapping[str, float]] | None = None,
          extra_files: Mapping[str, str] | None = None, source_names: list[str] | None = None) -> dict[str, Any]:
    """Load and check every run first, then write report.md/json and plots into a temp dir in ``out_dir``
    and move them into place.

    ``source_names`` replaces the run paths in the report (a run copied into ``out_dir`` is
    named where it ends up, not where it was written first).
    """
    rep = build_all(run_paths, mixes)  # raises before anything is written
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
