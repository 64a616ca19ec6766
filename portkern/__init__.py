"""portkern: GPU kernels for reinforcement learning, written once per compute backend, and what survives a port."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import buffer, envs, rng, step
from .backends import BackendUnavailable, backend_of, backends, get_backend

__version__ = "0.1.0"

__all__ = ["BackendUnavailable", "backends", "buffer", "envs", "get_backend", "rng", "step", "to_numpy"]


def to_numpy(x: Any) -> np.ndarray:
    """A host NumPy copy of any backend's array (a NumPy array is returned as is)."""
    if isinstance(x, np.ndarray):
        return x
    return backend_of(x).to_host(x)
