"""The report model: everything a report says, as plain data (report.json; what ``portkern cost`` reads).

Per report device (hardware plus driver), the functional matrix, application efficiency and the performant
portability ratio with intervals, Pennycook PP, and the workload penalties of each mix; the spectrum, data
paths and re-tune sections (sections.py) and the summary (summary.py) are built from the same records.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from ...runs import Record, Run
from .. import metrics
from ..names import NATIVE, functional_kernel
from .crossdevice import cross_device, parse_prices, timed_devices
from .definitions import DEFINITIONS
from .mixes import DEFAULT_MIXES, mix_origin
from .rounds import (
    _best, _compare, _figure, _harmonic_rounds, _iv, _kernels, _measured_on, _near_best, _order, _pick, _ratio_rounds,
    _status, _word,
)  # fmt: skip
from .sections import data_paths, retune, spectrum
from .summary import summary

REPORT_SCHEMA = "portkern-report/2"  # 2: intervals, verdicts, summary, spectrum, driver-devices


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


def build(run: Run, mixes: Mapping[str, Mapping[str, float]] | None = None,
          prices: Sequence[str] | Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """Everything the report says, as plain data (report.json; what ``portkern cost`` reads).

    ``prices``: price per device-hour by device, as ``DEVICE=RATE`` strings (crossdevice.parse_prices) or
    {device key: rate}; the cross-device section then gives cost per million env steps too."""
    mixes = dict(DEFAULT_MIXES if mixes is None else mixes)
    if prices is not None and not isinstance(prices, Mapping):
        prices = parse_prices(list(prices), timed_devices(run))
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
        "cross_device": cross_device(run, mixes, prices),
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
