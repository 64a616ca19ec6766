"""Random valid states and actions per env, shared by the interface and parity tests.

Both come from the env's own spec (``test_state_box``, the action space): a new env is picked up
with no edit here, and an env without those facts fails at import instead of borrowing another's.
"""

from __future__ import annotations

import numpy as np

from portkern import envs


def random_states(env_id: str, n: int, rng: np.random.Generator) -> np.ndarray:
    lo, hi = envs.get(env_id).test_state_box
    return rng.uniform(lo, hi, (n, len(lo)))


def random_actions(env_id: str, n: int, rng: np.random.Generator) -> np.ndarray:
    return envs.get(env_id).random_actions(rng, n, overshoot=1.2)
