"""Chain-v0: a planar chain of K rigid links on hinge joints, a motor at every joint (portkern's own env).

The physics is :mod:`portkern.envs._chain_model`'s: exactly MuJoCo's for the model :func:`mjcf` returns (RK4,
:data:`FRAME_SKIP` MuJoCo steps of ``dt`` per env step, the control held), computed by the articulated-body
algorithm (O(K); that module says why ABA and not MuJoCo's own CRBA + L^T D L). K is the structural keyword
``links`` of make (2 to 16, default 3), a compile-time constant of the kernels: ``step.make("Chain-v0", N,
links=5)``. The env's state is MuJoCo's ``(qpos, qvel)`` in that order (``get_state()["state"]`` is
``[N, 2K]``: K joint angles relative to the parent link, never wrapped, then K joint velocities), so any
state can be loaded into ``mujoco.MjData`` and stepped there to check the env.

The task: swing the tip up. The chain starts hanging at rest (the stable equilibrium, ``qpos = 0`` is every
link pointing down) and each joint's motor has ``gear`` = 1 N m, under the 2.45 N m gravity torque of one
horizontal link: raising the tip takes pumping energy in over several swings, as in Acrobot.

* Actions: ``[N, K]`` float32, the K motors' controls (MuJoCo's ``ctrl``), clipped to [-1, 1] by the env as
  MuJoCo's ``ctrllimited`` clips them; the torque is ``gear`` x the clipped control.
* Observations (3K + 2): cos and sin of the K joint angles, the K joint velocities (rad/s, unbounded: there is
  no damping), and the tip's position over the chain's reach, ``(x, z) / (K * link_length)`` in [-1, 1]^2
  (z up, the base at the origin; -1 is straight down).
* Reward: ``h - 1 - ctrl_cost * sum(ctrl^2)``, with ``h`` the tip's height over the reach after the step
  (-1 hanging, +1 straight up): dense, never positive, so every step the tip is low costs and reaching the
  top sooner is worth more (an Acrobot with a shaped reward).
* Termination: the tip's height over the reach reaches ``target_height`` (0.5: the tip K L / 2 above the
  base; a value above 1 turns termination off). Truncation at 200 steps (10 s of simulated time).
* Reset: ``qpos_j = reset_noise * U[-1, 1)``, ``qvel = 0``. A reset gets one Philox block (4 uniforms per
  env), so joint j takes uniform ``j % 4``: for K > 4 the angles repeat every 4 joints (still all within
  ``reset_noise`` of rest).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import _chain_model
from ._chain_model import FRAME_SKIP, MAX_LINKS, MIN_LINKS, ChainParams, mjcf
from .base import Derived, EnvSpec, KernelParams, Param, State, Structural, namespace, square

#: The params that are the MuJoCo model's (``mjcf``'s keywords); the others are the task's.
PHYSICS = ("link_length", "link_mass", "gravity", "gear", "dt")


def _model(p) -> ChainParams:
    return ChainParams(**{name: p[name] for name in PHYSICS})


PARAMS = (
    Param("link_length", 0.5, "positive", "m, every link (a solid cylinder of radius link_length / 20)"),
    Param("link_mass", 1.0, "positive", "kg, every link"),
    Param("gravity", 9.81, "finite", "m/s^2 along -z (0: a horizontal chain)"),
    Param("gear", 1.0, "positive", "N m of joint torque per unit of control"),
    Param("dt", 0.01, "positive", "s, MuJoCo's timestep; an env step is FRAME_SKIP of them"),
    Param("reset_noise", 0.1, "nonnegative", "reset: qpos_j ~ U[-reset_noise, reset_noise), qvel = 0"),
    Param("ctrl_cost", 0.01, "nonnegative", "reward: - ctrl_cost * sum of the clipped controls squared"),
    Param("target_height", 0.5, "finite", "terminated once the tip's height / reach >= this (> 1: never)"),
    # The model's derived constants in Python floats, by ChainParams' own formulas (the MJCF's numbers).
    Derived("link_com", lambda p: _model(p).link_com, "hinge to centre of mass: link_length / 2"),
    Derived("link_inertia", lambda p: _model(p).link_inertia, "about the centre of mass: m (3r^2 + L^2)/12"),
)


def reset(sym: np.ndarray, p: KernelParams, links: int) -> State:
    # K comes bound by the structure (a reset cannot read it from its [N, 4] draws); see the docstring for
    # why joint j takes draw j % 4.
    xp = namespace(sym)
    q = tuple(p.reset_noise * sym[:, j % 4] for j in range(links))
    return q + tuple(xp.zeros_like(sym[:, 0]) for _ in range(links))


def tip(qpos) -> tuple:
    """The tip's position over the reach, ``(x, z) / (K * link_length)``: the mean of the links' unit vectors
    (each ``(-sin phi, -cos phi)`` for its absolute angle ``phi``), so no param enters."""
    xp = namespace(*qpos)
    phi = qpos[0]
    x, z = -xp.sin(phi), -xp.cos(phi)
    for j in range(1, len(qpos)):
        phi = phi + qpos[j]
        x, z = x - xp.sin(phi), z - xp.cos(phi)
    k = float(len(qpos))
    return x / k, z / k


def step(state: State, action, p: KernelParams):
    xp = namespace(*state)
    k = len(state) // 2
    q, v = tuple(state[:k]), tuple(state[k:])
    # The float32 action is MuJoCo's float64 ctrl exactly; clipped as ctrllimited clips it (env_step clips
    # again, a no-op), in the state's dtype.
    u = xp.clip(xp.astype(action, q[0].dtype), -1.0, 1.0)
    ctrl = tuple(u[:, j] for j in range(k))
    nq, nv = _chain_model.env_step(q, v, ctrl, p)
    _, height = tip(nq)
    effort = square(ctrl[0])
    for j in range(1, k):
        effort = effort + square(ctrl[j])
    reward = (height - 1.0) - p.ctrl_cost * effort
    return nq + nv, reward, height >= p.target_height


def observe(state: State):
    xp = namespace(*state)
    k = len(state) // 2
    q = state[:k]
    x, z = tip(q)
    cols = [xp.cos(qj) for qj in q] + [xp.sin(qj) for qj in q] + list(state[k:]) + [x, z]
    return xp.stack(cols, axis=1)


def _relative(absolute: np.ndarray) -> np.ndarray:
    """[n, K] absolute link angles (or angular velocities) as joint ones, each relative to its parent."""
    return np.diff(absolute, axis=1, prepend=0.0)


def parity_states(rng: np.random.Generator, n: int, links: int) -> np.ndarray:
    """[n, 2K] states: a quarter near rest, a quarter with the tip near the termination heights (0.5 and the
    perturbation test's 0.625), a quarter near upright, the rest anywhere. Speeds are drawn per link (absolute
    angular velocities up to 10 rad/s, as swinging episodes reach them) and converted to joint velocities:
    independent joint velocities add up along a long chain into a whip no episode reaches, and that RK4 at
    the default dt cannot follow."""
    k = links
    s = np.empty((n, 2 * k))
    s[:, :k] = _relative(rng.uniform(-math.pi, math.pi, (n, k)))
    s[:, k:] = _relative(rng.uniform(-10.0, 10.0, (n, k)))
    a, b, c = n // 4, n // 2, 3 * n // 4
    s[:a, :k] = rng.normal(0.0, 0.1, (a, k))
    s[:a, k:] = rng.normal(0.0, 0.5, (a, k))
    # Tip heights in [0.35, 0.8]: drawn from a pool of random link angles (heights are cheap to compute).
    pool = rng.uniform(-math.pi, math.pi, (40 * (b - a) + 64, k))
    h = -np.cos(pool).mean(axis=1)
    near = pool[(h > 0.35) & (h < 0.8)]
    m = min(len(near), b - a)
    s[a : a + m, :k] = _relative(near[:m])
    s[a:b, k:] = _relative(rng.uniform(-5.0, 5.0, (b - a, k)))
    s[b:c, :k] = rng.normal(0.0, 0.15, (c - b, k))
    s[b:c, 0] += math.pi
    s[b:c, k:] = _relative(rng.uniform(-2.0, 2.0, (c - b, k)))
    return s


def _shape(values):
    """The EnvSpec fields that depend on K."""
    k = values["links"]
    inf = math.inf
    return dict(
        reset=functools.partial(reset, links=k),
        state_names=tuple(f"qpos{j}" for j in range(k)) + tuple(f"qvel{j}" for j in range(k)),
        obs_dim=3 * k + 2,
        obs_low=(-1.0,) * (2 * k) + (-inf,) * k + (-1.0, -1.0),
        obs_high=(1.0,) * (2 * k) + (inf,) * k + (1.0, 1.0),
        action_dim=k,
        # Joint angles over a turn each way; joint speeds up to 20 / K rad/s, so that the last link's (their
        # sum) stays within 20 rad/s at every K (see parity_states).
        test_state_box=((-math.pi,) * k + (-20.0 / k,) * k, (math.pi,) * k + (20.0 / k,) * k),
        parity_states=functools.partial(parity_states, links=k),
    )


LINKS = Structural("links", 3, MIN_LINKS, MAX_LINKS, "number of links K (a compile-time constant in kernels)")

SPEC = EnvSpec(
    id="Chain-v0",
    kernel="chain",
    discrete_actions=None,
    action_high=1.0,
    state_limit=None,
    max_episode_steps=200,
    params=PARAMS,
    step=step,
    observe=observe,
    # One env step is 5 RK4 steps, 20 articulated-body passes, each with K sin/cos, so a libm's ulps come out
    # amplified by the chain's dynamics over 50 ms. Measured on parity_states and the test box at K = 2..16:
    # a one-ulp change of the state moves the next state by up to 9e-6 relative in float32 and 4e-14 in
    # float64; the tolerances leave a margin of 10 and 2,500 for a few ulps of sin/cos and reordered sums.
    parity_tolerance={"float64": 1e-10, "float32": 1e-4},
    structure=(LINKS,),
    specialise=_shape,
    **_shape({"links": LINKS.default}),
)

__all__ = ["FRAME_SKIP", "LINKS", "MAX_LINKS", "MIN_LINKS", "PHYSICS", "SPEC", "mjcf", "observe", "reset",
           "step", "tip"]
