"""Rollouts: the three data paths agree, the MLP forward pass, the buffer layout, policy sampling."""

from __future__ import annotations

import numpy as np
import pytest

import portkern
from portkern import envs, step
from portkern.policy import MLPPolicy, RandomPolicy, sample_actions

from .conftest import small_n

ENV_IDS = list(envs.ENVS)
FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")


def np_(x):
    return portkern.to_numpy(x)


def _rollout(backend, env_id, policy, path, steps=12, autoreset="same_step", spl=None, limit_offset=6):
    n = small_n(backend)
    env = step.make(env_id, n, backend=backend.name, seed=21, autoreset=autoreset)
    env.reset()
    # Start near the time limit so the rollout crosses episode boundaries.
    env.set_state(steps=np.full(n, env.spec.max_episode_steps - limit_offset))
    buf = env.rollout(steps, policy, path=path, steps_per_launch=spl)
    return env, buf


def _fused(backend, env_id, policy, **kw):
    return _rollout(backend, env_id, policy, "fused", **kw)


@pytest.mark.parametrize("autoreset", ["same_step", "next_step"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_fused_random_rollout_equals_single_steps(backend, env_id, autoreset):
    env_f, fused = _fused(backend, env_id, RandomPolicy(), autoreset=autoreset)
    env_h, host = _rollout(backend, env_id, RandomPolicy(), "host", autoreset=autoreset)
    for name in FIELDS:
        np.testing.assert_array_equal(np_(getattr(fused, name)), getattr(host, name), err_msg=name)
    np.testing.assert_array_equal(env_f.get_state()["state"], env_h.get_state()["state"])
    np.testing.assert_array_equal(env_f.get_state()["steps"], env_h.get_state()["steps"])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1"])
def test_fused_mlp_rollout_equals_single_steps(backend, env_id):
    policy = MLPPolicy.init(envs.get(env_id), seed=4)
    _, fused = _fused(backend, env_id, policy)
    _, host = _rollout(backend, env_id, policy, "host")
    # The host path runs the policy in NumPy, the fused path in the kernel: tanh/exp may differ
    # by an ulp, so continuous actions agree to float32 rounding, discrete ones exactly.
    if envs.get(env_id).is_discrete:
        np.testing.assert_array_equal(np_(fused.actions), host.actions)
    else:
        np.testing.assert_allclose(np_(fused.actions), host.actions, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np_(fused.terminated), host.terminated)
    np.testing.assert_array_equal(np_(fused.truncated), host.truncated)
    np.testing.assert_allclose(np_(fused.obs), host.obs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spl", [1, 5, 12])
def test_steps_per_launch_does_not_change_the_result(backend, spl):
    _, ref = _fused(backend, "CartPole-v1", RandomPolicy(), spl=12)
    _, got = _rollout(backend, "CartPole-v1", RandomPolicy(), "fused", spl=spl)
    for name in FIELDS:
        np.testing.assert_array_equal(np_(getattr(got, name)), np_(getattr(ref, name)), err_msg=name)


def test_step_continues_seamlessly_after_a_fused_rollout(backend):
    env_f, _ = _fused(backend, "CartPole-v1", RandomPolicy())
    env_h, _ = _rollout(backend, "CartPole-v1", RandomPolicy(), "host")
    a = np.ones(env_f.num_envs, np.int32)
    for out_f, out_h in zip(env_f.step(a), env_h.step(a)):
        np.testing.assert_array_equal(np_(out_f), np_(out_h))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1"])
def test_mlp_forward_in_kernel_equals_numpy(backend, env_id, rng):
    spec = envs.get(env_id)
    policy = MLPPolicy.init(spec, seed=1)
    obs = rng.normal(size=(small_n(backend), spec.obs_dim)).astype(np.float32)
    out = backend.mlp_forward(backend.from_host(policy.flat()), backend.from_host(obs), policy.hidden,
                              policy.w3.shape[1])  # fmt: skip
    np.testing.assert_allclose(np_(out), policy.forward(obs), rtol=1e-5, atol=1e-5)


def test_rollout_buffer_layout_is_time_major():
    env = step.make("Acrobot-v1", 9)
    env.reset()
    buf = env.rollout(4, RandomPolicy())
    assert buf.obs.shape == (4, 9, 6) and buf.final_obs.shape == (4, 9, 6)
    assert buf.actions.shape == buf.rewards.shape == buf.terminated.shape == (4, 9)
    assert buf.actions.dtype == np.int32 and buf.terminated.dtype == np.bool_


def test_rollout_obs_are_what_the_policy_acted_on():
    env = step.make("CartPole-v1", 9, seed=2)
    first = np_(env.reset()).copy()
    buf = env.rollout(3, RandomPolicy())
    np.testing.assert_array_equal(buf.obs[0], first)
    # Without a reset in between, the next obs acted on is the previous step's final obs.
    done = buf.terminated[0] | buf.truncated[0]
    np.testing.assert_array_equal(buf.obs[1][~done], buf.final_obs[0][~done])


def test_random_discrete_actions_are_uniform():
    spec = envs.get("Acrobot-v1")
    n = 30000
    a = sample_actions(RandomPolicy(), spec, np.zeros((n, 6)), 0, np.zeros(n, np.uint32), np.zeros(n, np.int32))
    counts = np.bincount(a, minlength=3) / n
    np.testing.assert_allclose(counts, 1 / 3, atol=0.015)


def test_mlp_policy_rejects_mismatched_env():
    env = step.make("CartPole-v1", 4)
    env.reset()
    with pytest.raises(ValueError, match="policy: CartPole-v1 needs an MLP from 4 observations to 2 outputs"):
        env.rollout(2, MLPPolicy.init(envs.get("Acrobot-v1")))


def test_rollout_rejects_bad_path():
    env = step.make("CartPole-v1", 4)
    env.reset()
    with pytest.raises(ValueError, match="path: expected 'fused', 'device' or 'host'"):
        env.rollout(2, RandomPolicy(), path="gpu")


def test_mlp_weights_must_be_float32():
    p = MLPPolicy.init(envs.get("CartPole-v1"))
    with pytest.raises(TypeError, match="w1: expected a float32"):
        MLPPolicy(p.w1.astype(np.float64), p.b1, p.w2, p.b2, p.w3, p.b3)


# ---- the rollout's buffer: the env's own without buffer=, written in full ----------------------------
def _twins(backend, n, seed=3):
    """Two envs in the same state: one runs the rollouts under test, the other the references."""
    out = []
    for _ in range(2):
        env = step.make("CartPole-v1", n, backend=backend, seed=seed)
        env.reset()
        env.set_state(steps=np.full(n, env.spec.max_episode_steps - 2))  # cross an episode boundary
        out.append(env)
    return out


def _assert_same(got, want):
    for name in FIELDS:
        np.testing.assert_array_equal(np_(getattr(got, name)), np_(getattr(want, name)), err_msg=name)


#: T of these rollouts: _rollout's, so that a backend compiling per shape (jax) compiles it once per session.
_T = 12


def _reuse_check(backend, path):
    env, twin = _twins(backend, small_n(backend))
    host = path == "host"
    first = env.rollout(_T, RandomPolicy(), path=path)
    arrays = {name: getattr(first, name) for name in FIELDS}
    _assert_same(first, twin.rollout(_T, RandomPolicy(), twin.rollout_buffer(_T, host=host), path=path))
    second = env.rollout(_T, RandomPolicy(), path=path)
    assert second is first  # the same buffer, rewritten: copy what you keep
    if host or not backend.immutable_arrays:  # written in place: no array allocated by the second call
        assert all(getattr(second, name) is a for name, a in arrays.items())
    # the contents are those of a rollout into a fresh buffer, the episodes continuing
    _assert_same(second, twin.rollout(_T, RandomPolicy(), twin.rollout_buffer(_T, host=host), path=path))


def test_a_rollout_without_buffer_reuses_the_envs_own_buffer(backend):
    _reuse_check(backend, "fused")  # the kernel path of every backend; the host path's loop is one for all


def test_a_host_path_rollout_without_buffer_reuses_the_envs_own_host_buffer():
    _reuse_check(step.make("CartPole-v1", 1).backend, "host")


def test_the_envs_own_buffers_are_per_steps_and_the_most_recent_are_kept():
    env = step.make("CartPole-v1", 4)
    env.reset()
    five = env.rollout(5, RandomPolicy())
    assert env.rollout(3, RandomPolicy()) is not five
    assert env.rollout(5, RandomPolicy()) is five  # another T in between: each T keeps its own
    assert env.rollout(5, RandomPolicy(), path="host") is not five  # the host path's buffer is the host's
    for t in range(6, 6 + env.ROLLOUT_CACHE_SIZE):  # as many other T as are kept: T = 5 is dropped
        env.rollout(t, RandomPolicy())
    again = env.rollout(5, RandomPolicy())
    assert again is not five and again.steps == 5


def test_a_buffer_given_is_written_and_the_envs_own_left_alone():
    backend = step.make("CartPole-v1", 1).backend  # which buffer is written is decided before any backend runs
    env, twin = _twins(backend, small_n(backend))
    own = env.rollout(4, RandomPolicy())
    kept = {name: np_(getattr(own, name)).copy() for name in FIELDS}
    mine = env.rollout_buffer(4)
    got = env.rollout(4, RandomPolicy(), mine)
    assert got is mine
    for name in FIELDS:  # the env's own buffer still holds the first rollout
        np.testing.assert_array_equal(np_(getattr(own, name)), kept[name], err_msg=name)
    twin.rollout(4, RandomPolicy())
    _assert_same(mine, twin.rollout(4, RandomPolicy()))


def test_a_rollout_writes_every_element_of_an_unfilled_buffer(backend):
    _unfilled_check(backend, "fused")  # every backend's rollout kernel


def test_a_host_path_rollout_writes_every_element_of_an_unfilled_buffer():
    _unfilled_check(step.make("CartPole-v1", 1).backend, "host")


def _unfilled_check(backend, path):
    # rollout_buffer() and the env's own buffers are not filled: each field, final_obs included (every
    # step, whether or not an episode ended), must come out of the rollout whatever the memory held.
    env, twin = _twins(backend, small_n(backend))
    host = path == "host"
    dirty = env.rollout_buffer(_T, host=host)
    for name in FIELDS:
        a = np_(getattr(dirty, name))
        junk = np.full(a.shape, True if a.dtype == np.bool_ else 7, a.dtype)
        if a.dtype.kind == "f":
            junk[...] = np.nan
        setattr(dirty, name, junk if host else env.backend.from_host(junk))
    got = env.rollout(_T, RandomPolicy(), dirty, path=path)
    want = twin.rollout(_T, RandomPolicy(), path=path)
    assert np_(want.terminated).any() or np_(want.truncated).any()  # an episode ended on the way
    _assert_same(got, want)
