"""Workload mixes (schema portkern-mixes/1): derived from the measured phases of training files, read and
checked. ``python -m portkern.portability.training derive-mixes TRAIN.json --stack numpy --out FILE`` writes
them (:func:`main`); the report's shipped default mixes are such a file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..names import BASE_KERNELS, is_kernel
from .files import load_train
from .summary import _median, basis

MIXES_SCHEMA = "portkern-mixes/1"
#: What the measured workload mixes leave out (the report says it beside the workload table).
MIX_EXCLUDED = ("the PPO's forward passes (acting and update), backward pass and optimizer step, data movement, "
                "setup and bookkeeping: they are not portkern kernels")  # fmt: skip


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


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


def check_mixes(mixes: Mapping[str, Any], where: str) -> None:
    """Every mix a non-empty {kernel: share} of known kernels, shares >= 0 with a positive sum."""
    for name, phases in mixes.items():
        if not isinstance(phases, dict) or not phases:
            raise ValueError(f"{where} {name!r}: expected {{kernel: share}}, got {phases!r}")
        unknown = {k for k in phases if not is_kernel(k)}  # structural variants (step:Chain-v0/links=10) too
        if unknown:
            raise ValueError(f"{where} {name!r}: unknown kernels {sorted(unknown)}; valid: {', '.join(BASE_KERNELS)} "
                             f"and rollout:<env>:<host|device|fused>[:mlp]")  # fmt: skip
        if any(not (isinstance(w, (int, float)) and w >= 0) for w in phases.values()) or sum(phases.values()) <= 0:
            raise ValueError(f"{where} {name!r}: shares must be numbers >= 0 with a positive sum, got {phases}")


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
        check_mixes(doc["mixes"], args.train)  # every kernel one the report knows
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
