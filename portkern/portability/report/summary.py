"""The report's summary: at most five findings a person reads in half a minute, each one sentence with its figure
and interval, in the order a buyer asks: which device wins (the first workload across devices, and which driver
of one piece of hardware), then the stack-class spectrum, then the data paths, then the price when one is given."""

from __future__ import annotations

from typing import Any

from ..names import BASE_KERNELS
from .format import _fmt, _span, _x

MAX_FINDINGS = 5


def _pct_iv(x: float | None, iv: list[float] | None) -> str:
    return f"{_fmt(x, True)} [{_span(iv, True)}]"


def _x_iv(x: float | None, iv: list[float] | None) -> str:
    return f"{_x(x)} [{_span(iv, False, 'x')}]"


def _inv(x: float | None, iv: list[float] | None) -> tuple[float | None, list[float] | None]:
    """a / b as b / a: "0.4x of the fastest" read as "the fastest is 2.5x faster"."""
    if not x:
        return None, None
    return 1.0 / x, ([1.0 / iv[1], 1.0 / iv[0]] if iv and iv[0] > 0 else None)


def _name(rep: dict[str, Any], d: str) -> str:
    return rep["cross_device"]["devices"][d]["name"]


def _who(rep: dict[str, Any], d: str, backend: str) -> str:
    """The device and the backend that ran it; the host's one framework is in its name already."""
    info = rep["cross_device"]["devices"][d]
    return info["name"] if info["backends"] == [backend] and "(host:" in info["name"] else f"{info['name']} ({backend})"


def _workload_finding(rep: dict[str, Any]) -> dict[str, str] | None:
    cd = rep.get("cross_device") or {}
    if not cd.get("workloads"):
        return None
    m, w = next(iter(cd["workloads"].items()))
    top = next(r for r in w["devices"] if r["device"] == w["fastest"])
    unit = "env-steps/s" if w["env_steps_phase"] else "workload units/s"
    fig = "steps_per_s" if w["env_steps_phase"] else "W"
    text = (f"{_who(rep, top['device'], top['best_backend'])} runs it fastest: {_fmt(top[fig])} {unit} "
            f"[{_span(top.get(fig + '_interval'))}]")  # fmt: skip
    others = []
    for r in w["devices"]:
        if r is top:
            continue
        f, iv = _inv(r["vs_fastest"], r.get("vs_fastest_interval"))
        how = "" if r.get("paired") else ", unpaired"
        if r["verdict"] == "slower":
            others.append(f"{_x_iv(f, iv)} faster than {_who(rep, r['device'], r['best_backend'])}{how}")
        else:
            others.append(f"within noise of {_who(rep, r['device'], r['best_backend'])} ({_x_iv(f, iv)}{how})")
    if others:
        text += ". It is " + ", ".join(others)
    for p in w.get("drivers", []):
        if top["device"] in (p["faster"], p["slower"]):
            continue  # already said: it is a ratio to the fastest device
        word = "faster than" if p["verdict"] == "faster" else "within noise of"
        text += (f". Of the drivers, {_name(rep, p['faster'])} is {_x_iv(p['ratio'], p['interval'])} {word} "
                 f"{_name(rep, p['slower'])}")  # fmt: skip
    text += _driver_kernels(rep)
    mix = ", ".join(f"{k.removeprefix('step:')} {100 * s:.0f}%" for k, s in w["phases"].items())
    return {"title": f"Workload {m!r} ({mix}) across devices", "text": text + "."}


def _driver_kernels(rep: dict[str, Any]) -> str:
    """Which driver of one piece of hardware wins the step and buffer kernels: how many beyond noise, and the
    median kernel's ratio with its interval (the workload alone can be within noise on a quick run)."""
    pairs: dict[tuple[str, str], list[tuple[float, dict[str, Any], str]]] = {}
    for k in rep["cross_device"]["kernels"]:
        if k["kernel"] not in BASE_KERNELS:
            continue
        for p in k.get("drivers", []):
            key = tuple(sorted((p["faster"], p["slower"])))
            # One orientation per pair: the ratio of the first device (by key) to the second.
            r = p if (p["faster"], p["slower"]) == key else {**p, "ratio": 1 / p["ratio"], "interval": (
                [1 / p["interval"][1], 1 / p["interval"][0]] if p["interval"] else None),
                "verdict": {"faster": "slower", "slower": "faster"}.get(p["verdict"], p["verdict"])}  # fmt: skip
            pairs.setdefault(key, []).append((r["ratio"], r, k["kernel"]))  # type: ignore[arg-type]
    out = ""
    for (a, b), rows in pairs.items():
        wins = sum(1 for _, r, _ in rows if r["verdict"] == "faster")
        losses = sum(1 for _, r, _ in rows if r["verdict"] == "slower")
        if losses > wins:
            a, b, wins, losses = b, a, losses, wins
            rows = [(1 / x, {**r, "interval": [1 / r["interval"][1], 1 / r["interval"][0]] if r["interval"] else None},
                     k) for x, r, k in rows]  # fmt: skip
        rows.sort(key=lambda x: x[0])
        x, r, k = rows[(len(rows) - 1) // 2]  # the lower median: one measured kernel, with its own interval
        out += (f". Per kernel, {_name(rep, a)} is faster than {_name(rep, b)} beyond noise in {wins} of {len(rows)} "
                f"step and buffer kernels" + (f" (slower in {losses})" if losses else "")
                + f", {_x_iv(x, r['interval'])} at the median ({k})")  # fmt: skip
    return out


def _spectrum_finding(rep: dict[str, Any]) -> dict[str, str] | None:
    rows = [r for r in (rep.get("spectrum") or {}).get("rows", []) if r["kernel"] in BASE_KERNELS]
    if not rows:
        return None
    devices = list(dict.fromkeys(r["device"] for r in rows))
    # The driver-device the workload finding ranks highest (its spectrum includes the host frameworks).
    first = next(iter((rep.get("cross_device") or {}).get("workloads", {}).values()), {"devices": []})
    ranked = [r["device"] for r in sorted(first["devices"], key=lambda r: -(r["vs_fastest"] or 0.0))]
    d = next((x for x in ranked if x in devices), devices[0])
    mine = [r for r in rows if r["device"] == d]
    wins: dict[str, int] = {}
    for r in mine:
        beyond = [c for c, v in r["classes"].items() if v["verdict"] == "within noise of the best"]
        key = r["best"] if not beyond else "within noise"
        wins[key] = wins.get(key, 0) + 1
    counts = ", ".join(f"{c} in {n}" for c, n in sorted(wins.items(), key=lambda x: -x[1]) if c != "within noise")
    ties = wins.get("within noise", 0)
    name = rep["cross_device"]["devices"].get(d, {}).get("name", d) if rep.get("cross_device") else d
    text = (f"on {name} with the host frameworks, the fastest stack class beyond noise is {counts or 'none'} of "
            f"{len(mine)} step and buffer kernels" + (f" ({ties} within noise)" if ties else ""))
    eager = sorted((r["classes"]["framework eager"]["vs_best"], r) for r in mine
                   if "framework eager" in r["classes"] and r["best"] != "framework eager")  # fmt: skip
    if eager:
        v, r = eager[(len(eager) - 1) // 2]  # the lower median: a measured kernel, not an average of two
        c = r["classes"]["framework eager"]
        text += (f"; framework eager ({c['backend']}) reaches {_pct_iv(v, c['vs_best_interval'])} of the best class "
                 f"at the median kernel ({r['kernel']})")  # fmt: skip
    return {"title": "Kernels by stack class", "text": text + "."}


def _data_paths_finding(rep: dict[str, Any]) -> dict[str, str] | None:
    # Only a real fused kernel: numpy's "fused" path is its reference loop, no fusion to measure.
    fused = [r for r in (rep.get("data_paths") or {}).get("rows", [])
             if r["fused_vs_host"] and r.get("fused_class", "fused custom") == "fused custom"]  # fmt: skip
    if not fused:
        return None
    names = (rep.get("cross_device") or {}).get("devices", {})
    parts = []
    for d in dict.fromkeys(r["device"] for r in fused):
        mine = [r for r in fused if r["device"] == d]
        hi = max(mine, key=lambda r: r["fused_vs_host"])
        lo = min(mine, key=lambda r: r["fused_vs_host"])
        part = (f"{names.get(d, {}).get('name', d)} {_x_iv(hi['fused_vs_host'], hi['fused_vs_host_interval'])} "
                f"({hi['backend']}, {hi['env']}, {hi['policy']} policy, N = {hi['N']})")  # fmt: skip
        if lo is not hi:
            part += f" down to {_x_iv(lo['fused_vs_host'], lo['fused_vs_host_interval'])} ({lo['env']}, {lo['policy']})"
        parts.append(part)
    return {"title": "Data paths", "text": "a fused rollout over the host round-trip: " + "; ".join(parts) + "."}


def _price_finding(rep: dict[str, Any]) -> dict[str, str] | None:
    cd = rep.get("cross_device") or {}
    if "prices" not in cd or not cd.get("workloads"):
        return None
    m, w = next(iter(cd["workloads"].items()))
    priced = [r for r in w["devices"] if r.get("cost_per_1e6_steps") is not None]
    if not priced:
        return None
    priced.sort(key=lambda r: r["cost_per_1e6_steps"])
    parts = [f"{_name(rep, r['device'])} {_fmt(r['cost_per_1e6_steps'])} [{_span(r['cost_per_1e6_steps_interval'])}]"
             for r in priced]
    return {"title": f"Price per 1e6 env steps of {m!r}",
            "text": f"at the given prices, cheapest first: {', '.join(parts)}."}


def summary(rep: dict[str, Any]) -> list[dict[str, str]]:
    """At most five findings, each with its interval: which device wins the first workload (and which driver),
    the stack-class spectrum, the data paths, the price."""
    found = [f(rep) for f in (_workload_finding, _spectrum_finding, _data_paths_finding, _price_finding)]
    return [f for f in found if f][:MAX_FINDINGS]


def _says(verdict: str) -> str:
    return {"faster": "faster beyond noise", "slower": "slower beyond noise", "within noise": "within noise",
            "no interval": "no interval: an old run", "does not run": "does not run"}.get(verdict, verdict)  # fmt: skip
