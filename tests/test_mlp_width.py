"""MLP policies' kernels built for their hidden width (PK_MLP_HIDDEN of pk_policy.h/.cuh; Numba's policy.build).

The first H200 run's fused MLP rollouts ran ~90x slower than the random policy's: the layers' per-thread
activations sat in local memory (ptxas: a 512-byte stack frame in every env's rollout kernel). Built for
the policy's width (-DPK_MLP_HIDDEN), every activation stays in registers: the first layer a unit at a time,
the second streamed into the output layer. The additions and their order are those of the run-time-width
build (-DPK_MLP_RUNTIME_WIDTH), so both builds must agree bit for bit; a random policy's kernels are built
with neither define and carry no MLP code. GPU timing is bench/gpu/gpu_bench.py's (a row per build).
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


@pytest.mark.parametrize("hidden", [64, 7, 6])
def test_mlp_forward_builds_agree_over_several_passes(built, monkeypatch, rng, hidden):
    """Nine outputs: the fixed-width pk_mlp_forward makes them four a pass over the second layer (PK_MLP_OUTS),
    the last pass one; its first layer reads obs of a width known only at launch. The same bits as the
    run-time-width build. Widths 64, 7 and 6 stream the second layer 4, 1 and 2 units at a time."""
    obs_dim, out_dim = 5, 9
    g = np.random.default_rng(hidden)

    def layer(i: int, o: int) -> tuple[np.ndarray, np.ndarray]:
        return (g.normal(size=(i, o)) / np.sqrt(i)).astype(np.float32), (g.normal(size=o) * 0.1).astype(np.float32)

    policy = MLPPolicy(*layer(obs_dim, hidden), *layer(hidden, hidden), *layer(hidden, out_dim))
    obs = (rng.normal(size=(40, obs_dim)) * 2).astype(np.float32)
    out = {}
    for fixed in (True, False):
        monkeypatch.setattr(built, "fixed_mlp_width", fixed)
        y = built.mlp_forward(built.from_host(policy.flat()), built.from_host(obs), hidden, out_dim)
        out[fixed] = to_numpy(y).copy()
    np.testing.assert_array_equal(out[True], out[False])
    np.testing.assert_allclose(out[True], policy.forward(obs), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_nvrtc_keeps_the_hidden_layers_out_of_local_memory():
    """The GPU compiler's own account (ptxas -v through NVRTC, sm_90) of the three builds of pk_policy.cuh.

    The run-time-width rollout (-DPK_MLP_RUNTIME_WIDTH) has a 512-byte stack frame: h1 and h2, 64 floats each,
    read 64 x 64 times a step. Built for its width, every activation is in registers: the MLP adds nothing to
    the frame of the random-policy build (no define: no MLP code at all), and pk_mlp_forward, which has no
    other code, has none. What the rollouts of CartPole keep (32 bytes at most) is CUDA's sinf/cosf: the
    7-word buffer of its argument reduction for |x| > 105615, indexed by the argument's exponent, which ptxas
    leaves in local memory once an IEEE division's slow-path call comes before it (the env's own, or
    pk_tanh's); it is only touched for such arguments."""
    from portkern._kernels import load_source
    from portkern.backends import cupy as cupy_backend
    from portkern.backends._cuda_tools import nvrtc_build, nvrtc_library

    if not nvrtc_library():
        pytest.fail(f"NVRTC is needed here: {nvrtc_library().how}")

    def frame(filename: str, kernel: str, *extra: str) -> int:
        opts = cupy_backend.BASE_OPTIONS + ("-DREAL=float", "--ptxas-options=-v", *extra)
        log = nvrtc_build(load_source("cuda", filename), opts, 90, filename).log
        part = log.split(f"Function properties for {kernel}", 1)[1]
        return int(re.search(r"(\d+) bytes stack frame", part).group(1))

    rollout = ("cartpole.cu", "pk_cartpole_rollout")
    random_only = frame(*rollout)
    assert random_only <= 32  # was 512: the run-time MLP's arrays were in every build
    assert frame(*rollout, "-DPK_MLP_RUNTIME_WIDTH=1") >= 512
    assert frame(*rollout, "-DPK_MLP_HIDDEN=64") == random_only
    assert frame(*rollout, "-DPK_MLP_HIDDEN=32") == random_only
    assert frame("mlp.cu", "pk_mlp_forward", "-DPK_MLP_HIDDEN=64") == 0
    assert frame("mlp.cu", "pk_mlp_forward", "-DPK_MLP_RUNTIME_WIDTH=1") >= 512
