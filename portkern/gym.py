"""Gymnasium adapters over ``portkern.step``: a ``VectorEnv`` (the batch), an ``Env`` (one env), ``portkern/<EnvId>``.

``gymnasium.make_vec("portkern/CartPole-v1", 8)`` builds the batch (:class:`PortkernVectorEnv`), with
Gymnasium's default autoreset (``next_step``), so every Gymnasium vector wrapper accepts it;
``autoreset_mode=AutoresetMode.SAME_STEP`` (or portkern's ``autoreset="same_step"``) selects the other
mode. ``gymnasium.make("portkern/CartPole-v1")`` builds one env (:class:`PortkernEnv`), which is also
what ``gymnasium.make_vec(..., vectorization_mode="sync", vector_kwargs={"autoreset_mode": ...})``
vectorises.

With the numpy backend (the default) the single env steps on NumPy scalars (``portkern._scalar``): the
reference dynamics, bit-identical to env 0 of the batch, at Gymnasium's own speed. Both envs render
(``render_mode="rgb_array"`` or ``"human"``) with Gymnasium's classic-control renderers (``portkern.render``).

Ids contain a ``/`` (``portkern/CartPole-v1``, Gymnasium's namespace syntax); tools that name files
after the id must replace it (the RL Zoo and CleanRL do: see README, "With the tools you already use").
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

#: The oldest Gymnasium the adapters run on: 1.0 brought AutoresetMode and the vector API they implement.
GYMNASIUM_MIN = "1.0"

try:
    import gymnasium
except ImportError:
    raise ImportError(f"portkern.gym needs Gymnasium >= {GYMNASIUM_MIN}: pip install 'portkern[gym]'") from None
try:
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector import VectorEnv as _GymVectorEnv
except ImportError as exc:
    # Gymnasium 0.29 imports, but lacks AutoresetMode: say which version is needed, not just "install it".
    raise ImportError(
        f"portkern.gym needs Gymnasium >= {GYMNASIUM_MIN} (for gymnasium.vector.AutoresetMode); found "
        f"gymnasium {getattr(gymnasium, '__version__', '?')}: pip install -U 'gymnasium>={GYMNASIUM_MIN}' "
        f"({exc})"
    ) from exc

from . import envs, render, step
from ._scalar import HOST_LOOP_MAX_ENVS, ScalarBatch, ScalarEnv, supports_scalar_path
from .backends import Backend
from .backends.numpy import NumpyBackend, reset_states

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
        raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
    return None if seed is None else int(seed)


def _vector_seed_arg(seed: Any, num_envs: int) -> tuple[int | None, list[int] | None]:
    """(the batch's seed, the per-env seeds or None) from an int, None, or one int per env."""
    if seed is None or isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return _seed_arg(seed), None
    if isinstance(seed, (list, tuple, np.ndarray)):
        seeds = list(seed)
        if len(seeds) != num_envs:
            raise ValueError(f"seed: a list of seeds needs one per env ({num_envs}), got {len(seeds)}")
        for i, s in enumerate(seeds):
            if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= int(s) < 2**32:
                raise ValueError(f"seed[{i}]: expected an int in [0, 2**32), got {s!r}")
        return int(seeds[0]), [int(s) for s in seeds]
    raise TypeError(
        f"seed: expected an int, a list of {num_envs} ints (one per env) or None, got {type(seed).__name__}"
    )


def _check_options(options: dict[str, Any] | None) -> None:
    if options:
        # Partial resets (options["reset_mask"]) need a masked reset kernel that portkern lacks.
        raise ValueError(f"options: not supported by portkern envs, got keys {sorted(options)}")


def _env_kwargs(env_id: str, kwargs: dict[str, Any], who: str) -> tuple[str, dict[str, int]]:
    """Check what Gymnasium forwards to the vector entry point (``max_episode_steps``, the env's structural
    keywords such as ``links=3``); the bare id and the structural keywords (checked)."""
    if not isinstance(env_id, str):
        raise TypeError(f"env_id: expected a portkern env id such as 'CartPole-v1', got {type(env_id).__name__} {env_id!r}")
    env_id = env_id.removeprefix(f"{NAMESPACE}/")
    spec = envs.get(env_id)
    structure = {s.name: kwargs.pop(s.name) for s in spec.structure if s.name in kwargs}
    spec = spec.with_structure(**structure)
    limit = kwargs.pop("max_episode_steps", spec.max_episode_steps)
    if limit != spec.max_episode_steps:
        raise ValueError(
            f"max_episode_steps: portkern's {env_id} truncates at {spec.max_episode_steps} steps, "
            f"got {limit!r}: the batched env's kernels count steps and truncate at the env's own limit "
            f"(a TimeLimit-style vector wrapper can shorten episodes, nothing can lengthen them there); "
            f"gymnasium.make's single env (portkern.gym.PortkernEnv(..., max_episode_steps=...)) takes "
            f"any limit"
        )
    if kwargs:
        # Python's own wording for an unknown keyword, which tools match on: TorchRL's GymEnv passes
        # ``frameskip`` and drops it only when the error reads "unexpected keyword argument 'frameskip'".
        raise TypeError(f"{who}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return env_id, structure


class PortkernVectorEnv(_GymVectorEnv):
    """A ``portkern.step.VectorEnv`` behind Gymnasium's vector API: host NumPy copies out, Gymnasium infos.

    Seeds key Philox by (seed, env index): ``reset(seed=s)`` restarts env i from key ``(s, i)``.
    ``reset(seed=[s0, s1, ...])`` (one int per env, as Gymnasium's vector envs take) restarts env i from
    key ``(s_i, i)``; the kernels hold one seed per batch, so the episodes that follow by autoreset
    continue env i's stream under ``s0``, key ``(s0, i)``: the same list gives the same run.
    ``render()`` returns one frame per env (Gymnasium's renderer, ``render_mode="rgb_array"``), the tuple
    Gymnasium's ``SyncVectorEnv`` returns.
    ``self.env`` is the wrapped ``portkern.step.VectorEnv`` (device buffers, ``get_state``/``set_state``),
    or, for up to ``HOST_LOOP_MAX_ENVS`` envs on numpy, a ``portkern._scalar.ScalarBatch`` with the same
    methods and results (a loop over scalar envs, faster at that size).
    """

    def __init__(self, env: step.VectorEnv | ScalarBatch, render_mode: str | None = None) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        if render_mode == "human":
            raise ValueError(
                "render_mode: the batched env renders 'rgb_array' frames (one per env); for a window, "
                "render one env: gymnasium.make(id, render_mode='human')"
            )
        self.render_mode = render.check_render_mode(render_mode, env.spec.id)
        #: Gymnasium's vector-env attributes, as ``SyncVectorEnv`` carries them (TorchRL's ``GymWrapper`` reads
        #: ``autoreset_mode``): the autoreset mode, and "same" observation spaces for every env.
        self.autoreset_mode = _MODES[env.autoreset]
        self.observation_mode = "same"
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": ["rgb_array"],
                         "render_fps": render.render_fps(env.spec.id), "env_id": env.spec.id}  # fmt: skip
        self._same_step = env.autoreset == "same_step"
        self._fresh = isinstance(env, ScalarBatch)
        self._renderer = None if render_mode is None else render.Renderer(env.spec.id, render_mode, env.params)
        self._last_actions: np.ndarray | None = None

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env: ``seed`` (one int for the batch, or one int per env) restarts the random streams."""
        first, seeds = _vector_seed_arg(seed, self.num_envs)
        _check_options(options)
        obs = self.env.reset(first)
        if seeds is not None and any(s != first for s in seeds):
            obs = self._restart_each(seeds)
        super().reset(seed=first)  # seeds self.np_random as Gymnasium does
        self._last_actions = None
        return self._host(obs), {}

    def _restart_each(self, seeds: list[int]) -> Any:
        """Env i's first state from key (seeds[i], i), episode 0: the reference draw, written to the device."""
        e, n = self.env, self.num_envs
        state = reset_states(e.spec, e._param_vector, np.asarray(seeds, dtype=np.uint32),
                             np.arange(n, dtype=np.uint32), np.zeros(n, dtype=np.uint32))  # fmt: skip
        e.set_state(np.stack([np.asarray(s, dtype=e.dtype) for s in state], axis=1))
        return e.obs

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every env; with same_step autoreset, ``infos["final_obs"]`` holds the pre-reset obs."""
        if self._renderer is not None:
            self._last_actions = np.array(actions, copy=True)
        obs, reward, terminated, truncated = self.env.step(actions)
        if self._fresh:  # the host loop builds new arrays every step: nothing to copy
            obs, term, trunc = obs, terminated, truncated
        else:  # copies: the env reuses these device buffers on the next call
            obs, term, trunc = self._host(obs), self._host(terminated), self._host(truncated)
        rew = self._host(reward).astype(np.float64, copy=False)  # float64 rewards, as SyncVectorEnv's
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

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One ``[H, W, 3]`` frame per env, drawn by Gymnasium's renderer (None without a render_mode)."""
        if self._renderer is None:
            gymnasium.logger.warn("render() called without a render_mode: make the env with render_mode='rgb_array'")
            return None
        states = self.env.get_state()["state"]
        acts = self._last_actions
        return tuple(
            self._renderer.render(states[i], None if acts is None else np.asarray(acts).reshape(self.num_envs, -1)[i])
            for i in range(self.num_envs)
        )

    def close_extras(self, **kwargs: Any) -> None:
        if self._renderer is not None:
            self._renderer.close()

    def _host(self, a: Any) -> np.ndarray:
        return self.env.backend.to_host(a)

    def __repr__(self) -> str:
        return f"PortkernVectorEnv({self.env!r})"


_F32 = np.dtype(np.float32)
_NP_INTS = (np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8)


class PortkernEnv(gymnasium.Env):
    """One portkern env as a ``gymnasium.Env``.

    With the numpy backend (the default) it runs on NumPy scalars on the host (``portkern._scalar``):
    the reference dynamics, bit-identical to env 0 of a batch, as fast as Gymnasium's own env. Other
    backends step a batch of one on their device. ``self.env`` is that engine (``get_state``/``set_state``
    as ``portkern.step.VectorEnv``'s, with one env).

    It steps with ``next_step`` autoreset inside and returns the obs an episode ended with; call
    ``reset()`` after ``terminated or truncated`` as with any Gymnasium env. ``reset(seed=s)`` keys the
    env's Philox stream by ``(s, 0)``; ``reset()`` starts the next episode of the stream (the first
    unseeded reset draws the key from ``self.np_random``).

    The env truncates at ``max_episode_steps``, the env's own limit unless given (any positive limit on
    the numpy backend; device kernels count to the env's limit only). ``gymnasium.make``'s own
    ``max_episode_steps`` is a ``TimeLimit`` wrapper, as for Gymnasium's own envs: the host env it builds
    leaves truncation to that wrapper (any limit, or none with ``max_episode_steps=-1``); a device
    kernel counts to the env's own limit, so a longer ``TimeLimit`` cannot lengthen its episodes.
    ``render_mode`` ``"rgb_array"`` or ``"human"`` draws with Gymnasium's renderer (``portkern.render``).

    :attr:`state` reads and sets the physical state as Gymnasium's classic-control envs' ``unwrapped.state``
    does (``env.unwrapped.state = (0.0, 0.0, 0.1, 0.0)`` starts CartPole-v1 tilted), in their order.
    """

    metadata = {"render_modes": list(render.RENDER_MODES), "render_fps": 50}

    def __init__(
        self,
        env_id: str,
        *,
        backend: str | Backend = "numpy",
        device: str | None = None,
        dtype: str | np.dtype = "float32",
        params: Mapping[str, float] | None = None,
        render_mode: str | None = None,
        max_episode_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        env_id, structure = _env_kwargs(env_id, kwargs, "PortkernEnv.__init__")
        spec = envs.get(env_id, **structure)
        self.render_mode = render.check_render_mode(render_mode, env_id)
        # An env without a Gymnasium renderer (a portkern-only env such as Chain-v0) offers no render mode.
        modes = type(self).metadata["render_modes"] if render.gymnasium_twin(env_id) in render.RENDER_FPS else []
        self.metadata = {**type(self).metadata, "render_fps": render.render_fps(env_id), "render_modes": modes}
        host = _host_path(backend, env_id, dtype)
        if host:
            if device not in (None, "cpu", "host"):
                raise ValueError(f"device: the numpy backend runs on the host only (None, 'cpu'), got {device!r}")
            self.env = ScalarEnv(env_id, seed=0, dtype=dtype, params=params, max_episode_steps=max_episode_steps)
        else:
            if max_episode_steps is not None and max_episode_steps != spec.max_episode_steps:
                raise ValueError(
                    f"max_episode_steps: on the {getattr(backend, 'name', backend)} backend, {env_id}'s kernels "
                    f"truncate at its own limit, {spec.max_episode_steps} steps, got {max_episode_steps!r}; "
                    f"the numpy backend takes any limit, and a TimeLimit wrapper can shorten episodes"
                )
            self.env = step.make(env_id, 1, backend=backend, device=device, seed=0, dtype=dtype,
                                 autoreset="next_step", params=params, **structure)  # fmt: skip
        self._scalar = host
        self.observation_space = self.env.single_observation_space if not host else _single_obs_space(self.env)
        self.action_space = _single_action_space(spec)
        if spec.is_discrete:
            self._n_actions = spec.discrete_actions
        self._discrete = spec.is_discrete
        self._action_dim = spec.action_dim
        self._renderer = (
            None if self.render_mode is None else render.Renderer(env_id, self.render_mode, self.env.params)
        )
        self._last_action: Any = None
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
        self._last_action = None
        if self.render_mode == "human":
            self.render()
        return (obs if self._scalar else self._host(obs)[0]), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = self._action(action)
        if self._scalar:
            obs, reward, terminated, truncated = self.env.step(a)
        else:
            o, r, te, tr = self.env.step(np.reshape(a, (1,) if self._action_dim == 1 else (1, self._action_dim)))
            obs, reward = self._host(o)[0], self._host(r)[0]
            terminated, truncated = bool(self._host(te)[0]), bool(self._host(tr)[0])
        if self._renderer is not None:
            self._last_action = a
            if self.render_mode == "human":
                self.render()
        return obs, float(reward), terminated, truncated, {}

    def _action(self, action: Any) -> Any:
        """The action checked once: an int in range, or a finite float (as a float32 scalar)."""
        if self._discrete:
            # The common cases first (an int, or a NumPy int from Discrete.sample()), one comparison each.
            if (type(action) is int or type(action) in _NP_INTS) and 0 <= action < self._n_actions:
                return int(action)
            a = np.asarray(action)
            if a.shape != () or a.dtype.kind not in "iu" or not 0 <= int(a) < self._n_actions:
                raise ValueError(
                    f"action: expected an int in [0, {self._n_actions}) ({self.action_space}), got {action!r}"
                )
            return int(a)
        if self._action_dim > 1:  # a Box of several components: a finite float array of shape (A,)
            a = np.asarray(action)
            if a.dtype.kind != "f" or a.shape != self.action_space.shape or not np.isfinite(a).all():
                raise ValueError(
                    f"action: expected a finite float array of shape {self.action_space.shape} "
                    f"({self.action_space}), got {action!r}"
                )
            return a.astype(np.float32)
        if type(action) is np.ndarray and action.dtype is _F32 and action.shape == (1,):
            v = action[0]  # Box.sample() and most policies' output: float32, shape (1,)
        else:
            a = np.asarray(action)
            if a.dtype.kind != "f" or a.size != 1 or a.ndim > 1:
                raise ValueError(
                    f"action: expected a finite float array of shape {self.action_space.shape} "
                    f"({self.action_space}), got {action!r}"
                )
            v = np.float32(a.reshape(())[()])
        if not math.isfinite(v):
            raise ValueError(
                f"action: expected a finite float array of shape {self.action_space.shape} "
                f"({self.action_space}), got {action!r}"
            )
        return v

    @property
    def state(self) -> np.ndarray:
        """The env's state ``[D]`` (a copy, in the env's dtype), in Gymnasium's ``unwrapped.state`` order:
        CartPole-v1 ``(x, x_dot, theta, theta_dot)``, Acrobot-v1 ``(theta1, theta2, dtheta1, dtheta2)``,
        MountainCar-v0 and MountainCarContinuous-v0 ``(position, velocity)``, Pendulum-v1 ``(theta, theta_dot)``;
        Chain-v0, which has no Gymnasium twin, the K joint angles then the K joint velocities (``qpos0 ..
        qpos{K-1}, qvel0 .. qvel{K-1}``, ``EnvSpec.state_names``). Setting it writes a new state (anything of
        ``D`` finite numbers, checked as ``VectorEnv.set_state`` checks them; the step count is kept) and the
        next :meth:`step` steps from it, as Gymnasium's envs do; writing into the returned array changes nothing."""
        return self.env.get_state()["state"][0]

    @state.setter
    def state(self, value: Any) -> None:
        a = np.asarray(value)
        names = self.env.spec.state_names
        if a.shape != (len(names),):
            raise ValueError(f"state: expected {len(names)} values ({', '.join(names)}), got shape {a.shape}")
        self.env.set_state(a[None])

    def render(self) -> np.ndarray | None:
        """Gymnasium's frame of the current state (``rgb_array``), or a window update (``human``)."""
        if self._renderer is None:
            gymnasium.logger.warn(
                "render() called without a render_mode: make the env with render_mode='rgb_array' or 'human'"
            )
            return None
        return self._renderer.render(self.env.get_state()["state"][0], self._last_action)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        super().close()

    def _host(self, a: Any) -> np.ndarray:
        return self.env.backend.to_host(a)

    def __repr__(self) -> str:
        return f"PortkernEnv({self.env!r})"


def _single_obs_space(env: ScalarEnv):
    spec = env.spec
    return gymnasium.spaces.Box(np.asarray(spec.obs_low, dtype=env.dtype), np.asarray(spec.obs_high, dtype=env.dtype),
                                dtype=env.dtype)  # fmt: skip


def _single_action_space(spec):
    if spec.is_discrete:
        return gymnasium.spaces.Discrete(spec.discrete_actions)
    high = np.float32(spec.action_high)
    return gymnasium.spaces.Box(-high, high, shape=(spec.action_dim,), dtype=np.float32)


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
    render_mode: str | None = None,
    **kwargs: Any,
) -> PortkernVectorEnv:
    """A Gymnasium vector env of ``num_envs`` portkern ``env_id`` copies (``portkern/`` prefix optional).

    Autoreset is Gymnasium's default, ``next_step``, unless ``autoreset="same_step"`` (portkern's name)
    or ``autoreset_mode=AutoresetMode.SAME_STEP`` (Gymnasium's) says otherwise. ``seed=None`` draws a
    fresh 32-bit seed from OS entropy, so unseeded envs differ between runs as in Gymnasium.
    ``kwargs`` takes what ``gymnasium.make_vec`` forwards: ``max_episode_steps`` (must equal the env's
    limit, which the kernels count to). ``render_mode="rgb_array"`` makes ``render()`` return one frame
    per env.
    """
    env_id, structure = _env_kwargs(env_id, kwargs, "make_vec")
    mode = _autoreset_arg(autoreset, autoreset_mode)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    host = backend == "numpy" or isinstance(backend, NumpyBackend)
    small = isinstance(num_envs, int) and 1 <= num_envs <= HOST_LOOP_MAX_ENVS
    if host and device in (None, "cpu", "host") and small and supports_scalar_path(env_id, dtype):
        # A few envs on the host: a loop over scalar envs beats the array path's fixed cost (same results).
        env = ScalarBatch(env_id, num_envs, seed=seed, dtype=dtype, autoreset=mode, params=params)
    else:
        env = step.make(
            env_id, num_envs, backend=backend, device=device, seed=seed, dtype=dtype,
            autoreset=mode, params=params, **structure,
        )  # fmt: skip
    return PortkernVectorEnv(env, render_mode=render_mode)


def _host_path(backend: Any, env_id: str, dtype: Any) -> bool:
    return (backend == "numpy" or isinstance(backend, NumpyBackend)) and supports_scalar_path(env_id, dtype)


def _registered_env(env_id: str, backend: Any = "numpy", dtype: Any = "float32", **kwargs: Any) -> PortkernEnv:
    """What ``gymnasium.make("portkern/<id>")`` builds. gymnasium.make wraps it in ``TimeLimit`` (the env's
    own limit, or its ``max_episode_steps``, which it never passes to the env): as with Gymnasium's own
    envs, the host env leaves truncation to that wrapper, so a longer limit really lengthens episodes."""
    if "max_episode_steps" not in kwargs and _host_path(backend, env_id, dtype):
        kwargs["max_episode_steps"] = 2**31 - 1
    return PortkernEnv(env_id, backend=backend, dtype=dtype, **kwargs)


def register_envs() -> None:
    """Register ``portkern/<id>`` for every portkern env: ``PortkernEnv`` for ``gymnasium.make`` and the
    sync/async vector modes, ``make_vec`` (the batch) as the vector entry point."""
    for env_id, spec in envs.ENVS.items():
        theirs = gymnasium.registry.get(env_id)
        gymnasium.register(
            id=f"{NAMESPACE}/{env_id}",
            entry_point=f"{__name__}:_registered_env",
            vector_entry_point=f"{__name__}:make_vec",
            max_episode_steps=spec.max_episode_steps,
            reward_threshold=None if theirs is None else theirs.reward_threshold,
            kwargs={"env_id": env_id},
        )


# Gymnasium 1.x has no plugin entry-point discovery: importing this module is what registers the ids
# (gymnasium.make_vec("portkern.gym:portkern/CartPole-v1") imports it on demand).
if f"{NAMESPACE}/CartPole-v1" not in gymnasium.registry:
    register_envs()
