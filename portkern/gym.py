"""Gymnasium ``VectorEnv`` adapter over ``portkern.step`` plus ``portkern/<EnvId>`` registration."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector import VectorEnv as _GymVectorEnv
except ImportError:
    raise ImportError("portkern.gym needs Gymnasium: pip install 'portkern[gym]'") from None

from . import envs, step
from .backends import Backend

__all__ = ["NAMESPACE", "PortkernVectorEnv", "make_vec", "register_envs"]

NAMESPACE = "portkern"
_MODES = {"same_step": AutoresetMode.SAME_STEP, "next_step": AutoresetMode.NEXT_STEP}


class PortkernVectorEnv(_GymVectorEnv):
    """A ``portkern.step.VectorEnv`` behind Gymnasium's vector API: host NumPy copies out, Gymnasium infos.

    Seeds key Philox by (seed, env index), so ``reset(seed=s)`` seeds the whole batch with one int;
    Gymnasium's per-env seed lists are rejected (they cannot be mapped onto that key).
    ``self.env`` is the wrapped ``portkern.step.VectorEnv`` (device buffers, ``get_state``/``set_state``).
    """

    def __init__(self, env: step.VectorEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.metadata = {"autoreset_mode": _MODES[env.autoreset], "render_modes": [], "env_id": env.spec.id}
        self._same_step = env.autoreset == "same_step"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env: ``seed`` (one int for the batch) restarts the random streams."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(
                f"seed: expected an int (one seed for the whole batch) or None, got {type(seed).__name__}; "
                "portkern keys each env's random stream by (seed, env index), so per-env seed lists "
                "are not supported"
            )
        if options:
            # Partial resets (options["reset_mask"]) need a masked reset kernel that portkern lacks.
            raise ValueError(f"options: not supported by portkern envs, got keys {sorted(options)}")
        obs = self.env.reset(None if seed is None else int(seed))
        super().reset(seed=None if seed is None else int(seed))  # seeds self.np_random as Gymnasium does
        return self._host(obs), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every env; with same_step autoreset, ``infos["final_obs"]`` holds the pre-reset obs."""
        obs, reward, terminated, truncated = self.env.step(actions)
        # Copies: the env reuses these device buffers on the next call. float64 rewards, as SyncVectorEnv's.
        obs, term, trunc = self._host(obs), self._host(terminated), self._host(truncated)
        rew = self._host(reward).astype(np.float64, copy=False)
        infos: dict[str, Any] = {}
        done = term | trunc
        if self._same_step and done.any():
            final = self._host(self.env.final_obs)
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = final[i]
            # Same keys, masks and empty final_info dicts as SyncVectorEnv._add_info builds.
            infos = {
                "final_obs": final_obs, "_final_obs": done.copy(),
                "final_info": {}, "_final_info": done.copy(),
            }  # fmt: skip
        return obs, rew, term, trunc, infos

    def _host(self, a: Any) -> np.ndarray:
        return self.env.backend.to_host(a)

    def __repr__(self) -> str:
        return f"PortkernVectorEnv({self.env!r})"


def make_vec(
    env_id: str,
    num_envs: int = 1,
    *,
    backend: str | Backend = "numpy",
    device: str | None = None,
    seed: int | None = None,
    dtype: str | np.dtype = "float32",
    autoreset: str = "same_step",
    params: Mapping[str, float] | None = None,
    **kwargs: Any,
) -> PortkernVectorEnv:
    """A Gymnasium vector env of ``num_envs`` portkern ``env_id`` copies (``portkern/`` prefix optional).

    ``seed=None`` draws a fresh 32-bit seed from OS entropy, so unseeded envs differ between runs as in
    Gymnasium. ``kwargs`` takes what ``gymnasium.make_vec`` forwards: ``max_episode_steps`` (must equal
    the env's limit, which portkern fixes per env) and ``render_mode`` (only None).
    """
    env_id = env_id.removeprefix(f"{NAMESPACE}/")
    spec = envs.get(env_id)
    limit = kwargs.pop("max_episode_steps", spec.max_episode_steps)
    if limit != spec.max_episode_steps:
        raise ValueError(
            f"max_episode_steps: portkern's {env_id} truncates at {spec.max_episode_steps} steps, "
            f"got {limit!r}"
        )
    if kwargs.pop("render_mode", None) is not None:
        raise ValueError("render_mode: portkern envs do not render; pass render_mode=None")
    if kwargs:
        raise TypeError(f"make_vec: unexpected keyword arguments {sorted(kwargs)}")
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    env = step.make(
        env_id, num_envs, backend=backend, device=device, seed=seed, dtype=dtype,
        autoreset=autoreset, params=params,
    )  # fmt: skip
    return PortkernVectorEnv(env)


def register_envs() -> None:
    """Register ``portkern/<id>`` for every portkern env with ``make_vec`` as the vector entry point."""
    for env_id, spec in envs.ENVS.items():
        theirs = gymnasium.registry.get(env_id)
        gymnasium.register(
            id=f"{NAMESPACE}/{env_id}",
            vector_entry_point=f"{__name__}:make_vec",
            max_episode_steps=spec.max_episode_steps,
            reward_threshold=None if theirs is None else theirs.reward_threshold,
            kwargs={"env_id": env_id},
        )


# Gymnasium 1.x has no plugin entry-point discovery: importing this module is what registers the ids
# (gymnasium.make_vec("portkern.gym:portkern/CartPole-v1") imports it on demand).
if f"{NAMESPACE}/CartPole-v1" not in gymnasium.registry:
    register_envs()
