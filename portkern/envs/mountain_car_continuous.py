"""MountainCarContinuous-v0: Gymnasium's mountain car with a continuous force."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import mountain_car
from .base import Constraint, KernelParams, Param, State, namespace

PARAMS = (
    Param("min_action", -1.0),
    Param("max_action", 1.0),
    *mountain_car.VALLEY,
    Param("goal_position", 0.45),
    Param("goal_velocity", 0.0, perturb=0.03),
    Param("power", 0.0015),
    Param("gravity", 0.0025, doc="a literal in Gymnasium's step; a parameter here"),
    *mountain_car.START,
)

CONSTRAINTS = (
    Constraint("min_action <= max_action", ("min_action", "max_action"), lambda p: p["min_action"] <= p["max_action"]),
    *mountain_car.CONSTRAINTS,
)


def step(state: State, action: np.ndarray, p: KernelParams):
    # Gymnasium keeps this env's state in float32 and mixes in one float64 cos; the reference
    # computes in the env dtype throughout (see README, "Where the reference differs").
    xp = namespace(*state)
    position, velocity = state
    max_speed, min_pos = p.max_speed, p.min_position
    a = xp.astype(action, position.dtype)
    force = xp.minimum(xp.maximum(a, p.min_action), p.max_action)
    velocity = velocity + (force * p.power - p.gravity * xp.cos(3.0 * position))
    velocity = xp.minimum(velocity, max_speed)
    velocity = xp.maximum(velocity, -max_speed)
    position = position + velocity
    position = xp.minimum(position, p.max_position)
    position = xp.maximum(position, min_pos)
    velocity = xp.where((position == min_pos) & (velocity < 0), xp.zeros_like(velocity), velocity)
    terminated = (position >= p.goal_position) & (velocity >= p.goal_velocity)
    # The action cost uses the unclipped action, as Gymnasium's does.
    reward = xp.where(terminated, xp.full_like(a, 100.0), xp.zeros_like(a)) - a * a * 0.1
    return (position, velocity), reward, terminated


# The same valley as MountainCar-v0 (spaces, reset, observation, the wall, goal and speed-clip
# parity states, tolerances), another engine: a continuous force, its own goal and episode limit.
SPEC = replace(
    mountain_car.SPEC,
    id="MountainCarContinuous-v0",
    gymnasium_id="MountainCarContinuous-v0",
    kernel="mountain_car_continuous",
    discrete_actions=None,
    action_high=1.0,
    max_episode_steps=999,
    params=PARAMS,
    constraints=CONSTRAINTS,
    step=step,
)
