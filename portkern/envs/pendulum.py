"""Pendulum-v1: Gymnasium's torque-limited inverted pendulum swing-up."""

from __future__ import annotations

import math

import numpy as np

from .base import Derived, EnvSpec, KernelParams, Param, State, namespace, square


PARAMS = (
    Param("max_speed", 8.0, "positive"),
    Param("max_torque", 2.0, "positive"),
    Param("dt", 0.05, "positive"),
    Param("g", 10.0),
    Param("m", 1.0, "positive"),
    Param("l", 1.0, "positive"),
    Param("x_init", math.pi, "nonnegative", "reset: theta ~ U[-x_init, x_init]"),
    Param("y_init", 1.0, "nonnegative", "reset: theta_dot ~ U[-y_init, y_init]"),
    Derived("grav_coef", lambda p: 3 * p["g"] / (2 * p["l"]), "Gymnasium: 3 * g / (2 * l), in Python floats"),
    Derived("torque_coef", lambda p: 3.0 / (p["m"] * p["l"] ** 2), "Gymnasium: 3.0 / (m * l**2)"),
    Derived("pi", lambda p: math.pi),
    Derived("two_pi", lambda p: 2 * math.pi),
)


def reset(sym: np.ndarray, p: KernelParams) -> State:
    return (p.x_init * sym[:, 0], p.y_init * sym[:, 1])


def angle_normalize(x: np.ndarray, pi, two_pi) -> np.ndarray:
    # remainder is Python's modulo (sign of the divisor), which kernels reproduce with fmod + fix-up.
    return namespace(x).remainder(x + pi, two_pi) - pi


def step(state: State, action: np.ndarray, p: KernelParams):
    xp = namespace(*state)
    th, thdot = state
    dtype = th.dtype
    max_speed, max_torque, dt = p.max_speed, p.max_torque, p.dt
    # The action is float32 (the action space's dtype). Gymnasium's torque terms then stay in
    # float32 (NumPy 2 keeps Python-float * float32 in float32) and are promoted afterwards;
    # mirroring that is what makes the float64 reference bit-exact.
    u = xp.astype(action, xp.float32)
    max_torque32 = xp.astype(max_torque, xp.float32)
    u = xp.minimum(xp.maximum(u, -max_torque32), max_torque32)
    u_cost = xp.astype(0.001 * square(u), dtype)
    u_acc = xp.astype(xp.astype(p.torque_coef, xp.float32) * u, dtype)
    costs = square(angle_normalize(th, p.pi, p.two_pi)) + 0.1 * square(thdot) + u_cost
    newthdot = thdot + (p.grav_coef * xp.sin(th) + u_acc) * dt
    newthdot = xp.minimum(xp.maximum(newthdot, -max_speed), max_speed)
    newth = th + newthdot * dt
    return (newth, newthdot), -costs, xp.zeros_like(th, dtype=xp.bool)


def observe(state: State) -> np.ndarray:
    th, thdot = state
    xp = namespace(th, thdot)
    return xp.stack([xp.cos(th), xp.sin(th), thdot], axis=1)


def parity_states(rng: np.random.Generator, n: int) -> np.ndarray:
    """Across the region, a third at the speed clip, a sixth exactly at +-pi (the angle wrap)."""
    s = rng.uniform([-8, -9], [8, 9], (n, 2))
    s[: n // 3, 1] = rng.choice([-8.0, 8.0], n // 3) + rng.normal(0, 0.05, n // 3)
    s[n // 3 : n // 2, 0] = rng.choice([-math.pi, math.pi], n // 2 - n // 3)
    return s


SPEC = EnvSpec(
    id="Pendulum-v1",
    gymnasium_id="Pendulum-v1",
    kernel="pendulum",
    state_names=("theta", "theta_dot"),
    obs_dim=3,
    obs_low=(-1.0, -1.0, -8.0),
    obs_high=(1.0, 1.0, 8.0),
    discrete_actions=None,
    action_high=2.0,
    state_limit=None,
    max_episode_steps=200,
    params=PARAMS,
    reset=reset,
    step=step,
    observe=observe,
    test_state_box=((-math.pi, -8.0), (math.pi, 8.0)),
    parity_states=parity_states,
    # Pendulum's cost squares an angle up to pi and a speed up to 8.
    parity_tolerance={"float64": 1e-12, "float32": 1e-5},
)
