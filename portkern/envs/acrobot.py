"""Acrobot-v1: Gymnasium's two-link underactuated pendulum (Sutton 1996), RK4 over one dt, "book" dynamics."""

from __future__ import annotations

import math

import numpy as np

from .base import EnvSpec, State

#: Squaring as the kernels do it (one correctly rounded multiply). Gymnasium writes ``x**2`` on
#: NumPy scalars, which calls libm's pow; tests swap this for that to prove the rest is exact.
square = np.square

DEFAULTS = {
    "dt": 0.2,
    "link_length_1": 1.0,
    "link_mass_1": 1.0,
    "link_mass_2": 1.0,
    "link_com_pos_1": 0.5,
    "link_com_pos_2": 0.5,
    "link_moi": 1.0,
    "max_vel_1": 4 * math.pi,
    "max_vel_2": 9 * math.pi,
    "gravity": 9.8,
    "reset_bound": 0.1,
}

# The products Gymnasium's _dsdt evaluates from constants only, named by the letter used below;
# precomputing them in the same order keeps every remaining operation identical.
PARAM_NAMES = (
    "dt", "dt2", "dt6", "c_a", "m2", "c_b", "c_c", "i1", "c_d", "c_e", "i2", "c_f", "c_g",
    "c_h", "c_j", "c_k", "c_l", "half_pi", "pi", "two_pi", "max_vel_1", "max_vel_2", "reset_bound",
)  # fmt: skip


def kernel_params(p):
    m1, m2 = p["link_mass_1"], p["link_mass_2"]
    l1, lc1, lc2 = p["link_length_1"], p["link_com_pos_1"], p["link_com_pos_2"]
    i1 = i2 = p["link_moi"]
    g = p["gravity"]
    dt = p["dt"]
    return [
        dt, dt / 2.0, dt / 6.0,
        m1 * lc1**2,  # c_a
        m2,
        l1**2 + lc2**2,  # c_b
        2 * l1 * lc2,  # c_c
        i1,
        lc2**2,  # c_d
        l1 * lc2,  # c_e
        i2,
        m2 * lc2 * g,  # c_f
        -m2 * l1 * lc2,  # c_g
        2 * m2 * l1 * lc2,  # c_h
        (m1 * lc1 + m2 * l1) * g,  # c_j
        m2 * l1 * lc2,  # c_k
        m2 * lc2**2,  # c_l
        math.pi / 2.0, math.pi, math.pi - -math.pi,
        p["max_vel_1"], p["max_vel_2"], p["reset_bound"],
    ]  # fmt: skip


def reset(sym: np.ndarray, kp: np.ndarray) -> State:
    return tuple(kp[22] * sym[:, i] for i in range(4))


def dsdt(kp: np.ndarray, a, theta1, theta2, dtheta1, dtheta2):
    """Gymnasium's AcrobotEnv._dsdt ("book" variant), operation for operation."""
    (_, _, _, c_a, m2, c_b, c_c, i1, c_d, c_e, i2, c_f, c_g, c_h, c_j, c_k, c_l,
     half_pi, *_rest) = kp  # fmt: skip
    d1 = c_a + m2 * (c_b + c_c * np.cos(theta2)) + i1 + i2
    d2 = m2 * (c_d + c_e * np.cos(theta2)) + i2
    phi2 = c_f * np.cos(theta1 + theta2 - half_pi)
    phi1 = (
        c_g * square(dtheta2) * np.sin(theta2)
        - c_h * dtheta2 * dtheta1 * np.sin(theta2)
        + c_j * np.cos(theta1 - half_pi)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - c_k * square(dtheta1) * np.sin(theta2) - phi2) / (
        c_l + i2 - square(d2) / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def _wrap(x: np.ndarray, lo, hi, span) -> np.ndarray:
    # Gymnasium's wrap(): subtract/add the span one at a time (not fmod), so results match bit for bit.
    x = x.copy()
    while (over := x > hi).any():
        x[over] = x[over] - span
    while (under := x < lo).any():
        x[under] = x[under] + span
    return x


def step(state: State, action: np.ndarray, kp: np.ndarray):
    T = kp.dtype.type
    dt, dt2, dt6 = kp[0], kp[1], kp[2]
    pi, two_pi, max_vel_1, max_vel_2 = kp[18], kp[19], kp[20], kp[21]
    y = state
    a = (action.astype(np.int64) - 1).astype(kp.dtype)  # AVAIL_TORQUE = [-1, 0, +1]
    k1 = dsdt(kp, a, *y)
    k2 = dsdt(kp, a, *(y[i] + dt2 * k1[i] for i in range(4)))
    k3 = dsdt(kp, a, *(y[i] + dt2 * k2[i] for i in range(4)))
    k4 = dsdt(kp, a, *(y[i] + dt * k3[i] for i in range(4)))
    ns = [y[i] + dt6 * (k1[i] + T(2) * k2[i] + T(2) * k3[i] + k4[i]) for i in range(4)]
    ns[0] = _wrap(ns[0], -pi, pi, two_pi)
    ns[1] = _wrap(ns[1], -pi, pi, two_pi)
    ns[2] = np.minimum(np.maximum(ns[2], -max_vel_1), max_vel_1)
    ns[3] = np.minimum(np.maximum(ns[3], -max_vel_2), max_vel_2)
    terminated = -np.cos(ns[0]) - np.cos(ns[1] + ns[0]) > T(1)
    reward = np.where(terminated, T(0), T(-1))
    return tuple(ns), reward, terminated


def observe(state: State) -> np.ndarray:
    s0, s1, s2, s3 = state
    return np.stack([np.cos(s0), np.sin(s0), np.cos(s1), np.sin(s1), s2, s3], axis=1)


SPEC = EnvSpec(
    id="Acrobot-v1",
    kernel="acrobot",
    state_names=("theta1", "theta2", "dtheta1", "dtheta2"),
    obs_dim=6,
    obs_low=(-1.0, -1.0, -1.0, -1.0, -DEFAULTS["max_vel_1"], -DEFAULTS["max_vel_2"]),
    obs_high=(1.0, 1.0, 1.0, 1.0, DEFAULTS["max_vel_1"], DEFAULTS["max_vel_2"]),
    discrete_actions=3,
    action_high=0.0,
    state_limit=(100.0, 100.0, 1e6, 1e6),
    max_episode_steps=500,
    defaults=DEFAULTS,
    param_names=PARAM_NAMES,
    kernel_params=kernel_params,
    reset=reset,
    step=step,
    observe=observe,
)
