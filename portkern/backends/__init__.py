"""Compute backends: the contract, the registry, and one module per API (numpy, opencl, cupy, numba)."""

from __future__ import annotations

from .base import AUTORESET_MODES, Backend, BackendUnavailable, EnvBuffers, Probe
from .registry import KNOWN, BackendRecord, backend_of, backends, get_backend, probe, register

__all__ = [
    "AUTORESET_MODES", "Backend", "BackendRecord", "BackendUnavailable", "EnvBuffers", "KNOWN",
    "Probe", "backend_of", "backends", "get_backend", "probe", "register",
]  # fmt: skip
