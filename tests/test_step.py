"""The stepping interface on every backend: shapes, resets, autoreset, truncation, state access, params."""

from __future__ import annotations

import numpy as np
import pytest

import portkern
from portkern import envs, rng as prng, step
from portkern.backends.numpy import reset_states

from .conftest import small_n
from .envstates import random_actions, random_states

ENV_IDS = list(envs.ENVS)
RESET_BOUNDS = {  # per state variable (low, high) of Gymnasium's reset distribution
    "CartPole-v1": [(-0.05, 0.05)] * 4,
    "Pendulum-v1": [(-np.pi, np.pi), (-1.0, 1.0)],
    "MountainCar-v0": [(-0.6, -0.4), (0.0, 0.0)],
    "MountainCarContinuous-v0": [(-0.6, -0.4), (0.0, 0.0)],
    "Acrobot-v1": [(-0.1, 0.1)] * 4,
}


def np_(x):
    return portkern.to_numpy(x)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_and_step_shapes_and_dtypes(backend, env_id, rng):
    n = small_n(backend)
    env = step.make(env_id, n, backend=backend.name)
    spec = env.spec
    obs = env.reset()
    assert backend.owns(obs)
    assert np_(obs).shape == (n, spec.obs_dim) and np_(obs).dtype == np.float32
    obs, rew, term, trunc = env.step(random_actions(env_id, n, rng))
    assert np_(obs).shape == (n, spec.obs_dim)
    assert np_(rew).shape == (n,) and np_(rew).dtype == np.float32
    assert np_(term).dtype == np.bool_ and np_(trunc).dtype == np.bool_
    assert np_(term).shape == np_(trunc).shape == (n,)


@pytest.mark.parametrize("env_id", list(envs.gymnasium_envs()))  # the envs Gymnasium has
def test_reset_states_lie_in_gymnasiums_reset_distribution(env_id):
    env = step.make(env_id, 20000, seed=3, dtype="float64")
    env.reset()
    s = env.get_state()["state"]
    for j, (lo, hi) in enumerate(RESET_BOUNDS[env_id]):
        assert s[:, j].min() >= lo and s[:, j].max() <= hi, env.spec.state_names[j]
        if hi > lo:  # spread over the whole interval, not a corner of it
            assert s[:, j].min() < lo + 0.01 * (hi - lo) and s[:, j].max() > hi - 0.01 * (hi - lo)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_is_independent_of_num_envs(env_id):
    small = step.make(env_id, 10, seed=42)
    large = step.make(env_id, 1000, seed=42)
    small.reset()
    large.reset()
    np.testing.assert_array_equal(small.get_state()["state"], large.get_state()["state"][:10])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_is_bit_identical_to_the_reference(backend, env_id, dtype):
    if dtype == "float64" and not backend.supports_float64:
        pytest.skip(f"{backend.device_name} has no float64")
    n = small_n(backend)
    env = step.make(env_id, n, backend=backend.name, seed=2024, dtype=dtype)
    env.reset()
    spec = env.spec
    kp = spec.param_vector(spec.defaults, np.dtype(dtype))
    expected = reset_states(spec, kp, 2024, np.arange(n, dtype=np.uint32), np.zeros(n, np.uint32))
    np.testing.assert_array_equal(env.get_state()["state"], np.stack(expected, axis=1))


def test_different_seeds_give_different_resets():
    a, b = step.make("CartPole-v1", 50, seed=1), step.make("CartPole-v1", 50, seed=2)
    a.reset()
    b.reset()
    assert not np.array_equal(a.get_state()["state"], b.get_state()["state"])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_reset_without_seed_starts_the_next_episode(backend, env_id):
    n = small_n(backend)
    env = step.make(env_id, n, backend=backend.name, seed=9)
    env.reset()
    first = env.get_state()["state"]
    env.reset()
    second = env.get_state()["state"]
    kp = env.spec.param_vector(env.spec.defaults, np.float32)
    expected = reset_states(env.spec, kp, 9, np.arange(n, dtype=np.uint32), np.ones(n, np.uint32))
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(second, np.stack(expected, axis=1))
    env.reset(seed=9)
    np.testing.assert_array_equal(env.get_state()["state"], first)


def _cartpole_about_to_fall(n: int) -> np.ndarray:
    state = np.zeros((n, 4))
    state[:, 2] = 0.2094  # theta just inside the threshold, falling further
    state[:, 3] = 2.0
    return state


def test_same_step_autoreset_returns_reset_obs_and_keeps_final_obs(backend):
    n = small_n(backend)
    env = step.make("CartPole-v1", n, backend=backend.name, seed=5, dtype="float64" if backend.supports_float64 else "float32")
    env.reset()
    env.set_state(state=_cartpole_about_to_fall(n), steps=np.full(n, 17))
    obs, rew, term, trunc = env.step(np.ones(n, np.int32))
    obs, term, trunc, final = np_(obs), np_(term), np_(trunc), np_(env.final_obs)
    assert term.all() and not trunc.any()
    np.testing.assert_array_equal(np_(rew), 1.0)
    assert (np.abs(final[:, 2]) > 0.2094).all()  # the obs it finished with
    kp = env.spec.param_vector(env.spec.defaults, env.dtype)
    fresh = reset_states(env.spec, kp, 5, np.arange(n, dtype=np.uint32), np.ones(n, np.uint32))
    np.testing.assert_array_equal(obs, np.stack(fresh, axis=1))  # episode 1's reset draw
    assert (env.get_state()["steps"] == 0).all()


def test_next_step_autoreset_resets_on_the_following_call(backend):
    n = small_n(backend)
    env = step.make("CartPole-v1", n, backend=backend.name, seed=5, autoreset="next_step")
    assert env.metadata["autoreset_mode"] == "next_step"
    env.reset()
    env.set_state(state=_cartpole_about_to_fall(n), steps=np.full(n, 3))
    obs, rew, term, trunc = env.step(np.ones(n, np.int32))
    assert np_(term).all()
    assert (np.abs(np_(obs)[:, 2]) > 0.2094).all()  # no reset yet: the terminal obs
    obs, rew, term, trunc = env.step(np.zeros(n, np.int32))
    assert not np_(term).any() and not np_(trunc).any()
    np.testing.assert_array_equal(np_(rew), 0.0)
    kp = env.spec.param_vector(env.spec.defaults, np.float32)
    fresh = reset_states(env.spec, kp, 5, np.arange(n, dtype=np.uint32), np.ones(n, np.uint32))
    np.testing.assert_array_equal(np_(obs), np.stack(fresh, axis=1))
    assert (env.get_state()["steps"] == 0).all()


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_truncation_at_the_episode_limit(backend, env_id, autoreset):
    n = small_n(backend)
    env = step.make(env_id, n, backend=backend.name, seed=1, autoreset=autoreset)
    env.reset()
    limit = env.spec.max_episode_steps
    steps = np.where(np.arange(n) % 2 == 0, limit - 1, limit - 2)
    env.set_state(steps=steps)
    before = env.get_state()["state"]
    _, _, term, trunc = env.step(random_actions(env_id, n, np.random.default_rng(0)))
    expected = (np.arange(n) % 2 == 0) & ~np_(term)
    np.testing.assert_array_equal(np_(trunc) & ~np_(term), expected)
    after = env.get_state()["steps"]
    if autoreset == "same_step":
        np.testing.assert_array_equal(after[np_(trunc)], 0)
    else:
        np.testing.assert_array_equal(after[np_(trunc)], limit)
    np.testing.assert_array_equal(after[~np_(trunc) & ~np_(term)], limit - 1)
    assert before.shape == env.get_state()["state"].shape


def test_episode_lengths_under_a_constant_action_match_gymnasium():
    import gymnasium as gym

    genv = gym.make("CartPole-v1")
    genv.reset(seed=0)
    glen = 0
    while True:
        _, _, term, trunc, _ = genv.step(1)
        glen += 1
        if term or trunc:
            break
    genv.reset(seed=0)
    env = step.make("CartPole-v1", 1, dtype="float64")
    env.reset()
    env.set_state(state=np.asarray(genv.unwrapped.state)[None, :], steps=[0])
    length = 0
    while True:
        _, _, term, trunc = env.step(np.ones(1, np.int32))
        length += 1
        if term[0] or trunc[0]:
            break
    assert length == glen


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_get_state_set_state_round_trip(backend, env_id, rng):
    n = small_n(backend)
    env = step.make(env_id, n, backend=backend.name, dtype="float32")
    env.reset()
    s = random_states(env_id, n, rng).astype(np.float32)
    steps = rng.integers(0, env.spec.max_episode_steps, n)
    env.set_state(state=s, steps=steps)
    got = env.get_state()
    np.testing.assert_array_equal(got["state"], s)
    np.testing.assert_array_equal(got["steps"], steps)


def test_params_override_changes_the_dynamics(backend):
    n = small_n(backend)
    light = step.make("CartPole-v1", n, backend=backend.name, params={"gravity": 1.0})
    heavy = step.make("CartPole-v1", n, backend=backend.name)
    for env in (light, heavy):
        env.reset()
        env.set_state(state=np.tile([0.0, 0.0, 0.1, 0.0], (n, 1)))
        env.step(np.ones(n, np.int32))
    kp = light.spec.param_vector(light.spec.resolve_params({"gravity": 1.0}), np.float32)
    ref_state, _, _ = light.spec.step(tuple(np.full(n, v, np.float32) for v in (0.0, 0.0, 0.1, 0.0)), np.ones(n, np.int32), kp)
    np.testing.assert_allclose(light.get_state()["state"], np.stack(ref_state, axis=1), rtol=1e-6, atol=1e-7)
    assert not np.allclose(light.get_state()["state"][:, 3], heavy.get_state()["state"][:, 3])


def test_to_numpy_returns_host_arrays(backend):
    env = step.make("CartPole-v1", 5, backend=backend.name)
    obs = env.reset()
    host = portkern.to_numpy(obs)
    assert isinstance(host, np.ndarray) and host.shape == (5, 4)


def test_gymnasium_spaces_are_batched(backend):
    import gymnasium as gym

    env = step.make("Pendulum-v1", 7, backend=backend.name)
    assert env.action_space == gym.vector.utils.batch_space(env.single_action_space, 7)
    assert env.observation_space.shape == (7, 3)
    assert env.num_envs == 7


def test_reset_draws_use_the_documented_philox_mapping():
    env = step.make("CartPole-v1", 4, seed=77)
    env.reset()
    bits = prng.philox4x32(
        np.array([[0, 0, prng.STREAM_RESET, 0]] * 4, np.uint32),
        np.stack([np.full(4, 77, np.uint32), np.arange(4, dtype=np.uint32)], axis=1),
    )
    expected = np.float32(0.05) * prng.symmetric(bits, np.float32)
    np.testing.assert_array_equal(env.get_state()["state"], expected)
