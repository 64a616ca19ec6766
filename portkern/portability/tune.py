"""Re-tune search results: the best knob configuration per device, backend, kernel and size class (``tuned.json``)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..runs import Record, load_run
from ..tuning import sizes_per_class

TUNED_SCHEMA = "portkern-tuned/1"


def _best_at(group: list[Record], size: int) -> dict[str, Any] | None:
    """The fastest passing configuration of ``group`` at ``size`` and what was tried there; None if none passed."""
    at = [r for r in group if r.size == size]
    ok = [r for r in at if r.status == "pass" and r.items_per_s]
    if not ok:
        return None
    best = max(ok, key=lambda r: r.items_per_s or 0.0)
    return {
        "config": best.config, "items_per_s": best.items_per_s, "size": size,
        "configs_tried": len({r.config_key for r in at}),
        "configs_invalid": sorted({r.config_key for r in at if r.status == "invalid-config"}),
    }  # fmt: skip


def best_configs(records: list[Record]) -> dict[str, dict[str, dict[str, Any]]]:
    """device -> "backend/kernel" -> the fastest passing configuration at the largest size searched, and
    under ``classes`` the same per size class (portkern.tuning.size_class) at the largest size searched
    in each: a tune run searches one size per class, and each class gets its own default from it."""
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in records:
        if r.kernel != "copy":
            groups[(r.device_key, r.backend, r.kernel)].append(r)
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for (d, b, k), group in sorted(groups.items()):
        largest = _best_at(group, max(r.size for r in group))
        if largest is None:
            continue
        classes = {}
        for cls, size in sorted(sizes_per_class((r.size for r in group), k).items(), key=lambda kv: kv[1]):
            best = _best_at(group, size)
            if best is not None:
                classes[cls] = best
        out[d][f"{b}/{k}"] = dict(largest, classes=classes)
    return dict(out)


def write_tuned(run_path: str | Path, out_path: str | Path) -> dict[str, Any]:
    tuned = {"schema": TUNED_SCHEMA, "source": Path(run_path).name, "devices": best_configs(load_run(run_path).records)}
    Path(out_path).write_text(json.dumps(tuned, indent=1))
    return tuned
