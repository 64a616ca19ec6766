"""Bad input: a clear error naming the argument, raised before any launch, with nothing mutated."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

import portkern
from portkern import buffer, step


def np_(x):
    return portkern.to_numpy(x)


@pytest.fixture
def cartpole(backend):
    env = step.make("CartPole-v1", 8, backend=backend.name, seed=3)
    env.reset()
    env.step(np.ones(8, np.int32))
    return env


@pytest.fixture
def pendulum(backend):
    env = step.make("Pendulum-v1", 8, backend=backend.name, seed=3)
    env.reset()
    return env


def _snapshot(env):
    s = env.get_state()
    return s["state"].copy(), s["steps"].copy(), np_(env.final_obs).copy()


def _assert_unchanged(env, snap):
    now = _snapshot(env)
    for a, b in zip(snap, now):
        np.testing.assert_array_equal(a, b)


@contextmanager
def _rejected_without_mutation(env, exc, match):
    """The block must raise ``exc`` (message matching ``match``) and leave ``env``'s state, step counts and
    final obs as they were: every rejection below is checked this one way."""
    snap = _snapshot(env)
    with pytest.raises(exc, match=match):
        yield
    _assert_unchanged(env, snap)


@pytest.mark.parametrize(
    "actions,exc,match",
    [
        pytest.param(np.ones(7, np.int32), ValueError, r"actions: expected int array of shape \(8,\)", id="short"),
        pytest.param(np.ones((8, 1), np.int32), ValueError, r"got shape \(8, 1\)", id="2d"),
        pytest.param(np.ones(8, np.float32), TypeError, r"actions: expected int array.*float32", id="float"),
        pytest.param(np.full(8, 2), ValueError, r"values in \[0, 2\).*got values in \[2, 2\]", id="too-big"),
        pytest.param(np.full(8, -1), ValueError, r"got values in \[-1, -1\]", id="negative"),
        pytest.param("left", TypeError, "actions", id="string"),
    ],
)
def test_discrete_action_rejected_without_mutation(cartpole, actions, exc, match):
    with _rejected_without_mutation(cartpole, exc, match):
        cartpole.step(actions)


def test_discrete_device_actions_out_of_range_rejected(cartpole, backend):
    with _rejected_without_mutation(cartpole, ValueError, r"actions: .*got values in \[0, 5\]"):
        cartpole.step(backend.from_host(np.array([0, 1, 5, 0, 0, 0, 0, 0], np.int32)))


@pytest.mark.parametrize(
    "actions,exc,match",
    [
        pytest.param(np.array([np.nan] + [0.0] * 7, np.float32)[:, None], ValueError, "NaN or inf", id="nan"),
        pytest.param(np.array([np.inf] + [0.0] * 7, np.float32), ValueError, "NaN or inf", id="inf"),
        pytest.param(np.zeros((8, 2), np.float32), ValueError, r"shape \(8, 1\) or \(8,\)", id="wide"),
        pytest.param(np.zeros(8, np.int64), TypeError, "float array", id="int"),
    ],
)
def test_continuous_action_rejected_without_mutation(pendulum, actions, exc, match):
    with _rejected_without_mutation(pendulum, exc, match):
        pendulum.step(actions)


def test_continuous_device_nan_rejected(pendulum, backend):
    bad = np.zeros((8, 1), np.float32)
    bad[3] = np.nan
    with _rejected_without_mutation(pendulum, ValueError, "NaN or inf"):
        pendulum.step(backend.from_host(bad))


def test_out_of_range_continuous_action_is_clipped_like_gymnasium(pendulum):
    """A finite action beyond the bound is accepted and clipped to +-max_torque: the step equals the step with
    the action pre-clipped, bit for bit, and Gymnasium's Pendulum-v1 stepped from the same state (float64)."""
    high = np.float32(pendulum.spec.action_high)
    wild = np.array([100.0, -100.0, 3.0, -2.5, 1.0, -0.5, 1e30, -1e30], np.float32)[:, None]
    start = pendulum.get_state()
    got = [np_(x).copy() for x in pendulum.step(wild)]
    pendulum.set_state(start["state"], start["steps"])
    want = [np_(x).copy() for x in pendulum.step(np.clip(wild, -high, high))]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    gym = pytest.importorskip("gymnasium")
    theirs = gym.make("Pendulum-v1").unwrapped
    theirs.reset(seed=0)
    for i in range(len(wild)):
        theirs.state = np.asarray(start["state"][i], dtype=np.float64)
        obs, reward, *_ = theirs.step(wild[i])
        np.testing.assert_allclose(got[0][i], obs, rtol=1e-5, atol=1e-5)
        assert float(got[1][i]) == pytest.approx(reward, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        pytest.param({"num_envs": 0}, ValueError, r"num_envs: expected an int in \[1, ", id="zero-envs"),
        pytest.param({"num_envs": 2.5}, TypeError, "num_envs", id="float-envs"),
        pytest.param({"num_envs": True}, TypeError, "num_envs", id="bool-envs"),
        pytest.param({"dtype": "float16"}, ValueError, "dtype: expected 'float32' or 'float64'", id="dtype"),
        pytest.param({"autoreset": "never"}, ValueError, "autoreset: expected one of", id="autoreset"),
        pytest.param({"seed": -1}, ValueError, "seed", id="seed"),
        pytest.param({"params": {"gravity": float("nan")}}, ValueError, r"params\['gravity'\]", id="nan-param"),
        pytest.param({"params": {"mass": 1.0}}, ValueError, "no parameter 'mass'; valid names", id="bad-param"),
        pytest.param({"backend": "metal"}, ValueError, "valid names", id="backend"),
    ],
)
def test_make_rejects_bad_arguments(kwargs, exc, match):
    args = {"num_envs": 4} | kwargs
    with pytest.raises(exc, match=match):
        step.make("CartPole-v1", **args)


def test_unknown_env_id_lists_valid_ids():
    with pytest.raises(ValueError, match="env_id: unknown environment 'CartPole-v0'; valid ids: CartPole-v1"):
        step.make("CartPole-v0", 4)


def test_step_before_reset_is_an_error():
    env = step.make("CartPole-v1", 4)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(4, np.int32))


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        pytest.param({"state": np.zeros((8, 3))}, ValueError, r"state: expected shape \(8, 4\)", id="state-shape"),
        pytest.param({"state": np.full((8, 4), np.nan)}, ValueError, "state: expected finite", id="state-nan"),
        pytest.param({"steps": np.full(8, 500)}, ValueError, r"steps: expected values in \[0, 499\]", id="steps-limit"),
        pytest.param({"steps": np.zeros(8, np.float32)}, TypeError, "steps: expected an int array", id="steps-float"),
        pytest.param({"state": np.zeros((8, 4)), "steps": np.zeros(3, int)}, ValueError, "steps", id="half-bad"),
    ],
)
def test_set_state_rejects_bad_input_without_mutation(cartpole, kwargs, exc, match):
    with _rejected_without_mutation(cartpole, exc, match):
        cartpole.set_state(**kwargs)


def test_acrobot_set_state_rejects_angles_its_wrap_cannot_handle():
    env = step.make("Acrobot-v1", 2)
    env.reset()
    with pytest.raises(ValueError, match=r"theta1 must be within \+-100"):
        env.set_state(state=np.array([[1e9, 0, 0, 0], [0, 0, 0, 0]]))


def _gae_args(T=4, N=3):
    f = np.zeros((T, N), np.float32)
    b = np.zeros((T, N), bool)
    return [f, f.copy(), f.copy(), b, b.copy()]


@pytest.mark.parametrize(
    "index,value,exc,match",
    [
        pytest.param(1, np.zeros((4, 2), np.float32), ValueError, r"values: expected shape \(4, 3\)", id="values-shape"),
        pytest.param(2, np.zeros((4, 3), np.float64), TypeError, "next_values: expected dtype float32", id="dtype-mix"),
        pytest.param(3, np.zeros((4, 3), np.float32), TypeError, "terminated: expected a bool array", id="flags-dtype"),
        pytest.param(4, np.zeros((3, 3), bool), ValueError, r"truncated: expected shape \(4, 3\)", id="flags-shape"),
        pytest.param(0, np.zeros(4, np.float32), ValueError, r"rewards: expected a non-empty \[T, N\]", id="rewards-1d"),
        pytest.param(0, np.zeros((4, 3), np.int32), TypeError, "rewards: expected a float32 or float64", id="rewards-int"),
    ],
)
def test_gae_rejects_mismatched_buffers(index, value, exc, match):
    args = _gae_args()
    args[index] = value
    with pytest.raises(exc, match=match):
        buffer.gae(*args, gamma=0.99, lam=0.95)


@pytest.mark.parametrize("name,value", [("gamma", 1.5), ("gamma", -0.1), ("lam", 2.0), ("lam", float("nan"))])
def test_gae_rejects_discount_outside_unit_interval(name, value):
    kwargs = {"gamma": 0.99, "lam": 0.95, name: value}
    with pytest.raises(ValueError, match=rf"{name}: expected a float in \[0, 1\]"):
        buffer.gae(*_gae_args(), **kwargs)


def test_discounted_returns_rejects_bad_bootstrap():
    r = np.zeros((4, 3), np.float32)
    b = np.zeros((4, 3), bool)
    with pytest.raises(ValueError, match=r"bootstrap: expected shape \(3,\) or \(4, 3\)"):
        buffer.discounted_returns(r, b, b, np.zeros(4, np.float32), gamma=0.9)


def test_normalize_rejects_negative_eps():
    with pytest.raises(ValueError, match="eps: expected a finite float >= 0"):
        buffer.normalize(np.ones(3, np.float32), eps=-1.0)


def test_normalize_rejects_empty():
    with pytest.raises(ValueError, match="x: expected at least one element"):
        buffer.normalize(np.ones(0, np.float32))


@pytest.mark.parametrize(
    "indices,exc,match",
    [
        pytest.param(np.array([0, 10]), ValueError, r"indices: expected values in \[0, 9\].*\[0, 10\]", id="too-big"),
        pytest.param(np.array([-1, 2]), ValueError, r"got values in \[-1, 2\]", id="negative"),
        pytest.param(np.array([0.0, 1.0]), TypeError, "indices: expected an int32 or int64", id="float"),
        pytest.param(np.zeros((2, 2), np.int64), ValueError, r"indices: expected shape \(B,\)", id="2d"),
    ],
)
def test_gather_rejects_bad_indices(backend, indices, exc, match):
    x = backend.from_host(np.zeros((10, 2), np.float32))
    with pytest.raises(exc, match=match):
        buffer.gather(x, backend.from_host(indices))


def test_buffer_ops_reject_foreign_arrays():
    with pytest.raises(TypeError, match="cannot tell the backend"):
        buffer.normalize([1.0, 2.0])


@pytest.mark.parametrize(
    "env_id,params,match",
    [
        pytest.param("CartPole-v1", {"length": 0.0}, r"params\['length'\]: expected a finite number > 0 \(positive\), got 0\.0",
                     id="zero-length"),
        pytest.param("CartPole-v1", {"masspole": -0.1}, r"params\['masspole'\]: expected a finite number > 0", id="negative-mass"),
        pytest.param("CartPole-v1", {"tau": float("inf")}, r"params\['tau'\]: expected a finite number > 0", id="inf-dt"),
        pytest.param("CartPole-v1", {"x_threshold": -2.4}, r"params\['x_threshold'\]", id="negative-threshold"),
        pytest.param("CartPole-v1", {"reset_bound": -0.05}, r"params\['reset_bound'\]: expected a finite number >= 0",
                     id="negative-bound"),
        pytest.param("Pendulum-v1", {"dt": 0.0}, r"params\['dt'\]", id="zero-dt"),
        pytest.param("Acrobot-v1", {"link_mass_2": 0.0}, r"params\['link_mass_2'\]", id="zero-link-mass"),
        pytest.param("MountainCar-v0", {"reset_low": 0.0},
                     r"needs reset_low <= reset_high, got reset_low=0\.0, reset_high=-0\.4", id="empty-reset-range"),
        pytest.param("MountainCarContinuous-v0", {"min_action": 2.0}, r"needs min_action <= max_action", id="action-range"),
        pytest.param("CartPole-v1", {"total_mass": 2.0}, r"no parameter 'total_mass' \(a derived constant", id="derived"),
        pytest.param("CartPole-v1", {"gravity": True}, r"params\['gravity'\]: expected a number", id="bool"),
    ],
)  # fmt: skip
def test_make_rejects_params_outside_their_domain(env_id, params, match):
    with pytest.raises((ValueError, TypeError), match=match):
        step.make(env_id, 4, params=params)


def test_params_inside_their_domain_are_accepted_and_used():
    env = step.make("CartPole-v1", 4, params={"gravity": 1.62, "reset_bound": 0.0})
    env.reset()
    assert env.params["gravity"] == 1.62
    np.testing.assert_array_equal(env.get_state()["state"], 0.0)  # reset_bound 0: every state starts at 0
