"""The report's ``training`` section from training files: per task and hardware, device-hours per converged
policy (H) per stack, env steps to converge, env-steps/s, phase shares and the factor between stacks."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence


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


def per_policy_s(run: Mapping[str, Any]) -> float:
    """A converged run's device seconds per converged policy: ``device_seconds_per_policy`` where the run records
    it (a K-seed batch's wall time / its converged policies), else its own wall time (files from before it)."""
    v = run.get("device_seconds_per_policy")
    return float(v) if v is not None else float(run["wall_s"])


def parallel_seeds(run: Mapping[str, Any]) -> int:
    """Seeds that shared the device with ``run`` (1 for files from before --parallel-seeds)."""
    return int(run.get("parallel_seeds") or 1)


def base_stack(run: Mapping[str, Any]) -> str:
    """The stack label without a K-seed batch's ``/K`` (``jax/8@gpu`` -> ``jax@gpu``)."""
    k = parallel_seeds(run)
    name, at, device = run["stack"].partition("@")
    suffix = f"/{k}"
    return (name[: -len(suffix)] if k > 1 and name.endswith(suffix) else name) + at + device


def _driver(identity: Mapping[str, Any]) -> str:
    return " ".join(x for x in (str(identity.get("platform") or ""), str(identity.get("driver") or "")) if x)


def stack_figures(runs: Sequence[Mapping[str, Any]], devices: Mapping[str, Mapping[str, Any]],
                  prime_s: Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """One stack's figures over its seeds (``runs`` all of one task, stack and hardware)."""
    ok = [r for r in runs if r["converged"]]
    base, basis_name = basis(runs)
    wall_ok = [per_policy_s(r) for r in ok]
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
        "parallel_seeds": parallel_seeds(first), "base_stack": base_stack(first),
        "batches": len({tuple(r.get("batch_seeds") or [r["seed"]]) for r in runs}),
    }  # fmt: skip


def h_against_k(stacks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per base stack run with several K (seeds sharing the device at once): a row per K with H per converged
    policy (median [range] over converged seeds' records), converged seeds, batches, the fused share of the wall
    time, and H / H at the smallest K; empty when no stack ran with more than one K."""
    by_base: dict[str, list[Mapping[str, Any]]] = {}
    for s in stacks:
        by_base.setdefault(s["base_stack"], []).append(s)
    out = []
    for base, ss in by_base.items():
        if len({s["parallel_seeds"] for s in ss}) < 2:
            continue
        ss = sorted(ss, key=lambda s: s["parallel_seeds"])
        ref = ss[0]["H_s"]
        for s in ss:
            out.append({"base_stack": base, "stack": s["stack"], "k": s["parallel_seeds"], "batches": s["batches"],
                        "runs": s["runs"], "converged": s["converged"], "H_s": s["H_s"], "H_s_range": s["H_s_range"],
                        "fused_share": s["phase_shares"].get("fused"),
                        "vs_smallest_k": None if ref is None or s["H_s"] is None else s["H_s"] / ref})  # fmt: skip
    return out


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
            "throughput_factor": throughput_factor(stacks), "h_against_k": h_against_k(stacks),
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
