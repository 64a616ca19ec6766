"""Every kernel backend against the NumPy reference: env steps from identical states, trajectories, buffer ops."""

from __future__ import annotations

import numpy as np
import pytest

import portkern
from portkern import buffer, envs, step
from portkern.backends import probe

from .conftest import small_n
from .envstates import random_actions, random_states

ENV_IDS = list(envs.ENVS)

# Tolerances for one step from identical states: each env's spec.parity_tolerance. Kernels do
# the reference's arithmetic in the same order with contraction off; what differs is the
# device's libm (sin/cos within a few ulp), amplified by the dynamics (the reasons are in each
# env module).
TOL = {(dtype, env_id): spec.parity_tolerance[dtype] for env_id, spec in envs.ENVS.items()
       for dtype in ("float32", "float64")}  # fmt: skip


def np_(x):
    return portkern.to_numpy(x)


def _pair(kernel_backend, env_id, dtype, autoreset="same_step", seed=11):
    if dtype == "float64" and not kernel_backend.supports_float64:
        pytest.skip(f"{kernel_backend.device_name} has no float64")
    n = small_n(kernel_backend)
    ref = step.make(env_id, n, backend="numpy", dtype=dtype, autoreset=autoreset, seed=seed)
    dev = step.make(env_id, n, backend=kernel_backend.name, dtype=dtype, autoreset=autoreset, seed=seed)
    ref.reset()
    dev.reset()
    return ref, dev, n


def _close(a, b, tol, what):
    np.testing.assert_allclose(np_(a), np_(b), rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_one_step_from_identical_states(kernel_backend, env_id, dtype, rng):
    ref, dev, n = _pair(kernel_backend, env_id, dtype)
    states = random_states(env_id, n, rng)
    steps = rng.integers(0, 5, n)
    for env in (ref, dev):
        env.set_state(state=states, steps=steps)
    actions = random_actions(env_id, n, rng)
    r_out, d_out = ref.step(actions), dev.step(actions)
    tol = TOL[(dtype, env_id)]
    # Termination is compared where the state is not on a knife edge of a threshold.
    np.testing.assert_array_equal(np_(d_out[2]), np_(r_out[2]))
    np.testing.assert_array_equal(np_(d_out[3]), np_(r_out[3]))
    _close(d_out[1], r_out[1], tol, "reward")
    _close(dev.final_obs, ref.final_obs, tol, "final_obs")
    # Terminated envs were reset from Philox: bit-identical; the rest within tolerance.
    done = np_(r_out[2]) | np_(r_out[3])
    ds, rs = dev.get_state(), ref.get_state()
    np.testing.assert_array_equal(ds["state"][done], rs["state"][done])
    _close(ds["state"][~done], rs["state"][~done], tol, "state")
    np.testing.assert_array_equal(ds["steps"], rs["steps"])
    _close(d_out[0], r_out[0], tol, "obs")


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_trajectory_across_episode_boundaries(kernel_backend, env_id, autoreset, rng):
    # Start every env two steps from its time limit, so each trajectory crosses a boundary
    # (truncation and, for some, termination) and its autoreset draw; both sides then step on.
    dtype = "float64" if kernel_backend.supports_float64 else "float32"
    ref, dev, n = _pair(kernel_backend, env_id, dtype, autoreset)
    limit = ref.spec.max_episode_steps
    states = random_states(env_id, n, rng)
    for env in (ref, dev):
        env.set_state(state=states, steps=np.full(n, limit - 2))
    tol = max(TOL[(dtype, env_id)], 1e-9) * 10
    for t in range(5):
        actions = random_actions(env_id, n, rng)
        r_out, d_out = ref.step(actions), dev.step(actions)
        for k, name in enumerate(("obs", "reward")):
            _close(d_out[k], r_out[k], tol, f"{name} at step {t}")
        np.testing.assert_array_equal(np_(d_out[2]), np_(r_out[2]), err_msg=f"terminated at step {t}")
        np.testing.assert_array_equal(np_(d_out[3]), np_(r_out[3]), err_msg=f"truncated at step {t}")
        np.testing.assert_array_equal(dev.get_state()["steps"], ref.get_state()["steps"])


# ---- buffer ops --------------------------------------------------------------------------------

SHAPES = [pytest.param((1, 1), id="1x1"), pytest.param((7, 37), id="7x37"), pytest.param((33, 300), id="33x300")]


def _rollout(shape, dtype, rng):
    r = rng.normal(size=shape).astype(dtype)
    v = rng.normal(size=shape).astype(dtype)
    nv = rng.normal(size=shape).astype(dtype)
    term = rng.random(shape) < 0.1
    trunc = rng.random(shape) < 0.05
    return r, v, nv, term, trunc


def _up(b, *arrays):
    return [b.from_host(np.ascontiguousarray(a)) for a in arrays]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES)
def test_gae_matches_reference(kernel_backend, shape, dtype, rng):
    if dtype == "float64" and not kernel_backend.supports_float64:
        pytest.skip("no float64")
    host = _rollout(shape, dtype, rng)
    adv_r, ret_r = buffer.gae(*host, gamma=0.99, lam=0.95)
    adv_d, ret_d = buffer.gae(*_up(kernel_backend, *host), gamma=0.99, lam=0.95)
    tol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(np_(adv_d), adv_r, rtol=tol, atol=tol)
    np.testing.assert_allclose(np_(ret_d), ret_r, rtol=tol, atol=tol)


@pytest.mark.parametrize("per_step", [False, True], ids=["bootstrap-N", "bootstrap-TN"])
@pytest.mark.parametrize("shape", SHAPES)
def test_discounted_returns_match_reference(kernel_backend, shape, per_step, rng):
    r, _, nv, term, trunc = _rollout(shape, "float32", rng)
    boot = nv if per_step else nv[-1].copy()
    exp = buffer.discounted_returns(r, term, trunc, boot, gamma=0.97)
    got = buffer.discounted_returns(*_up(kernel_backend, r, term, trunc, boot), gamma=0.97)
    np.testing.assert_allclose(np_(got), exp, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("size", [1, 255, 256, 257, 4097, 100_003])
def test_normalize_matches_reference(kernel_backend, size, rng):
    if size > 5000 and probe(kernel_backend.name).simulator:
        pytest.skip("large reduction is too slow in the simulator")
    x = (rng.normal(size=size) * 3 + 5).astype(np.float32)
    exp = buffer.normalize(x)
    got = buffer.normalize(kernel_backend.from_host(x))
    np.testing.assert_allclose(np_(got), exp, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_matches_reference(kernel_backend, idx_dtype, rng):
    x = rng.normal(size=(300, 5)).astype(np.float32)
    idx = rng.permutation(300)[:77].astype(idx_dtype)
    got = buffer.gather(kernel_backend.from_host(x), kernel_backend.from_host(idx))
    np.testing.assert_array_equal(np_(got), x[idx])
