"""Rendering: Gymnasium's frames for portkern's states, in the single and the vector env, and RecordVideo."""

from __future__ import annotations

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")
pytest.importorskip("pygame")

import portkern  # noqa: E402
from portkern.gym import PortkernEnv, make_vec  # noqa: E402
from portkern.render import gymnasium_twin  # noqa: E402

#: Every env Gymnasium can draw: its own counterparts, and variants through their parent's.
ENV_IDS = sorted(e for e in portkern.envs.ENVS if gymnasium_twin(e))


@pytest.fixture(autouse=True)
def no_display(monkeypatch):
    # pygame opens no window anywhere in these tests ("human" mode draws to SDL's dummy video driver).
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")


def gymnasium_frame(env_id: str, state: np.ndarray, last_action=None) -> np.ndarray:
    """Gymnasium's own env of ``env_id`` drawing ``state`` (and Pendulum's torque arrow for ``last_action``)."""
    theirs = gymnasium.make(env_id, render_mode="rgb_array").unwrapped
    theirs.reset(seed=0)
    if last_action is not None:  # Gymnasium sets the arrow by stepping: step from the state, then set it
        theirs.state = np.asarray(state, dtype=np.float64)
        theirs.step(last_action)
    theirs.state = np.asarray(state, dtype=np.float64)
    frame = theirs.render()
    theirs.close()
    return frame


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_metadata_declares_gymnasiums_render_modes_and_fps(env_id: str) -> None:
    ours, theirs = gymnasium.make(f"portkern/{env_id}"), gymnasium.make(gymnasium_twin(env_id))
    assert ours.metadata["render_modes"] == theirs.metadata["render_modes"]
    assert ours.metadata["render_fps"] == theirs.metadata["render_fps"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rgb_array_frames_equal_gymnasiums_for_the_same_state(env_id: str) -> None:
    env = gymnasium.make(f"portkern/{env_id}", render_mode="rgb_array")
    env.reset(seed=1)
    action = env.action_space.sample()
    for _ in range(3):
        env.step(action)
    frame = env.render()
    state = env.unwrapped.env.get_state()["state"][0]
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    twin = gymnasium_twin(env_id)
    pendulum = twin == "Pendulum-v1"
    np.testing.assert_array_equal(frame, gymnasium_frame(twin, state, action if pendulum else None))
    env.close()


def test_frames_follow_the_state() -> None:
    env = gymnasium.make("portkern/CartPole-v1", render_mode="rgb_array")
    env.reset(seed=0)
    first = env.render()
    env.unwrapped.env.set_state(np.array([[1.5, 0.0, 0.15, 0.0]]))
    assert not np.array_equal(first, env.render())


def test_human_mode_draws_without_returning_frames() -> None:
    env = gymnasium.make("portkern/CartPole-v1", render_mode="human")
    env.reset(seed=0)
    env.step(0)
    assert env.render() is None
    env.close()


def test_render_without_a_mode_returns_none() -> None:
    env = PortkernEnv("CartPole-v1")
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render\\(\\) called without a render_mode"):
        assert env.render() is None


def test_vector_env_renders_one_gymnasium_frame_per_env_as_sync_vector_env_does() -> None:
    n = 3
    ours = make_vec("CartPole-v1", n, seed=0, render_mode="rgb_array")
    ours.reset(seed=[4, 5, 6])
    ours.step(np.array([0, 1, 1]))
    theirs = gymnasium.make_vec("CartPole-v1", n, vectorization_mode="sync", render_mode="rgb_array")
    theirs.reset(seed=0)
    frames, their_frames = ours.render(), theirs.render()
    assert type(frames) is type(their_frames) is tuple and len(frames) == len(their_frames) == n
    states = ours.env.get_state()["state"]
    for i in range(n):
        assert frames[i].shape == their_frames[i].shape and frames[i].dtype == their_frames[i].dtype
        np.testing.assert_array_equal(frames[i], gymnasium_frame("CartPole-v1", states[i]))
    assert ours.metadata["render_fps"] == theirs.metadata["render_fps"]


def test_vector_env_refuses_human_mode_pointing_at_the_single_env() -> None:
    with pytest.raises(ValueError, match="render_mode: the batched env renders 'rgb_array' frames"):
        make_vec("CartPole-v1", 2, render_mode="human")


def test_record_video_writes_a_video_whose_first_frame_is_gymnasiums(tmp_path) -> None:
    pytest.importorskip("moviepy")
    from gymnasium.wrappers import RecordVideo

    env = RecordVideo(
        gymnasium.make("portkern/CartPole-v1", render_mode="rgb_array"), str(tmp_path / "videos"),
        episode_trigger=lambda e: True,
        disable_logger=True,
    )  # fmt: skip
    env.reset(seed=0)
    first_state = env.unwrapped.env.get_state()["state"][0]
    np.testing.assert_array_equal(env.recorded_frames[0], gymnasium_frame("CartPole-v1", first_state))
    for t in range(5):
        env.step(t % 2)
    env.close()
    videos = list((tmp_path / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 0
