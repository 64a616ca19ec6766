"""The Numba backend's kernels (a private package: the registry takes no ``_`` module for a backend).

``common`` holds what every kernel shares and the one generic builder of an env's reset, step and
rollout kernels; each env has its module, named as the env's ``EnvSpec.kernel`` (like its kernel
files), that builds its reset, physics and observe device functions; ``policy`` has the in-kernel
policies and ``buffers`` the rollout-buffer and validation kernels. Each is built once per dtype
here; Numba compiles a kernel on its first launch, per argument types.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache

import numpy as np

from ... import envs
from ..._kernels import KernelSourceMissing
from ...envs.base import EnvSpec
from . import buffers, common, policy
from .buffers import BufferKernels, CopyKernels, copy_kernels
from .common import EnvKernels, params_value, simulator, toolkit
from .policy import Policies

__all__ = ["BufferKernels", "CopyKernels", "EnvKernels", "Policies", "buffer_kernels", "copy_kernels",
           "env_kernels", "params_value", "policy_kernels", "simulator"]  # fmt: skip


def env_kernels(spec: EnvSpec, dtype: np.dtype, mlp_width: int | None = None) -> EnvKernels:
    """``spec``'s reset, step and rollout kernels in ``dtype`` (and its structural values, if any); with
    ``mlp_width``, the rollout's MLP built for that hidden width (policy.build)."""
    return _env_kernels(spec.id, np.dtype(dtype).str, tuple(sorted(spec.structure_values.items())), mlp_width)


@cache
def _env_kernels(env_id: str, dtype_str: str, structure: tuple[tuple[str, int], ...] = (),
                 mlp_width: int | None = None) -> EnvKernels:  # fmt: skip
    spec = envs.get(env_id, **dict(structure))
    # The env's module by its kernel stem, as kernels/<api>/<kernel>.* are loaded by explicit name.
    if importlib.util.find_spec(f"{__name__}.{spec.kernel}") is None:
        raise KernelSourceMissing(f"{spec.id} has no Numba kernel yet (portkern/backends/_numba/{spec.kernel}.py)")
    module = importlib.import_module(f"{__name__}.{spec.kernel}")
    k = toolkit(dtype_str)
    act = policy.make_act(spec, k, policy_kernels(dtype_str, mlp_width))
    # A structural env's builder gets its values as keywords (build(k, links=3)): compile-time constants
    # of the Numba build, as -DPK_LINKS=3 is of the OpenCL and CUDA ones; one build per values (cached).
    fns = module.build(k, **dict(structure)) if structure else module.build(k)
    return common.env_kernels(spec, fns, act, k)


@cache
def policy_kernels(dtype_str: str, mlp_width: int | None = None) -> Policies:
    return policy.build(toolkit(dtype_str), mlp_width)


@cache
def buffer_kernels(dtype_str: str, wg: int) -> BufferKernels:
    return buffers.build(toolkit(dtype_str), wg)
