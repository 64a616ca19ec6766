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
