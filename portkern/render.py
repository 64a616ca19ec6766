"""Frames of portkern envs, drawn by Gymnasium's own classic-control renderers.

portkern keeps no drawing code: a :class:`Renderer` holds one Gymnasium env of the same id (the "twin"),
copies portkern's state (and the physics params both envs name alike, e.g. CartPole's ``length``) into
it and calls the twin's ``render()``. The frames are therefore Gymnasium's for that state, pixel for
pixel, in ``rgb_array`` and ``human`` mode alike. Needs pygame: ``pip install 'portkern[render]'``.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

__all__ = ["RENDER_FPS", "RENDER_MODES", "Renderer"]

#: The modes every portkern env renders, as Gymnasium's classic-control envs declare them.
RENDER_MODES = ["human", "rgb_array"]
#: ``metadata["render_fps"]`` per env id, Gymnasium's values (what ``human`` mode ticks at and what
#: RecordVideo writes videos at).
RENDER_FPS = {
    "CartPole-v1": 50,
    "Pendulum-v1": 30,
    "MountainCar-v0": 30,
    "MountainCarContinuous-v0": 30,
    "Acrobot-v1": 15,
}


def gymnasium_twin(env_id: str) -> str | None:
    """The Gymnasium env whose renderer draws ``env_id``: its own counterpart, or for a variant (an env
    that reuses another's kernels) the counterpart of the env that owns them; None for neither."""
    from . import envs

    spec = envs.get(env_id)
    if spec.gymnasium_id:
        return spec.gymnasium_id
    owner = envs.KERNEL_OWNERS.get(spec.kernel)
    return owner.gymnasium_id if owner is not None else None


def render_fps(env_id: str) -> int:
    return RENDER_FPS.get(gymnasium_twin(env_id) or "", 30)


def check_render_mode(render_mode: Any, env_id: str) -> str | None:
    """``render_mode`` checked against :data:`RENDER_MODES` (and the ids that have a Gymnasium renderer)."""
    if render_mode is None:
        return None
    if render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode: expected None or one of {RENDER_MODES}, got {render_mode!r}")
    if gymnasium_twin(env_id) not in RENDER_FPS:
        raise ValueError(f"render_mode: {env_id} has no Gymnasium renderer to draw with; pass render_mode=None")
    return render_mode


class Renderer:
    """Gymnasium's renderer for ``env_id``, drawing portkern states.

    ``render(state, last_action)`` returns an ``[H, W, 3]`` uint8 frame in ``rgb_array`` mode and draws
    to the window in ``human`` mode (returning None, as Gymnasium's envs do). ``last_action`` is what
    Pendulum's torque arrow shows (None after a reset, as in Gymnasium).
    """

    def __init__(self, env_id: str, render_mode: str, params: Mapping[str, float] | None = None) -> None:
        import gymnasium

        check_render_mode(render_mode, env_id)
        try:
            import pygame  # noqa: F401  (Gymnasium imports it lazily; fail here, with portkern's extra)
        except ImportError:
            raise ImportError(
                f"render_mode={render_mode!r} draws with pygame: pip install 'portkern[render]'"
            ) from None
        self.render_mode = render_mode
        self.twin = gymnasium.make(gymnasium_twin(env_id), render_mode=render_mode).unwrapped
        self.twin.reset(seed=0)  # creates the attributes render() reads; the state is overwritten below
        # Params both envs name alike (CartPole's length, x_threshold; MountainCar's positions) change
        # the drawing as they change the physics.
        for name, value in (params or {}).items():
            if hasattr(self.twin, name):
                setattr(self.twin, name, value)

    def render(self, state: Any, last_action: Any = None) -> np.ndarray | None:
        twin = self.twin
        twin.state = np.asarray(state, dtype=np.float64)
        if hasattr(twin, "last_u"):  # Pendulum: the arrow shows the clipped torque, as Gymnasium's step stores it
            twin.last_u = None if last_action is None else float(
                np.clip(np.asarray(last_action, dtype=np.float32).reshape(-1)[0], -twin.max_torque, twin.max_torque)
            )
        return twin.render()

    def close(self) -> None:
        self.twin.close()
