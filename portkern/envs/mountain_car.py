"""MountainCar-v0: Gymnasium's under-powered car in a valley (Moore 1990), discrete push."""

from __future__ import annotations

import numpy as np

from .base import EnvSpec, State

DEFAULTS = {
    "min_position": -1.2,
    "max_position": 0.6,
    "max_speed": 0.07,
    "goal_position": 0.5,
    "goal_velocity": 0.0,
    "force": 0.001,
    "gravity": 0.0025,
    "reset_low": -0.6,
    "reset_high": -0.4,
}

PARAM_NAMES = (
    "min_position", "max_position", "max_speed", "goal_position", "goal_velocity",
    "force", "gravity", "reset_center", "reset_half",
)  # fmt: skip


def kernel_params(p):
    return [
        p["min_position"], p["max_position"], p["max_speed"], p["goal_position"],
        p["goal_velocity"], p["force"], p["gravity"],
        (p["reset_low"] + p["reset_high"]) / 2, (p["reset_high"] - p["reset_low"]) / 2,
    ]  # fmt: skip


def reset(sym: np.ndarray, kp: np.ndarray) -> State:
    position = kp[7] + kp[8] * sym[:, 0]
    return (position, np.zeros_like(position))


def step(state: State, action: np.ndarray, kp: np.ndarray):
    T = kp.dtype.type
    position, velocity = state
    min_pos, max_pos, max_speed, goal_pos, goal_vel, force, gravity, _, _ = kp
    push = (action.astype(np.int64) - 1).astype(kp.dtype) * force
    velocity = velocity + (push + np.cos(T(3) * position) * (-gravity))
    velocity = np.clip(velocity, -max_speed, max_speed)
    position = position + velocity
    position = np.clip(position, min_pos, max_pos)
    velocity = np.where((position == min_pos) & (velocity < 0), T(0), velocity)
    terminated = (position >= goal_pos) & (velocity >= goal_vel)
    return (position, velocity), np.full_like(position, -1), terminated


def observe(state: State) -> np.ndarray:
    return np.stack(state, axis=1)


SPEC = EnvSpec(
    id="MountainCar-v0",
    kernel="mountain_car",
    state_names=("position", "velocity"),
    obs_dim=2,
    obs_low=(-1.2, -0.07),
    obs_high=(0.6, 0.07),
    discrete_actions=3,
    action_high=0.0,
    state_limit=None,
    max_episode_steps=200,
    defaults=DEFAULTS,
    param_names=PARAM_NAMES,
    kernel_params=kernel_params,
    reset=reset,
    step=step,
    observe=observe,
)
