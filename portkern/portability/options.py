"""Command-line choices the commands check before anything runs: item counts, and the backends and devices
an invocation selects."""

from __future__ import annotations

from typing import Any, Sequence

from ..backends import backends
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
