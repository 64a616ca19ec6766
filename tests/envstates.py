"""Random valid states and actions per env, shared by the interface and parity tests."""

from __future__ import annotations

import math

import numpy as np

from portkern import envs

#: Box each env's random test states are drawn from (inside what an episode can reach).
STATE_BOX = {
    "CartPole-v1": ([-2.4, -3.0, -0.2, -3.0], [2.4, 3.0, 0.2, 3.0]),
    "Pendulum-v1": ([-math.pi, -8.0], [math.pi, 8.0]),
    "MountainCar-v0": ([-1.2, -0.07], [0.6, 0.07]),
    "MountainCarContinuous-v0": ([-1.2, -0.07], [0.6, 0.07]),
    "Acrobot-v1": ([-math.pi, -math.pi, -4 * math.pi, -9 * math.pi], [math.pi, math.pi, 4 * math.pi, 9 * math.pi]),
}


def random_states(env_id: str, n: int, rng: np.random.Generator) -> np.ndarray:
    lo, hi = STATE_BOX[env_id]
    return rng.uniform(lo, hi, (n, len(lo)))


def random_actions(env_id: str, n: int, rng: np.random.Generator) -> np.ndarray:
    spec = envs.get(env_id)
    if spec.is_discrete:
        return rng.integers(0, spec.discrete_actions, n).astype(np.int32)
    return rng.uniform(-1.2 * spec.action_high, 1.2 * spec.action_high, (n, 1)).astype(np.float32)
