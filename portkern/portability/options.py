"""Command-line choices the commands check before anything runs: item counts, and the backends and devices
an invocation selects."""

from __future__ import annotations

from typing import Any, Sequence

from ..backends import backends
from ..envs import ENVS
from ..identity import device_matches

#: The most items (envs, elements, steps) one option may ask for: env indices and element counts are int32
#: in kernels.
MAX_ITEMS = 2**31 - 1


def select_backends(names: Sequence[str], device: str | None) -> list[Any]:
    """The registry records of the backends named (all when none) that are available here, keeping only
    those with a device whose name contains ``device``; every error lists the valid choices.

    ``names`` are ``--backend`` values (repeatable, or comma-separated). Called before anything runs.
    """
    records = backends()
    known = [r.name for r in records]
    available = [r.name for r in records if r.available]
    wanted = [s.strip() for n in names for s in n.split(",") if s.strip()]
    for name in wanted:
        if name not in known:
            raise ValueError(f"--backend {name}: unknown backend; valid names: {', '.join(known)}")
        rec = records[known.index(name)]
        if not rec.available:
            raise ValueError(f"--backend {name}: unavailable here ({rec.reason}); available: {', '.join(available)}")
    usable = [r for r in records if r.available and (not wanted or r.name in wanted)]
    if device is not None:
        matching = [r for r in usable if any(device_matches(r.name, d, device) for d in r.devices)]
        if not device.strip() or not matching:
            found = "; ".join(f"{r.name}: {', '.join(r.devices) or '-'}" for r in usable)
            raise ValueError(f"--device {device!r}: no device of {', '.join(r.name for r in usable)} matches "
                             f"(an OpenCL implementation such as pocl or intel, or a substring of a device "
                             f"name); devices found: {found}")  # fmt: skip
        usable = matching
    return usable


#: The structural keywords a bench or tune run may set (EnvSpec.structure): keyword -> its option.
STRUCTURE_OPTIONS = {"links": "--links"}


def structure_values(text: str | None, keyword: str = "links") -> dict[str, tuple[int, ...]]:
    """``{keyword: (K, ...)}`` of a ``--links K[,K...]`` value (distinct, in the order given), {} for none.

    Each K is checked against the range every env declaring ``keyword`` takes (Chain-v0: 2..16), before
    anything runs; a bad value is a ValueError naming the option and the range."""
    option = STRUCTURE_OPTIONS.get(keyword, f"--{keyword}")
    if text is None or not text.strip():
        return {}
    declared = [s for spec in ENVS.values() for s in spec.structure if s.name == keyword]
    if not declared:
        raise ValueError(f"{option}: no env here has a {keyword!r} keyword, so there is nothing to run at {text}")
    low, high = max(s.low for s in declared), min(s.high for s in declared)
    owners = ", ".join(spec.id for spec in ENVS.values() if any(s.name == keyword for s in spec.structure))
    expected = f"expected K[,K...] with each K an int from {low} to {high} ({keyword} of {owners})"
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{option} {text}: {expected}") from None
    bad = [p for p, v in zip(parts, values) if not low <= v <= high]
    if bad:
        raise ValueError(f"{option} {text}: {expected}; got {', '.join(bad)}")
    return {keyword: tuple(dict.fromkeys(values))}
