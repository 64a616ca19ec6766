"""MountainCarContinuous-v0: Gymnasium's mountain car with a continuous force."""

from __future__ import annotations

import numpy as np

from .base import Constraint, Derived, EnvSpec, KernelParams, Param, State, namespace
from .mountain_car import parity_states

PARAMS = (
    Param("min_action", -1.0),
    Param("max_action", 1.0),
    Param("min_position", -1.2),
    Param("max_position", 0.6, perturb=0.52),  # inward: the states near the right wall then clip
    Param("max_speed", 0.07, "positive"),
    Param("goal_position", 0.45),
    Param("goal_velocity", 0.0, perturb=0.03),
    Param("power", 0.0015),
    Param("gravity", 0.0025, doc="a literal in Gymnasium's step; a parameter here"),
    Param("reset_low", -0.6, doc="reset: position ~ U[reset_low, reset_high]"),
    Param("reset_high", -0.4),
    Derived("reset_center", lambda p: (p["reset_low"] + p["reset_high"]) / 2),
    Derived("reset_half", lambda p: (p["reset_high"] - p["reset_low"]) / 2),
)

CONSTRAINTS = (
    Constraint("min_action <= max_action", ("min_action", "max_action"), lambda p: p["min_action"] <= p["max_action"]),
    Constraint("min_position < max_position", ("min_position", "max_position"),
               lambda p: p["min_position"] < p["max_position"]),
    Constraint("reset_low <= reset_high", ("reset_low", "reset_high"), lambda p: p["reset_low"] <= p["reset_high"]),
)  # fmt: skip


def reset(sym: np.ndarray, p: KernelParams) -> State:
    position = p.reset_center + p.reset_half * sym[:, 0]
    return (position, namespace(position).zeros_like(position))


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


def observe(state: State) -> np.ndarray:
    return namespace(*state).stack(state, axis=1)


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
    params=PARAMS,
    constraints=CONSTRAINTS,
    reset=reset,
    step=step,
    observe=observe,
    test_state_box=((-1.2, -0.07), (0.6, 0.07)),
    # Same valley as MountainCar-v0: the same wall, goal and speed-clip regions.
    parity_states=parity_states,
    parity_tolerance={"float64": 1e-14, "float32": 1e-7},
)
