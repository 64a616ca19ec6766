"""Tuning knobs of the suite's cases: what a backend can set per kernel family, what a case runs with and where
each value came from, and setting them on the shared backend instance for one case."""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Any, Iterator

from ... import tuning
from ...backends import Backend
from .kernels import ROLLOUT_T, family

#: Tuning knobs: kernel family -> backend attribute -> legal values (the first is not special).
#: A backend without the attribute has no such knob; None means "the driver chooses".
KNOBS: dict[str, dict[str, tuple[Any, ...]]] = {
    "step": {"local_size": (None, 32, 64, 128, 256), "block_size": (64, 128, 256, 512, 1024)},
    # OpenCL's scans also take a layout: PK_VW x PK_NV consecutive envs per work-item (1 x 1 is the
    # GPU shape). The work-group size is searched more coarsely so the product stays small.
    "gae": {"local_size": (None, 64, 256), "scan_vector_width": (1, 8, 16), "scan_vectors_per_item": (1, 32, 128, 512),
            "block_size": (64, 128, 256, 512, 1024)},
    "discounted_returns": {"local_size": (None, 64, 256), "scan_vector_width": (1, 8, 16),
                           "scan_vectors_per_item": (1, 32, 128, 512), "block_size": (64, 128, 256, 512, 1024)},
    # OpenCL's row layout: rows per work-item (0: one element per work-item, the GPU shape), vector width,
    # how many rows ahead a work-item prefetches (0: none), and whether a row of 8-64 bytes is one vector.
    "gather": {"local_size": (None, 256), "gather_rows_per_item": (0, 1, 4, 16, 64, 256), "gather_vector_width": (1, 2, 4),
               "gather_prefetch": (0, 16), "gather_row_vector": (0, 1), "block_size": (128, 256, 512)},
    # The reduction's work-group must be a power of two (PK_WG); the apply pass uses local_size.
    # OpenCL's chunk layout: elements per work-item (0: the work-group tree), vector width.
    "normalize": {"reduce_wg": (64, 256), "local_size": (None, 128), "reduce_chunk": (0, 4096, 16384, 65536),
                  "reduce_vector_width": (1, 8, 16), "block_size": (128, 256, 512)},
    # Host round-trip and per-step rollouts: envs per work-item and block size. The work-group size
    # is left to the driver here (the step family searches it); the product would be 5x larger.
    "rollout": {"env_vector_width": (None, 1, 4, 8, 16), "block_size": (128, 256, 512)},
    # Fused rollouts, plus steps per launch: an argument of the rollout (CASE_KNOBS), not a backend
    # attribute; values above the rollout's T are left out and T itself (one launch) is always in.
    "fused": {"steps_per_launch": (1, 8, 32, 128), "env_vector_width": (None, 1, 4, 8, 16),
              "block_size": (128, 256, 512)},
}
# OpenCL PK_VW (a build option). Explicit widths only: "the driver's advertised width" runs the same
# kernel as one of them and is never a default (tuning.py), so it is not searched either.
KNOBS["step"]["env_vector_width"] = (1, 4, 8, 16)
for _fam in ("rollout", "fused"):
    KNOBS[_fam]["env_vector_width"] = (1, 4, 8, 16)
#: Knobs that are arguments of a case rather than attributes of the backend instance.
CASE_KNOBS = ("steps_per_launch",)


def knobs(kernel: str, b: Backend, steps: int = ROLLOUT_T) -> dict[str, tuple[Any, ...]]:
    """The knobs this backend instance has for ``kernel`` (declared in KNOBS, present as attributes).

    ``steps`` is a rollout's T: ``steps_per_launch`` takes the declared values up to T, and T.
    """
    out = {}
    for k, values in KNOBS.get(family(kernel), {}).items():
        if k == "steps_per_launch":
            out[k] = tuple(sorted({v for v in values if v <= steps} | {steps}))
        elif hasattr(b, k):
            out[k] = values
    return out


def resolved_config(kernel: str, b: Backend, config: dict[str, Any] | None = None,
                    steps: int = ROLLOUT_T, size: int | None = None) -> dict[str, tuple[Any, str]]:  # fmt: skip
    """knob -> (value, origin) of the knobs a case of ``size`` runs with.

    Origins: "config" (set by the case's ``config``: a point of a tune search), "T" (a case knob
    left at the rollout's T), and for the backend's own values ``Backend.knob_in_force``:
    "attribute", or where a tuned default came from ("cache", "table <row>", "fallback", with the
    kernel or family entry in parentheses, and the size class when that class's own entry gave it:
    ``table pocl-cpu (gae, small)``). The values are what runs, never a sentinel. Tuned defaults are
    per size class (portkern.tuning.size_class): without ``size``, those of an unsized lookup.
    """
    config = config or {}
    out: dict[str, tuple[Any, str]] = {}
    for k in knobs(kernel, b, steps):
        if k in config:
            out[k] = (config[k], "config")
        elif k in CASE_KNOBS:
            out[k] = (steps, "T")
        else:
            r = b.knob_in_force(k, kernel, size)
            out[k] = (r.value, r.origin())
    return out


def current_config(kernel: str, b: Backend, config: dict[str, Any] | None = None,
                   steps: int = ROLLOUT_T, size: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Knob values a case of ``size`` runs with: ``config``'s, else the backend's values in force for
    ``kernel`` at that size (a tuned default resolved, not its sentinel), case knobs at T. The default
    case of a kernel is the one without a ``config``: :func:`config_origin` has no "config" in it."""
    return {k: v for k, (v, _) in resolved_config(kernel, b, config, steps, size).items()}


def config_origin(kernel: str, b: Backend, config: dict[str, Any] | None = None,
                  steps: int = ROLLOUT_T, size: int | None = None) -> dict[str, str]:  # fmt: skip
    """knob -> where the value :func:`current_config` records came from (see :func:`resolved_config`)."""
    return {k: origin for k, (_, origin) in resolved_config(kernel, b, config, steps, size).items()}


def tune_sizes(sizes: tuple[int, ...], kernel: str | None = None) -> tuple[int, ...]:
    """The sizes of a kernel's ladder that a tune search times: one per size class it reaches (the
    largest in each, portkern.tuning.sizes_per_class; a scan's class counts its columns, given ``kernel``),
    ascending, so each class gets its own default."""
    return tuple(sorted(tuning.sizes_per_class(sizes, kernel).values()))


def all_configs(kernel: str, b: Backend, steps: int = ROLLOUT_T) -> list[dict[str, Any]]:
    space = knobs(kernel, b, steps)
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def config_id(config: dict[str, Any] | None) -> str:
    if not config:
        return "default"
    return ",".join(f"{k}={'auto' if v is None else v}" for k, v in config.items())


@contextmanager
def applied(b: Backend, config: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Set knobs on the (shared, cached) backend instance for one case, and restore them after."""
    config = {k: v for k, v in (config or {}).items() if k not in CASE_KNOBS}
    saved = {k: b.knob_setting(k) for k in config}  # the setting (tuning.TUNED too), not the value it reads as
    try:
        for k, v in config.items():
            setattr(b, k, v)
        yield config
    finally:
        for k, v in saved.items():
            setattr(b, k, v)
