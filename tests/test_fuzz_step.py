"""Fuzzing ``step.make`` and ``VectorEnv`` (reset, step, set_state, get_state, rollout) on every backend that runs
here. Every call either gives the right answer (the NumPy reference's, for the same inputs) or raises a
ValueError/TypeError naming the argument, with the env's state as it was."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from portkern import envs, step
from portkern.backends import BackendUnavailable, EnvKernelMissing
from portkern.policy import MLPPolicy, RandomPolicy
from tests._fuzz_helpers import (
    ANY_DTYPES, CHEAP, COMPILING, Rejected, allowed, as_form, backend_params, forms, host, long_profile, outcome,
    wild_floats,
)  # fmt: skip
from tests._hypothesis_profiles import fuzz

ENV_IDS = list(envs.ENVS)
#: The envs the stepping fuzz runs (one discrete, one Box): each backend builds their kernels once.
STEP_ENVS = ("CartPole-v1", "Pendulum-v1")
N = 5  # envs per batch: under any vector width, so a remainder path runs

_ENVS: dict[tuple, step.VectorEnv] = {}


def _env(pair, env_id: str) -> step.VectorEnv:
    key = (pair, env_id)
    if key not in _ENVS:
        _ENVS[key] = step.make(env_id, N, backend=pair[0], device=pair[1])
    return _ENVS[key]


def _reference(env_id: str) -> step.VectorEnv:
    """The NumPy reference: an env of its own, also when the backend under test is numpy."""
    key = ("reference", env_id)
    if key not in _ENVS:
        _ENVS[key] = step.make(env_id, N)
    return _ENVS[key]


#: The stepping fuzz's backends: torch_compile and jax compile every env first (a minute for torch_compile on 2
#: cores), so they join under --hypothesis-profile=long only; test_make runs them always (make compiles nothing).
STEP_PAIRS = backend_params(CHEAP + (COMPILING if long_profile() else []))




def _snapshot(env: step.VectorEnv) -> tuple[np.ndarray, ...]:
    s = env.get_state()
    return s["state"].copy(), s["steps"].copy(), host(env.obs).copy()


def _assert_unchanged(before, env: step.VectorEnv) -> None:
    after = _snapshot(env)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def _close(got, want, what: str) -> None:
    np.testing.assert_allclose(host(got), host(want), rtol=1e-4, atol=1e-4, equal_nan=True, err_msg=what)


# ---- make -------------------------------------------------------------------------------------------------
_param_values = st.one_of(
    wild_floats, st.integers(-(10**400), 10**400), st.text(max_size=4), st.none(), st.booleans(),
    st.lists(st.floats(), max_size=2), st.just(np.float32(0.5)), st.just(np.float64(2.0)), st.just(1 + 2j),
)  # fmt: skip


@st.composite
def _make_args(draw, pair):
    env_id = draw(st.one_of(st.sampled_from(ENV_IDS), st.text(max_size=8), st.integers(), st.none()))
    kwargs: dict = {}
    num_envs = draw(st.one_of(st.integers(1, 9), st.integers(-(2**40), 0), st.integers(2**31, 2**70),
                              st.floats(allow_nan=True), st.booleans(), st.text(max_size=3),
                              st.just(np.int64(3)), st.just(np.uint8(2))))  # fmt: skip
    if draw(st.booleans()):
        kwargs["seed"] = draw(st.one_of(st.integers(0, 2**32 - 1), st.integers(-(2**70), -1), st.integers(2**32, 2**80),
                                        st.floats(), st.text(max_size=3), st.none(), st.just(np.int32(4))))  # fmt: skip
    if draw(st.booleans()):
        kwargs["dtype"] = draw(st.sampled_from(["float32", "float64", np.float32, np.float64, "float16", "int32", None,
                                                "f4", ">f4", "<f8", ">f8", np.dtype(">f4"), 3, "bogus", object, "f"]))
    if draw(st.booleans()):
        kwargs["autoreset"] = draw(st.one_of(st.sampled_from(["same_step", "next_step", "disabled", "SAME_STEP"]),
                                             st.text(max_size=4), st.none(), st.integers(0, 3)))  # fmt: skip
    if draw(st.booleans()):
        spec = envs.ENVS.get(env_id) if isinstance(env_id, str) else None
        names = [p.name for p in spec.user_params] if spec is not None else ["gravity"]
        keys = st.one_of(st.sampled_from(names), st.text(max_size=5))
        kwargs["params"] = draw(st.one_of(st.dictionaries(keys, _param_values, max_size=3), st.none(),
                                          st.lists(st.floats(), max_size=2), st.text(max_size=3)))  # fmt: skip
    if draw(st.booleans()):
        name = draw(st.sampled_from(["links", "link", "num_links", "K"]))
        kwargs[name] = draw(st.one_of(st.integers(-3, 20), st.floats(), st.text(max_size=2), st.none()))
    backend, device = pair
    if draw(st.integers(0, 9)) == 0:
        backend = draw(st.one_of(st.text(max_size=6), st.integers(), st.none(), st.sampled_from(["cupy", "OPENCL"])))
    if draw(st.integers(0, 9)) == 0:
        device = draw(st.one_of(st.text(max_size=6), st.integers(), st.sampled_from(["cpu", "gpu", "oclgrind"])))
    kwargs["backend"], kwargs["device"] = backend, device
    return env_id, num_envs, kwargs


@pytest.mark.parametrize("pair", backend_params(CHEAP + COMPILING))
@given(data=st.data())
@fuzz(12)
@example(data=None)  # the regressions found, pinned below in test_make_regressions
def test_make(pair, data):
    if data is None:
        return
    env_id, num_envs, kwargs = data.draw(_make_args(pair))
    names = ["env_id", "num_envs", "params", *kwargs]
    try:
        ok, env = outcome(lambda: step.make(env_id, num_envs, **kwargs), *names)
    except (BackendUnavailable, EnvKernelMissing):  # a backend name that does not run here: said, not a crash
        return
    if not ok:
        return
    assert env.num_envs == num_envs and env.spec.id == env_id.strip() if isinstance(env_id, str) else True
    assert env.dtype in (np.dtype(np.float32), np.dtype(np.float64)) and env.dtype.isnative, env.dtype
    given_params = kwargs.get("params") or {}
    for name, value in given_params.items():
        assert env.params[name] == float(value)
        assert math.isfinite(env.params[name]), (name, value)
    if env.spec.id in STEP_ENVS and (pair not in COMPILING or long_profile()) and env.backend.name == pair[0]:
        obs = host(env.reset())
        assert obs.shape == (num_envs, env.spec.obs_dim) and obs.dtype == env.dtype


def test_make_regressions():
    """What fuzzing test_make found, fixed: each is a ValueError/TypeError naming the argument now."""
    with pytest.raises(ValueError, match=r"^params\['gravity'\]"):  # was OverflowError from float()
        step.make("CartPole-v1", 2, params={"gravity": 10**400})
    with pytest.raises(TypeError, match=r"^params\['gravity'\]"):  # a string was read as a number
        step.make("CartPole-v1", 2, params={"gravity": "9.8"})
    env = step.make("CartPole-v1", 2, dtype=">f4")  # a big-endian dtype name: the native float32 it names
    assert env.dtype == np.dtype(np.float32) and env.dtype.isnative
    env.reset(seed=1)
    assert host(env.obs).dtype.isnative


# ---- reset -------------------------------------------------------------------------------------------------
_seeds = st.one_of(st.integers(0, 2**32 - 1), st.integers(-(2**64), -1), st.integers(2**32, 2**70), st.none(),
                   st.floats(), st.text(max_size=3), st.booleans(), st.just(np.int64(7)), st.just(np.uint32(9)))  # fmt: skip


@pytest.mark.parametrize("pair", STEP_PAIRS)
@pytest.mark.parametrize("env_id", STEP_ENVS)
@given(seed=_seeds)
@fuzz(6)
def test_reset(pair, env_id, seed):
    env, ref = _env(pair, env_id), _reference(env_id)
    env.reset(seed=11)
    ref.reset(seed=11)
    before = _snapshot(env)
    try:
        with allowed("seed"):
            obs = env.reset(seed=seed)
    except Rejected:
        _assert_unchanged(before, env)
        return
    _close(obs, ref.reset(seed=seed), f"reset(seed={seed!r})")


# ---- step ---------------------------------------------------------------------------------------------------
@st.composite
def _actions(draw, env: step.VectorEnv):
    spec = env.spec
    n = env.num_envs
    kind = draw(st.sampled_from(["valid", "valid", "dtype", "shape", "values", "object"]))
    if spec.is_discrete:
        k = spec.discrete_actions
        values = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
        dtype = draw(st.sampled_from([np.int32, np.int64, np.uint8, np.int8, np.uint64]))
        if kind == "values":
            bad = draw(st.sampled_from([-1, k, 2**31, -(2**31), 2**32 + 1, 2**63 - 1]))
            values[draw(st.integers(0, n - 1))] = bad
            dtype = np.int64 if bad < 2**63 else np.uint64
        a = np.array(values, dtype=dtype)
    else:
        high = float(spec.action_high)
        values = draw(st.lists(st.floats(-high, high, width=32), min_size=n, max_size=n))
        dtype = draw(st.sampled_from([np.float32, np.float64]))
        if kind == "values":
            values[draw(st.integers(0, n - 1))] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e39]))
        a = np.array(values, dtype=dtype)
        if draw(st.booleans()):
            a = a.reshape(n, 1)
    if kind == "dtype":
        a = a.astype(draw(st.sampled_from(ANY_DTYPES)))
    elif kind == "shape":
        a = draw(st.sampled_from([a[:-1], np.concatenate([a, a[:1]]), a.reshape(1, -1), a[:0], a.reshape(-1)[0],
                                  np.stack([a, a], -1)]))  # fmt: skip
    elif kind == "object":
        return draw(st.sampled_from([None, "0", object(), {"a": 1}, 1.5, [None] * n, b"\x00" * n]))
    return as_form(np.asarray(a), draw(forms_for(a)))


def forms_for(a):
    return forms


@pytest.mark.parametrize("pair", STEP_PAIRS)
@pytest.mark.parametrize("env_id", STEP_ENVS)
@given(data=st.data())
@fuzz(12)
def test_step(pair, env_id, data):
    env, ref = _env(pair, env_id), _reference(env_id)
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    env.reset(seed=seed)
    ref.reset(seed=seed)
    actions = data.draw(_actions(env), label="actions")
    before = _snapshot(env)
    try:
        with allowed("actions"):
            obs, reward, terminated, truncated = env.step(actions)
    except Rejected:
        _assert_unchanged(before, env)
        return
    want = ref.step(np.asarray(host(actions)))
    for got, exp, what in zip((obs, reward, terminated, truncated), want, ("obs", "reward", "terminated", "truncated")):
        _close(got, exp, f"{what} after step({actions!r})")


@pytest.mark.parametrize("other", ["pocl", "intel"])
def test_an_opencl_array_of_another_device_is_copied_not_handed_to_the_kernel(other):
    """Found by test_step: a PoCL array as the actions of an Intel env (owned by the opencl backend, but of
    another context) went to the kernel as it was, and the driver crashed the process (segfault in
    pk_count_nonfinite_f32). It is copied through the host now, like any other backend's array; set_state
    takes device arrays too (they were read as arrays of Python objects)."""
    from tests._fuzz_helpers import _available

    this = "intel" if other == "pocl" else "pocl"
    for dev in (this, other):
        if _available(("opencl", dev)):
            pytest.skip(_available(("opencl", dev)))
    from portkern.backends import get_backend

    env, ref = step.make("Pendulum-v1", 3, backend="opencl", device=this), step.make("Pendulum-v1", 3)
    theirs = get_backend("opencl", other)
    actions = np.array([0.5, -1.0, 2.0], np.float32)
    env.reset(seed=2)
    ref.reset(seed=2)
    _close(env.step(theirs.from_host(actions))[0], ref.step(actions)[0], "obs")
    with pytest.raises(ValueError, match="^actions:"):
        env.step(theirs.from_host(np.array([0.5, np.nan, 2.0], np.float32)))
    state = np.array([[0.1, 0.2], [0.3, 0.4], [-0.5, 0.6]], np.float32)
    env.set_state(theirs.from_host(state), theirs.from_host(np.array([1, 2, 3], np.int32)))
    np.testing.assert_array_equal(env.get_state()["state"], state)
    np.testing.assert_array_equal(env.get_state()["steps"], [1, 2, 3])


def test_step_regressions():
    env = step.make("CartPole-v1", 3)
    env.reset(seed=0)
    before = _snapshot(env)
    for bad in (np.array([0, 1, 2**32], np.int64), np.array([0, 1, 2**63 - 1], np.int64), np.array([0, 1, -1])):
        with pytest.raises(ValueError, match="^actions:"):
            env.step(bad)
    _assert_unchanged(before, env)


# ---- set_state / get_state --------------------------------------------------------------------------------
@st.composite
def _state_args(draw, env: step.VectorEnv):
    n, d, limit = env.num_envs, env.spec.state_dim, env.spec.max_episode_steps
    state = draw(st.one_of(
        st.none(),
        st.lists(st.lists(st.floats(-1.0, 1.0, width=32), min_size=d, max_size=d), min_size=n, max_size=n)
        .map(lambda v: np.array(v, np.float64)),
        st.lists(st.lists(wild_floats, min_size=d, max_size=d), min_size=n, max_size=n).map(np.array),
        st.sampled_from([np.zeros((n, d + 1)), np.zeros((n + 1, d)), np.zeros(n * d), np.zeros((d, n)), np.full((n, d), 1e39),
                         np.zeros((n, d), np.complex64), np.zeros((n, d), bool), np.zeros((n, d), np.float16),
                         np.zeros((n, d), np.int64), "state", 3.0]),
    ))  # fmt: skip
    steps = draw(st.one_of(
        st.none(),
        st.lists(st.integers(0, limit - 1), min_size=n, max_size=n).map(lambda v: np.array(v, np.int64)),
        st.lists(st.integers(-5, limit + 5), min_size=n, max_size=n).map(np.array),
        st.sampled_from([np.zeros(n, np.float32), np.zeros(n + 1, np.int32), np.zeros((n, 1), np.int32),
                         np.full(n, 2**40, np.int64), np.zeros(n, np.uint64), "steps"]),
    ))  # fmt: skip
    if isinstance(state, np.ndarray) and state.dtype != np.complex64:
        state = as_form(state, draw(forms))
    if isinstance(steps, np.ndarray):
        steps = as_form(steps, draw(forms))
    return state, steps


@pytest.mark.parametrize("pair", STEP_PAIRS)
@pytest.mark.parametrize("env_id", STEP_ENVS)
@given(data=st.data())
@fuzz(12)
@example(data=None)
def test_set_state(pair, env_id, data):
    env = _env(pair, env_id)
    if data is None:  # pinned: a float64 state beyond float32's range used to be stored as inf
        env.reset(seed=0)
        before = _snapshot(env)
        with pytest.raises(ValueError, match="^state:"):
            env.set_state(np.full((N, env.spec.state_dim), 1e39))
        _assert_unchanged(before, env)
        return
    env.reset(seed=data.draw(st.integers(0, 2**32 - 1), label="seed"))
    state, steps = data.draw(_state_args(env), label="state, steps")
    before = _snapshot(env)
    try:
        with allowed("state", "steps"):
            env.set_state(state, steps)
    except Rejected:
        _assert_unchanged(before, env)
        return
    got = env.get_state()
    assert got["state"].shape == (N, env.spec.state_dim) and got["steps"].shape == (N,)
    if state is not None:
        np.testing.assert_array_equal(got["state"], np.asarray(host(state)).astype(env.dtype))
        _close(env.obs, env.spec.observe(np.asarray(host(state), env.dtype).T), "obs of the state set")
    else:
        np.testing.assert_array_equal(got["state"], before[0])
    np.testing.assert_array_equal(got["steps"], before[1] if steps is None else np.asarray(host(steps)))
    env.step(np.zeros(N, np.int32) if env.spec.is_discrete else np.zeros(N, np.float32))  # and it still steps


# ---- rollout -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pair", STEP_PAIRS)
@pytest.mark.parametrize("env_id", STEP_ENVS)
@given(
    steps=st.one_of(st.integers(1, 6), st.integers(-3, 0), st.integers(2**31, 2**40), st.floats(), st.none(),
                    st.text(max_size=2)),
    path=st.one_of(st.sampled_from(["fused", "device", "host"]), st.text(max_size=4), st.none()),
    spl=st.one_of(st.none(), st.integers(-2, 8), st.floats(), st.text(max_size=2)),
    policy=st.sampled_from(["random", "mlp", "mlp-wrong", None, "random-str", 0]),
    seed=st.integers(0, 2**32 - 1),
    buffer=st.sampled_from(["none", "none", "own", "host", "other-steps", "numpy", "junk"]),
)  # fmt: skip
@fuzz(10)
@example(steps=2, path="fused", spl=None, policy="random", seed=0, buffer="junk")  # was AttributeError: 'str' has no 'steps'
@example(steps=1, path="host", spl=None, policy="random", seed=0, buffer="own")  # cuda_host: TypeError, item assignment
def test_rollout(pair, env_id, steps, path, spl, policy, seed, buffer):
    env, ref = _env(pair, env_id), _reference(env_id)
    spec = env.spec
    other = envs.get("Acrobot-v1")  # 6 observations: an MLP for another env
    pol = {"random": RandomPolicy(), "mlp": MLPPolicy.init(spec, 8, seed=3), "mlp-wrong": MLPPolicy.init(other, 8, seed=3),
           "random-str": "random"}.get(policy, policy)  # fmt: skip
    env.reset(seed=seed)
    ref.reset(seed=seed)
    before = _snapshot(env)
    kwargs = {"path": path, "steps_per_launch": spl}
    if buffer != "none":
        t = steps if isinstance(steps, int) and 1 <= steps <= 6 else 2
        kwargs["buffer"] = {"own": lambda: env.rollout_buffer(t), "host": lambda: env.rollout_buffer(t, host=True),
                            "other-steps": lambda: env.rollout_buffer(t + 1), "numpy": lambda: ref.rollout_buffer(t),
                            "junk": lambda: "buffer"}[buffer]()  # fmt: skip
    try:
        with allowed("steps", "path", "steps_per_launch", "policy", "buffer"):
            buf = env.rollout(steps, pol, **kwargs)
    except Rejected:
        _assert_unchanged(before, env)
        return
    want = ref.rollout(steps, pol, path="fused")
    for field in ("obs", "actions", "rewards", "terminated", "truncated", "final_obs"):
        _close(getattr(buf, field), getattr(want, field), f"rollout {field}")
    _close(env.obs, ref.obs, "obs after the rollout")
