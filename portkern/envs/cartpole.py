"""CartPole-v1: Gymnasium's cart-pole (Barto, Sutton & Anderson 1983), Euler integration."""

from __future__ import annotations

import math

import numpy as np

from .base import EnvSpec, State

DEFAULTS = {
    "gravity": 9.8,
    "masscart": 1.0,
    "masspole": 0.1,
    "length": 0.5,  # half the pole's length, as in Gymnasium
    "force_mag": 10.0,
    "tau": 0.02,
    "theta_threshold_radians": 12 * 2 * math.pi / 360,
    "x_threshold": 2.4,
    "reset_bound": 0.05,
}

PARAM_NAMES = (
    "gravity", "masscart", "masspole", "total_mass", "length", "polemass_length",
    "force_mag", "tau", "theta_threshold_radians", "x_threshold", "reset_bound",
)  # fmt: skip


def kernel_params(p):
    # Derived exactly as Gymnasium's __init__ derives them (Python floats, float64).
    total_mass = p["masspole"] + p["masscart"]
    polemass_length = p["masspole"] * p["length"]
    return [
        p["gravity"], p["masscart"], p["masspole"], total_mass, p["length"], polemass_length,
        p["force_mag"], p["tau"], p["theta_threshold_radians"], p["x_threshold"], p["reset_bound"],
    ]  # fmt: skip


def reset(sym: np.ndarray, kp: np.ndarray) -> State:
    return tuple(kp[10] * sym[:, i] for i in range(4))


def step(state: State, action: np.ndarray, kp: np.ndarray):
    # Same operations in the same order as Gymnasium's CartPoleEnv.step, so float64 is bit-exact.
    T = kp.dtype.type
    x, x_dot, theta, theta_dot = state
    gravity, _, masspole, total_mass, length, polemass_length, force_mag, tau, th_thr, x_thr, _ = kp
    force = np.where(action == 1, force_mag, -force_mag)
    costheta = np.cos(theta)
    sintheta = np.sin(theta)
    temp = (force + polemass_length * np.square(theta_dot) * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (
        length * (T(4.0 / 3.0) - masspole * np.square(costheta) / total_mass)
    )
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    x = x + tau * x_dot
    x_dot = x_dot + tau * xacc
    theta = theta + tau * theta_dot
    theta_dot = theta_dot + tau * thetaacc
    terminated = (x < -x_thr) | (x > x_thr) | (theta < -th_thr) | (theta > th_thr)
    reward = np.ones_like(x)
    return (x, x_dot, theta, theta_dot), reward, terminated


def observe(state: State) -> np.ndarray:
    return np.stack(state, axis=1)


SPEC = EnvSpec(
    id="CartPole-v1",
    kernel="cartpole",
    state_names=("x", "x_dot", "theta", "theta_dot"),
    obs_dim=4,
    obs_low=(-4.8, -math.inf, -2 * DEFAULTS["theta_threshold_radians"], -math.inf),
    obs_high=(4.8, math.inf, 2 * DEFAULTS["theta_threshold_radians"], math.inf),
    discrete_actions=2,
    action_high=0.0,
    state_limit=None,
    max_episode_steps=500,
    defaults=DEFAULTS,
    param_names=PARAM_NAMES,
    kernel_params=kernel_params,
    reset=reset,
    step=step,
    observe=observe,
)
