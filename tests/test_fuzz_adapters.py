"""Fuzzing the Gymnasium and Stable-Baselines3 adapters (portkern/gym.py, portkern/sb3.py): construction keywords,
reset seeds and options, actions of every shape, dtype and form, the single env's ``state``, SB3's seeds and
indices. Allowed: the answer the NumPy reference gives for the same inputs, or a ValueError/TypeError naming
the argument with the env as it was."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from portkern import envs, step
from portkern.backends import BackendUnavailable
from tests._fuzz_helpers import ANY_DTYPES, CHEAP, Rejected, allowed, as_form, backend_params, forms, host, outcome
from tests._hypothesis_profiles import fuzz

gym_adapter = pytest.importorskip("portkern.gym")
PAIRS = backend_params(CHEAP)
ENV_IDS = ("CartPole-v1", "Pendulum-v1")
N = 3


def _state(env) -> tuple[np.ndarray, np.ndarray]:
    s = env.get_state()
    return s["state"].copy(), s["steps"].copy()


def _unchanged(before, env) -> None:
    for a, b in zip(before, _state(env)):
        np.testing.assert_array_equal(a, b)


def _vector_actions(draw, spec, n):
    kind = draw(st.sampled_from(["valid", "valid", "valid", "dtype", "shape", "range", "object"]))
    if spec.is_discrete:
        a = np.array(draw(st.lists(st.integers(0, spec.discrete_actions - 1), min_size=n, max_size=n)), np.int64)
        if kind == "range":
            a[0] = draw(st.sampled_from([-1, spec.discrete_actions, 2**40]))
    else:
        high = float(spec.action_high)
        a = np.array(draw(st.lists(st.floats(-high, high, width=32), min_size=n, max_size=n)), np.float32).reshape(n, 1)
        if kind == "range":
            a[0, 0] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    if kind == "dtype":
        a = a.astype(draw(st.sampled_from(ANY_DTYPES)))
    elif kind == "shape":
        a = draw(st.sampled_from([a[:-1], a.reshape(1, -1), a.reshape(-1)[:1], np.stack([a, a], -1)]))
    elif kind == "object":
        return draw(st.sampled_from([None, "1", object(), 1.5, [None] * n]))
    return as_form(a, draw(forms))


# ---- Gymnasium: the vector env --------------------------------------------------------------------------
@pytest.mark.parametrize("pair", PAIRS)
@given(data=st.data())
@fuzz(10)
def test_make_vec(pair, data):
    kwargs = {"backend": pair[0], "device": pair[1]}
    env_id = data.draw(st.one_of(st.sampled_from([*ENV_IDS, "portkern/CartPole-v1", "Nope-v0"]), st.integers(), st.none()))
    num_envs = data.draw(st.one_of(st.integers(1, 5), st.integers(-2, 0), st.floats(), st.text(max_size=2)))
    for name, strat in {
        "seed": st.one_of(st.integers(0, 2**32 - 1), st.integers(-5, -1), st.integers(2**32, 2**40), st.text(max_size=2),
                          st.lists(st.integers(-1, 2**32), max_size=6)),
        "autoreset": st.one_of(st.sampled_from(["same_step", "next_step", "disabled"]), st.text(max_size=3), st.integers()),
        "autoreset_mode": st.one_of(st.sampled_from(["next_step", "same_step", "disabled", "NextStep"]), st.integers()),
        "render_mode": st.one_of(st.sampled_from(["rgb_array", "ansi", "human_", ""]), st.integers()),
        "max_episode_steps": st.one_of(st.integers(-1, 1000), st.none(), st.floats()),
        "params": st.one_of(st.dictionaries(st.sampled_from(["gravity", "g", "nope"]), st.floats(), max_size=2),
                            st.text(max_size=2)),
        "frameskip": st.integers(0, 3),
    }.items():  # fmt: skip
        if data.draw(st.integers(0, 3), label=f"give {name}") == 0:
            kwargs[name] = data.draw(strat, label=name)
    names = ("env_id", "num_envs", *kwargs, "seed[")
    try:
        ok, env = outcome(lambda: gym_adapter.make_vec(env_id, num_envs, **kwargs), *names)
    except BackendUnavailable:
        return
    if ok:
        assert env.num_envs == num_envs
        obs, _ = env.reset()
        assert obs.shape == (num_envs, env.single_observation_space.shape[0])


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("env_id", ENV_IDS)
@given(data=st.data())
@fuzz(10)
def test_vector_env_reset_and_step(pair, env_id, data):
    env = gym_adapter.make_vec(env_id, N, backend=pair[0], device=pair[1], autoreset="same_step")
    ref = gym_adapter.make_vec(env_id, N, autoreset="same_step")  # NumPy: the host loop of scalar envs
    seed = data.draw(st.one_of(st.integers(0, 2**32 - 1), st.lists(st.integers(0, 2**32 - 1), min_size=N, max_size=N)
                               .map(lambda s: [s[0]] * N), st.integers(-3, -1), st.text(max_size=2),
                               st.lists(st.integers(0, 9), max_size=N + 1)), label="seed")  # fmt: skip
    options = data.draw(st.sampled_from([None, {}, {"reset_mask": np.ones(N, bool)}, {"x": 1}]), label="options")
    env.reset(seed=1)
    before = _state(env.env)
    try:
        with allowed("seed", "seed[", "options"):
            obs, info = env.reset(seed=seed, options=options)
    except Rejected:
        _unchanged(before, env.env)
        return
    np.testing.assert_allclose(obs, ref.reset(seed=seed)[0], rtol=1e-5, atol=1e-5)
    for _ in range(2):
        actions = _vector_actions(data.draw, envs.get(env_id), N)
        before = _state(env.env)
        try:
            with allowed("actions"):
                obs, rew, term, trunc, infos = env.step(actions)
        except Rejected:
            _unchanged(before, env.env)
            continue
        want = ref.step(np.asarray(host(actions)))
        np.testing.assert_allclose(obs, want[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(rew, want[1], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(term, want[2])
        assert rew.dtype == np.float64 and term.dtype == np.bool_ and trunc.dtype == np.bool_


# ---- Gymnasium: the single env ----------------------------------------------------------------------------
@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("env_id", ENV_IDS)
@given(data=st.data())
@fuzz(10)
def test_single_env(pair, env_id, data):
    import gymnasium

    env = gymnasium.make(f"portkern/{env_id}", backend=pair[0], device=pair[1]).unwrapped
    ref = gym_adapter.PortkernEnv(env_id)  # the NumPy reference (its host loop)
    seed = data.draw(st.one_of(st.integers(0, 2**32 - 1), st.integers(-3, -1), st.integers(2**32, 2**34),
                               st.text(max_size=2), st.floats(), st.booleans()), label="seed")  # fmt: skip
    env.reset(seed=5)
    before = env.state.copy()
    try:
        with allowed("seed"):
            obs, _ = env.reset(seed=seed)
    except Rejected:
        np.testing.assert_array_equal(env.state, before)
        return
    np.testing.assert_allclose(obs, ref.reset(seed=seed)[0], rtol=1e-5, atol=1e-5)
    spec = ref.env.spec if hasattr(ref.env, "spec") else None
    for _ in range(3):
        if env_id == "CartPole-v1":
            action = data.draw(st.one_of(st.integers(0, 1), st.integers(-2, 5), st.just(np.int64(1)), st.floats(),
                                         st.just(np.array([1])), st.just(np.array(1.0)), st.none(), st.text(max_size=1),
                                         st.booleans(), st.just(np.uint64(2**63))), label="action")  # fmt: skip
        else:
            action = data.draw(st.one_of(st.floats(-2, 2, width=32).map(lambda v: np.array([v], np.float32)),
                                         st.floats(allow_nan=True), st.just(np.array([np.nan], np.float32)),
                                         st.just(np.array([1.0, 2.0])), st.just(np.array([1], np.int32)),
                                         st.just([0.5]), st.none(), st.text(max_size=1)), label="action")  # fmt: skip
        if data.draw(st.booleans(), label="set state"):
            state = data.draw(st.one_of(
                st.lists(st.floats(-0.04, 0.04), min_size=len(before), max_size=len(before)).map(np.array),
                st.sampled_from([np.zeros(len(before) + 1), np.full(len(before), np.nan), "x", None, np.zeros((1, len(before)))]),
            ), label="state")  # fmt: skip
            was = env.state.copy()
            try:
                with allowed("state"):
                    env.state = state
                ref.state = state
                np.testing.assert_allclose(env.state, np.asarray(state, env.state.dtype))
            except Rejected:
                np.testing.assert_array_equal(env.state, was)
        was = env.state.copy()
        try:
            with allowed("action"):
                obs, reward, term, trunc, info = env.step(action)
        except Rejected:
            np.testing.assert_array_equal(env.state, was)
            continue
        want = ref.step(action)
        np.testing.assert_allclose(obs, want[0], rtol=1e-4, atol=1e-4)
        assert abs(reward - want[1]) <= 1e-4 * max(1.0, abs(want[1])) and (term, trunc) == want[2:4]
        if term or trunc:
            env.reset(seed=7)
            ref.reset(seed=7)
    del spec


# ---- Stable-Baselines3 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("pair", PAIRS)
@given(data=st.data())
@fuzz(10)
def test_sb3_vec_env(pair, data):
    sb3 = pytest.importorskip("portkern.sb3")
    env_id = data.draw(st.sampled_from(ENV_IDS), label="env_id")
    venv = sb3.make_vec_env(env_id, N, seed=3, backend=pair[0], device=pair[1], monitor=False)
    ref = step.make(env_id, N, autoreset="same_step")
    seed = data.draw(st.one_of(st.integers(0, 2**32 - 1), st.integers(-3, -1), st.integers(2**32, 2**34), st.text(max_size=2),
                               st.floats(), st.none()), label="seed")  # fmt: skip
    ok, got = outcome(lambda: venv.seed(seed), "seed")
    if not ok:
        seed = 4
        venv.seed(seed)
    elif seed is None:
        seed = got[0]
    np.testing.assert_allclose(venv.reset(), host(ref.reset(seed)), rtol=1e-5, atol=1e-5)
    for _ in range(2):
        actions = _vector_actions(data.draw, ref.spec, N)
        before = _state(venv.env)
        try:
            with allowed("actions"):
                obs, rewards, dones, infos = venv.step(actions)
        except Rejected:
            _unchanged(before, venv.env)
            continue
        want = ref.step(np.asarray(host(actions)))
        np.testing.assert_allclose(obs, host(want[0]), rtol=1e-4, atol=1e-4)
        assert rewards.dtype == np.float32 and dones.dtype == np.bool_ and len(infos) == N
    indices = data.draw(st.one_of(st.none(), st.integers(-2, N + 1), st.lists(st.integers(-1, N), max_size=4),
                                  st.text(max_size=2), st.floats(), st.just(np.arange(N))), label="indices")  # fmt: skip
    attr = data.draw(st.sampled_from(["num_envs", "observation_space", "render_mode", "nope", "spec"]), label="attr")
    try:
        with allowed("indices", "get_attr"):
            values = venv.get_attr(attr, indices)
    except Rejected:
        pass
    except AttributeError as exc:  # an attribute the batch does not have: DummyVecEnv's AttributeError too
        assert attr == "nope" and "nope" in str(exc)
    else:
        assert len(values) == len(venv._get_indices(indices))


def test_adapter_regressions():
    with pytest.raises(TypeError, match="^env_id:"):  # was AttributeError: 'NoneType' object has no attribute 'removeprefix'
        gym_adapter.make_vec(None, 2)
    sb3 = pytest.importorskip("portkern.sb3")
    with pytest.raises(TypeError, match="^env_id:"):  # was AttributeError: 'int' object has no attribute 'removeprefix'
        sb3.make_vec_env(3, 2)
    venv = sb3.make_vec_env("CartPole-v1", 2, seed=1, monitor=False)
    with pytest.raises(TypeError, match="^indices:"):  # was TypeError: 'float' object is not iterable
        venv.get_attr("num_envs", 1.5)
    venv.reset()
    venv.step_async(None)  # was RuntimeError("step_wait() called without step_async(actions)")
    with pytest.raises(TypeError, match="^actions:"):
        venv.step_wait()
    with pytest.raises(RuntimeError, match="without step_async"):  # the rejected actions are not stepped again
        venv.step_wait()
