"""CartPole-v1: Gymnasium's cart-pole (Barto, Sutton & Anderson 1983), Euler integration."""

from __future__ import annotations

import math

import numpy as np

from .base import Derived, EnvSpec, KernelParams, Param, State, namespace

THETA_THRESHOLD = 12 * 2 * math.pi / 360

PARAMS = (
    Param("gravity", 9.8),
    Param("masscart", 1.0, "positive"),
    Param("masspole", 0.1, "positive"),
    # Derived exactly as Gymnasium's __init__ derives them (Python floats, float64).
    Derived("total_mass", lambda p: p["masspole"] + p["masscart"]),
    Param("length", 0.5, "positive", "half the pole's length, as in Gymnasium"),
    Derived("polemass_length", lambda p: p["masspole"] * p["length"]),
    Param("force_mag", 10.0, "nonnegative"),
    Param("tau", 0.02, "positive", "seconds per step"),
    Param("theta_threshold_radians", THETA_THRESHOLD, "positive"),
    Param("x_threshold", 2.4, "positive"),
    Param("reset_bound", 0.05, "nonnegative", "reset: each state variable ~ U[-b, b]"),
)


def reset(sym: np.ndarray, p: KernelParams) -> State:
    return tuple(p.reset_bound * sym[:, i] for i in range(4))


def step(state: State, action: np.ndarray, p: KernelParams):
    # Same operations in the same order as Gymnasium's CartPoleEnv.step, so float64 is bit-exact.
    # Array API only (see envs.base): Python-float literals take the state's dtype, as NumPy
    # scalars of that dtype did.
    xp = namespace(*state)
    x, x_dot, theta, theta_dot = state
    total_mass, polemass_length, tau = p.total_mass, p.polemass_length, p.tau
    force = xp.where(action == 1, p.force_mag, -p.force_mag)
    costheta = xp.cos(theta)
    sintheta = xp.sin(theta)
    temp = (force + polemass_length * xp.square(theta_dot) * sintheta) / total_mass
    thetaacc = (p.gravity * sintheta - costheta * temp) / (
        p.length * (4.0 / 3.0 - p.masspole * xp.square(costheta) / total_mass)
    )
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    x = x + tau * x_dot
    x_dot = x_dot + tau * xacc
    theta = theta + tau * theta_dot
    theta_dot = theta_dot + tau * thetaacc
    x_thr, th_thr = p.x_threshold, p.theta_threshold_radians
    terminated = (x < -x_thr) | (x > x_thr) | (theta < -th_thr) | (theta > th_thr)
    reward = xp.ones_like(x)
    return (x, x_dot, theta, theta_dot), reward, terminated


def observe(state: State) -> np.ndarray:
    return namespace(*state).stack(state, axis=1)


def parity_states(rng: np.random.Generator, n: int) -> np.ndarray:
    """Across the region, a third packed at the x threshold and a third at the angle threshold."""
    s = rng.uniform([-2.6, -4, -0.25, -4], [2.6, 4, 0.25, 4], (n, 4))
    k = n // 3
    s[:k, 0] = rng.choice([-2.4, 2.4], k) + rng.normal(0, 1e-3, k)
    s[k : 2 * k, 2] = rng.choice([-1, 1], k) * THETA_THRESHOLD + rng.normal(0, 1e-4, k)
    return s


SPEC = EnvSpec(
    id="CartPole-v1",
    gymnasium_id="CartPole-v1",
    kernel="cartpole",
    state_names=("x", "x_dot", "theta", "theta_dot"),
    obs_dim=4,
    obs_low=(-4.8, -math.inf, -2 * THETA_THRESHOLD, -math.inf),
    obs_high=(4.8, math.inf, 2 * THETA_THRESHOLD, math.inf),
    discrete_actions=2,
    action_high=0.0,
    state_limit=None,
    max_episode_steps=500,
    params=PARAMS,
    reset=reset,
    step=step,
    observe=observe,
    test_state_box=((-2.4, -3.0, -0.2, -3.0), (2.4, 3.0, 0.2, 3.0)),
    parity_states=parity_states,
    parity_tolerance={"float64": 1e-12, "float32": 2e-6},
)
