"""The NumPy reference against Gymnasium's own single environments, state by state."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from portkern import envs
from portkern.envs import acrobot, pendulum

N_STATES = 1200
#: The envs that declare a Gymnasium counterpart; portkern-only envs (variants) have none to match.
GYM_ENV_IDS = list(envs.gymnasium_envs())


def _states(env_id: str, rng: np.random.Generator) -> np.ndarray:
    """States across the whole region, with some packed near thresholds and clips (the env's own facts)."""
    return envs.get(env_id).parity_states(rng, N_STATES)


def _actions(spec, rng: np.random.Generator) -> np.ndarray:
    if spec.is_discrete:
        return rng.integers(0, spec.discrete_actions, N_STATES)
    hi = spec.action_high
    return rng.uniform(-1.3 * hi, 1.3 * hi, N_STATES).astype(np.float32)  # some beyond the bound: clipped


def _gym_step(env_id, states, actions, state_dtype=np.float64):
    spec = envs.get(env_id)
    env = gym.make(spec.gymnasium_id).unwrapped
    env.reset(seed=0)
    out_state, out_reward, out_term = [], [], []
    for s, a in zip(states, actions):
        env.state = np.array(s, dtype=state_dtype)
        if hasattr(env, "steps_beyond_terminated"):
            env.steps_beyond_terminated = None
        act = int(a) if spec.is_discrete else np.array([a], dtype=np.float32)
        _, r, term, _, _ = env.step(act)
        out_state.append(np.asarray(env.state, dtype=np.float64))
        out_reward.append(r)
        out_term.append(term)
    return np.array(out_state), np.array(out_reward), np.array(out_term)


def _ref_step(env_id, states, actions, dtype=np.float64):
    spec = envs.get(env_id)
    kp = spec.param_vector(spec.defaults, dtype)
    st = tuple(states[:, i].astype(dtype) for i in range(spec.state_dim))
    ns, r, t = spec.step(st, np.asarray(actions), kp)
    return np.stack(ns, axis=1).astype(np.float64), r.astype(np.float64), t


def _both_steps(env_id: str, rng: np.random.Generator) -> tuple[tuple, tuple]:
    """Gymnasium's step and the float64 reference's from the same random states and actions."""
    states = _states(env_id, rng)
    actions = _actions(envs.get(env_id), rng)
    return _gym_step(env_id, states, actions), _ref_step(env_id, states, actions)


def _libm_square(a: np.ndarray) -> np.ndarray:
    # Gymnasium's ``x**2`` on a NumPy scalar: libm's pow(x, 2), element by element.
    return np.array([x**2 for x in a], dtype=a.dtype)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "MountainCar-v0"])
def test_float64_reference_is_bit_exact(env_id, rng):
    (gs, gr, gt), (rs, rr, rt) = _both_steps(env_id, rng)
    np.testing.assert_array_equal(rs, gs)
    np.testing.assert_array_equal(rr, gr)
    np.testing.assert_array_equal(rt, gt)
    assert 0 < gt.sum() < len(gt) or env_id == "MountainCar-v0" and gt.sum() > 0


@pytest.mark.parametrize("env_id,module", [("Pendulum-v1", pendulum), ("Acrobot-v1", acrobot)])
def test_float64_reference_is_bit_exact_with_gymnasiums_squaring(env_id, module, rng, monkeypatch):
    # With squaring done as Gymnasium does it (libm pow), every other operation matches exactly.
    monkeypatch.setattr(module, "square", _libm_square)
    (gs, gr, gt), (rs, rr, rt) = _both_steps(env_id, rng)
    np.testing.assert_array_equal(rs, gs)
    np.testing.assert_array_equal(rr, gr)
    np.testing.assert_array_equal(rt, gt)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "Acrobot-v1"])
def test_float64_reference_with_multiply_squaring_is_within_ulps(env_id, rng):
    # The shipped reference squares by multiplication (what kernels do); libm's pow(x, 2) is not
    # always correctly rounded, so a few results differ in the last bits and nothing more.
    (gs, gr, gt), (rs, rr, rt) = _both_steps(env_id, rng)
    np.testing.assert_allclose(rs, gs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rr, gr, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(rt, gt)
    assert (rs == gs).all(axis=1).mean() > 0.98


def test_mountain_car_continuous_matches_float32_gymnasium_within_rounding(rng):
    # Gymnasium keeps this env's state in float32 (with a float64 cos): the float64 reference
    # agrees to float32 rounding, and termination agrees wherever it is not on a knife edge.
    env_id = "MountainCarContinuous-v0"
    states = _states(env_id, rng).astype(np.float32)
    actions = _actions(envs.get(env_id), rng)
    gs, gr, gt = _gym_step(env_id, states, actions, state_dtype=np.float32)
    rs, rr, rt = _ref_step(env_id, states.astype(np.float64), actions)
    np.testing.assert_allclose(rs, gs, rtol=0, atol=2e-7)
    np.testing.assert_allclose(rr, gr, rtol=1e-6, atol=1e-6)
    assert (rt == gt).mean() > 0.995


@pytest.mark.parametrize("env_id", GYM_ENV_IDS)
def test_episode_limit_matches_gymnasium(env_id):
    assert envs.get(env_id).max_episode_steps == gym.spec(envs.get(env_id).gymnasium_id).max_episode_steps


@pytest.mark.parametrize("env_id", GYM_ENV_IDS)
def test_default_params_match_gymnasium_attributes(env_id):
    spec = envs.get(env_id)
    env = gym.make(spec.gymnasium_id).unwrapped
    attr = {  # our name -> Gymnasium attribute where they differ in spelling
        "link_length_1": "LINK_LENGTH_1", "link_mass_1": "LINK_MASS_1", "link_mass_2": "LINK_MASS_2",
        "link_com_pos_1": "LINK_COM_POS_1", "link_com_pos_2": "LINK_COM_POS_2", "link_moi": "LINK_MOI",
        "max_vel_1": "MAX_VEL_1", "max_vel_2": "MAX_VEL_2",
    }  # fmt: skip
    checked = 0
    for name, value in spec.defaults.items():
        gname = attr.get(name, name)
        if hasattr(env, gname):
            assert float(getattr(env, gname)) == value, name
            checked += 1
    assert checked >= 3


@pytest.mark.parametrize("env_id", GYM_ENV_IDS)
def test_spaces_match_gymnasium(env_id):
    from portkern import step

    genv = gym.make(envs.get(env_id).gymnasium_id)
    env = step.make(env_id, 3)
    assert env.single_action_space == genv.action_space
    np.testing.assert_allclose(env.single_observation_space.low, genv.observation_space.low)
    np.testing.assert_allclose(env.single_observation_space.high, genv.observation_space.high)
    assert env.single_observation_space.shape == genv.observation_space.shape


def test_gymnasium_counterparts_are_declared_and_exist():
    # The declaration decides which envs the parity tests above take: an env named like a Gymnasium
    # env that does not declare it would skip them, and a declared id must be Gymnasium's.
    assert GYM_ENV_IDS, "no env declares a Gymnasium counterpart"
    missing = [spec.gymnasium_id for spec in envs.gymnasium_envs().values() if spec.gymnasium_id not in gym.registry]
    assert not missing, f"gymnasium_id not in Gymnasium's registry: {missing}"
    undeclared = [env_id for env_id, spec in envs.ENVS.items() if spec.gymnasium_id is None and env_id in gym.registry]
    assert not undeclared, f"envs named like a Gymnasium env without gymnasium_id: {undeclared}"
