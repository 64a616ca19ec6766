"""The OpenCL kernels built once to SPIR-V (clang-15 + llvm-spirv-15, portkern.toolchains.spirv) and run from it
through clCreateProgramWithIL on Intel's CPU runtime: parity against the NumPy reference, with the existing parity
tests' own checks.

Every program the OpenCL backend builds in these tests comes from SPIR-V (its ``_compile`` is swapped for one that
compiles the source with the build's ``-D`` options to SPIR-V and loads the IL), in a fresh program cache, so no
program built from source is reused. Helpers in the kernels are ``static inline``: a C99 ``inline`` without
``static`` leaves no body to call where the compiler does not inline it, and a SPIR-V consumer then reports
"Symbols not found".
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from portkern import envs
from portkern.backends import base, probe, registry
from portkern.toolchains import spirv, toolchain_tools

from . import test_parity, test_rollout

ENV_IDS = list(envs.ENVS)
pytestmark = pytest.mark.slow  # every kernel file compiled to SPIR-V and by Intel's CPU compiler, per test


@pytest.fixture
def il_backend(monkeypatch):
    tool = toolchain_tools(["spirv"])["spirv"]
    if not tool:
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(f"spirv: {tool.missing()}")
    if not probe("opencl").available:
        pytest.skip(f"opencl: {probe('opencl').reason}")
    import pyopencl as cl

    from portkern.backends.opencl import OpenCLBackend, device_ids

    ids = device_ids()
    if "intel" not in ids:
        pytest.skip("Intel's CPU OpenCL runtime is not installed here (pip install intel-opencl-rt)")
    built: list[tuple[str, str]] = []

    def compile_il(self, filename: str, source: str, options: tuple[str, ...]):
        defines = tuple(o for o in options if o.startswith("-D"))
        rest = [o for o in options if not o.startswith(("-D", "-cl-std"))]  # the runtime's options only
        il, level, _ = spirv.compile_spirv(source, filename, defines)
        with warnings.catch_warnings():  # Intel's CPU compiler logs its vectoriser's remarks for every build
            warnings.simplefilter("ignore", cl.CompilerWarning)
            prg = cl.Program(self.context, il).build(options=rest)
        built.append((filename, level))
        return prg

    monkeypatch.setattr(base, "_PROGRAMS", {})
    monkeypatch.setattr(registry, "_INSTANCES", {})
    monkeypatch.setattr(OpenCLBackend, "_compile", compile_il)
    monkeypatch.setenv("PORTKERN_OPENCL_DEVICE", ids["intel"])
    b = registry.get_backend("opencl", ids["intel"])
    b.built_from_il = built
    return b


def _from_il(b, *files: str) -> None:
    got = {f for f, _ in b.built_from_il}
    assert set(files) <= got, f"built from SPIR-V: {sorted(got)}"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_kernels_from_spirv_match_the_reference(il_backend, env_id, rng):
    spec = envs.ENVS[env_id]
    for dtype in ("float32", "float64"):
        test_parity.test_one_step_from_identical_states(il_backend, env_id, dtype, rng)
    test_parity.test_trajectory_across_episode_boundaries(il_backend, env_id, "same_step", rng)
    test_rollout.test_fused_mlp_rollout_equals_single_steps(il_backend, env_id)
    _from_il(il_backend, f"{spec.kernel}.cl")


def test_buffer_ops_from_spirv_match_the_reference(il_backend, rng):
    for dtype in ("float32", "float64"):
        test_parity.test_gae_matches_reference(il_backend, (33, 300), dtype, rng)
    test_parity.test_discounted_returns_match_reference(il_backend, (33, 300), True, rng)
    test_parity.test_normalize_matches_reference(il_backend, 4097, rng)
    for idx in (np.int32, np.int64):
        test_parity.test_gather_matches_reference(il_backend, idx, rng)
    _from_il(il_backend, "gae.cl", "discounted_returns.cl", "normalize.cl", "gather.cl")
    levels = dict(il_backend.built_from_il)
    assert all(level in spirv.LEVELS for level in levels.values())
