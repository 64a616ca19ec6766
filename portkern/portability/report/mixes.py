"""The workload mixes a report computes: the shipped defaults (measured in training runs), ``--mix`` values,
and where each mix came from."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..._jsonfile import read_option_json
from ..training.mixes import MIX_EXCLUDED, check_mixes, read_mixes

#: The shipped workload mixes: time shares of portkern's kernel phases measured in training runs (``portkern
#: train``; python -m portkern.portability.training derive-mixes writes each file). The PPO's forward, backward and
#: optimizer step, data movement and setup are not portkern kernels: the mixes are the kernel part of an RL loop.
#: One file per training run they were measured in: the classic-control tasks, then the articulated chain.
MIXES_FILES = ("data/workload_mixes.json", "data/workload_mixes_chain.json")
MIXES_FILE = MIXES_FILES[0]


def _shipped_mixes() -> tuple[dict[str, dict[str, float]], dict[str, dict[str, Any]]]:
    """(every shipped mix, the source of each mix by name); a mix name in two files is an error."""
    mixes: dict[str, dict[str, float]] = {}
    sources: dict[str, dict[str, Any]] = {}
    for name in MIXES_FILES:
        where = f"portkern/{name}"
        try:
            data = json.loads(resources.files("portkern").joinpath(name).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RuntimeError(f"{where}: the shipped workload mixes cannot be read ({exc}); reinstall portkern") from None
        got, source = read_mixes(data, where)
        check_mixes(got, where)
        twice = sorted(set(got) & set(mixes))
        if twice:
            raise RuntimeError(f"{where}: mix(es) {', '.join(twice)} already come from another shipped file")
        mixes.update({k: dict(v) for k, v in got.items()})
        sources.update(dict.fromkeys(got, source))
    return mixes, sources


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
        mixes = read_option_json("--mix", text, "{name: {kernel: share}}")
        if not isinstance(mixes, dict):
            raise ValueError(f"--mix {text}: expected a JSON object {{name: {{kernel: share}}}}, got {type(mixes).__name__}")
        if "schema" in mixes:
            mixes = read_mixes(mixes, f"--mix {text}")[0]
        check_mixes(mixes, f"--mix {text}")  # the file named in what is wrong with it
        return mixes
    check_mixes(mixes, "--mix")
    return mixes


def mix_origin(name: str, shares: Mapping[str, float]) -> dict[str, Any]:
    """Where a mix came from: measured (a shipped mix, unchanged) with its source and covered share, or given."""
    if name in DEFAULT_MIXES and dict(shares) == DEFAULT_MIXES[name]:
        src = DEFAULT_MIXES_SOURCES[name]
        task = next((t for t, v in src.get("tasks", {}).items() if v.get("mix") == name), None)
        info = src.get("tasks", {}).get(task, {})
        return {"kind": "measured", "file": src.get("file"), "stack": src.get("stack"), "task": task,
                "seeds": info.get("seeds"), "basis": info.get("basis"), "covered": info.get("covered"),
                "excluded": src.get("excluded", MIX_EXCLUDED)}  # fmt: skip
    return {"kind": "given", "file": None, "covered": None}


DEFAULT_MIXES, DEFAULT_MIXES_SOURCES = _shipped_mixes()
#: The source of the first shipped file's mixes (the classic-control training run).
DEFAULT_MIXES_SOURCE = DEFAULT_MIXES_SOURCES[next(iter(DEFAULT_MIXES))]
