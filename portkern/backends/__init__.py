"""Compute backends: the contract, the registry, and one module per API (found by listing this package)."""

from __future__ import annotations

from typing import Any

from .base import AUTORESET_MODES, OPS, Backend, BackendUnavailable, EnvBuffers, EnvKernelMissing, Probe, Unsupported
from .registry import BackendRecord, backend_of, backends, extras, get_backend, names, probe, register


def __getattr__(attr: str) -> Any:
    if attr == "KNOWN":  # name -> pip extra, from registration (computed when asked for)
        return extras()
    raise AttributeError(attr)


__all__ = [
    "AUTORESET_MODES", "OPS", "Backend", "BackendRecord", "BackendUnavailable", "EnvBuffers", "KNOWN",
    "EnvKernelMissing", "Probe", "Unsupported", "backend_of", "backends", "extras", "get_backend", "names", "probe", "register",
]  # fmt: skip
