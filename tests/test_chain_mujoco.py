"""The chain's reference dynamics are MuJoCo's: portkern.envs._chain_model against MuJoCo itself
(``mj_forward``'s qacc, ``mj_step`` through ``mujoco.rollout``) on the MJCF the module writes.

Tolerances, and why the trajectory tests come in three kinds. A chain of links is chaotic: two
correct implementations that differ by rounding (here the articulated-body algorithm in NumPy
against MuJoCo's composite-rigid-body path in C) drift apart like e^(lambda t). So:

* one env step from the same state agrees to 1e-9 relative everywhere, however violent the motion;
* 100 env steps agree to 1e-7 (radians, rad/s) in the small-oscillation regime (links hanging
  near rest, control gain 0.25 N m: 100 steps amplify rounding by ~1e8 at K = 10, 1e4 at K = 5);
* in any regime, over 100 steps the reference strays from MuJoCo no further than MuJoCo strays from
  itself when its initial state moves by one ulp (times a safety factor): the gap is the physics'
  sensitivity, not a modelling difference.
"""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
from mujoco import rollout

from portkern.envs import _chain_model as chain

FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS
#: Control gain of the small-oscillation regime (see the module docstring).
GENTLE = chain.ChainParams(gear=0.25)


def _model(links: int, p: chain.ChainParams = chain.ChainParams()) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(
        chain.mjcf(links, link_length=p.link_length, link_mass=p.link_mass, gravity=p.gravity, gear=p.gear, dt=p.dt)
    )


def _mj_qacc(model: mujoco.MjModel, q: np.ndarray, v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """MuJoCo's qacc after mj_forward at each column of [K, N] states and controls."""
    data = mujoco.MjData(model)
    out = np.empty_like(q)
    for n in range(q.shape[1]):
        data.qpos[:], data.qvel[:], data.ctrl[:] = q[:, n], v[:, n], u[:, n]
        mujoco.mj_forward(model, data)
        out[:, n] = data.qacc
    return out


def _mj_env_steps(model: mujoco.MjModel, q: np.ndarray, v: np.ndarray, ctrl: np.ndarray, skip: int = chain.FRAME_SKIP):
    """``mujoco.rollout`` (mj_step) from [K, N] states under [T, K, N] controls, each held for
    ``skip`` MuJoCo steps: the states after each of the T env steps, as [T, K, N] qpos and qvel."""
    k, n = q.shape
    data = mujoco.MjData(model)
    init = np.empty((n, mujoco.mj_stateSize(model, FULL)))
    for i in range(n):
        data.qpos[:], data.qvel[:] = q[:, i], v[:, i]
        mujoco.mj_getState(model, data, init[i], FULL)
    control = np.repeat(np.transpose(ctrl, (2, 0, 1)), skip, axis=1)  # [N, T * skip, K]
    state, _ = rollout.rollout(model, data, init, control)
    state = np.transpose(state[:, skip - 1 :: skip], (1, 2, 0))  # [size, ...] -> [T, size, N]
    return state[:, 1 : 1 + k], state[:, 1 + k : 1 + 2 * k]  # FULLPHYSICS: time, qpos, qvel, ...


def _run(q, v, ctrl, p, dtype=np.float64):
    """The reference's env steps from [K, N] states under [T, K, N] controls: [T, K, N] qpos, qvel."""
    qs, vs = [], []
    state = (tuple(q.astype(dtype)), tuple(v.astype(dtype)))
    for u in ctrl.astype(dtype):
        state = chain.env_step(*state, u, p)
        qs.append(np.stack(state[0]))
        vs.append(np.stack(state[1]))
    return np.stack(qs), np.stack(vs)


def _rest_states(g: np.random.Generator, k: int, n: int):
    """Near rest, as a reset would draw them: every angle and velocity ~ U[-0.1, 0.1]."""
    return g.uniform(-0.1, 0.1, (k, n)), g.uniform(-0.1, 0.1, (k, n))


def _mj_run_from_rest(model: mujoco.MjModel, links: int, seed: int, n: int, steps: int = 100):
    """``n`` rest states and [steps, links, n] controls in U[-1, 1], drawn from ``seed`` in that order, and
    MuJoCo's trajectory from them: (q0, v0, ctrl, qpos, qvel)."""
    g = np.random.default_rng(seed)
    q0, v0 = _rest_states(g, links, n)
    ctrl = g.uniform(-1.0, 1.0, (steps, links, n))
    return (q0, v0, ctrl, *_mj_env_steps(model, q0, v0, ctrl))


# --- the model -------------------------------------------------------------------------------------


@pytest.mark.parametrize("links", [2, 5, 10, 16])
def test_mjcf_is_the_documented_model(links):
    p = chain.ChainParams()
    m = _model(links)
    assert m.njnt == m.nq == m.nv == links
    assert (m.jnt_type == mujoco.mjtJoint.mjJNT_HINGE).all()
    np.testing.assert_array_equal(m.jnt_axis, np.tile([0.0, 1.0, 0.0], (links, 1)))
    assert not m.jnt_limited.any()
    assert not m.dof_damping.any() and not m.dof_armature.any() and not m.dof_frictionloss.any()
    assert not m.jnt_stiffness.any()
    assert m.nu == links
    assert m.actuator_trnid[:, 0].tolist() == list(range(links))  # one motor per joint, in order
    np.testing.assert_array_equal(m.actuator_gear[:, 0], p.gear)
    assert m.actuator_ctrllimited.all()
    np.testing.assert_array_equal(m.actuator_ctrlrange, np.tile([-1.0, 1.0], (links, 1)))
    assert m.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
    assert m.opt.timestep == p.dt
    np.testing.assert_array_equal(m.opt.gravity, [0.0, 0.0, -p.gravity])
    assert m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_CONTACT
    assert not m.geom_contype.any() and not m.geom_conaffinity.any()
    # The explicit inertials, parsed to exactly the floats the reference computes with.
    np.testing.assert_array_equal(m.body_mass[1:], p.link_mass)
    np.testing.assert_array_equal(m.body_inertia[1:, 1], p.link_inertia)  # about the hinge axis
    np.testing.assert_array_equal(m.body_ipos[1:], np.tile([0.0, 0.0, -p.link_com], (links, 1)))
    np.testing.assert_array_equal(m.body_pos[2:], np.tile([0.0, 0.0, -p.link_length], (links - 1, 1)))


def test_mjcf_carries_every_param():
    p = chain.ChainParams(link_length=0.3, link_mass=0.7, gravity=0.0, gear=2.5, dt=0.004)
    m = _model(3, p)
    assert m.opt.timestep == 0.004 and m.opt.gravity[2] == 0.0
    np.testing.assert_array_equal(m.actuator_gear[:, 0], 2.5)
    np.testing.assert_array_equal(m.body_mass[1:], 0.7)
    np.testing.assert_array_equal(m.body_inertia[1:, 1], p.link_inertia)
    np.testing.assert_array_equal(m.body_pos[2:, 2], -0.3)


@pytest.mark.parametrize("bad", [1, 17, 2.5, "3", True, 0, -3, None])
def test_bad_links_raise_naming_links(bad):
    with pytest.raises(ValueError, match="links"):
        chain.mjcf(bad)
    with pytest.raises(ValueError, match="links"):
        chain.check_links(bad)


@pytest.mark.parametrize(
    "name, value", [("link_length", 0.0), ("link_mass", -1.0), ("gear", math.inf), ("dt", "0.01"), ("gravity", math.nan)]
)
def test_bad_params_raise_naming_them(name, value):
    with pytest.raises(ValueError, match=name):
        chain.mjcf(3, **{name: value})
    with pytest.raises(ValueError, match=name):
        chain.ChainParams(**{name: value})


def test_mismatched_arrays_raise_naming_them():
    z2, z3 = np.zeros((2, 4)), np.zeros((3, 4))
    with pytest.raises(ValueError, match="qvel"):
        chain.qacc(z3, z2, z3)
    with pytest.raises(ValueError, match="ctrl"):
        chain.env_step(z3, z3, z2)
    with pytest.raises(ValueError, match="qpos"):
        chain.rk4_step(np.zeros((1, 4)), np.zeros((1, 4)), np.zeros((1, 4)))
    with pytest.raises(ValueError, match="qpos"):
        chain.qacc(np.zeros((17, 4)), np.zeros((17, 4)), np.zeros((17, 4)))


# --- forward dynamics ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "p", [chain.ChainParams(), chain.ChainParams(link_length=0.3, link_mass=0.2, gravity=-3.0, gear=7.0)],
    ids=["defaults", "other-params"],
)
@pytest.mark.parametrize("links", [2, 5, 10])
def test_qacc_equals_mj_forward(links, p):
    g = np.random.default_rng(links)
    n = 300
    q = g.uniform(-2 * math.pi, 2 * math.pi, (links, n))  # beyond one turn: angles are never wrapped
    v = g.uniform(-10.0, 10.0, (links, n))
    u = g.uniform(-1.5, 1.5, (links, n))  # a third beyond ctrlrange: MuJoCo clamps them
    q[:, :20], v[:, :20] = 0.0, 0.0  # the rest state exactly
    want = _mj_qacc(_model(links, p), q, v, u)
    # Relative to each state's largest acceleration (a component may be ~0 where others are large).
    scale = np.abs(want).max(axis=0)
    assert (scale > 0).all()
    for algorithm in (chain.qacc, chain.qacc_crba):  # the spec's ABA, and MuJoCo's own path
        got = np.stack(algorithm(tuple(q), tuple(v), tuple(u), p))
        assert (np.abs(got - want).max(axis=0) / scale).max() <= 1e-9, algorithm.__name__


def test_qacc_accepts_a_k_by_n_array_and_a_tuple_alike():
    g = np.random.default_rng(0)
    q, v, u = (g.uniform(-1, 1, (4, 16)) for _ in range(3))
    for a, b in zip(chain.qacc(q, v, u), chain.qacc(tuple(q), list(v), tuple(u))):
        np.testing.assert_array_equal(a, b)


# --- integration -----------------------------------------------------------------------------------


@pytest.mark.parametrize("links", [2, 5, 10])
def test_rk4_step_equals_one_mj_step(links):
    g = np.random.default_rng(10 + links)
    n = 100
    q, v = g.uniform(-math.pi, math.pi, (links, n)), g.uniform(-8.0, 8.0, (links, n))
    u = g.uniform(-1.2, 1.2, (1, links, n))
    mq, mv = _mj_env_steps(_model(links), q, v, u, skip=1)
    got_q, got_v = (np.stack(x) for x in chain.rk4_step(q, v, u[0]))
    np.testing.assert_allclose(got_q, mq[0], rtol=0, atol=1e-12 * max(1.0, np.abs(mq).max()))
    np.testing.assert_allclose(got_v, mv[0], rtol=0, atol=1e-12 * max(1.0, np.abs(mv).max()))


def test_env_step_is_frame_skip_rk4_steps():
    g = np.random.default_rng(1)
    q, v, u = g.uniform(-1, 1, (3, 8)), g.uniform(-1, 1, (3, 8)), g.uniform(-1, 1, (3, 8))
    want = (tuple(q), tuple(v))
    for _ in range(chain.FRAME_SKIP):
        want = chain.rk4_step(*want, u)
    got = chain.env_step(q, v, u)
    for a, b in zip((*want[0], *want[1]), (*got[0], *got[1])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # whole MuJoCo trajectories
@pytest.mark.parametrize("links", [2, 5, 10])
def test_every_env_step_of_a_violent_trajectory_equals_mujoco(links):
    """One env step from each of MuJoCo's states along 100 steps at gear 5 (spinning at up to
    ~100 rad/s): the step map is the same everywhere, not only near rest."""
    p = chain.ChainParams(gear=5.0)
    m = _model(links, p)
    q0, v0, ctrl, mq, mv = _mj_run_from_rest(m, links, seed=20 + links, n=8)
    # All steps at once: the reference from the states before each step (a batch of steps * n envs).
    before_q = np.concatenate([q0[None], mq[:-1]]).transpose(1, 0, 2).reshape(links, -1)
    before_v = np.concatenate([v0[None], mv[:-1]]).transpose(1, 0, 2).reshape(links, -1)
    got_q, got_v = chain.env_step(before_q, before_v, ctrl.transpose(1, 0, 2).reshape(links, -1), p)
    want_q, want_v = mq.transpose(1, 0, 2).reshape(links, -1), mv.transpose(1, 0, 2).reshape(links, -1)
    scale = np.maximum(1.0, np.maximum(np.abs(want_q), np.abs(want_v)).max(axis=0))
    assert np.abs(want_v).max() > 20.0  # it really is violent
    assert (np.abs(np.stack(got_q) - want_q).max(axis=0) / scale).max() <= 1e-9
    assert (np.abs(np.stack(got_v) - want_v).max(axis=0) / scale).max() <= 1e-9


@pytest.mark.slow  # whole MuJoCo trajectories
@pytest.mark.parametrize("links", [2, 5, 10])
def test_100_env_steps_equal_mujoco_near_rest(links):
    q0, v0, ctrl, mq, mv = _mj_run_from_rest(_model(links, GENTLE), links, seed=links, n=16)
    rq, rv = _run(q0, v0, ctrl, GENTLE)
    assert np.abs(mv).max() > 1.0  # the controls do move the chain
    np.testing.assert_allclose(rq, mq, rtol=0, atol=1e-7)
    np.testing.assert_allclose(rv, mv, rtol=0, atol=1e-7)


@pytest.mark.slow  # whole MuJoCo trajectories
@pytest.mark.parametrize("links, gear", [(5, 5.0), (10, 1.0)])
def test_100_env_steps_stay_within_mujocos_own_rounding_sensitivity(links, gear):
    """Where the chain is chaotic, the reference's gap to MuJoCo is no larger than MuJoCo's gap to
    itself after a 1-ulp change of its initial state (x 100, plus 1e-12 for the first steps, where
    the one-ulp run has not yet spread)."""
    p = chain.ChainParams(gear=gear)
    m = _model(links, p)
    q0, v0, ctrl, mq, mv = _mj_run_from_rest(m, links, seed=30 + links, n=16)
    gap_mj = 0.0
    for dq, dv in ((np.nextafter(q0, np.inf), v0), (q0, np.nextafter(v0, -np.inf))):
        pq, pv = _mj_env_steps(m, dq, dv, ctrl)
        gap_mj = np.maximum(gap_mj, np.maximum(np.abs(pq - mq), np.abs(pv - mv)).max(axis=(1, 2)))
    rq, rv = _run(q0, v0, ctrl, p)
    gap_ref = np.maximum(np.abs(rq - mq), np.abs(rv - mv)).max(axis=(1, 2))  # [steps]
    assert gap_mj[-1] > 1e-11  # this regime does amplify rounding (from ~1e-16)
    assert (gap_ref <= 100.0 * gap_mj + 1e-12).all()


# --- precision and array libraries -------------------------------------------------------------------

#: float32 against float64, relative to max(1, |state|), one env step from the same (float32) state:
#: the same at every K, since the articulated-body algorithm's error does not grow with K (measured
#: 2e-7 at K = 2 to 1.3e-6 at K = 16, from states across the circle at up to 5 rad/s).
F32_STEP_TOL = 1e-5
#: float32 against float64 over 100 env steps from the same rest states, radians and rad/s, in the
#: small-oscillation regime (GENTLE; measured 4e-6 at K = 2, 3e-5 at K = 3, 1.5e-4 at K = 5). At
#: K = 10, or with the default gear at K >= 3, the chain amplifies float32's rounding past any
#: useful bound within 100 steps, as it amplifies float64's (see above): there, float32 kernels are
#: to be checked one step at a time (F32_STEP_TOL).
F32_RUN_TOL = {2: 1e-4, 3: 1e-3, 5: 3e-3}


@pytest.mark.parametrize("links", [2, 5, 10, 16])
def test_float32_one_env_step_within_documented_tolerance(links):
    g = np.random.default_rng(40 + links)
    n = 200
    q = g.uniform(-math.pi, math.pi, (links, n)).astype(np.float32)
    v = g.uniform(-5.0, 5.0, (links, n)).astype(np.float32)
    u = g.uniform(-1.0, 1.0, (links, n)).astype(np.float32)
    q32, v32 = (np.stack(x) for x in chain.env_step(q, v, u))
    assert q32.dtype == v32.dtype == np.float32
    q64, v64 = (np.stack(x) for x in chain.env_step(q.astype(np.float64), v.astype(np.float64), u.astype(np.float64)))
    scale = np.maximum(1.0, np.maximum(np.abs(q64), np.abs(v64)).max(axis=0))
    err = np.maximum(np.abs(q32 - q64), np.abs(v32 - v64)).max(axis=0) / scale
    assert err.max() <= F32_STEP_TOL


def test_float32_error_of_aba_does_not_grow_with_k_as_crbas_does():
    """The module docstring's reason for ABA: at K = 16 hanging near rest (cond(M) ~ 3e5), MuJoCo's
    CRBA + L^T D L path in float32 is far off float64, the articulated-body algorithm is not."""
    links, n = 16, 200
    g = np.random.default_rng(60)
    q, v = _rest_states(g, links, n)
    u = g.uniform(-1.0, 1.0, (links, n))
    q, v, u = (x.astype(np.float32) for x in (q, v, u))
    truth = np.stack(chain.qacc(*(x.astype(np.float64) for x in (q, v, u))))
    scale = np.abs(truth).max(axis=0)
    err = {f.__name__: (np.abs(np.stack(f(q, v, u)) - truth).max(axis=0) / scale).max() for f in (chain.qacc, chain.qacc_crba)}
    assert err["qacc"] <= 1e-5
    assert err["qacc_crba"] >= 100 * err["qacc"], err


@pytest.mark.slow  # whole MuJoCo trajectories
@pytest.mark.parametrize("links", sorted(F32_RUN_TOL))
def test_float32_100_env_steps_within_documented_tolerance(links):
    p = GENTLE
    g = np.random.default_rng(50 + links)
    n, steps = 32, 100
    q0, v0 = _rest_states(g, links, n)
    ctrl = g.uniform(-1.0, 1.0, (steps, links, n))
    q64, v64 = _run(q0, v0, ctrl, p)
    q32, v32 = _run(q0, v0, ctrl, p, np.float32)
    assert q32.dtype == np.float32
    assert max(np.abs(q32 - q64).max(), np.abs(v32 - v64).max()) <= F32_RUN_TOL[links]


def test_reference_runs_on_array_api_strict_and_torch():
    """Written against the array API: bit-identical on array-api-strict (NumPy underneath), and
    equal to rounding on PyTorch tensors (its sin and cos are not NumPy's)."""
    import array_api_strict as xs
    import torch

    g = np.random.default_rng(2)
    q, v, u = g.uniform(-3, 3, (5, 32)), g.uniform(-3, 3, (5, 32)), g.uniform(-1.5, 1.5, (5, 32))
    want = np.stack([np.stack(s) for s in chain.env_step(q, v, u)])
    strict = chain.env_step(*(tuple(xs.asarray(r) for r in a) for a in (q, v, u)))
    np.testing.assert_array_equal(np.stack([np.stack([np.asarray(r) for r in s]) for s in strict]), want)
    tq = chain.env_step(*(torch.from_numpy(a) for a in (q, v, u)))
    got = np.stack([torch.stack(s).numpy() for s in tq])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())
