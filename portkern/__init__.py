"""portkern: GPU kernels for reinforcement learning, written once per compute backend, and what survives a port."""

from __future__ import annotations

from typing import Any

import numpy as np

from .backends import _opencl_drivers

# Before anything can list OpenCL platforms: the ICD loader enumerates its drivers once per process,
# so a PyPI driver (Intel's CPU runtime) registered after pyopencl first listed platforms would stay
# invisible in this process. Cheap: it writes a vendor folder and sets an environment variable,
# imports no pyopencl.
_opencl_drivers.register()

from . import buffer, envs, rng, step  # noqa: E402
from .backends import BackendUnavailable, backend_of, backends, get_backend  # noqa: E402

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
