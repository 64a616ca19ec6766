"""MountainCarContinuous-v0: Gymnasium's mountain car with a continuous force."""

from __future__ import annotations

import numpy as np

from .base import EnvSpec, State

DEFAULTS = {
    "min_action": -1.0,
    "max_action": 1.0,
    "min_position": -1.2,
    "max_position": 0.6,
    "max_speed": 0.07,
    "goal_position": 0.45,
    "goal_velocity": 0.0,
    "power": 0.0015,
    "gravity": 0.0025,  # a literal in Gymnasium's step; a parameter here
    "reset_low": -0.6,
    "reset_high": -0.4,
}

PARAM_NAMES = (
    "min_action", "max_action", "min_position", "max_position", "max_speed",
    "goal_position", "goal_velocity", "power", "gravity", "reset_center", "reset_half",
)  # fmt: skip


def kernel_params(p):
    return [
        p["min_action"], p["max_action"], p["min_position"], p["max_position"], p["max_speed"],
        p["goal_position"], p["goal_velocity"], p["power"], p["gravity"],
        (p["reset_low"] + p["reset_high"]) / 2, (p["reset_high"] - p["reset_low"]) / 2,
    ]  # fmt: skip


def reset(sym: np.ndarray, kp: np.ndarray) -> State:
    position = kp[9] + kp[10] * sym[:, 0]
    return (position, np.zeros_like(position))


def step(state: State, action: np.ndarray, kp: np.ndarray):
    # Gymnasium keeps this env's state in float32 and mixes in one float64 cos; the reference
    # computes in the env dtype throughout (see README, "Where the reference differs").
    T = kp.dtype.type
    position, velocity = state
    min_a, max_a, min_pos, max_pos, max_speed, goal_pos, goal_vel, power, gravity, _, _ = kp
    a = action.astype(kp.dtype)
    force = np.minimum(np.maximum(a, min_a), max_a)
    velocity = velocity + (force * power - gravity * np.cos(T(3) * position))
    velocity = np.minimum(velocity, max_speed)
    velocity = np.maximum(velocity, -max_speed)
    position = position + velocity
    position = np.minimum(position, max_pos)
    position = np.maximum(position, min_pos)
    velocity = np.where((position == min_pos) & (velocity < 0), T(0), velocity)
    terminated = (position >= goal_pos) & (velocity >= goal_vel)
    # The action cost uses the unclipped action, as Gymnasium's does.
    reward = np.where(terminated, T(100), T(0)) - a * a * T(0.1)
    return (position, velocity), reward, terminated


def observe(state: State) -> np.ndarray:
    return np.stack(state, axis=1)


SPEC = EnvSpec(
    id="MountainCarContinuous-v0",
    kernel="mountain_car_continuous",
    state_names=("position", "velocity"),
    obs_dim=2,
    obs_low=(-1.2, -0.07),
    obs_high=(0.6, 0.07),
    discrete_actions=None,
    action_high=1.0,
    state_limit=None,
    max_episode_steps=999,
    defaults=DEFAULTS,
    param_names=PARAM_NAMES,
    kernel_params=kernel_params,
    reset=reset,
    step=step,
    observe=observe,
)
