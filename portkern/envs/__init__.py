"""The environments: one module each, with Gymnasium's constants and the NumPy reference dynamics."""

from __future__ import annotations

from . import acrobot, cartpole, mountain_car, mountain_car_continuous, pendulum
from .base import EnvSpec

ENVS: dict[str, EnvSpec] = {
    m.SPEC.id: m.SPEC for m in (cartpole, pendulum, mountain_car, mountain_car_continuous, acrobot)
}


def get(env_id: str) -> EnvSpec:
    """The spec for ``env_id``; unknown ids raise ValueError listing the valid ones."""
    try:
        return ENVS[env_id]
    except (KeyError, TypeError):
        raise ValueError(
            f"env_id: unknown environment {env_id!r}; valid ids: {', '.join(ENVS)}"
        ) from None


__all__ = ["ENVS", "EnvSpec", "get"]
