"""CuPy-specific behaviour: probe reasons, device arrays and caches (NVRTC builds: test_nvrtc_compile.py)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from portkern.backends import base
from portkern.backends import cupy as cupy_backend
from portkern.backends.base import EnvBuffers
from portkern.envs import ENVS

PROBE = cupy_backend.CupyBackend.probe()
needs_gpu = pytest.mark.skipif(not PROBE.available, reason=f"cupy backend unavailable: {PROBE.reason}")


def test_probe_is_one_line_reason_when_unavailable() -> None:
    print(f"cupy probe: {PROBE}")
    if PROBE.available:
        assert PROBE.reason == "" and PROBE.devices
    else:
        assert PROBE.reason and "\n" not in PROBE.reason
        assert not PROBE.devices


def test_probe_reason_when_cupy_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cupy_backend, "cupy", None)
    monkeypatch.setattr(cupy_backend, "_IMPORT_ERROR", "cupy is not installed: pip install 'portkern[cuda]'")
    probe = cupy_backend.CupyBackend.probe()
    assert not probe.available
    assert probe.reason == "cupy is not installed: pip install 'portkern[cuda]'"


@pytest.mark.skipif(importlib.util.find_spec("cupy") is None, reason="cupy is not installed")
def test_probe_reason_names_the_missing_gpu() -> None:
    if PROBE.available:
        pytest.skip("a GPU is present")
    assert PROBE.reason.startswith("CuPy installed but no CUDA GPU/driver found: ")


# ---- on a GPU ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend() -> cupy_backend.CupyBackend:
    return cupy_backend.CupyBackend(None)


def _bufs(be: cupy_backend.CupyBackend, spec, n: int, dtype) -> EnvBuffers:
    z = be.zeros
    return EnvBuffers(z((spec.state_dim, n), dtype), z((n,), np.int32), z((n,), np.uint32),
                      z((n,), np.bool_), z((n, spec.obs_dim), dtype), z((n, spec.obs_dim), dtype),
                      z((n,), dtype), z((n,), np.bool_), z((n,), np.bool_))  # fmt: skip


def _cached(be: cupy_backend.CupyBackend) -> tuple[int, int]:
    """(modules built in this process, kernels fetched by ``be``): the base class's two caches."""
    return len(base._PROGRAMS), len(be.__dict__.get("_pk_caches", {}).get("kernels", {}))


@needs_gpu
def test_describe_names_device_and_versions(backend) -> None:
    info = backend.describe()
    for key in ("device", "compute_capability", "cuda_driver", "cuda_runtime", "cupy"):
        assert info[key]


@needs_gpu
def test_device_selection_by_index_and_name(backend) -> None:
    assert cupy_backend.CupyBackend("cuda:0").device_id == 0
    assert cupy_backend.CupyBackend("0").device_id == 0
    assert cupy_backend.CupyBackend(backend.device_name.split()[-1]).device_name == backend.device_name
    with pytest.raises(ValueError, match="no CUDA device"):
        cupy_backend.CupyBackend("cuda:999")


@needs_gpu
def test_arrays_are_cupy_and_bool_is_one_byte(backend) -> None:
    import cupy

    a = backend.zeros((5,), np.bool_)
    assert isinstance(a, cupy.ndarray) and a.itemsize == 1
    assert cupy_backend.CupyBackend.owns(a) and not cupy_backend.CupyBackend.owns(np.zeros(3))


@needs_gpu
def test_modules_and_kernels_are_cached(backend) -> None:
    spec = ENVS["CartPole-v1"]
    p = spec.param_vector(spec.resolve_params(None), np.float32)
    bufs = _bufs(backend, spec, 8, np.float32)
    backend.env_reset(spec, bufs, p, 0, True)
    modules, kernels = _cached(backend)
    backend.env_reset(spec, bufs, p, 0, False)
    assert _cached(backend) == (modules, kernels)


@needs_gpu
def test_env_step_does_not_allocate(backend) -> None:
    import cupy

    spec = ENVS["CartPole-v1"]
    p = spec.param_vector(spec.resolve_params(None), np.float32)
    bufs = _bufs(backend, spec, 1024, np.float32)
    actions = backend.from_host(np.ones(1024, np.int32))
    backend.env_reset(spec, bufs, p, 0, True)
    backend.env_step(spec, bufs, actions, p, 0, 500, "same_step")  # warm: compile, param upload
    backend.synchronize()
    pool = cupy.get_default_memory_pool()
    used = pool.used_bytes()
    for _ in range(10):
        backend.env_step(spec, bufs, actions, p, 0, 500, "same_step")
    backend.synchronize()
    assert pool.used_bytes() == used


@needs_gpu
def test_obs_shares_memory_through_cuda_array_interface(backend) -> None:
    a = backend.zeros((4, 3), np.float32)
    assert a.__cuda_array_interface__["data"][0] == a.data.ptr


@needs_gpu
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_fused_rollout_in_float64_equals_the_host_path(env_id: str) -> None:
    # test_rollout covers float32; the double build keeps the policy (and a Box action) in float32.
    from portkern import step
    from portkern.policy import RandomPolicy

    n, out = 1037, []
    for path in ("fused", "host"):
        env = step.make(env_id, n, backend="cupy", seed=5, dtype="float64")
        env.reset()
        env.set_state(steps=np.full(n, env.spec.max_episode_steps - 3))  # cross an episode boundary
        out.append(
            (env, env.rollout(6, RandomPolicy(), path=path, steps_per_launch=4 if path == "fused" else None))
        )
    (env_f, fused), (env_h, host) = out
    for name in ("obs", "actions", "rewards", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(getattr(fused, name).get(), getattr(host, name), err_msg=name)
    np.testing.assert_array_equal(env_f.get_state()["state"], env_h.get_state()["state"])


@needs_gpu
def test_mlp_forward_rejects_a_hidden_layer_wider_than_the_kernel(backend) -> None:
    obs = backend.from_host(np.zeros((3, 4), np.float32))
    params = backend.from_host(np.zeros(4 * 65 + 65 + 65 * 65 + 65 + 65 * 2 + 2 + 1, np.float32))
    with pytest.raises(ValueError, match=r"hidden: expected an int in \[1, 64\]"):
        backend.mlp_forward(params, obs, 65, 2)


@needs_gpu
def test_fused_rollout_does_not_allocate(backend) -> None:
    # The rollout writes the caller's buffer and the env's own; ceil(T / steps_per_launch) launches, no copies.
    import cupy

    from portkern import step
    from portkern.policy import RandomPolicy

    env = step.make("CartPole-v1", 1037, backend=backend)
    env.reset()
    buf = env.rollout_buffer(8)
    env.rollout(8, RandomPolicy(), buf, steps_per_launch=3)  # compile, and cache the policy parameters
    pool = cupy.get_default_memory_pool()
    before = pool.used_bytes()
    env.rollout(8, RandomPolicy(), buf, steps_per_launch=3)
    assert pool.used_bytes() == before
