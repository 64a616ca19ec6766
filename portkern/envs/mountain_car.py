"""MountainCar-v0: Gymnasium's under-powered car in a valley (Moore 1990), discrete push."""

from __future__ import annotations

import numpy as np

from .base import Constraint, Derived, EnvSpec, KernelParams, Param, State, namespace

# The valley and the start are MountainCarContinuous-v0's too (it imports them, with reset,
# observe, the spaces and the parity facts); the two envs differ in the engine and the reward.
#: The valley: its walls and the speed clip.
VALLEY = (
    Param("min_position", -1.2),
    Param("max_position", 0.6, perturb=0.52),  # inward: the states near the right wall then clip
    Param("max_speed", 0.07, "positive"),
)
#: The start: position ~ U[reset_low, reset_high], at rest.
START = (
    Param("reset_low", -0.6, doc="reset: position ~ U[reset_low, reset_high]"),
    Param("reset_high", -0.4),
    Derived("reset_center", lambda p: (p["reset_low"] + p["reset_high"]) / 2),
    Derived("reset_half", lambda p: (p["reset_high"] - p["reset_low"]) / 2),
)
PARAMS = (
    *VALLEY,
    Param("goal_position", 0.5),
    Param("goal_velocity", 0.0, perturb=0.03),
    Param("force", 0.001),
    Param("gravity", 0.0025),
    *START,
)

CONSTRAINTS = (
    Constraint("min_position < max_position", ("min_position", "max_position"),
               lambda p: p["min_position"] < p["max_position"]),
    Constraint("reset_low <= reset_high", ("reset_low", "reset_high"), lambda p: p["reset_low"] <= p["reset_high"]),
)  # fmt: skip


def reset(sym: np.ndarray, p: KernelParams) -> State:
    position = p.reset_center + p.reset_half * sym[:, 0]
    return (position, namespace(position).zeros_like(position))


def step(state: State, action: np.ndarray, p: KernelParams):
    # Array API only (see envs.base); clips are maximum then minimum, which is what np.clip computes.
    xp = namespace(*state)
    position, velocity = state
    min_pos, max_speed = p.min_position, p.max_speed
    push = xp.astype(xp.astype(action, xp.int64) - 1, position.dtype) * p.force
    velocity = velocity + (push + xp.cos(3.0 * position) * (-p.gravity))
    velocity = xp.minimum(xp.maximum(velocity, -max_speed), max_speed)
    position = position + velocity
    position = xp.minimum(xp.maximum(position, min_pos), p.max_position)
    velocity = xp.where((position == min_pos) & (velocity < 0), xp.zeros_like(velocity), velocity)
    terminated = (position >= p.goal_position) & (velocity >= p.goal_velocity)
    return (position, velocity), xp.full_like(position, -1.0), terminated


def observe(state: State) -> np.ndarray:
    return namespace(*state).stack(state, axis=1)


def parity_states(rng: np.random.Generator, n: int) -> np.ndarray:
    """Across the region, with quarters at the left wall, near the goal and at the speed clip."""
    s = rng.uniform([-1.2, -0.07], [0.6, 0.07], (n, 2))
    k = n // 4
    s[:k, 0] = -1.2 + rng.uniform(0, 0.01, k)  # left wall with negative velocity
    s[:k, 1] = -rng.uniform(0, 0.07, k)
    s[k : 2 * k, 0] = rng.uniform(0.4, 0.6, k)  # near the goal
    s[2 * k : 3 * k, 1] = rng.choice([-0.07, 0.07], k) * rng.uniform(0.97, 1.0, k)  # speed clip
    return s


SPEC = EnvSpec(
    id="MountainCar-v0",
    gymnasium_id="MountainCar-v0",
    kernel="mountain_car",
    state_names=("position", "velocity"),
    obs_dim=2,
    obs_low=(-1.2, -0.07),
    obs_high=(0.6, 0.07),
    discrete_actions=3,
    action_high=0.0,
    state_limit=None,
    max_episode_steps=200,
    params=PARAMS,
    constraints=CONSTRAINTS,
    reset=reset,
    step=step,
    observe=observe,
    test_state_box=((-1.2, -0.07), (0.6, 0.07)),
    parity_states=parity_states,
    parity_tolerance={"float64": 1e-14, "float32": 1e-7},
)
