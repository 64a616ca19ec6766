"""Acrobot-v1: Gymnasium's two-link underactuated pendulum (Sutton 1996), RK4 over one dt, "book" dynamics."""

from __future__ import annotations

import math

import numpy as np

from .base import Derived, EnvSpec, KernelParams, Param, State, namespace, square


PARAMS = (
    Param("dt", 0.2, "positive"),
    Param("link_length_1", 1.0, "positive"),
    Param("link_mass_1", 1.0, "positive"),
    Param("link_mass_2", 1.0, "positive"),
    Param("link_com_pos_1", 0.5, "positive"),
    Param("link_com_pos_2", 0.5, "positive"),
    Param("link_moi", 1.0, "positive"),
    Param("max_vel_1", 4 * math.pi, "positive"),
    Param("max_vel_2", 9 * math.pi, "positive"),
    Param("gravity", 9.8),
    Param("reset_bound", 0.1, "nonnegative", "reset: each state variable ~ U[-b, b]"),
    # The products Gymnasium's _dsdt evaluates from constants only, named by the letter used
    # below; precomputing them in the same order keeps every remaining operation identical.
    Derived("dt2", lambda p: p["dt"] / 2.0),
    Derived("dt6", lambda p: p["dt"] / 6.0),
    Derived("c_a", lambda p: p["link_mass_1"] * p["link_com_pos_1"] ** 2),
    Derived("m2", lambda p: p["link_mass_2"]),
    Derived("c_b", lambda p: p["link_length_1"] ** 2 + p["link_com_pos_2"] ** 2),
    Derived("c_c", lambda p: 2 * p["link_length_1"] * p["link_com_pos_2"]),
    Derived("i1", lambda p: p["link_moi"]),
    Derived("c_d", lambda p: p["link_com_pos_2"] ** 2),
    Derived("c_e", lambda p: p["link_length_1"] * p["link_com_pos_2"]),
    Derived("i2", lambda p: p["link_moi"]),
    Derived("c_f", lambda p: p["link_mass_2"] * p["link_com_pos_2"] * p["gravity"]),
    Derived("c_g", lambda p: -p["link_mass_2"] * p["link_length_1"] * p["link_com_pos_2"]),
    Derived("c_h", lambda p: 2 * p["link_mass_2"] * p["link_length_1"] * p["link_com_pos_2"]),
    Derived("c_j", lambda p: (p["link_mass_1"] * p["link_com_pos_1"] + p["link_mass_2"] * p["link_length_1"])
            * p["gravity"]),
    Derived("c_k", lambda p: p["link_mass_2"] * p["link_length_1"] * p["link_com_pos_2"]),
    Derived("c_l", lambda p: p["link_mass_2"] * p["link_com_pos_2"] ** 2),
    Derived("half_pi", lambda p: math.pi / 2.0),
    Derived("pi", lambda p: math.pi),
    Derived("two_pi", lambda p: math.pi - -math.pi),
)


def reset(sym: np.ndarray, p: KernelParams) -> State:
    return tuple(p.reset_bound * sym[:, i] for i in range(4))


def dsdt(p: KernelParams, a, theta1, theta2, dtheta1, dtheta2):
    """Gymnasium's AcrobotEnv._dsdt ("book" variant), operation for operation."""
    xp = namespace(theta1, theta2)
    m2, i1, i2 = p.m2, p.i1, p.i2
    d1 = p.c_a + m2 * (p.c_b + p.c_c * xp.cos(theta2)) + i1 + i2
    d2 = m2 * (p.c_d + p.c_e * xp.cos(theta2)) + i2
    phi2 = p.c_f * xp.cos(theta1 + theta2 - p.half_pi)
    phi1 = (
        p.c_g * square(dtheta2) * xp.sin(theta2)
        - p.c_h * dtheta2 * dtheta1 * xp.sin(theta2)
        + p.c_j * xp.cos(theta1 - p.half_pi)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - p.c_k * square(dtheta1) * xp.sin(theta2) - phi2) / (
        p.c_l + i2 - square(d2) / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


def _wrap(x: np.ndarray, lo, hi, span) -> np.ndarray:
    # Gymnasium's wrap(): subtract/add the span one at a time (not fmod), so results match bit for
    # bit. The loop runs while any element is out of range (a data-dependent trip count, once per
    # 2*pi: set_state bounds the angles); where() changes only the elements out of range.
    xp = namespace(x)
    while bool(xp.any(x > hi)):
        x = xp.where(x > hi, x - span, x)
    while bool(xp.any(x < lo)):
        x = xp.where(x < lo, x + span, x)
    return x


def step(state: State, action: np.ndarray, p: KernelParams):
    xp = namespace(*state)
    dt, dt2, dt6 = p.dt, p.dt2, p.dt6
    pi, two_pi, max_vel_1, max_vel_2 = p.pi, p.two_pi, p.max_vel_1, p.max_vel_2
    y = state
    a = xp.astype(xp.astype(action, xp.int64) - 1, y[0].dtype)  # AVAIL_TORQUE = [-1, 0, +1]
    k1 = dsdt(p, a, *y)
    k2 = dsdt(p, a, *(y[i] + dt2 * k1[i] for i in range(4)))
    k3 = dsdt(p, a, *(y[i] + dt2 * k2[i] for i in range(4)))
    k4 = dsdt(p, a, *(y[i] + dt * k3[i] for i in range(4)))
    ns = [y[i] + dt6 * (k1[i] + 2.0 * k2[i] + 2.0 * k3[i] + k4[i]) for i in range(4)]
    ns[0] = _wrap(ns[0], -pi, pi, two_pi)
    ns[1] = _wrap(ns[1], -pi, pi, two_pi)
    ns[2] = xp.minimum(xp.maximum(ns[2], -max_vel_1), max_vel_1)
    ns[3] = xp.minimum(xp.maximum(ns[3], -max_vel_2), max_vel_2)
    terminated = -xp.cos(ns[0]) - xp.cos(ns[1] + ns[0]) > 1.0
    reward = xp.where(terminated, xp.zeros_like(ns[0]), xp.full_like(ns[0], -1.0))
    return tuple(ns), reward, terminated


def observe(state: State) -> np.ndarray:
    s0, s1, s2, s3 = state
    xp = namespace(*state)
    return xp.stack([xp.cos(s0), xp.sin(s0), xp.cos(s1), xp.sin(s1), s2, s3], axis=1)


def parity_states(rng: np.random.Generator, n: int) -> np.ndarray:
    """Across the region, a quarter beyond the velocity bounds (clipping), a quarter near +-pi (wrap)."""
    s = rng.uniform([-math.pi, -math.pi, -4 * math.pi, -9 * math.pi],
                    [math.pi, math.pi, 4 * math.pi, 9 * math.pi], (n, 4))  # fmt: skip
    s[: n // 4, 2:] *= 1.05  # beyond the velocity bounds: clipping
    s[n // 4 : n // 2, 0] = rng.choice([-math.pi, math.pi], n // 4) * rng.uniform(0.98, 1.0, n // 4)
    return s


SPEC = EnvSpec(
    id="Acrobot-v1",
    gymnasium_id="Acrobot-v1",
    kernel="acrobot",
    state_names=("theta1", "theta2", "dtheta1", "dtheta2"),
    obs_dim=6,
    obs_low=(-1.0, -1.0, -1.0, -1.0, -4 * math.pi, -9 * math.pi),
    obs_high=(1.0, 1.0, 1.0, 1.0, 4 * math.pi, 9 * math.pi),
    discrete_actions=3,
    action_high=0.0,
    state_limit=(100.0, 100.0, 1e6, 1e6),
    max_episode_steps=500,
    params=PARAMS,
    reset=reset,
    step=step,
    observe=observe,
    test_state_box=((-math.pi, -math.pi, -4 * math.pi, -9 * math.pi), (math.pi, math.pi, 4 * math.pi, 9 * math.pi)),
    parity_states=parity_states,
    # Acrobot's RK4 feeds sin/cos through four derivative evaluations with d2/d1 divisions.
    parity_tolerance={"float64": 1e-10, "float32": 5e-4},
)
