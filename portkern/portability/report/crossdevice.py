"""Which device runs a kernel or a workload fastest: every device (hardware x driver) of the runs side by side,
with its best backend and each backend, and its ratio to the fastest device.

A device here is where a record was measured: an OpenCL platform on a CPU is one device, and the host
frameworks (NumPy, torch on the CPU) on that same CPU are another, listed once (the efficiency tables fold
them into every driver-device instead). Two devices of one machine share interleaved rounds, so their
ratio gets a paired interval (rounds.py); devices of different machines never ran in the same rounds, so
their ratio gets the unpaired interval from the two throughput intervals (lo_a / hi_b to hi_a / lo_b),
which is wider.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..._jsonfile import read_option_json
from ...backends._opencl_devices import known_platform_ids, platform_id
from ...runs import Record, Run
from .. import metrics
from .rounds import _best, _compare, _iv, _kernels, _order, _paired, _ratio_rounds, _word


def timed_devices(run: Run) -> dict[str, dict[str, Any]]:
    """Every device a record was timed on (simulators are never timed), in run order."""
    timed = {r.device_key for r in run.records if r.status == "pass" and r.items_per_s and r.kernel != "copy"}
    return {k: d for k, d in run.devices.items() if d["kind"] != "simulator" and k in timed}


def _ratio(a: Record, b: Record) -> dict[str, Any]:
    """T_a / T_b: paired (same interleaved rounds) when they share a round group, else unpaired."""
    if a is b:
        return {"ratio": 1.0, "interval": [1.0, 1.0], "paired": True, "verdict": "fastest"}
    if _paired(a, b):
        return _compare(a, b)
    ia, ib = _iv(a.round_rates), _iv(b.round_rates)
    ratio = (a.items_per_s or 0.0) / (b.items_per_s or 1.0)
    iv = [ia[0] / ib[1], ia[1] / ib[0]] if ia and ib and ib[0] > 0 else None
    v = metrics.verdict(tuple(iv) if iv else None)
    return {"ratio": ratio, "interval": iv, "paired": False, "verdict": _word(v)}


def _pick_across(recs: list[Record]) -> tuple[dict[str, dict[str, Record]], int | None, bool]:
    """Per device and backend, the fastest passing record at the largest size every device measured (or each
    device's largest when they share none: then the flag is False and the table says so)."""
    sizes: dict[str, set[int]] = defaultdict(set)
    for r in recs:
        sizes[r.device_key].add(r.size)
    common = set.intersection(*sizes.values()) if sizes else set()
    size = max(common) if common else None
    out: dict[str, dict[str, Record]] = defaultdict(dict)
    for d, ss in sizes.items():
        at = size if size is not None else max(ss)
        for r in recs:
            if r.device_key == d and r.size == at:
                cur = out[d].get(r.backend)
                if cur is None or (r.items_per_s or 0.0) > (cur.items_per_s or 0.0):
                    out[d][r.backend] = r
    return dict(out), size, size is not None


def _kernel_rows(run: Run, devices: Mapping[str, Any]) -> list[dict[str, Any]]:
    passing = [r for r in run.records if r.device_key in devices and r.status == "pass" and r.items_per_s
               and r.kernel != "copy"]  # fmt: skip
    by_kernel: dict[str, list[Record]] = defaultdict(list)
    for r in passing:
        by_kernel[r.kernel].append(r)
    rows = []
    for k in _kernels(run.records):
        pick, size, same_size = _pick_across(by_kernel.get(k, []))
        if not pick:
            continue
        best_of = {d: pick[d][_best(pick[d])] for d in pick}  # type: ignore[index]
        # Ranked by paired rounds where every device ran in the same rounds (one machine), else by throughput:
        # rounds of different machines have nothing to pair.
        one_round = len({r.round_group for r in best_of.values()}) == 1 and all(r.round_group for r in best_of.values())
        top_dev = _best(best_of) if one_round else max(best_of, key=lambda d: best_of[d].items_per_s or 0.0)
        top = best_of[top_dev]  # type: ignore[index]
        devs = []
        for d in sorted(pick, key=list(devices).index):
            entries = {}
            for b in _order(set(pick[d])):
                r = pick[d][b]
                entries[b] = {"items_per_s": r.items_per_s, "items_per_s_interval": _iv(r.round_rates),
                              "size": r.size, **_vs(r, top)}  # fmt: skip
            best_b = best_of[d].backend
            devs.append({"device": d, "best_backend": best_b, **entries[best_b], "backends": entries})
        drivers = []
        for i, a in enumerate(best_of):
            for b in list(best_of)[i + 1:]:
                if not _drivers_of_one(devices[a], devices[b]):
                    continue
                c = _ratio(best_of[a], best_of[b])
                if c["ratio"] and c["ratio"] < 1:  # the faster driver first
                    a, b, c = b, a, _ratio(best_of[b], best_of[a])
                drivers.append({"faster": a, "slower": b, "backends": [best_of[a].backend, best_of[b].backend],
                                "ratio": c["ratio"], "interval": c["interval"], "paired": c["paired"],
                                "verdict": c["verdict"]})  # fmt: skip
        rows.append({"kernel": k, "size": size, "same_size": same_size, "fastest": top_dev, "devices": devs,
                     "drivers": drivers})  # fmt: skip
    return rows


def _drivers_of_one(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two drivers (OpenCL platforms) of one piece of hardware: PoCL and Intel's runtime on one CPU."""
    return bool(a.get("platform") and b.get("platform") and a.get("hardware_key") == b.get("hardware_key"))


def _vs(r: Record, top: Record) -> dict[str, Any]:
    c = _ratio(r, top)
    return {"vs_fastest": c["ratio"], "vs_fastest_interval": c["interval"], "paired": c["paired"],
            "verdict": "fastest" if r is top else c["verdict"]}


def _workload_rows(run: Run, devices: Mapping[str, Any], mixes: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Per mix: each device's workload throughput with each backend, W(b, d) = 1 / sum_i(w_i x T(i, ref) /
    T(i, b, d)) where ref is the fastest measured implementation of phase i on ANY device (the one definition
    of a workload, with the reference taken over the whole run so devices share one unit of work), and with a
    step phase its env-steps/s (the phase's env steps per unit of work / the unit's seconds)."""
    pick_of = {}
    for k in {k for m in mixes.values() for k in m}:
        recs = [r for r in run.records if r.kernel == k and r.device_key in devices and r.status == "pass"
                and r.items_per_s]  # fmt: skip
        pick_of[k] = _pick_across(recs)[0]
    out: dict[str, Any] = {}
    for m, shares in mixes.items():
        total = sum(shares.values())
        phases = {k: w / total for k, w in shares.items() if w > 0}
        if not phases or any(not pick_of.get(k) for k in phases):
            continue
        ref = {k: max(r.items_per_s or 0.0 for per in pick_of[k].values() for r in per.values()) for k in phases}
        steps = [k for k in phases if k.startswith("step:")]
        per_step = phases[steps[0]] * ref[steps[0]] if len(steps) == 1 else None  # env steps per unit of work
        cands: dict[str, dict[str, dict[str, Record]]] = defaultdict(dict)
        for d in devices:
            for b in _order({b for k in phases for b in pick_of[k].get(d, {})}):
                recs = {k: pick_of[k].get(d, {}).get(b) for k in phases}
                if all(recs.values()):
                    cands[d][b] = recs  # type: ignore[assignment]
        if not cands:
            continue

        def w_of(recs: Mapping[str, Record], q: int | None = None) -> float:
            """W at the median (q None) or at the low (0) / high (1) end of each phase's interval."""
            t = 0.0
            for k, r in recs.items():
                iv = _iv(r.round_rates) if q is not None else None
                rate = iv[q] if iv else r.items_per_s
                t += phases[k] * ref[k] / rate  # type: ignore[operator]
            return 1.0 / t

        def w_ratio_rounds(a: Mapping[str, Record], b: Mapping[str, Record]) -> np.ndarray | None:
            """Per round W(a) / W(b), paired phase by phase (as the per-device workload tables)."""
            t = {k: phases[k] * ref[k] / b[k].items_per_s for k in phases}  # type: ignore[operator]
            share = np.array([t[k] / sum(t.values()) for k in phases])
            mat = metrics.aligned([_ratio_rounds(a[k], b[k]) for k in phases])
            return None if mat is None else 1.0 / np.sum(share / mat, axis=1)

        best_b = {d: max(c, key=lambda b: w_of(c[b])) for d, c in cands.items()}
        top_dev = max(best_b, key=lambda d: w_of(cands[d][best_b[d]]))
        top = cands[top_dev][best_b[top_dev]]
        w_top = w_of(top)
        devs = []
        for d, c in cands.items():
            entries = {}
            for b, recs in c.items():
                w = w_of(recs)
                lo, hi = w_of(recs, 0), w_of(recs, 1)
                paired = all(_paired(recs[k], top[k]) for k in phases)
                if recs is top:
                    ratio, iv, paired = 1.0, [1.0, 1.0], True
                elif paired and (rr := w_ratio_rounds(recs, top)) is not None:
                    ratio, iv = float(np.median(rr)), _iv(rr)
                else:
                    paired = False
                    ratio, iv = w / w_top, [lo / w_of(top, 1), hi / w_of(top, 0)]
                v = metrics.verdict(tuple(iv) if iv else None)
                entries[b] = {"W": w, "W_interval": [lo, hi],
                              "steps_per_s": per_step * w if per_step else None,
                              "steps_per_s_interval": [per_step * lo, per_step * hi] if per_step else None,
                              "vs_fastest": ratio, "vs_fastest_interval": iv, "paired": paired,
                              "verdict": "fastest" if recs is top else _word(v)}  # fmt: skip
            devs.append({"device": d, "best_backend": best_b[d], **entries[best_b[d]], "backends": entries})
        # Two drivers of one piece of hardware (PoCL and Intel's runtime on one CPU): their own ratio, the
        # question "which driver" that the ranking against the fastest device (maybe the host) leaves open.
        drivers = []
        for i, a in enumerate(cands):
            for b in list(cands)[i + 1:]:
                if not _drivers_of_one(devices[a], devices[b]):
                    continue
                ra, rb = cands[a][best_b[a]], cands[b][best_b[b]]
                if w_of(rb) > w_of(ra):
                    a, b, ra, rb = b, a, rb, ra
                # 1 / (W(b) / W(a)) weighs the phases by their times on the faster device, as the ratios to
                # the fastest device do, so a pair that includes the fastest device reads the same both ways.
                back = w_ratio_rounds(rb, ra) if all(_paired(ra[k], rb[k]) for k in phases) else None
                rr = None if back is None else 1.0 / back
                ratio, iv = ((float(np.median(rr)), _iv(rr)) if rr is not None else
                             (w_of(ra) / w_of(rb), [w_of(ra, 0) / w_of(rb, 1), w_of(ra, 1) / w_of(rb, 0)]))  # fmt: skip
                drivers.append({"faster": a, "slower": b, "backends": [best_b[a], best_b[b]], "ratio": ratio,
                                "interval": iv, "paired": rr is not None,
                                "verdict": _word(metrics.verdict(tuple(iv) if iv else None))})  # fmt: skip
        out[m] = {"phases": phases, "env_steps_phase": steps[0] if per_step else None, "fastest": top_dev,
                  "devices": devs, "drivers": drivers}  # fmt: skip
    return out


def cross_device(run: Run, mixes: Mapping[str, Mapping[str, float]],
                 prices: Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """The cross-device section: per kernel and per workload, every timed device ranked against the fastest."""
    devices = timed_devices(run)
    kernels = _kernel_rows(run, devices)
    workloads = _workload_rows(run, devices, mixes)
    machines = {d: i.get("machine", "") for d, i in devices.items()}
    backends = {d: _order({r.backend for r in run.records if r.device_key == d}) for d in devices}
    out = {"devices": {d: {"name": device_name(i, backends[d], len(set(machines.values())) > 1),
                           "label": i["device_label"], "kind": i["kind"], "machine": machines[d],
                           "hardware_key": i.get("hardware_key", d), "platform": i.get("platform") or "",
                           "backends": backends[d]}
                       for d, i in devices.items()},
           "machines": len(set(machines.values())), "kernels": kernels, "workloads": workloads}  # fmt: skip
    if prices:
        out["prices"] = dict(prices)
        for w in workloads.values():
            for row in w["devices"]:
                rate = prices.get(row["device"])
                for e in [row, *row["backends"].values()]:
                    e["cost_per_1e6_steps"] = (cost_per_million(rate, e["steps_per_s"]) if rate is not None
                                               and e.get("steps_per_s") else None)  # fmt: skip
                    iv = e.get("steps_per_s_interval")
                    e["cost_per_1e6_steps_interval"] = ([cost_per_million(rate, iv[1]), cost_per_million(rate, iv[0])]
                                                        if rate is not None and iv else None)  # fmt: skip
    return out


def device_name(info: Mapping[str, Any], backends: list[str], with_machine: bool) -> str:
    """A device as a reader names it: the hardware and its driver ("AMD EPYC (Intel(R) OpenCL)"), the host
    frameworks marked as such ("AMD EPYC (host: numpy, torch)"), the machine first when there are several."""
    label = str(info.get("device_label") or "?")
    if not (info.get("platform") or "") and info.get("kind") == "cpu":
        label += f" (host: {', '.join(backends)})"
    return f"{info.get('machine')}: {label}" if with_machine else label


def cost_per_million(rate: float, steps_per_s: float) -> float:
    """Price of 1e6 env steps on a device billed ``rate`` per device-hour at ``steps_per_s``."""
    return rate * 1e6 / (steps_per_s * 3600.0)


def parse_prices(items: list[str], devices: Mapping[str, Any]) -> dict[str, float]:
    """``DEVICE=RATE`` items (or a JSON file of {DEVICE: RATE}) to {device key: price per device-hour}.

    DEVICE is a device key, a substring of the keys of one piece of hardware (all its drivers get the price:
    a price is per hour of the hardware), an OpenCL implementation (pocl, intel: every device of that platform)
    or ``host`` (every CPU without a driver layer: NumPy and torch there)."""
    pairs: list[tuple[str, str, str]] = []  # (device, rate, where it was given: "" on the line, " in FILE")
    for item in items:
        if "=" not in item and Path(item).is_file():
            data = read_option_json("--price", item, "{DEVICE: RATE}")
            if not isinstance(data, dict):
                raise ValueError(f"--price {item}: expected a JSON object {{DEVICE: RATE}}")
            pairs += [(str(k), str(v), f" in {item}") for k, v in data.items()]
        elif "=" in item:
            k, v = item.rsplit("=", 1)
            pairs.append((k.strip(), v.strip(), ""))
        else:
            raise ValueError(f"--price {item!r}: expected DEVICE=RATE (price per device-hour) or a JSON file")
    out: dict[str, float] = {}
    for name, value, where in pairs:
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"--price {name}={value}{where}: RATE must be a number (price per device-hour)") from None
        if not (math.isfinite(rate) and rate >= 0):
            raise ValueError(f"--price {name}={value}{where}: RATE must be a finite number >= 0")
        for d in _match(name, devices):
            out[d] = rate
    return out


def _match(name: str, devices: Mapping[str, Any]) -> list[str]:
    low = name.lower()
    if low == "host":
        found = [k for k, d in devices.items() if not (d.get("platform") or "") and d.get("kind") == "cpu"]
    elif low in known_platform_ids():
        found = [k for k, d in devices.items() if platform_id(str(d.get("platform") or "")) == low]
    else:
        found = [k for k in devices if k == name] or [k for k in devices if low in k.lower()]
        # A price is per hour of the hardware: one name may price all the drivers of one piece of hardware.
        if len({devices[k].get("hardware_key", k) for k in found}) > 1:
            raise ValueError(f"--price {name}: matches {', '.join(found)} on different hardware; give one of them")
    if not found:
        raise ValueError(f"--price {name}: no such device in these runs; expected one of {', '.join(devices)} (or a "
                         "unique substring, an OpenCL implementation such as pocl or intel, or host)")
    return found


def policy_costs(cd: Mapping[str, Any], training: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Cost per converged policy: each trained (task, stack) on a priced device, price x H (device-hours per
    converged policy, median over its converged seeds, with their min–max). A training run's device key is the
    bench's (both from portkern.identity on the same machine label), so the bench's prices apply to it; a
    stack trained on a device the prices do not name is left out, and so is one that never converged."""
    prices = cd.get("prices") or {}
    rows = []
    for g in training.get("groups", []):
        for st in g["stacks"]:
            keys = [d["device_key"] for d in st["devices"]]
            rate = next((prices[k] for k in keys if k in prices), None)
            if rate is None or st.get("H_h") is None:
                continue
            lo, hi = st.get("H_h_range") or (st["H_h"], st["H_h"])
            rows.append({"task": g["task"], "stack": st["stack"], "device": keys[0], "H_h": st["H_h"],
                         "H_h_range": [lo, hi], "rate": rate, "cost_per_policy": rate * st["H_h"],
                         "cost_per_policy_range": [rate * lo, rate * hi], "converged": st["converged"],
                         "runs": st["runs"]})  # fmt: skip
    return sorted(rows, key=lambda r: (r["task"], r["cost_per_policy"]))
