"""Gymnasium adapters over ``portkern.step``: a ``VectorEnv`` (the batch), an ``Env`` (one env), ``portkern/<EnvId>``.

``gymnasium.make_vec("portkern/CartPole-v1", 8)`` builds the batch (:class:`PortkernVectorEnv`), with
Gymnasium's default autoreset (``next_step``), so every Gymnasium vector wrapper accepts it;
``autoreset_mode=AutoresetMode.SAME_STEP`` (or portkern's ``autoreset="same_step"``) selects the other
mode. ``gymnasium.make("portkern/CartPole-v1")`` builds one env (:class:`PortkernEnv`), which is also
what ``gymnasium.make_vec(..., vectorization_mode="sync", vector_kwargs={"autoreset_mode": ...})``
vectorises.
"""

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

__all__ = ["NAMESPACE", "PortkernEnv", "PortkernVectorEnv", "make_vec", "register_envs"]

NAMESPACE = "portkern"
_MODES = {"same_step": AutoresetMode.SAME_STEP, "next_step": AutoresetMode.NEXT_STEP}
_NAMES = {mode: name for name, mode in _MODES.items()}
#: Gymnasium's default for vector envs (and so what its stateful wrappers, NormalizeObservation first, accept).
DEFAULT_AUTORESET = "next_step"


def _autoreset_arg(autoreset: str | None, autoreset_mode: AutoresetMode | str | None) -> str:
    """portkern's ``autoreset`` name from either spelling: portkern's string or Gymnasium's ``AutoresetMode``."""
    from_mode = None
    if autoreset_mode is not None:
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            mode = None
        if mode not in _NAMES:
            raise ValueError(
                f"autoreset_mode: expected AutoresetMode.NEXT_STEP or AutoresetMode.SAME_STEP (portkern envs "
                f"always reset in the kernel, so DISABLED is not available), got {autoreset_mode!r}"
            )
        from_mode = _NAMES[mode]
    if autoreset is not None and autoreset not in _MODES:
        raise ValueError(f"autoreset: expected one of {', '.join(map(repr, _MODES))}, got {autoreset!r}")
    if autoreset is not None and from_mode is not None and autoreset != from_mode:
        raise ValueError(f"autoreset={autoreset!r} and autoreset_mode={autoreset_mode!r} disagree; give one of them")
    return autoreset or from_mode or DEFAULT_AUTORESET


def _seed_arg(seed: Any) -> int | None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise TypeError(
            f"seed: expected an int (one seed for the whole batch) or None, got {type(seed).__name__}; "
            "portkern keys each env's random stream by (seed, env index), so per-env seed lists "
            "are not supported"
        )
    return None if seed is None else int(seed)


def _check_options(options: dict[str, Any] | None) -> None:
    if options:
        # Partial resets (options["reset_mask"]) need a masked reset kernel that portkern lacks.
        raise ValueError(f"options: not supported by portkern envs, got keys {sorted(options)}")


def _env_kwargs(env_id: str, kwargs: dict[str, Any], who: str) -> str:
    """Check what Gymnasium forwards to an entry point (``max_episode_steps``, ``render_mode``); the bare id."""
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
        raise TypeError(f"{who}: unexpected keyword arguments {sorted(kwargs)}")
    return env_id


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
        seed = _seed_arg(seed)
        _check_options(options)
        obs = self.env.reset(seed)
        super().reset(seed=seed)  # seeds self.np_random as Gymnasium does
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


class PortkernEnv(gymnasium.Env):
    """One portkern env as a ``gymnasium.Env``: a batch of one on ``backend``, host NumPy arrays out.

    It steps with ``next_step`` autoreset inside and returns the obs an episode ended with; call
    ``reset()`` after ``terminated or truncated`` as with any Gymnasium env. ``reset(seed=s)`` keys the
    env's Philox stream by ``(s, 0)``; ``reset()`` starts the next episode of the stream (the first
    unseeded reset draws the key from ``self.np_random``). The episode limit is the env's own
    (``gymnasium.make``'s ``TimeLimit`` can shorten it, not lengthen it).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        env_id: str,
        *,
        backend: str | Backend = "numpy",
        device: str | None = None,
        dtype: str | np.dtype = "float32",
        params: Mapping[str, float] | None = None,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        env_id = _env_kwargs(env_id, {**kwargs, "render_mode": render_mode}, "PortkernEnv")
        self.env = step.make(env_id, 1, backend=backend, device=device, seed=0, dtype=dtype,
                             autoreset="next_step", params=params)  # fmt: skip
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self.render_mode = None
        self._started = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        seed = _seed_arg(seed)
        _check_options(options)
        if seed is not None:
            obs = self.env.reset(seed)  # range-checks the seed before anything changes
            super().reset(seed=seed)  # seeds self.np_random as Gymnasium does
        else:
            super().reset()  # self.np_random from OS entropy on the first call, else kept
            obs = self.env.reset(None if self._started else int(self.np_random.integers(0, 2**32)))
        self._started = True
        return self._host(obs)[0], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated = self.env.step(self._batch_action(action))
        return (self._host(obs)[0], float(self._host(reward)[0]), bool(self._host(terminated)[0]),
                bool(self._host(truncated)[0]), {})  # fmt: skip

    def render(self) -> None:
        return None

    def _batch_action(self, action: Any) -> np.ndarray:
        a = np.asarray(action)
        space = self.action_space
        if isinstance(space, gymnasium.spaces.Discrete):
            if a.shape != () or a.dtype.kind not in "iu" or not 0 <= int(a) < space.n:
                raise ValueError(f"action: expected an int in [0, {space.n}) ({space}), got {action!r}")
            return a.reshape(1)
        if a.dtype.kind != "f" or a.size != 1 or a.ndim > 1 or not np.isfinite(a).all():
            raise ValueError(f"action: expected a finite float array of shape {space.shape} ({space}), got {action!r}")
        return a.astype(np.float32).reshape(1, 1)

    def _host(self, a: Any) -> np.ndarray:
        return self.env.backend.to_host(a)

    def __repr__(self) -> str:
        return f"PortkernEnv({self.env!r})"


def make_vec(
    env_id: str,
    num_envs: int = 1,
    *,
    backend: str | Backend = "numpy",
    device: str | None = None,
    seed: int | None = None,
    dtype: str | np.dtype = "float32",
    autoreset: str | None = None,
    autoreset_mode: AutoresetMode | str | None = None,
    params: Mapping[str, float] | None = None,
    **kwargs: Any,
) -> PortkernVectorEnv:
    """A Gymnasium vector env of ``num_envs`` portkern ``env_id`` copies (``portkern/`` prefix optional).

    Autoreset is Gymnasium's default, ``next_step``, unless ``autoreset="same_step"`` (portkern's name)
    or ``autoreset_mode=AutoresetMode.SAME_STEP`` (Gymnasium's) says otherwise. ``seed=None`` draws a
    fresh 32-bit seed from OS entropy, so unseeded envs differ between runs as in Gymnasium.
    ``kwargs`` takes what ``gymnasium.make_vec`` forwards: ``max_episode_steps`` (must equal the env's
    limit, which portkern fixes per env) and ``render_mode`` (only None).
    """
    env_id = _env_kwargs(env_id, kwargs, "make_vec")
    mode = _autoreset_arg(autoreset, autoreset_mode)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    env = step.make(
        env_id, num_envs, backend=backend, device=device, seed=seed, dtype=dtype,
        autoreset=mode, params=params,
    )  # fmt: skip
    return PortkernVectorEnv(env)


def register_envs() -> None:
    """Register ``portkern/<id>`` for every portkern env: ``PortkernEnv`` for ``gymnasium.make`` and the
    sync/async vector modes, ``make_vec`` (the batch) as the vector entry point."""
    for env_id, spec in envs.ENVS.items():
        theirs = gymnasium.registry.get(env_id)
        gymnasium.register(
            id=f"{NAMESPACE}/{env_id}",
            entry_point=f"{__name__}:PortkernEnv",
            vector_entry_point=f"{__name__}:make_vec",
            max_episode_steps=spec.max_episode_steps,
            reward_threshold=None if theirs is None else theirs.reward_threshold,
            kwargs={"env_id": env_id},
        )


# Gymnasium 1.x has no plugin entry-point discovery: importing this module is what registers the ids
# (gymnasium.make_vec("portkern.gym:portkern/CartPole-v1") imports it on demand).
if f"{NAMESPACE}/CartPole-v1" not in gymnasium.registry:
    register_envs()
