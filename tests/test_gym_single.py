"""The single env's host path (portkern._scalar): bit-identical to env 0 of the batched numpy reference,
through random states, random actions, autoresets and the reset stream; and the rest of its contract
(action checks, episode limits, the Gymnasium version it needs)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

import portkern  # noqa: E402
from portkern import step as pk_step  # noqa: E402
from portkern import _scalar  # noqa: E402
from portkern._scalar import FAST_STEPS, ScalarEnv, supports_scalar_path  # noqa: E402
from portkern.gym import PortkernEnv  # noqa: E402

#: The envs the scalar engine runs: one env at its declared sizes, one action (not Chain-v0's K-wide Box).
ENV_IDS = sorted(e for e in portkern.envs.ENVS if _scalar.scalar_engine_runs(e))
# Every env on the reference-on-scalars path, and the specialised steps where an env has one.
PATHS = [(e, False) for e in ENV_IDS] + [(e, True) for e in ENV_IDS if portkern.envs.get(e).kernel in FAST_STEPS]


def scalar_action(spec, batch_actions: np.ndarray):
    """Env 0's action as PortkernEnv hands it to the scalar env: an int, or a float32 scalar."""
    return int(batch_actions[0]) if spec.is_discrete else np.float32(batch_actions[0, 0])


def assert_same(single, batch, what: str) -> None:
    s, b = single, batch
    assert type(s) is type(b), f"{what}: {type(s).__name__} != {type(b).__name__}"
    if isinstance(s, np.ndarray):
        assert s.dtype == b.dtype and s.shape == b.shape, what
    # Bit patterns, so -0.0 vs 0.0 and NaN payloads count as differences.
    assert np.asarray(s).tobytes() == np.asarray(b).tobytes(), f"{what}: {s!r} != {b!r}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("env_id", "fast"), PATHS)
def test_scalar_env_is_bit_identical_to_env_zero_of_the_batch_through_autoresets(env_id, fast, dtype) -> None:
    spec = portkern.envs.get(env_id)
    rng = np.random.default_rng(7)
    single = ScalarEnv(env_id, seed=11, dtype=dtype, fast=fast)
    batch = pk_step.make(env_id, 3, seed=11, dtype=dtype, autoreset="next_step")
    assert_same(single.reset(), batch.reset()[0], "reset obs")
    episodes = 0
    for t in range(max(1200, 2 * spec.max_episode_steps + 50)):
        actions = spec.random_actions(rng, 3)
        obs, reward, term, trunc = single.step(scalar_action(spec, actions))
        b_obs, b_rew, b_term, b_trunc = batch.step(actions)
        assert_same(obs, b_obs[0], f"obs at step {t}")
        assert_same(reward, b_rew[0], f"reward at step {t}")
        assert (term, trunc) == (bool(b_term[0]), bool(b_trunc[0])), f"flags at step {t}"
        episodes += term or trunc
    assert episodes >= 2, "the run must cross autoresets to test the reset stream"


@pytest.mark.parametrize(("env_id", "fast"), PATHS)
def test_scalar_step_equals_the_batched_reference_on_random_states(env_id, fast) -> None:
    # States across the region and packed at thresholds, clips and wraps (the env's parity_states),
    # one step each with a random action (continuous ones overshoot the bound: the env clips).
    spec = portkern.envs.get(env_id)
    rng = np.random.default_rng(3)
    n = 300
    states = spec.parity_states(rng, n).astype(np.float32)
    actions = spec.random_actions(rng, n)
    batch = pk_step.make(env_id, n, seed=0, autoreset="next_step")
    batch.set_state(states)
    b_obs, b_rew, b_term, _ = (np.array(a, copy=True) for a in batch.step(actions))
    single = ScalarEnv(env_id, seed=0, fast=fast)
    for i in range(n):
        single.set_state(states[i : i + 1], np.array([0]))
        obs, reward, term, _ = single.step(scalar_action(spec, actions[i : i + 1]))
        assert_same(obs, b_obs[i], f"obs from state {states[i]!r}, action {actions[i]!r}")
        assert_same(reward, b_rew[i], f"reward from state {states[i]!r}")
        assert term == bool(b_term[i]), f"terminated from state {states[i]!r}"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_and_following_resets_are_the_batched_env_zeros(env_id) -> None:
    # Same seed -> env 0's reset state; each unseeded reset() -> env 0's next episode of that stream.
    single = ScalarEnv(env_id, seed=0)
    for seed in (0, 5, 2**32 - 1):
        batch = pk_step.make(env_id, 2, seed=seed)
        assert_same(single.reset(seed), batch.reset()[0], f"seed {seed}")
        for episode in range(1, 4):
            assert_same(single.reset(), batch.reset()[0], f"seed {seed}, episode {episode}")


def test_reset_stream_crosses_a_block_of_precomputed_draws() -> None:
    single = ScalarEnv("CartPole-v1", seed=9)
    batch = pk_step.make("CartPole-v1", 1, seed=9)
    single.reset(), batch.reset()
    for _ in range(70):  # past the first block of 64 episodes' draws
        single.reset(), batch.reset()
    assert_same(single.reset(), batch.reset()[0], "episode 71")


def test_gym_make_builds_the_host_scalar_path_and_matches_gymnasium_physics() -> None:
    env = gymnasium.make("portkern/CartPole-v1")
    assert isinstance(env.unwrapped.env, ScalarEnv)
    obs, _ = env.reset(seed=0)
    theirs = gymnasium.make("CartPole-v1").unwrapped
    theirs.reset(seed=0)
    theirs.state = np.asarray(obs, dtype=np.float64)
    for t in range(8):
        obs, _, term, *_ = env.step(t % 2)
        their_obs, _, their_term, *_ = theirs.step(t % 2)
        # float32 physics against Gymnasium's float64: within the float32 parity tolerance.
        np.testing.assert_allclose(obs, their_obs, atol=2e-6)
        assert term == their_term


@pytest.mark.parametrize(
    ("action", "expected"),
    [(1, 1), (np.int64(1), 1), (np.array(1), 1), (np.uint8(0), 0)],
    ids=["int", "np.int64", "0-d array", "np.uint8"],
)
def test_discrete_actions_of_every_int_kind_are_accepted(action, expected) -> None:
    env = PortkernEnv("CartPole-v1")
    env.reset(seed=0)
    ref = PortkernEnv("CartPole-v1")
    ref.reset(seed=0)
    np.testing.assert_array_equal(env.step(action)[0], ref.step(expected)[0])


@pytest.mark.parametrize("action", [True, np.bool_(True), -1, np.int64(2), [1]])
def test_discrete_action_outside_the_space_is_rejected(action) -> None:
    env = PortkernEnv("CartPole-v1")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action: expected an int in \[0, 2\) \(Discrete\(2\)\)"):
        env.step(action)


@pytest.mark.parametrize(
    "action", [np.array([0.5], np.float32), np.array([0.5]), 0.5, np.float32(0.5), np.array(0.5)],
    ids=["float32[1]", "float64[1]", "float", "np.float32", "0-d"],
)
def test_continuous_actions_are_taken_as_float32(action) -> None:
    env = PortkernEnv("Pendulum-v1")
    env.reset(seed=0)
    ref = PortkernEnv("Pendulum-v1")
    ref.reset(seed=0)
    np.testing.assert_array_equal(env.step(action)[0], ref.step(np.array([0.5], np.float32))[0])


@pytest.mark.parametrize("action", [np.array([np.inf], np.float32), np.array([1, 2], np.float32), np.array([1])])
def test_continuous_action_not_a_finite_float_is_rejected(action) -> None:
    env = PortkernEnv("Pendulum-v1")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action: expected a finite float array of shape \(1,\)"):
        env.step(action)


def test_single_env_takes_a_longer_episode_limit_on_the_host() -> None:
    env = PortkernEnv("CartPole-v1", max_episode_steps=1000)
    env.reset(seed=0)
    env.env.set_state(np.zeros((1, 4)), np.array([998]))
    assert env.step(0)[3] is False  # step 999: past CartPole's own 500
    assert env.step(1)[3] is True  # step 1000


def test_single_env_refuses_an_episode_limit_its_device_kernels_cannot_count() -> None:
    with pytest.raises(ValueError, match=r"max_episode_steps: on the torch backend, CartPole-v1's kernels truncate at"):
        PortkernEnv("CartPole-v1", backend="torch", max_episode_steps=1000)


def test_make_vec_refusal_of_a_longer_limit_gives_the_reason() -> None:
    with pytest.raises(ValueError, match=r"truncates at 500 steps, got 1000: the batched env's kernels count steps"):
        gymnasium.make_vec("portkern/CartPole-v1", num_envs=2, max_episode_steps=1000)


def test_single_env_on_a_device_backend_is_env_zero_of_the_batch() -> None:
    pytest.importorskip("torch")
    host, device = PortkernEnv("Pendulum-v1"), PortkernEnv("Pendulum-v1", backend="torch")
    np.testing.assert_allclose(host.reset(seed=3)[0], device.reset(seed=3)[0], atol=1e-6)
    for _ in range(5):
        a = np.array([0.7], np.float32)
        np.testing.assert_allclose(host.step(a)[0], device.step(a)[0], atol=1e-5)


def _load_gym_adapter_with(monkeypatch, fake_gymnasium: types.ModuleType, fake_vector: types.ModuleType):
    """Execute portkern/gym.py afresh with a stand-in Gymnasium (the installed one stays loaded elsewhere)."""
    monkeypatch.setitem(sys.modules, "gymnasium", fake_gymnasium)
    monkeypatch.setitem(sys.modules, "gymnasium.vector", fake_vector)
    path = Path(portkern.__file__).parent / "gym.py"
    spec = importlib.util.spec_from_file_location("portkern._gym_version_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def test_gymnasium_0_29_is_refused_naming_the_version_needed(monkeypatch) -> None:
    old = types.ModuleType("gymnasium")
    old.__version__ = "0.29.1"
    vector = types.ModuleType("gymnasium.vector")  # 0.29's gymnasium.vector: no AutoresetMode
    vector.VectorEnv = object
    with pytest.raises(ImportError, match=r"needs Gymnasium >= 1\.0 .*found gymnasium 0\.29\.1"):
        _load_gym_adapter_with(monkeypatch, old, vector)


# ---- the small batch on the host: a loop over scalar envs --------------------------------------------
@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_small_host_batch_is_bit_identical_to_the_array_batch(env_id, autoreset) -> None:
    from portkern._scalar import ScalarBatch
    from portkern.gym import PortkernVectorEnv, make_vec

    spec = portkern.envs.get(env_id)
    n = 3
    loop = make_vec(env_id, n, seed=21, autoreset=autoreset)
    assert isinstance(loop.env, ScalarBatch)
    array = PortkernVectorEnv(pk_step.make(env_id, n, seed=21, autoreset=autoreset))
    assert_same(loop.reset()[0], array.reset()[0], "reset obs")
    rng = np.random.default_rng(1)
    finished = 0
    for t in range(2 * spec.max_episode_steps + 50):
        actions = spec.random_actions(rng, n)
        ours, theirs = loop.step(actions), array.step(actions)
        for what, a, b in zip(("obs", "reward", "terminated", "truncated"), ours[:4], theirs[:4]):
            assert_same(a, b, f"{what} at step {t}")
        assert ours[4].keys() == theirs[4].keys()
        if "final_obs" in ours[4]:
            for i in np.flatnonzero(ours[4]["_final_obs"]):
                assert_same(ours[4]["final_obs"][i], theirs[4]["final_obs"][i], f"final_obs at step {t}")
        finished += int((ours[2] | ours[3]).sum())
    assert finished >= n
    assert_same(loop.env.get_state()["state"], array.env.get_state()["state"], "state")
    # A seed list, then more steps: still the same run.
    assert_same(loop.reset(seed=[5, 6, 7])[0], array.reset(seed=[5, 6, 7])[0], "seed-list reset")
    actions = spec.random_actions(rng, n)
    assert_same(loop.step(actions)[0], array.step(actions)[0], "step after a seed-list reset")


def test_small_host_batch_checks_actions_as_the_batch_does() -> None:
    from portkern.gym import make_vec

    env = make_vec("CartPole-v1", 4, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"actions: expected int array of shape \(4,\) with values in \[0, 2\)"):
        env.step(np.array([0, 1, 2, 0]))


def test_more_envs_than_the_host_loop_takes_use_the_array_batch() -> None:
    from portkern._scalar import HOST_LOOP_MAX_ENVS
    from portkern.gym import make_vec

    assert isinstance(make_vec("CartPole-v1", HOST_LOOP_MAX_ENVS + 1, seed=0).env, pk_step.VectorEnv)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_env_passes_the_scalar_path_check(dtype) -> None:
    assert all(supports_scalar_path(e, dtype) for e in ENV_IDS)


def test_an_env_the_scalar_engine_cannot_run_gets_the_array_path() -> None:
    from portkern.gym import make_vec

    assert not _scalar.scalar_engine_runs("Chain-v0") and not supports_scalar_path("Chain-v0")
    env = make_vec("Chain-v0", 2, seed=0, links=4)
    assert isinstance(env.env, pk_step.VectorEnv) and env.action_space.shape == (2, 4)


def test_an_env_failing_the_scalar_path_check_gets_the_array_path(monkeypatch) -> None:
    from portkern.gym import make_vec

    monkeypatch.setitem(_scalar._SUPPORTED, ("CartPole-v1", "float32"), False)
    assert isinstance(PortkernEnv("CartPole-v1").env, pk_step.VectorEnv)
    assert isinstance(make_vec("CartPole-v1", 2, seed=0).env, pk_step.VectorEnv)


def test_gym_make_limit_beyond_the_envs_own_is_adopted_on_the_host():
    """gymnasium.make(max_episode_steps=k) with k above the env's limit: the env truncates at k, not at
    its own limit (which would cut the episodes short without a word)."""
    env = gymnasium.make("portkern/MountainCar-v0", max_episode_steps=250)
    env.reset(seed=0)
    steps, truncated = 0, False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(1)  # "don't accelerate": never reaches the goal
        assert not terminated
        steps += 1
    assert steps == 250



def test_gym_make_keeps_the_envs_own_limit_by_default_and_none_with_minus_one():
    def episode(env, cap):
        env.reset(seed=0)
        for n in range(1, cap + 1):
            _, _, terminated, truncated, _ = env.step(1)
            assert not terminated
            if truncated:
                return n
        return None

    assert episode(gymnasium.make("portkern/MountainCar-v0"), 300) == 200
    assert episode(gymnasium.make("portkern/MountainCar-v0", max_episode_steps=-1), 300) is None
    assert episode(gymnasium.make("portkern/MountainCar-v0", max_episode_steps=50), 300) == 50
