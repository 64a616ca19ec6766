"""Chain-v0 as an env (portkern/envs/chain.py): make(..., links=K) steps as MuJoCo steps the model the env
publishes (``mjcf``, ``FRAME_SKIP``), its state is MuJoCo's (qpos, qvel), and its observations, reward,
termination and truncation are the ones the module declares, on every array-API backend.

The physics itself (accelerations, RK4, long trajectories against MuJoCo) is tested in
tests/test_chain_mujoco.py; here only what the env adds, on a few envs and steps (cheap)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

import portkern
from portkern import envs, step
from portkern.backends import probe
from portkern.envs import _chain_model, chain


def _model(env) -> mujoco.MjModel:
    """MuJoCo's model of ``env``: the env's own MJCF at its K and physics params."""
    k = env.spec.structure_values["links"]
    return mujoco.MjModel.from_xml_string(chain.mjcf(k, **{name: env.params[name] for name in chain.PHYSICS}))


def _mj_step(model: mujoco.MjModel, state: np.ndarray, ctrl: np.ndarray):
    """One env step in MuJoCo per row: (qpos, qvel) loaded, ctrl set, mj_step x FRAME_SKIP. The rows' next
    [N, 2K] states and their tip sites' world positions [N, 3]."""
    data = mujoco.MjData(model)
    k = model.nq
    out, tips = np.empty_like(state), np.empty((len(state), 3))
    for i, (s, u) in enumerate(zip(state, ctrl)):
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:], data.ctrl[:] = s[:k], s[k:], u
        for _ in range(chain.FRAME_SKIP):
            mujoco.mj_step(model, data)
        mujoco.mj_kinematics(model, data)  # the site at the new qpos (mj_step leaves it at the last stage's)
        out[i] = np.concatenate([data.qpos, data.qvel])
        tips[i] = data.site("tip").xpos
    return out, tips


def _near_rest(g: np.random.Generator, n: int, k: int) -> np.ndarray:
    return np.concatenate([g.uniform(-0.3, 0.3, (n, k)), g.uniform(-1.0, 1.0, (n, k))], axis=1)


def test_model_is_exported_from_the_env_module():
    assert chain.FRAME_SKIP == _chain_model.FRAME_SKIP and chain.mjcf is _chain_model.mjcf
    model = mujoco.MjModel.from_xml_string(chain.mjcf(4))
    assert (model.nq, model.nv, model.nu) == (4, 4, 4)
    assert model.opt.timestep == chain.SPEC.defaults["dt"]
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
    # The model's params are the env's, by name and default.
    for name in chain.PHYSICS:
        assert chain.SPEC.defaults[name] == getattr(_chain_model.ChainParams(), name)


@pytest.mark.parametrize("links", [2, 5])
def test_env_steps_equal_mujoco_mj_step_frame_skip_times(links):
    g = np.random.default_rng(links)
    n = 6
    env = step.make("Chain-v0", n, links=links, dtype="float64", seed=3)
    env.reset()
    model = _model(env)
    state = _near_rest(g, n, links)
    env.set_state(state=state, steps=np.zeros(n, np.int64))
    for _ in range(3):
        # Controls beyond [-1, 1] too: the env clips them as MuJoCo's ctrllimited does.
        ctrl = g.uniform(-1.5, 1.5, (n, links)).astype(np.float32)
        want, _ = _mj_step(model, env.get_state()["state"], ctrl.astype(np.float64))
        env.step(ctrl)
        np.testing.assert_allclose(env.get_state()["state"], want, rtol=1e-9, atol=1e-9)


def test_state_is_mujocos_qpos_then_qvel_and_reset_is_as_declared():
    k, n = 3, 5
    env = step.make("Chain-v0", n, links=k, dtype="float64", params={"reset_noise": 0.2})
    assert env.spec.state_names == ("qpos0", "qpos1", "qpos2", "qvel0", "qvel1", "qvel2")
    env.reset()
    s = env.get_state()["state"]
    assert s.shape == (n, 2 * k)
    assert (np.abs(s[:, :k]) <= 0.2).all() and (s[:, :k] != 0).all() and (s[:, k:] == 0).all()
    # Load it into MuJoCo as (qpos, qvel): zero velocities and no control leave the chain's energy to gravity,
    # and MuJoCo's qacc at that state is the reference's.
    model = _model(env)
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = s[0, :k], s[0, k:]
    mujoco.mj_forward(model, data)
    ref = _chain_model.qacc(s[:1, :k].T, s[:1, k:].T, np.zeros((k, 1)))
    np.testing.assert_allclose(np.ravel(ref), data.qacc, rtol=1e-9)


def test_obs_reward_termination_and_truncation_are_as_declared():
    k, n = 3, 4
    env = step.make("Chain-v0", n, links=k, dtype="float64", autoreset="next_step")
    env.reset()
    model = _model(env)
    up = [math.pi, 0.0, 0.0]  # straight up: height 1
    hanging, bent = [0.1, -0.2, 0.3], [math.pi / 2, 0.0, 0.0]  # the tip low, then level with the base
    state = np.array([up + [0.0] * k, hanging + [0.5, 0.0, -0.5], bent + [0.0] * k, hanging + [0.0] * k])
    steps = np.array([0, 0, 0, env.spec.max_episode_steps - 1])
    env.set_state(state=state, steps=steps)
    ctrl = np.array([[0.5, -2.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [-0.3, 0.2, 0.1]], np.float32)
    obs, reward, terminated, truncated = (np.asarray(a) for a in env.step(ctrl))
    want, tips = _mj_step(model, state, ctrl.astype(np.float64))
    reach = k * env.params["link_length"]
    height = tips[:, 2] / reach
    u = np.clip(ctrl.astype(np.float64), -1.0, 1.0)
    cost = env.params["ctrl_cost"] * (u * u).sum(axis=1)
    np.testing.assert_allclose(reward, height - 1.0 - cost, rtol=1e-9)
    assert (reward <= 0).all()
    np.testing.assert_array_equal(terminated, height >= env.params["target_height"])
    np.testing.assert_array_equal(terminated, [True, False, False, False])
    np.testing.assert_array_equal(truncated, [False, False, False, True])
    q, v = want[:, :k], want[:, k:]
    cols = np.concatenate([np.cos(q), np.sin(q), v, tips[:, [0]] / reach, tips[:, [2]] / reach], axis=1)
    np.testing.assert_allclose(obs, cols, rtol=1e-9, atol=1e-12)
    assert obs.shape == (n, env.spec.obs_dim) == (n, 3 * k + 2)
    lo, hi = np.asarray(env.spec.obs_low), np.asarray(env.spec.obs_high)
    assert ((obs >= lo) & (obs <= hi)).all()


def test_a_target_height_above_one_never_terminates():
    env = step.make("Chain-v0", 2, links=2, dtype="float64", params={"target_height": 1.5})
    env.reset()
    env.set_state(state=np.array([[math.pi, 0.0, 0.0, 0.0]] * 2))
    _, _, terminated, _ = env.step(np.zeros((2, 2), np.float32))
    assert not np.asarray(terminated).any()


@pytest.mark.parametrize("bad", [1, 17, 2.5, True, "3"])
def test_bad_links_raise_naming_links(bad):
    with pytest.raises(ValueError, match=r"^links: must be an int from 2 to 16, got "):
        step.make("Chain-v0", 4, links=bad)


def test_sizes_follow_links():
    for k in (2, 7, 16):
        spec = envs.get("Chain-v0", links=k)
        assert (spec.state_dim, spec.obs_dim, spec.action_dim) == (2 * k, 3 * k + 2, k)
        assert spec.defines == {"PK_LINKS": k}
        lo, hi = spec.test_state_box
        assert len(lo) == len(hi) == 2 * k
        assert spec.parity_states(np.random.default_rng(0), 8).shape == (8, 2 * k)
    assert envs.get("Chain-v0") is chain.SPEC and chain.SPEC.structure_values == {"links": 3}
    assert chain.SPEC.gymnasium_id is None


def _array_api_backends():
    out = []
    for name in ("torch", "jax"):
        p = probe(name)
        marks = [] if p.available else [pytest.mark.skip(reason=f"{name}: {p.reason}")]
        if name == "jax":  # XLA compiles the unrolled 20 articulated-body passes: ~20 s a dtype on 2 cores
            marks.append(pytest.mark.slow)
        out.append(pytest.param(name, marks=marks))
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", _array_api_backends())
def test_array_api_backends_step_like_the_reference(name, dtype):
    if name == "jax" and dtype == "float64":
        # jax's float64 path is the float32 one at another dtype (tests/test_parity.py runs both on every other
        # env); one more ~15 s compile of the chain buys no coverage.
        pytest.skip("jax x Chain-v0 runs in float32 here: its float64 path is covered on the other envs")
    k, n = 4, 64
    g = np.random.default_rng(7)
    spec = envs.get("Chain-v0", links=k)
    lo, hi = (np.asarray(b) for b in spec.test_state_box)
    states = g.uniform(lo, hi, (n, 2 * k))
    ref = step.make("Chain-v0", n, links=k, dtype=dtype, seed=5)
    dev = step.make("Chain-v0", n, links=k, dtype=dtype, seed=5, backend=name)
    if dtype == "float64" and not dev.backend.supports_float64:
        pytest.skip(f"{name}: no float64 here")
    for env in (ref, dev):
        env.reset()
        env.set_state(state=states, steps=np.zeros(n, np.int64))
    tol = spec.parity_tolerance[dtype]
    host = dev.backend.to_host
    for _ in range(2):
        actions = spec.random_actions(g, n)
        r_obs, r_rew, r_term, r_trunc = ref.step(actions)
        d_obs, d_rew, d_term, d_trunc = dev.step(actions)
        np.testing.assert_array_equal(host(d_term), r_term)
        np.testing.assert_array_equal(host(d_trunc), r_trunc)
        np.testing.assert_allclose(host(d_rew), r_rew, rtol=tol, atol=tol)
        np.testing.assert_allclose(host(d_obs), r_obs, rtol=tol, atol=tol)
        np.testing.assert_allclose(dev.get_state()["state"], ref.get_state()["state"], rtol=tol, atol=tol)
    if name == "jax" and dtype == "float32":
        # The fused rollout (one compiled scan) against the reference's, from the same state: the shared rollout
        # tests leave jax x Chain-v0 here (tests/conftest.py, SHARED_SUITE_ENV_EXCLUSIONS).
        from portkern.policy import RandomPolicy

        for env in (ref, dev):
            env.set_state(state=states, steps=np.zeros(n, np.int64))
        r_buf = ref.rollout(6, RandomPolicy(), path="fused")
        d_buf = dev.rollout(6, RandomPolicy(), path="fused")
        for field in ("terminated", "truncated"):
            np.testing.assert_array_equal(host(getattr(d_buf, field)), getattr(r_buf, field), err_msg=field)
        for field in ("actions", "rewards", "obs", "final_obs"):
            np.testing.assert_allclose(host(getattr(d_buf, field)), getattr(r_buf, field), rtol=tol, atol=tol,
                                       err_msg=field)


def _kernel_backends():
    out = []
    for name in ("opencl", "cuda_host", "numba", "cupy"):
        p = probe(name)
        out.append(pytest.param(name, marks=[] if p.available else [pytest.mark.skip(reason=f"{name}: {p.reason}")]))
    return out


@pytest.mark.parametrize("links", [2, 16])
@pytest.mark.parametrize("name", _kernel_backends())
def test_kernel_backends_step_and_roll_out_k_wide_at_the_extreme_lengths(name, links):
    # The shared suites build the kernels at the default K = 3 only. Here each kernel backend builds K = 2 and 16
    # (-DPK_LINKS, Numba's keyword): one step against the reference in both dtypes where the device has float64,
    # and the fused rollout with the in-kernel K-output MLP against the host path (NumPy's policy), crossing the
    # time limit. 16 links draw their random components from four Philox blocks and the MLP's from eight.
    spec = envs.get("Chain-v0", links=links)
    n = 37 if probe(name).simulator else 261
    g = np.random.default_rng(links)
    lo, hi = (np.asarray(b) for b in spec.test_state_box)
    states = g.uniform(lo, hi, (n, 2 * links))
    actions = 1.5 * spec.random_actions(g, n)  # beyond [-1, 1]: the clip is part of the step
    for dtype in ("float32", "float64"):
        dev = step.make("Chain-v0", n, links=links, dtype=dtype, seed=5, backend=name)
        if dtype == "float64" and not dev.backend.supports_float64:
            continue
        ref = step.make("Chain-v0", n, links=links, dtype=dtype, seed=5)
        for env in (ref, dev):
            env.reset()
            env.set_state(state=states, steps=np.zeros(n, np.int64))
        tol = spec.parity_tolerance[dtype]
        r_obs, r_rew, r_term, _ = ref.step(actions)
        d_obs, d_rew, d_term, _ = (dev.backend.to_host(x) for x in dev.step(actions))
        np.testing.assert_array_equal(d_term, r_term)
        np.testing.assert_allclose(d_rew, r_rew, rtol=tol, atol=tol)
        np.testing.assert_allclose(d_obs, r_obs, rtol=tol, atol=tol)
        np.testing.assert_allclose(dev.get_state()["state"], ref.get_state()["state"], rtol=tol, atol=tol)
    from portkern.policy import MLPPolicy

    policy = MLPPolicy.init(spec, seed=4)
    bufs = []
    for path in ("fused", "host"):
        env = step.make("Chain-v0", n, links=links, seed=21, backend=name)
        env.reset()
        env.set_state(steps=np.full(n, spec.max_episode_steps - 3))
        bufs.append(env.rollout(6, policy, path=path))
    # [fused, host] of each field
    actions, obs = ([portkern.to_numpy(getattr(b, f)) for b in bufs] for f in ("actions", "obs"))
    assert actions[0].shape == actions[1].shape == (6, n, links)
    np.testing.assert_allclose(actions[0], actions[1], rtol=1e-5, atol=1e-5)  # tanh/exp ulps in the kernel
    np.testing.assert_allclose(obs[0], obs[1], rtol=1e-4, atol=1e-4)
    for f in ("terminated", "truncated"):
        np.testing.assert_array_equal(*(portkern.to_numpy(getattr(b, f)) for b in bufs), err_msg=f)
