"""``portkern cost --train``: H (the locked stack's device-hours per converged policy) and the throughput
ratio (portable / locked env-steps/s) from training files, with where each came from."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any, Mapping, Sequence

from .files import load_train
from .render import not_converged_text
from .summary import _best_return, _range, pooled


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
