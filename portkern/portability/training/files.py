"""The training-file format (``portkern train``, schema portkern-train/1): reading and checking one file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from ..._jsonfile import read_json
from ...train.config import TRAIN_SCHEMA

_TOP_KEYS = {
    "schema": str, "portkern_version": str, "created": str, "command": str, "config": dict, "device_hour": str,
    "phases": dict, "update_parts": dict, "untimed_tolerance": (int, float), "host": dict, "order": str,
    "prime_s": dict, "devices": dict, "runs": list,
}  # fmt: skip
_RUN_KEYS = {
    "task": str, "stack": str, "mode": str, "backend": str, "device_key": str, "hardware_key": str,
    "agent_device": str, "seed": int, "converged": bool, "stop_reason": str, "env_steps": int,
    "steps_to_converge": (int, type(None)), "updates": int, "wall_s": (int, float),
    "device_hours": (int, float, type(None)), "steps_per_s": (int, float), "final_return": (int, float, type(None)),
    "episodes": int, "phases": dict, "update_parts": dict, "untimed_s": (int, float), "compile_s": (int, float),
    "losses": dict, "losses_finite": bool, "curve": list,
}  # fmt: skip


class TrainFileError(ValueError):
    """A file that is not a usable portkern training run; the message names the file and the problem."""


def _type_name(t: Any) -> str:
    names = [x.__name__ for x in (t if isinstance(t, tuple) else (t,))]
    return " or ".join({"NoneType": "null", "str": "a string", "int": "an integer", "float": "a number",
                        "bool": "true/false", "dict": "an object", "list": "a list"}.get(n, n) for n in names)  # fmt: skip


def _is(value: Any, t: Any) -> bool:
    types = t if isinstance(t, tuple) else (t,)
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a number here
    return isinstance(value, types)


def _off_spec(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """``obj`` against ``spec`` ({key: type(s)}): (the keys it lacks, and, when it lacks none, the first key
    whose value is not of the declared type(s), else None)."""
    missing = [k for k in spec if k not in obj]
    return missing, None if missing else next((k for k, t in spec.items() if not _is(obj[k], t)), None)


def is_train_file(path: str | Path) -> bool:
    """Whether ``path`` is meant as a training file: a JSON object whose ``schema`` names portkern-train.

    Unreadable or non-JSON files answer False; the bench-run loader then names the problem.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("portkern-train")


def load_train(path: str | Path) -> dict[str, Any]:
    """Read and check one ``portkern train`` file; raises TrainFileError naming the file and the problem."""
    p = str(path)

    def fail(what: str) -> TrainFileError:
        return TrainFileError(f"{p}: {what}")

    doc = read_json(p, fail)
    if not isinstance(doc, dict):
        raise fail(f"expected a JSON object of schema {TRAIN_SCHEMA!r} (written by `portkern train`), "
                   f"got {type(doc).__name__}")  # fmt: skip
    if doc.get("schema") != TRAIN_SCHEMA:
        raise fail(f"not a portkern training file of schema {TRAIN_SCHEMA!r} (written by `portkern train`): "
                   f"its schema is {doc.get('schema')!r}")  # fmt: skip
    missing, bad = _off_spec(doc, _TOP_KEYS)
    if missing:
        raise fail(f"missing top-level keys {missing}; a {TRAIN_SCHEMA} file has {', '.join(_TOP_KEYS)}")
    if bad:
        raise fail(f"'{bad}' must be {_type_name(_TOP_KEYS[bad])}, got {type(doc[bad]).__name__}")
    tasks = doc["config"].get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise fail("'config.tasks' must be a non-empty object of env id -> task settings")
    for env_id, t in tasks.items():
        if not isinstance(t, dict) or not isinstance(t.get("ppo"), dict) or not _is(t.get("target"), (int, float)):
            raise fail(f"'config.tasks.{env_id}' must be an object with 'target' (a number) and 'ppo' (an object)")
    if not doc["runs"]:
        raise fail("'runs' is empty: the file holds no training run")
    for key, ident in doc["devices"].items():
        if not isinstance(ident, dict):
            raise fail(f"'devices.{key}' must be an object (the device's identity), got {type(ident).__name__}")
    for task_id, primes in doc["prime_s"].items():
        if not isinstance(primes, dict):
            raise fail(f"'prime_s.{task_id}' must be an object of stack -> seconds, got {type(primes).__name__}")
    phases = list(doc["phases"])
    parts = list(doc["update_parts"])
    for i, r in enumerate(doc["runs"]):
        where = f"runs[{i}]"
        if not isinstance(r, dict):
            raise fail(f"{where} must be an object, got {type(r).__name__}")
        missing, bad = _off_spec(r, _RUN_KEYS)
        if missing:
            raise fail(f"{where} lacks {missing}")
        if bad:
            raise fail(f"{where}.{bad} must be {_type_name(_RUN_KEYS[bad])}, got {r[bad]!r}")
        where = f"{where} ({r['task']} {r['stack']} seed {r['seed']})"
        if r["task"] not in tasks:
            raise fail(f"{where}: task {r['task']!r} is not in config.tasks ({', '.join(tasks)})")
        if r["device_key"] not in doc["devices"]:
            raise fail(f"{where}: device_key {r['device_key']!r} is not in 'devices' ({', '.join(doc['devices'])})")
        if not (math.isfinite(r["wall_s"]) and r["wall_s"] > 0):
            raise fail(f"{where}.wall_s must be a number > 0, got {r['wall_s']!r}")
        if not (math.isfinite(r["steps_per_s"]) and r["steps_per_s"] >= 0):
            raise fail(f"{where}.steps_per_s must be a number >= 0, got {r['steps_per_s']!r}")
        for j, point in enumerate(r["curve"]):  # [update, env steps, seconds, window mean return, last return]
            if not isinstance(point, list) or not all(v is None or _is(v, (int, float)) for v in point):
                raise fail(f"{where}.curve[{j}] must be a list of numbers (or nulls), got {point!r}")
        per_policy = r.get("device_seconds_per_policy")  # optional (files from before K-seed batches)
        if per_policy is not None and not (_is(per_policy, (int, float)) and math.isfinite(per_policy) and per_policy > 0):
            raise fail(f"{where}.device_seconds_per_policy must be a number > 0 or null, got {per_policy!r}")
        k = r.get("parallel_seeds")
        if k is not None and not (_is(k, int) and k >= 1):
            raise fail(f"{where}.parallel_seeds must be an integer >= 1 or null, got {k!r}")
        for name, keys, got in (("phases", phases, r["phases"]), ("update_parts", parts, r["update_parts"])):
            lacking = [k for k in keys if k not in got]
            if lacking:
                raise fail(f"{where}.{name} lacks {lacking} (the file's '{name}' lists {', '.join(keys)})")
            bad = {k: v for k, v in got.items() if not (_is(v, (int, float)) and math.isfinite(v) and v >= 0)}
            if bad:
                raise fail(f"{where}.{name}: seconds must be numbers >= 0, got {bad}")
        if r["converged"]:
            if not (r["steps_to_converge"] and r["steps_to_converge"] > 0) or r["device_hours"] is None:
                raise fail(f"{where}: converged, so steps_to_converge must be an integer > 0 and device_hours a "
                           f"number; got {r['steps_to_converge']!r} and {r['device_hours']!r}")  # fmt: skip
        elif r["device_hours"] is not None or r["steps_to_converge"] is not None:
            raise fail(f"{where}: not converged, so device_hours and steps_to_converge must be null")
    return doc
