"""MLP policies' kernels built for their hidden width (PK_MLP_HIDDEN of pk_policy.h/.cuh; Numba's policy.build).

The first H200 run's fused MLP rollouts ran ~90x slower than the random policy's: the layers' per-thread
activations sat in local memory (ptxas: a 512-byte stack frame in every env's rollout kernel). Built for
the policy's width, the hidden layers keep their accumulators in registers. The arithmetic and its order
are unchanged, so both builds must agree bit for bit; the width is a build option, so the random policy's
builds stay shared. GPU timing is bench/gpu/gpu_bench.py's (a row per build).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from portkern import envs, step, to_numpy
from portkern.policy import MLPPolicy, RandomPolicy

FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")


@pytest.fixture
def built(kernel_backend):
    """The kernel backends that build their MLP code (cuda_host, opencl on each driver, numba, cupy on a GPU)."""
    if not hasattr(kernel_backend, "fixed_mlp_width"):
        pytest.skip(
            f"{kernel_backend.name} builds no MLP kernel (it runs the policy in array or Python code)"
        )
    return kernel_backend


def _rollout(backend, env_id, policy, fixed, monkeypatch):
    monkeypatch.setattr(backend, "fixed_mlp_width", fixed)
    env = step.make(env_id, 37, backend=backend, seed=3)
    env.reset()
    buf = env.rollout(6, policy)
    return {f: to_numpy(getattr(buf, f)).copy() for f in FIELDS}


def _spy_widths(backend, monkeypatch) -> list[int | None]:
    """The hidden width of every MLP build a backend asks for from now on (None: the run-time-width build)."""
    seen: list[int | None] = []
    ask = backend._mlp_width

    def spy(kind: int, hidden: int):
        option = ask(kind, hidden)
        width = option
        if isinstance(option, tuple):  # CUDA and OpenCL: PK_MLP_HIDDEN=H, PK_MLP_RUNTIME_WIDTH or none (random)
            width = int(option[0].split("=")[1]) if option and "PK_MLP_HIDDEN=" in option[0] else None
        seen.append(width)
        return option

    monkeypatch.setattr(backend, "_mlp_width", spy)
    return seen


def _built_widths(backend) -> set[str]:
    """The PK_MLP_HIDDEN options among the builds a backend holds (its per-instance kernel caches' keys)."""
    found: set[str] = set()

    def walk(key) -> None:
        if isinstance(key, tuple):
            for part in key:
                walk(part)
        elif isinstance(key, str) and key.startswith("-DPK_MLP_HIDDEN="):
            found.add(key)

    for cache in backend.__dict__.get("_pk_caches", {}).values():
        for key in cache:
            walk(key)
    return found


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "Chain-v0"])
@pytest.mark.parametrize("hidden", [64, 7])
def test_the_width_build_equals_the_run_time_width_build(built, monkeypatch, env_id, hidden):
    policy = MLPPolicy.init(envs.get(env_id), hidden=hidden, seed=2)
    seen = _spy_widths(built, monkeypatch)
    fixed = _rollout(built, env_id, policy, True, monkeypatch)
    assert seen and set(seen) == {hidden}
    if built.name != "numba":  # the build options the CUDA and OpenCL builds are cached under
        assert f"-DPK_MLP_HIDDEN={hidden}" in _built_widths(built)
    seen.clear()
    generic = _rollout(built, env_id, policy, False, monkeypatch)
    assert seen and set(seen) == {None}
    for f in FIELDS:
        np.testing.assert_array_equal(fixed[f], generic[f], err_msg=f)


def test_the_random_policy_builds_no_width(built, monkeypatch):
    monkeypatch.setattr(built, "_pk_caches", {})  # this instance's builds only, restored after
    seen = _spy_widths(built, monkeypatch)
    _rollout(built, "CartPole-v1", RandomPolicy(), True, monkeypatch)
    assert seen == [None] and _built_widths(built) == set()


def test_mlp_forward_is_built_for_its_width(built, monkeypatch, rng):
    spec = envs.get("Acrobot-v1")
    policy = MLPPolicy.init(spec, hidden=24, seed=1)
    obs = rng.normal(size=(50, spec.obs_dim)).astype(np.float32)
    seen = _spy_widths(built, monkeypatch)
    out = built.mlp_forward(built.from_host(policy.flat()), built.from_host(obs), 24, spec.discrete_actions)
    assert seen == [24]
    if built.name != "numba":
        assert "-DPK_MLP_HIDDEN=24" in _built_widths(built)
    np.testing.assert_allclose(to_numpy(out), policy.forward(obs), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_nvrtc_keeps_the_hidden_layers_out_of_local_memory():
    """The GPU compiler's own account (ptxas -v through NVRTC, sm_90): the run-time-width rollout kernel has
    a 512-byte stack frame (h1 and h2, 64 floats each, read 64 x 64 times a step); built for its width, at
    most one hidden layer's floats stay there (the second layer's input, read once per input)."""
    from portkern._kernels import load_source
    from portkern.backends import cupy as cupy_backend
    from portkern.backends._cuda_tools import nvrtc_build, nvrtc_library

    if not nvrtc_library():
        pytest.fail(f"NVRTC is needed here: {nvrtc_library().how}")
    source = load_source("cuda", "cartpole.cu")

    def frame(*extra: str) -> int:
        opts = cupy_backend.BASE_OPTIONS + ("-DREAL=float", "--ptxas-options=-v", *extra)
        log = nvrtc_build(source, opts, 90, "cartpole.cu").log
        part = log.split("Function properties for pk_cartpole_rollout", 1)[1]
        return int(re.search(r"(\d+) bytes stack frame", part).group(1))

    assert frame() >= 512
    assert frame("-DPK_MLP_HIDDEN=64") <= 256
    assert frame("-DPK_MLP_HIDDEN=32") <= 128
