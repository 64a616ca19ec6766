"""Pendulum-v1: Gymnasium's torque-limited inverted pendulum swing-up."""

from __future__ import annotations

import math

import numpy as np

from .base import EnvSpec, State

#: Squaring as the kernels do it (one correctly rounded multiply). Gymnasium writes ``x**2`` on
#: NumPy scalars, which calls libm's pow; tests swap this for that to prove the rest is exact.
square = np.square

DEFAULTS = {
    "max_speed": 8.0,
    "max_torque": 2.0,
    "dt": 0.05,
    "g": 10.0,
    "m": 1.0,
    "l": 1.0,
    "x_init": math.pi,  # reset: theta ~ U[-x_init, x_init]
    "y_init": 1.0,  # reset: theta_dot ~ U[-y_init, y_init]
}

PARAM_NAMES = (
    "max_speed", "max_torque", "dt", "x_init", "y_init",
    "grav_coef", "torque_coef", "pi", "two_pi",
)  # fmt: skip


def kernel_params(p):
    return [
        p["max_speed"], p["max_torque"], p["dt"], p["x_init"], p["y_init"],
        3 * p["g"] / (2 * p["l"]),  # Gymnasium: 3 * g / (2 * l), in Python floats
        3.0 / (p["m"] * p["l"] ** 2),  # Gymnasium: 3.0 / (m * l**2)
        math.pi, 2 * math.pi,
    ]  # fmt: skip


def reset(sym: np.ndarray, kp: np.ndarray) -> State:
    return (kp[3] * sym[:, 0], kp[4] * sym[:, 1])


def angle_normalize(x: np.ndarray, pi, two_pi) -> np.ndarray:
    # np.remainder is Python's modulo (sign of the divisor), which kernels reproduce with fmod + fix-up.
    return np.remainder(x + pi, two_pi) - pi


def step(state: State, action: np.ndarray, kp: np.ndarray):
    T = kp.dtype.type
    th, thdot = state
    max_speed, max_torque, dt, _, _, grav_coef, torque_coef, pi, two_pi = kp
    # The action is float32 (the action space's dtype). Gymnasium's torque terms then stay in
    # float32 (NumPy 2 keeps Python-float * float32 in float32) and are promoted afterwards;
    # mirroring that is what makes the float64 reference bit-exact.
    u = np.clip(action.astype(np.float32), np.float32(-max_torque), np.float32(max_torque))
    u_cost = (np.float32(0.001) * square(u)).astype(T)
    u_acc = (np.float32(torque_coef) * u).astype(T)
    costs = square(angle_normalize(th, pi, two_pi)) + T(0.1) * square(thdot) + u_cost
    newthdot = thdot + (grav_coef * np.sin(th) + u_acc) * dt
    newthdot = np.clip(newthdot, -max_speed, max_speed)
    newth = th + newthdot * dt
    return (newth, newthdot), -costs, np.zeros(th.shape, dtype=bool)


def observe(state: State) -> np.ndarray:
    th, thdot = state
    return np.stack([np.cos(th), np.sin(th), thdot], axis=1)


SPEC = EnvSpec(
    id="Pendulum-v1",
    kernel="pendulum",
    state_names=("theta", "theta_dot"),
    obs_dim=3,
    obs_low=(-1.0, -1.0, -DEFAULTS["max_speed"]),
    obs_high=(1.0, 1.0, DEFAULTS["max_speed"]),
    discrete_actions=None,
    action_high=DEFAULTS["max_torque"],
    state_limit=None,
    max_episode_steps=200,
    defaults=DEFAULTS,
    param_names=PARAM_NAMES,
    kernel_params=kernel_params,
    reset=reset,
    step=step,
    observe=observe,
)
