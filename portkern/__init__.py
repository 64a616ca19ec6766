"""portkern: GPU kernels for reinforcement learning, written once per compute backend, and what survives a port."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import buffer, envs, rng, step
from .backends import BackendUnavailable, backend_of, backends, get_backend

__version__ = "0.1.0"

__all__ = ["BackendUnavailable", "backends", "buffer", "envs", "get_backend", "rng", "step", "to_numpy"]


def _register_with_gymnasium() -> None:
    # Gymnasium 1.x discovers no plugins, so registering portkern/<EnvId> has to happen on import
    # for gymnasium.make_vec("portkern/CartPole-v1") to work; only where Gymnasium is installed.
    import importlib.util

    if importlib.util.find_spec("gymnasium") is None:
        return
    try:
        from . import gym  # noqa: F401  (registers on import)
    except Exception as exc:  # a broken Gymnasium must not make portkern unimportable
        import warnings

        warnings.warn(f"portkern: Gymnasium registration skipped: {exc}", stacklevel=2)


_register_with_gymnasium()


def to_numpy(x: Any) -> np.ndarray:
    """A host NumPy copy of any backend's array (a NumPy array is returned as is)."""
    if isinstance(x, np.ndarray):
        return x
    return backend_of(x).to_host(x)
