"""Stable-Baselines3 VecEnv adapter: SB3's step and info conventions, seeding, attributes, and PPO training as is."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

import gymnasium  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.env_checker import check_env as sb3_check_env  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize  # noqa: E402

import portkern  # noqa: E402
from portkern import step  # noqa: E402
from portkern.sb3 import PortkernVecEnv, make_vec_env  # noqa: E402

N = 4
ABOUT_TO_TERMINATE = (2.39, 1.0, 0.0, 0.0)  # CartPole: x crosses 2.4 on the next step


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny MLPs: a second torch thread only adds synchronisation, and stalls on a busy 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def sb3_logs_in_tmp_path(tmp_path, monkeypatch):
    """SB3's learn() makes a log folder even when it logs nothing (``SB3-<date>`` in the system temp dir
    without $SB3_LOGDIR): the test's own temp dir, which pytest cleans up, instead."""
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "sb3-logs"))


def cartpole(seed: int = 0) -> PortkernVecEnv:
    return make_vec_env("CartPole-v1", N, seed=seed, monitor=False)


def finish_env0_and_truncate_env1(env: PortkernVecEnv) -> None:
    state = np.zeros((N, 4))
    state[0] = ABOUT_TO_TERMINATE
    env.env.set_state(state, np.array([0, env.env.spec.max_episode_steps - 1, 0, 0]))


# ---- PPO trains unmodified (CI smoke) --------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])  # Discrete and Box actions
def test_ppo_mlp_policy_trains_on_it(env_id: str) -> None:
    env = make_vec_env(env_id, N, seed=0)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(2 * 64 * N)
    assert model.num_timesteps == 2 * 64 * N
    if env_id == "CartPole-v1":  # VecMonitor fed SB3's episode log
        assert len(model.ep_info_buffer) > 0 and all(ep["r"] == ep["l"] for ep in model.ep_info_buffer)


def test_ppo_with_the_same_seed_collects_the_same_rollout() -> None:
    def rollout(seed: int) -> np.ndarray:
        model = PPO("MlpPolicy", make_vec_env("CartPole-v1", N), n_steps=32, batch_size=64, n_epochs=1,
                    seed=seed, device="cpu")  # fmt: skip
        model.learn(32 * N)
        return model.rollout_buffer.observations.copy()

    first = rollout(3)
    np.testing.assert_array_equal(first, rollout(3))
    assert not np.array_equal(first, rollout(4))


def test_vec_normalize_wraps_it() -> None:
    env = VecNormalize(make_vec_env("CartPole-v1", N, seed=0))
    env.reset()
    for _ in range(40):
        obs, rew, done, infos = env.step(np.zeros(N, dtype=np.int64))
    assert obs.shape == (N, 4) and np.isfinite(obs).all()


# ---- SB3's step conventions ------------------------------------------------------------------------
def test_step_returns_host_arrays_with_dummy_vec_env_dtypes() -> None:
    env = cartpole()
    obs = env.reset()
    assert obs.shape == (N, 4) and obs.dtype == np.float32
    obs, rew, done, infos = env.step(np.zeros(N, dtype=np.int64))
    assert rew.dtype == np.float32 and rew.shape == (N,)
    assert done.dtype == np.bool_ and done.shape == (N,)
    assert isinstance(infos, list) and len(infos) == N and all(isinstance(i, dict) for i in infos)


def test_terminal_observation_and_time_limit_truncated_follow_sb3() -> None:
    env = cartpole()
    env.reset()
    finish_env0_and_truncate_env1(env)
    obs, rew, done, infos = env.step(np.zeros(N, dtype=np.int64))
    np.testing.assert_array_equal(done, [True, True, False, False])
    assert infos[0]["terminal_observation"][0] > 2.4 and abs(obs[0][0]) <= 0.05  # same-step autoreset
    assert infos[0]["TimeLimit.truncated"] is False  # terminated: no bootstrap
    assert infos[1]["TimeLimit.truncated"] is True  # truncated only: SB3 bootstraps from terminal_observation
    assert infos[1]["terminal_observation"].shape == (4,)
    assert infos[2] == infos[3] == {"TimeLimit.truncated": False}


def test_info_keys_match_dummy_vec_env_over_gymnasium_cartpole() -> None:
    theirs = DummyVecEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(N)])
    theirs.seed(0)
    theirs.reset()
    while True:  # always pushing left ends within ~10 steps
        _, _, done, their_infos = theirs.step(np.zeros(N, dtype=np.int64))
        if done.any():
            break
    ours = cartpole()
    ours.reset()
    finish_env0_and_truncate_env1(ours)
    *_, our_infos = ours.step(np.zeros(N, dtype=np.int64))
    i, j = int(np.flatnonzero(done)[0]), int(np.flatnonzero(~done)[0])
    assert set(our_infos[0]) == set(their_infos[i])  # a finished env
    assert set(our_infos[2]) == set(their_infos[j])  # a running one


def test_a_next_step_env_is_rejected() -> None:
    with pytest.raises(ValueError, match="make the env with autoreset='same_step'"):
        PortkernVecEnv(step.make("CartPole-v1", N, autoreset="next_step"))


def test_reset_options_are_rejected() -> None:
    env = cartpole()
    env.set_options({"low": -0.1})
    with pytest.raises(ValueError, match="options: not supported"):
        env.reset()


# ---- seeding ---------------------------------------------------------------------------------------
def test_seed_keys_the_next_reset_like_portkern_make() -> None:
    env = cartpole(seed=0)
    assert env.seed(7) == [7] * N
    np.testing.assert_array_equal(env.reset(), step.make("CartPole-v1", N, seed=7).reset())


def test_a_seed_applies_to_one_reset_only() -> None:
    env = cartpole()
    env.seed(7)
    first = env.reset()
    assert not np.array_equal(env.reset(), first)  # the next episode of the same streams
    env.seed(7)
    np.testing.assert_array_equal(env.reset(), first)


def test_seed_out_of_range_names_the_argument() -> None:
    with pytest.raises(ValueError, match=r"seed: expected an int in \[0, 4294967295\]"):
        cartpole().seed(-1)


# ---- attributes and methods ------------------------------------------------------------------------
def test_get_attr_gives_the_single_env_view_per_index() -> None:
    env = cartpole()
    assert env.get_attr("render_mode") == [None] * N
    assert env.get_attr("observation_space", [0, 2]) == [env.observation_space] * 2
    assert env.get_attr("autoreset") == ["same_step"] * N  # the portkern env's own attributes
    assert env.has_attr("num_envs") and not env.has_attr("no_such_attribute")


def test_bad_indices_are_rejected_naming_the_range() -> None:
    with pytest.raises(ValueError, match=r"indices: expected env indices in \[0, 4\), got \[4\]"):
        cartpole().get_attr("render_mode", [4])


def test_env_method_calls_the_batch_once_for_all_envs() -> None:
    env = cartpole()
    env.reset()
    states = env.env_method("get_state")
    assert len(states) == N and states[0]["state"].shape == (N, 4)
    with pytest.raises(ValueError, match="pass indices=None"):
        env.env_method("get_state", indices=[0])


def test_set_attr_is_not_supported_and_says_why() -> None:
    with pytest.raises(NotImplementedError, match="one batch configured by portkern.step.make"):
        cartpole().set_attr("seed", 3)


def test_env_is_wrapped_reports_no_gymnasium_wrappers() -> None:
    assert cartpole().env_is_wrapped(Monitor) == [False] * N
    assert isinstance(make_vec_env("CartPole-v1", N), VecMonitor)


# ---- the single Gymnasium env passes SB3's own checker ---------------------------------------------
@pytest.mark.parametrize("env_id", sorted(portkern.envs.ENVS))
def test_single_gymnasium_env_passes_sb3_check_env(env_id: str) -> None:
    import portkern.gym  # noqa: F401  (registers portkern/<EnvId>)

    sb3_check_env(gymnasium.make(f"portkern/{env_id}").unwrapped, warn=False)
