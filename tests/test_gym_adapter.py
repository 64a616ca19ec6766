"""Gymnasium adapters: the vector env (spaces, autoreset modes, seeding), the single env, and registration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402
from gymnasium.vector.utils import batch_space  # noqa: E402
from gymnasium.wrappers.vector import RecordEpisodeStatistics  # noqa: E402

import portkern  # noqa: E402
from portkern.backends import Backend  # noqa: E402
from portkern.gym import PortkernEnv, PortkernVectorEnv, make_vec  # noqa: E402

N = 4
# CartPole state (x, x_dot, theta, theta_dot): x_dot * tau carries x past 2.4 in one step.
ABOUT_TO_TERMINATE = (2.39, 1.0, 0.0, 0.0)


def cartpole(autoreset: str = "same_step", backend: Backend | str = "numpy") -> PortkernVectorEnv:
    env = make_vec("CartPole-v1", N, seed=0, autoreset=autoreset, backend=backend)
    env.reset()
    return env


def finish_env0_and_truncate_env1(env: PortkernVectorEnv) -> None:
    """Env 0 terminates and env 1 truncates on the next step; envs 2 and 3 carry on."""
    state = np.zeros((N, 4))
    state[0] = ABOUT_TO_TERMINATE
    limit = env.env.spec.max_episode_steps
    env.env.set_state(state, np.array([0, limit - 1, 0, 0]))


def episodes_from_flags(dones: list[np.ndarray], counted: list[np.ndarray]) -> list[list[int]]:
    """Per env, the lengths of finished episodes, counting only the steps marked in ``counted``."""
    lengths: list[list[int]] = [[] for _ in range(N)]
    running = np.zeros(N, dtype=int)
    for done, count in zip(dones, counted):
        running += count
        for i in np.flatnonzero(done):
            lengths[i].append(int(running[i]))
            running[i] = 0
    return lengths


# ---- spaces and metadata -------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", sorted(portkern.envs.gymnasium_envs()))  # the envs Gymnasium has
def test_spaces_equal_gymnasium_env_batched(env_id: str) -> None:
    ours = make_vec(env_id, N, seed=0)
    theirs = gymnasium.make(env_id)
    assert ours.single_observation_space == theirs.observation_space
    assert ours.single_action_space == theirs.action_space
    assert ours.observation_space == batch_space(theirs.observation_space, N)
    assert ours.action_space == batch_space(theirs.action_space, N)
    assert ours.num_envs == N


@pytest.mark.parametrize(
    ("autoreset", "mode"), [("same_step", AutoresetMode.SAME_STEP), ("next_step", AutoresetMode.NEXT_STEP)]
)
def test_metadata_declares_gymnasium_autoreset_mode(autoreset: str, mode: AutoresetMode) -> None:
    assert make_vec("CartPole-v1", N, seed=0, autoreset=autoreset).metadata["autoreset_mode"] is mode


def test_outputs_are_host_numpy_with_gymnasium_dtypes(backend: Backend) -> None:
    env = cartpole(backend=backend)
    obs, rew, term, trunc, infos = env.step(np.zeros(N, dtype=np.int64))
    assert obs.dtype == np.float32 and obs.shape == (N, 4)
    assert rew.dtype == np.float64 and rew.shape == (N,)
    assert term.dtype == np.bool_ and trunc.dtype == np.bool_
    assert infos == {}


def test_outputs_are_copies_not_the_reused_env_buffers(backend: Backend) -> None:
    env = cartpole(backend=backend)
    obs, *_ = env.step(np.zeros(N, dtype=np.int64))
    kept = obs.copy()
    env.step(np.ones(N, dtype=np.int64))
    np.testing.assert_array_equal(obs, kept)


# ---- autoreset -----------------------------------------------------------------------------------
def test_default_autoreset_is_gymnasiums_next_step() -> None:
    assert make_vec("CartPole-v1", N, seed=0).metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    env = gymnasium.make_vec("portkern/CartPole-v1", N)
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert env.env.autoreset == "next_step"


@pytest.mark.parametrize("value", [AutoresetMode.SAME_STEP, "SameStep"], ids=["enum", "value"])
def test_gymnasium_make_vec_autoreset_mode_kwarg_selects_same_step(value) -> None:
    # Gymnasium passes a vector entry point its arguments as kwargs (vector_kwargs are for sync/async).
    env = gymnasium.make_vec("portkern/CartPole-v1", N, autoreset_mode=value)
    assert isinstance(env, PortkernVectorEnv) and env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP


def test_portkern_autoreset_kwarg_selects_same_step() -> None:
    env = gymnasium.make_vec("portkern/CartPole-v1", N, autoreset="same_step")
    assert env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP


def test_autoreset_mode_disabled_is_rejected_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="autoreset_mode: expected AutoresetMode.NEXT_STEP or AutoresetMode.SAME_STEP"):
        make_vec("CartPole-v1", N, autoreset_mode=AutoresetMode.DISABLED)


def test_conflicting_autoreset_spellings_are_rejected() -> None:
    with pytest.raises(ValueError, match="disagree"):
        make_vec("CartPole-v1", N, autoreset="next_step", autoreset_mode=AutoresetMode.SAME_STEP)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next_step", "same_step"])
def test_sync_vectorization_with_vector_kwargs_uses_the_single_env(mode: AutoresetMode) -> None:
    env = gymnasium.make_vec("portkern/CartPole-v1", N, vectorization_mode="sync",
                             vector_kwargs={"autoreset_mode": mode})  # fmt: skip
    assert isinstance(env, SyncVectorEnv) and env.metadata["autoreset_mode"] is mode
    assert all(isinstance(e.unwrapped, PortkernEnv) for e in env.envs)
    env.reset(seed=0)
    saw_final_obs = False
    for _ in range(60):  # always pushing left ends an episode within ~10 steps
        *_, infos = env.step(np.zeros(N, dtype=np.int64))
        saw_final_obs |= "final_obs" in infos
    assert saw_final_obs is (mode is AutoresetMode.SAME_STEP)


def test_vector_kwargs_on_the_batch_route_fail_as_for_gymnasiums_own_cartpole() -> None:
    # Gymnasium refuses vector_kwargs for every vector entry point (its own CartPole-v1 too), before
    # portkern is called: the batch takes autoreset_mode= as a kwarg, the sync route takes vector_kwargs.
    kwargs = {"vector_kwargs": {"autoreset_mode": AutoresetMode.SAME_STEP}}
    with pytest.raises(gymnasium.error.Error) as theirs:
        gymnasium.make_vec("CartPole-v1", N, **kwargs)
    with pytest.raises(gymnasium.error.Error) as ours:
        gymnasium.make_vec("portkern/CartPole-v1", N, **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_same_step_final_obs_follow_sync_vector_env_convention(backend: Backend) -> None:
    env = cartpole("same_step", backend=backend)
    finish_env0_and_truncate_env1(env)
    obs, rew, term, trunc, infos = env.step(np.zeros(N, dtype=np.int64))
    np.testing.assert_array_equal(term, [True, False, False, False])
    np.testing.assert_array_equal(trunc, [False, True, False, False])
    assert set(infos) == {"final_obs", "_final_obs", "final_info", "_final_info"}
    assert infos["final_obs"].dtype == object
    np.testing.assert_array_equal(infos["_final_obs"], [True, True, False, False])
    np.testing.assert_array_equal(infos["_final_info"], [True, True, False, False])
    assert infos["final_obs"][2] is None and infos["final_obs"][3] is None
    assert infos["final_obs"][0][0] > 2.4  # the obs that crossed the threshold ...
    assert abs(obs[0][0]) <= 0.05  # ... while the returned obs is already the reset one


def test_same_step_info_keys_match_gymnasium_sync_vector_env() -> None:
    theirs = gymnasium.make_vec(
        "CartPole-v1", N, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}
    )
    theirs.reset(seed=0)
    infos: dict = {}
    while not infos:
        *_, infos = theirs.step(np.zeros(N, dtype=np.int64))  # always pushing left ends within ~10 steps
    ours = cartpole("same_step")
    finish_env0_and_truncate_env1(ours)
    *_, our_infos = ours.step(np.zeros(N, dtype=np.int64))
    assert set(our_infos) == set(infos)
    assert our_infos["final_info"] == infos["final_info"] == {}


def test_next_step_resets_on_the_following_call_with_zero_reward(backend: Backend) -> None:
    env = cartpole("next_step", backend=backend)
    finish_env0_and_truncate_env1(env)
    _, _, term, trunc, infos = env.step(np.zeros(N, dtype=np.int64))
    assert term[0] and trunc[1] and infos == {}
    obs, rew, term, trunc, infos = env.step(np.zeros(N, dtype=np.int64))
    np.testing.assert_array_equal(rew, [0.0, 0.0, 1.0, 1.0])
    assert not term[:2].any() and not trunc[:2].any()
    assert np.abs(obs[:2]).max() <= 0.05  # CartPole resets uniformly in [-0.05, 0.05]
    assert infos == {}


# ---- wrappers ------------------------------------------------------------------------------------
def test_record_episode_statistics_same_step_counts_every_step() -> None:
    env = RecordEpisodeStatistics(make_vec("CartPole-v1", N, seed=3, autoreset="same_step"))
    env.reset()
    rng = np.random.default_rng(0)
    dones, reported = [], [[] for _ in range(N)]
    for _ in range(300):
        _, _, term, trunc, infos = env.step(rng.integers(0, 2, N))
        dones.append(term | trunc)
        for i in np.flatnonzero(infos.get("_episode", np.zeros(N, bool))):
            reported[i].append((int(infos["episode"]["l"][i]), float(infos["episode"]["r"][i])))
    expected = episodes_from_flags(dones, [np.ones(N, dtype=int)] * len(dones))
    assert sum(map(len, expected)) >= 3 * N  # several episodes per env
    assert [[length for length, _ in env_eps] for env_eps in reported] == expected
    assert all(ret == length for env_eps in reported for length, ret in env_eps)  # CartPole: +1 per step


def test_record_episode_statistics_next_step_skips_reset_steps() -> None:
    env = RecordEpisodeStatistics(make_vec("CartPole-v1", N, seed=3, autoreset="next_step"))
    env.reset()
    rng = np.random.default_rng(0)
    dones, counted, reported = [], [], [[] for _ in range(N)]
    prev_done = np.zeros(N, dtype=bool)
    for _ in range(300):
        _, _, term, trunc, infos = env.step(rng.integers(0, 2, N))
        counted.append((~prev_done).astype(int))  # the step after a done only resets
        prev_done = term | trunc
        dones.append(prev_done)
        for i in np.flatnonzero(infos.get("_episode", np.zeros(N, bool))):
            reported[i].append(int(infos["episode"]["l"][i]))
    expected = episodes_from_flags(dones, counted)
    assert sum(map(len, expected)) >= 3 * N
    assert reported == expected


# ---- seeding -------------------------------------------------------------------------------------
def rollout(env: PortkernVectorEnv, seed: int, steps: int = 40) -> np.ndarray:
    obs, _ = env.reset(seed=seed)
    seq = [obs]
    for t in range(steps):
        seq.append(env.step(np.full(N, t % 2))[0])
    return np.stack(seq)


def test_same_seed_gives_same_obs_sequence() -> None:
    first, second = make_vec("CartPole-v1", N), make_vec("CartPole-v1", N)
    np.testing.assert_array_equal(rollout(first, 7), rollout(second, 7))


def test_different_seed_gives_different_obs_sequence() -> None:
    env = make_vec("CartPole-v1", N)
    assert not np.array_equal(rollout(env, 7), rollout(env, 8))


def test_unseeded_envs_draw_different_seeds() -> None:
    first, _ = make_vec("CartPole-v1", N).reset()
    second, _ = make_vec("CartPole-v1", N).reset()
    assert not np.array_equal(first, second)


def test_reset_takes_one_seed_per_env_keying_env_i_by_its_seed() -> None:
    seeds = [11, 7, 7, 123]
    obs, _ = make_vec("CartPole-v1", N).reset(seed=seeds)
    for i, s in enumerate(seeds):
        # env i restarts from key (s_i, i): env i of a batch seeded with s_i
        np.testing.assert_array_equal(obs[i], make_vec("CartPole-v1", N).reset(seed=s)[0][i])
    again, _ = make_vec("CartPole-v1", N).reset(seed=np.array(seeds))
    np.testing.assert_array_equal(obs, again)


def test_reset_rejects_a_seed_list_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match=r"seed: a list of seeds needs one per env \(4\), got 3"):
        make_vec("CartPole-v1", N).reset(seed=[1, 2, 3])


def test_reset_rejects_options() -> None:
    with pytest.raises(ValueError, match="options: not supported"):
        make_vec("CartPole-v1", N).reset(options={"reset_mask": np.ones(N, dtype=bool)})


# ---- registration --------------------------------------------------------------------------------
def test_gymnasium_make_vec_builds_registered_id() -> None:
    env = gymnasium.make_vec("portkern/CartPole-v1", num_envs=N, seed=0, autoreset="next_step")
    assert isinstance(env, PortkernVectorEnv)
    assert env.spec.id == "portkern/CartPole-v1"
    assert env.spec.reward_threshold == 475.0
    assert env.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP


def test_gymnasium_make_vec_module_prefix_imports_the_adapter() -> None:
    code = (
        "import gymnasium\n"
        "env = gymnasium.make_vec('portkern.gym:portkern/CartPole-v1', num_envs=2, seed=0)\n"
        "print(type(env).__name__)\n"
    )
    # A fresh interpreter, so nothing has imported portkern.gym yet; it must find this checkout's portkern.
    root = str(Path(portkern.__file__).parents[1])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "PortkernVectorEnv"


def test_make_vec_rejects_a_different_episode_limit() -> None:
    with pytest.raises(ValueError, match="truncates at 500 steps"):
        gymnasium.make_vec("portkern/CartPole-v1", num_envs=N, max_episode_steps=100)


def test_make_vec_by_namespace_after_importing_portkern_only():
    import subprocess
    import sys

    code = (
        "import portkern, gymnasium\n"
        "env = gymnasium.make_vec('portkern/CartPole-v1', num_envs=3)\n"
        "obs, _ = env.reset(seed=0)\n"
        "assert obs.shape == (3, 4), obs.shape\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


# ---- the single env ------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", sorted(portkern.envs.ENVS))
def test_single_env_passes_gymnasiums_env_checker(env_id: str) -> None:
    env = gymnasium.make(f"portkern/{env_id}")
    assert isinstance(env.unwrapped, PortkernEnv)
    check_env(env.unwrapped)


@pytest.mark.parametrize("env_id", sorted(portkern.envs.gymnasium_envs()))  # the envs Gymnasium has
def test_single_env_spaces_equal_gymnasiums(env_id: str) -> None:
    ours, theirs = gymnasium.make(f"portkern/{env_id}"), gymnasium.make(env_id)
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space
    assert ours.spec.max_episode_steps == theirs.spec.max_episode_steps


def test_single_env_is_env_zero_of_the_batch(backend: Backend) -> None:
    single = PortkernEnv("CartPole-v1", backend=backend)
    batch = make_vec("CartPole-v1", N, seed=5, autoreset="next_step", backend=backend)
    obs, info = single.reset(seed=5)
    np.testing.assert_array_equal(obs, batch.reset(seed=5)[0][0])
    assert obs.shape == (4,) and obs.dtype == np.float32 and info == {}
    for t in range(8):
        obs, rew, term, trunc, info = single.step(t % 2)
        b_obs, b_rew, b_term, b_trunc, _ = batch.step(np.full(N, t % 2))
        np.testing.assert_array_equal(obs, b_obs[0])
        assert (rew, term, trunc, info) == (b_rew[0], b_term[0], b_trunc[0], {})
        assert type(rew) is float and type(term) is bool and type(trunc) is bool


def test_single_env_returns_the_obs_it_ended_with_then_resets_on_request() -> None:
    env = gymnasium.make("portkern/CartPole-v1")
    env.reset(seed=0)
    env.unwrapped.env.set_state(np.array([ABOUT_TO_TERMINATE]))
    obs, _, term, trunc, _ = env.step(0)
    assert term and not trunc and obs[0] > 2.4  # the terminal obs, not a reset one
    obs, _ = env.reset()
    assert np.abs(obs).max() <= 0.05


def test_single_env_truncates_at_the_episode_limit() -> None:
    env = gymnasium.make("portkern/CartPole-v1")
    env.reset(seed=0)
    for _ in range(499):  # the pole put back upright before every step: only the limit can end it
        env.unwrapped.env.set_state(np.zeros((1, 4)))
        _, _, term, trunc, _ = env.step(0)
        assert not (term or trunc)
    env.unwrapped.env.set_state(np.zeros((1, 4)))
    _, _, term, trunc, _ = env.step(0)
    assert trunc and not term


def test_single_env_unseeded_resets_differ_between_envs() -> None:
    first, _ = gymnasium.make("portkern/CartPole-v1").reset()
    second, _ = gymnasium.make("portkern/CartPole-v1").reset()
    assert not np.array_equal(first, second)


@pytest.mark.parametrize(("env_id", "action"), [("CartPole-v1", 2), ("CartPole-v1", 0.5), ("Pendulum-v1", [0.1, 0.2]),
                                                ("Pendulum-v1", [np.nan])])  # fmt: skip
def test_single_env_rejects_a_bad_action_naming_the_space(env_id: str, action) -> None:
    env = PortkernEnv(env_id)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action: expected .*(Discrete|Box)"):
        env.step(action)


def test_single_env_rejects_an_unknown_render_mode() -> None:
    with pytest.raises(ValueError, match=r"render_mode: expected None or one of \['human', 'rgb_array'\]"):
        PortkernEnv("CartPole-v1", render_mode="ansi")


# ---- unwrapped.state, as Gymnasium's classic-control envs have it ------------------------------------------
#: A state per env (Gymnasium's ``unwrapped.state`` order) away from any reset draw, and an action.
SET_STATES = {
    "CartPole-v1": ((0.5, -0.3, 0.1, 0.4), 1),
    "Acrobot-v1": ((0.7, -1.2, 2.0, -3.0), 2),
    "MountainCar-v0": ((-0.9, 0.03), 0),
    "MountainCarContinuous-v0": ((-0.2, -0.04), np.array([0.6], dtype=np.float32)),
    "Pendulum-v1": ((2.5, -4.0), np.array([1.5], dtype=np.float32)),
}


@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
@pytest.mark.parametrize("env_id", sorted(SET_STATES))
def test_single_env_state_set_then_stepped_matches_gymnasiums(env_id: str, backend_name: str) -> None:
    """``env.unwrapped.state = s`` on portkern's env and on Gymnasium's, one step of each from it with the same
    action: the same obs (to float32 rounding: Gymnasium steps in float64), and the state reads back."""
    if backend_name == "torch":
        pytest.importorskip("torch")
    assert env_id in portkern.envs.gymnasium_envs()
    state, action = SET_STATES[env_id]
    ours, theirs = gymnasium.make(f"portkern/{env_id}", backend=backend_name), gymnasium.make(env_id)
    ours.reset(seed=0)
    theirs.reset(seed=0)
    ours.unwrapped.state = state
    theirs.unwrapped.state = np.array(state, dtype=np.float64)
    np.testing.assert_array_equal(ours.unwrapped.state, np.float32(state))
    got, want = ours.step(action), theirs.step(action)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert got[1] == pytest.approx(want[1], rel=1e-5, abs=1e-5) and got[2:4] == want[2:4]
    np.testing.assert_allclose(ours.unwrapped.state, np.asarray(theirs.unwrapped.state, dtype=np.float64),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_chain_state_is_joint_angles_then_velocities() -> None:
    """Chain-v0 has no Gymnasium twin: its state is ``qpos0 .. qpos{K-1}, qvel0 .. qvel{K-1}``, and a step from a
    set state is the reference step of that state."""
    env = gymnasium.make("portkern/Chain-v0", links=3)
    spec = portkern.envs.get("Chain-v0", links=3)
    assert spec.state_names == ("qpos0", "qpos1", "qpos2", "qvel0", "qvel1", "qvel2")
    env.reset(seed=0)
    state = np.array([0.3, -0.2, 0.1, 1.0, -0.5, 0.25])
    env.unwrapped.state = state
    np.testing.assert_array_equal(env.unwrapped.state, state.astype(np.float32))
    action = np.array([0.5, -0.5, 0.2], dtype=np.float32)
    obs = env.step(action)[0]
    ref = make_vec("Chain-v0", 1, seed=0, links=3)
    ref.reset()
    ref.env.set_state(state[None].astype(np.float32))
    np.testing.assert_array_equal(obs, ref.step(action[None])[0][0])


def test_single_env_state_rejects_the_wrong_number_of_values() -> None:
    env = PortkernEnv("CartPole-v1")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"state: expected 4 values \(x, x_dot, theta, theta_dot\), got shape \(2,\)"):
        env.state = (0.0, 0.0)


# ---- what tools read of a Gymnasium env's constructor and vector env -----------------------------------------
@pytest.mark.parametrize("make", [lambda **kw: PortkernEnv("CartPole-v1", **kw),
                                  lambda **kw: gymnasium.make("portkern/CartPole-v1", **kw),
                                  lambda **kw: make_vec("CartPole-v1", 2, **kw)])  # fmt: skip
def test_an_unknown_keyword_reads_as_pythons_own_error(make) -> None:
    """TorchRL's GymEnv passes ``frameskip`` and drops it only on Python's own wording of the TypeError."""
    with pytest.raises(TypeError, match=r"\(\) got an unexpected keyword argument 'frameskip'"):
        make(frameskip=1)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_env_carries_sync_vector_envs_public_attributes(mode: AutoresetMode) -> None:
    ours = gymnasium.make_vec("portkern/CartPole-v1", 2, autoreset_mode=mode)
    theirs = gymnasium.make_vec("CartPole-v1", 2, vectorization_mode="sync", vector_kwargs={"autoreset_mode": mode})
    # SyncVectorEnv's own plumbing (its sub-envs, their factories, its copy flag, the sub-env calls) aside.
    plumbing = {"envs", "env_fns", "copy", "call", "get_attr", "set_attr"}
    public = {a for a in dir(theirs) if not a.startswith("_")} - plumbing
    assert public <= set(dir(ours)), sorted(public - set(dir(ours)))
    assert ours.autoreset_mode == theirs.autoreset_mode == mode
    assert ours.observation_mode == theirs.observation_mode == "same"
    assert ours.metadata["autoreset_mode"] == theirs.metadata["autoreset_mode"] == mode
    assert set(theirs.metadata) <= set(ours.metadata)
