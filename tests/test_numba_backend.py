"""Numba-specific behaviour: probe reasons (import failures, no GPU, simulator) and native arrays."""

from __future__ import annotations

import numpy as np
import pytest

from portkern.backends import numba as numba_backend

PROBE = numba_backend.NumbaBackend.probe()
needs_numba = pytest.mark.skipif(not PROBE.available, reason=f"numba backend unavailable: {PROBE.reason}")


def test_probe_is_one_line() -> None:
    print(f"numba probe: {PROBE}")
    assert "\n" not in PROBE.reason
    assert PROBE.available == (PROBE.reason == "")


def test_probe_reason_when_import_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the module records when `import numba.cuda` raises against an incompatible NumPy.
    monkeypatch.setattr(numba_backend, "cuda", None)
    monkeypatch.setattr(numba_backend, "numba", None)
    monkeypatch.setattr(numba_backend, "_IMPORT_ERROR",
                        "numba.cuda failed to import: AttributeError: module 'numpy' has no attribute 'row_stack'")  # fmt: skip
    probe = numba_backend.NumbaBackend.probe()
    assert not probe.available
    assert probe.reason.startswith("numba.cuda failed to import: AttributeError")


def test_import_error_becomes_one_line_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins
    import importlib
    import sys

    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "numba" or name.startswith("numba."):
            raise AttributeError("module 'numpy' has no attribute 'row_stack'.\nDid you mean: 'vstack'?")
        return real_import(name, *args, **kwargs)

    saved = sys.modules.pop("portkern.backends.numba")
    monkeypatch.setattr(builtins, "__import__", broken)
    try:
        mod = importlib.import_module("portkern.backends.numba")
        probe = mod.NumbaBackend.probe()
    finally:
        monkeypatch.setattr(builtins, "__import__", real_import)
        sys.modules["portkern.backends.numba"] = saved
        from portkern.backends import registry

        registry._CLASSES["numba"] = saved.NumbaBackend
    assert not probe.available
    assert probe.reason.startswith("numba.cuda failed to import: AttributeError")
    assert "\n" not in probe.reason


def test_probe_reports_simulator_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    if numba_backend.numba is None:
        pytest.skip(PROBE.reason)
    monkeypatch.setattr(numba_backend.numba.config, "ENABLE_CUDASIM", 1)
    probe = numba_backend.NumbaBackend.probe()
    assert probe.available and probe.simulator
    assert probe.devices == ("CUDA simulator",)


def test_probe_without_gpu_or_simulator_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    if numba_backend.numba is None:
        pytest.skip(PROBE.reason)
    monkeypatch.setattr(numba_backend.numba.config, "ENABLE_CUDASIM", 0)
    monkeypatch.setattr(numba_backend.cuda, "is_available", lambda: False)
    probe = numba_backend.NumbaBackend.probe()
    assert not probe.available
    assert "NUMBA_ENABLE_CUDASIM=1" in probe.reason and "\n" not in probe.reason


@needs_numba
def test_arrays_are_numba_device_arrays() -> None:
    be = numba_backend.NumbaBackend(None)
    a = be.zeros((3, 2), np.bool_)
    assert numba_backend.NumbaBackend.owns(a) and not numba_backend.NumbaBackend.owns(np.zeros(3))
    assert be.to_host(a).dtype == np.bool_
    be.write(a, np.ones((3, 2), np.bool_))
    assert be.to_host(a).all()


@needs_numba
def test_describe_reports_simulator() -> None:
    be = numba_backend.NumbaBackend(None)
    assert be.describe()["simulator"] == str(PROBE.simulator)


def _fused_and_host(env_id: str, dtype: str, autoreset: str = "same_step", steps: int = 6):
    from portkern import step
    from portkern.policy import RandomPolicy

    n = 19 if PROBE.simulator else 1037
    out = []
    for path in ("fused", "host"):
        env = step.make(env_id, n, backend="numba", seed=5, dtype=dtype, autoreset=autoreset)
        env.reset()
        env.set_state(steps=np.full(n, env.spec.max_episode_steps - 3))  # cross an episode boundary
        buf = env.rollout(steps, RandomPolicy(), path=path, steps_per_launch=4 if path == "fused" else None)
        out.append((env, buf))
    return out


@needs_numba
@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
def test_fused_rollout_in_float64_equals_the_host_path(autoreset: str) -> None:
    # test_rollout covers float32; the double build keeps the policy (and a Box action) in float32.
    (env_f, fused), (env_h, host) = _fused_and_host("Pendulum-v1", "float64", autoreset)
    be = env_f.backend
    for name in ("obs", "actions", "rewards", "terminated", "truncated", "final_obs"):
        np.testing.assert_array_equal(be.to_host(getattr(fused, name)), getattr(host, name), err_msg=name)
    assert be.to_host(fused.obs).dtype == np.float64 and be.to_host(fused.actions).dtype == np.float32
    np.testing.assert_array_equal(env_f.get_state()["state"], env_h.get_state()["state"])


@needs_numba
def test_mlp_forward_rejects_a_hidden_layer_wider_than_the_kernel() -> None:
    be = numba_backend.NumbaBackend(None)
    obs = be.from_host(np.zeros((3, 4), np.float32))
    params = be.from_host(np.zeros(4 * 65 + 65 + 65 * 65 + 65 + 65 * 2 + 2 + 1, np.float32))
    with pytest.raises(ValueError, match=r"hidden: expected an int in \[1, 64\]"):
        be.mlp_forward(params, obs, 65, 2)


@needs_numba
def test_mlp_forward_checks_the_parameter_count() -> None:
    be = numba_backend.NumbaBackend(None)
    obs = be.from_host(np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="policy_params: expected 4611 floats"):
        be.mlp_forward(be.from_host(np.zeros(10, np.float32)), obs, 64, 2)


@needs_numba
def test_rollout_rejects_a_buffer_of_the_wrong_dtype() -> None:
    from portkern import step
    from portkern.policy import RandomPolicy

    env = step.make("CartPole-v1", 5, backend="numba")
    env.reset()
    buf = env.rollout_buffer(3)
    buf.actions = env.backend.zeros((3, 5), np.float32)
    with pytest.raises(TypeError, match="buffer.actions: expected dtype int32, got float32"):
        env.rollout(3, RandomPolicy(), buf)


@needs_numba
def test_policy_tanh_is_pk_tanh() -> None:
    """The Numba twin of pk_tanh (pk_policy.cuh): within 2 ulp of tanh over float32, odd (-0 stays -0), 1 for
    every large argument with no overflow on the way (policy.tanh_of caps what it discards), NaN kept."""
    from portkern.backends._numba import common, policy

    if not common.simulator():
        pytest.skip("calls the device function as Python, as the simulator does")
    tanh = policy.tanh_of(common.toolkit(np.dtype(np.float32).str))
    xs = np.concatenate([np.linspace(-12, 12, 24001, dtype=np.float32), np.geomspace(1e-30, 20, 2000, dtype=np.float32)])
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # tiny |x| underflow a * a: as in float32
        got = np.array([tanh(np.float32(x)) for x in xs], np.float32)
        big = [tanh(np.float32(x)) for x in (9.5, 44.0, 89.0, 1e4, 1e30, 3.4e38, np.inf, -1e30, -np.inf)]
    want = np.tanh(xs.astype(np.float64))
    ulps = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps.max() <= 2.0, xs[np.argmax(ulps)]
    assert big == [1.0] * 7 + [-1.0] * 2
    assert np.signbit(tanh(np.float32(-0.0))) and tanh(np.float32(0.0)) == 0.0
    assert np.isnan(tanh(np.float32("nan")))
