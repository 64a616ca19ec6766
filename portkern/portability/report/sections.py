"""The report's sections beyond the kernel tables: the stack-class spectrum, the rollout data paths and the
re-tune penalties, each built from the run's records."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from ... import tuning
from ...runs import Record
from .. import metrics
from ..names import (
    BASE_KERNELS, ENV_ORDER, PATHS, POLICIES, STACK_CLASSES, STRUCTURE_SEP, base_kernel, kernel_rank, rollout_parts,
)  # fmt: skip
from .rounds import _best, _compare, _iv, _measured_on, _order, _status


def spectrum(recs: list[Record], devices: Mapping[str, Any]) -> dict[str, Any]:
    """Per device and kernel (rollouts: env and policy), the best throughput of each stack class and its
    ratio to the best class, with intervals. Classes come from the records (portkern.identity.BENCH_CLASSES)."""
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

    def rank(name: str) -> tuple[Any, ...]:  # a structural variant (rollout:Chain-v0/links=10) after its plain kernel
        try:
            base = base_kernel(name)
        except ValueError:
            base = name
        return (order.index(base) if base in order else len(order), kernel_rank(name))

    rows = []
    for (d, name), rs in sorted(groups.items(), key=lambda x: (list(devices).index(x[0][0]), rank(x[0][1]),
                                                               x[0][1])):  # fmt: skip
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
        plain = env.split(STRUCTURE_SEP)[0]  # Chain-v0/links=10 with Chain-v0, after it
        return (list(devices).index(d), rank[b], ENV_ORDER.index(plain) if plain in ENV_ORDER else len(ENV_ORDER),
                kernel_rank(f"step:{env}"), env,
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
                     # numpy's "fused" path is its reference loop, not a fused kernel: the summary needs to tell
                     "fused_class": best["fused"].stack_class if best["fused"] else None,
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


def retune(recs: list[Record], devices: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Re-tune penalty for each backend, kernel and ordered pair of devices that were both tuned, per size
    class both were searched in (portkern.tuning.size_class: a tune run searches one size per class, the
    largest of its ladder there), largest class first; where the two devices' largest searched sizes fall
    in different classes (ladders scaled to unlike devices), also between those ("largest")."""
    space: dict[tuple[str, str, str, str], dict[str, Record]] = {}
    for (b, k, d), group in _group(recs, devices).items():
        classes = tuning.sizes_per_class((r.size for r in group), k)  # a scan's class: its columns
        for cls, size in (*classes.items(), ("largest", max(classes.values()))):
            at = {r.config_key: r for r in group if r.size == size}
            if len(at) > 1:  # a search ran here (more than one configuration measured)
                space[(b, k, d, cls)] = at
    out = []
    for (b, k, src, cls), src_space in space.items():
        tuned = max((r for r in src_space.values() if r.status == "pass"), key=lambda r: r.items_per_s or 0.0,
                    default=None)  # fmt: skip
        if tuned is None:
            continue
        for (b2, k2, tgt, cls2), tgt_space in space.items():
            if (b2, k2, cls2) != (b, k, cls) or tgt == src:
                continue
            searched_at = {tuning.case_class(k, next(iter(x.values())).size) for x in (src_space, tgt_space)}
            if cls == "largest" and len(searched_at) == 1:
                continue  # both largest sizes in one class: that class's row is this comparison
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
                "backend": b, "kernel": k, "size_class": cls, "source_size": tuned.size, "target_size": best_rec.size,
                "source": src, "target": tgt, "config": tuned.config,
                "target_best_config": best_rec.config,
                "penalty": None if t is None else metrics.retune_penalty(t, best), "note": note,
                "penalty_interval": interval,
                "verdict": ("no interval" if interval is None else
                            "beyond noise" if interval[0] > 0 else "within noise"),
            })  # fmt: skip
    # Report order: backends, then kernels as the tables list them (a chain's Ks together, by K), then size
    # classes largest first ("largest" last), then the device pair.
    backends = _order({r["backend"] for r in out})
    classes = [*reversed(tuning.CLASS_NAMES), "largest"]
    out.sort(key=lambda r: (backends.index(r["backend"]), kernel_rank(r["kernel"]),
                            classes.index(r["size_class"]) if r["size_class"] in classes else len(classes),
                            list(devices).index(r["source"]), list(devices).index(r["target"])))  # fmt: skip
    return out


def _group(recs: list[Record], devices: Mapping[str, Any]) -> dict[tuple[str, str, str], list[Record]]:
    g: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in recs:
        if r.device_key in devices and r.kernel != "copy":
            g[(r.backend, r.kernel, r.device_key)].append(r)
    return g
