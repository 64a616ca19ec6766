"""Every Gymnasium vector wrapper that applies to a Box/Discrete env, over portkern's vector env, for several episodes.

Each wrapped env runs in lockstep with an unwrapped twin (same seed, and the action the wrapper passes
down): the wrapped outputs must be the wrapper's transformation of the twin's, step for step, across
autoresets. Both autoreset modes run where the wrapper allows; where it does not, it must refuse
portkern's env exactly as it refuses Gymnasium's own SyncVectorEnv in that mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

import gymnasium.wrappers as W  # noqa: E402
import gymnasium.wrappers.vector as V  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

from portkern.gym import make_vec  # noqa: E402

N = 4
SEED = 11
#: Steps per run: CartPole's random episodes last ~20 steps; Pendulum's 200 (it only truncates).
STEPS = {"CartPole-v1": 200, "Pendulum-v1": 450}
MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}
Out = tuple  # (obs, reward, terminated, truncated, infos)


@dataclass(frozen=True)
class Case:
    wrap: Callable[[Any], Any]
    #: (wrapper, twin's output, wrapped output, the action sent to the wrapper) -> None; asserts.
    check: Callable[[Any, Out, Out, Any], None]
    envs: tuple[str, ...] = ("CartPole-v1", "Pendulum-v1")
    same_step: bool = True  # False: the wrapper requires NEXT_STEP (or DISABLED)


def same_obs(w, raw: Out, out: Out, a) -> None:
    np.testing.assert_array_equal(out[0], raw[0])


def same_reward(w, raw: Out, out: Out, a) -> None:
    np.testing.assert_array_equal(out[1], raw[1])


def obs_is(f: Callable[[np.ndarray], np.ndarray]):
    def check(w, raw: Out, out: Out, a) -> None:
        np.testing.assert_allclose(out[0], f(raw[0]), rtol=1e-6, atol=1e-6)
        same_reward(w, raw, out, a)

    return check


def reward_is(f: Callable[[np.ndarray], np.ndarray]):
    def check(w, raw: Out, out: Out, a) -> None:
        np.testing.assert_allclose(out[1], f(raw[1]), rtol=1e-12)
        same_obs(w, raw, out, a)

    return check


def passes_through(w, raw: Out, out: Out, a) -> None:
    same_obs(w, raw, out, a)
    same_reward(w, raw, out, a)


def normalized_obs(w, raw: Out, out: Out, a) -> None:
    rms = w.obs_rms
    np.testing.assert_allclose(out[0], (raw[0] - rms.mean) / np.sqrt(rms.var + w.epsilon), rtol=1e-4, atol=1e-5)


def normalized_reward(w, raw: Out, out: Out, a) -> None:
    np.testing.assert_allclose(out[1], raw[1] / np.sqrt(w.return_rms.var + w.epsilon), rtol=1e-12)
    same_obs(w, raw, out, a)


def list_infos(w, raw: Out, out: Out, a) -> None:
    passes_through(w, raw, out, a)
    infos, raw_infos = out[4], raw[4]
    assert isinstance(infos, list) and len(infos) == N
    for i, info in enumerate(infos):
        if raw_infos.get("_final_obs", np.zeros(N, bool))[i]:
            np.testing.assert_array_equal(info["final_obs"], raw_infos["final_obs"][i])
        else:
            assert "final_obs" not in info


def bounded(space) -> tuple[np.ndarray, np.ndarray]:
    return space.low.astype(np.float64), space.high.astype(np.float64)


def rescaled_obs(w, raw: Out, out: Out, a) -> None:
    low, high = bounded(w.env.single_observation_space)
    np.testing.assert_allclose(out[0], -1 + 2 * (raw[0] - low) / (high - low), rtol=1e-5, atol=1e-5)


def rescaled_action(w, raw: Out, out: Out, a) -> None:
    low, high = bounded(w.env.single_action_space)
    np.testing.assert_allclose(w.actions(a), low + (np.asarray(a) + 1) * (high - low) / 2, rtol=1e-5, atol=1e-6)
    passes_through(w, raw, out, a)


def clipped_action(w, raw: Out, out: Out, a) -> None:
    low, high = bounded(w.env.single_action_space)
    np.testing.assert_array_equal(w.actions(a), np.clip(a, low, high))
    passes_through(w, raw, out, a)


CONTINUOUS = ("Pendulum-v1",)
# fmt: off
CASES: dict[str, Case] = {
    # RecordEpisodeStatistics is checked against the flags in its own test below; here it must pass through.
    "RecordEpisodeStatistics": Case(lambda e: V.RecordEpisodeStatistics(e), passes_through),
    "NormalizeObservation": Case(lambda e: V.NormalizeObservation(e), normalized_obs, same_step=False),
    "NormalizeReward": Case(lambda e: V.NormalizeReward(e, gamma=0.9), normalized_reward),
    "TransformObservation": Case(lambda e: V.TransformObservation(e, lambda o: 0.5 * o), obs_is(lambda o: 0.5 * o),
                                 same_step=False),
    "VectorizeTransformObservation": Case(
        lambda e: V.VectorizeTransformObservation(e, W.TransformObservation, func=lambda o: -o, observation_space=None),
        obs_is(lambda o: -o), same_step=False),
    "FlattenObservation": Case(lambda e: V.FlattenObservation(e), obs_is(lambda o: o), same_step=False),
    "ReshapeObservation": Case(lambda e: V.ReshapeObservation(e, (e.single_observation_space.shape[0], 1)),
                               obs_is(lambda o: o[..., None]), same_step=False),
    "DtypeObservation": Case(lambda e: V.DtypeObservation(e, np.float64), obs_is(lambda o: o.astype(np.float64)),
                             same_step=False),
    # Needs finite observation bounds: CartPole's velocities are unbounded.
    "RescaleObservation": Case(lambda e: V.RescaleObservation(e, -1.0, 1.0), rescaled_obs, envs=CONTINUOUS,
                               same_step=False),
    "TransformReward": Case(lambda e: V.TransformReward(e, lambda r: 2 * r), reward_is(lambda r: 2 * r)),
    "VectorizeTransformReward": Case(lambda e: V.VectorizeTransformReward(e, W.TransformReward, func=lambda r: r - 1),
                                     reward_is(lambda r: r - 1)),
    "ClipReward": Case(lambda e: V.ClipReward(e, -0.5, 0.5), reward_is(lambda r: np.clip(r, -0.5, 0.5))),
    "TransformAction": Case(lambda e: V.TransformAction(e, lambda a: a[::-1].copy()), passes_through),
    "ClipAction": Case(lambda e: V.ClipAction(e), clipped_action, envs=CONTINUOUS),
    "RescaleAction": Case(lambda e: V.RescaleAction(e, -1.0, 1.0), rescaled_action, envs=CONTINUOUS),
    "VectorizeTransformAction": Case(lambda e: V.VectorizeTransformAction(e, W.ClipAction), clipped_action,
                                     envs=CONTINUOUS),
    "DictInfoToList": Case(lambda e: V.DictInfoToList(e), list_infos),
}
# fmt: on


def params():
    for name, case in CASES.items():
        for env_id in case.envs:
            for mode in MODES:
                if mode == "same_step" and not case.same_step:
                    continue
                yield pytest.param(name, env_id, mode, id=f"{name}-{env_id}-{mode}")


def refused_params():
    for name, case in CASES.items():
        if not case.same_step:
            yield pytest.param(name, case.envs[0], id=name)


def down_action(w, a):
    """The action the wrapper sends to the env below it (action wrappers transform it)."""
    return w.actions(a) if hasattr(w, "actions") else a


@pytest.mark.parametrize(("name", "env_id", "mode"), list(params()))
def test_wrapper_transforms_the_twin_outputs_across_episodes(name: str, env_id: str, mode: str) -> None:
    case = CASES[name]
    w = case.wrap(make_vec(env_id, N, seed=SEED, autoreset=mode))
    twin = make_vec(env_id, N, seed=SEED, autoreset=mode)
    obs, _ = w.reset(seed=SEED)
    raw_obs, _ = twin.reset(seed=SEED)
    assert obs in w.observation_space
    w.action_space.seed(SEED)
    seen = [raw_obs]
    done_count = 0
    for _ in range(STEPS[env_id]):
        a = w.action_space.sample()
        out = w.step(a)
        raw = twin.step(down_action(w, a))
        seen.append(raw[0])
        case.check(w, raw, out, a)
        np.testing.assert_array_equal(out[2], raw[2])
        np.testing.assert_array_equal(out[3], raw[3])
        assert out[0] in w.observation_space
        done_count += int(np.sum(raw[2] | raw[3]))
    assert done_count >= 2 * N, f"only {done_count} episodes ended"
    if name == "NormalizeObservation":  # the running mean saw exactly portkern's observations
        np.testing.assert_allclose(w.obs_rms.mean, np.concatenate(seen).mean(axis=0), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(("name", "env_id"), list(refused_params()))
def test_wrapper_refuses_same_step_as_it_refuses_gymnasiums_own(name: str, env_id: str) -> None:
    theirs = gymnasium.make_vec(env_id, N, vectorization_mode="sync",
                                vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})  # fmt: skip
    with pytest.raises(ValueError) as expected:
        CASES[name].wrap(theirs)
    with pytest.raises(ValueError) as got:
        CASES[name].wrap(make_vec(env_id, N, seed=SEED, autoreset="same_step"))
    assert str(got.value) == str(expected.value)


def episode_lengths_and_returns(rewards: list[np.ndarray], dones: list[np.ndarray], next_step: bool):
    """Per env, (length, return) of each finished episode; next_step's reset steps count for neither."""
    found: list[list[tuple[int, float]]] = [[] for _ in range(N)]
    length, ret = np.zeros(N, dtype=int), np.zeros(N)
    prev = np.zeros(N, dtype=bool)
    for rew, done in zip(rewards, dones):
        counted = ~prev if next_step else np.ones(N, dtype=bool)
        length += counted
        ret += np.where(counted, rew, 0.0)
        for i in np.flatnonzero(done):
            found[i].append((int(length[i]), float(ret[i])))
            length[i], ret[i] = 0, 0.0
        prev = done
    return found


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("mode", list(MODES))
def test_record_episode_statistics_matches_the_flags(env_id: str, mode: str) -> None:
    w = V.RecordEpisodeStatistics(make_vec(env_id, N, seed=SEED, autoreset=mode))
    w.reset(seed=SEED)
    w.action_space.seed(SEED)
    rewards, dones, reported = [], [], [[] for _ in range(N)]
    for _ in range(STEPS[env_id]):
        _, rew, term, trunc, infos = w.step(w.action_space.sample())
        rewards.append(rew)
        dones.append(term | trunc)
        for i in np.flatnonzero(infos.get("_episode", np.zeros(N, bool))):
            reported[i].append((int(infos["episode"]["l"][i]), float(infos["episode"]["r"][i])))
    expected = episode_lengths_and_returns(rewards, dones, next_step=mode == "next_step")
    assert sum(map(len, expected)) >= 2 * N
    assert [[l for l, _ in e] for e in reported] == [[l for l, _ in e] for e in expected]
    for got, want in zip(reported, expected):
        np.testing.assert_allclose([r for _, r in got], [r for _, r in want], rtol=1e-5)
    if env_id == "Pendulum-v1":
        assert {l for e in reported for l, _ in e} == {200}  # Pendulum only truncates


def test_normalize_observation_works_on_gymnasium_make_vec_out_of_the_box() -> None:
    env = V.NormalizeObservation(gymnasium.make_vec("portkern/CartPole-v1", 8))
    obs, _ = env.reset(seed=0)
    for _ in range(50):
        obs, *_ = env.step(env.action_space.sample())
    assert obs.shape == (8, 4) and np.isfinite(obs).all()
