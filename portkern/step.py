"""Batched, device-resident environment stepping: ``make()`` and ``VectorEnv``."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import envs
from ._validate import describe, dtype_arg, dtype_of, int_arg
from .backends import AUTORESET_MODES, Backend, EnvBuffers, EnvKernelMissing, backend_of, get_backend
from .policy import Policy, RolloutBuffer, sample_actions

__all__ = ["VectorEnv", "make"]

MAX_ENVS = 2**31 - 1  # env indices are int32 in kernels


def make(env_id: str, num_envs: int, **options: Any) -> VectorEnv:
    """``num_envs`` copies of ``env_id`` resident on ``backend``/``device``; call ``reset()`` before ``step()``.

    ``options`` are :class:`VectorEnv`'s keywords (``backend``, ``device``, ``seed``, ``dtype``, ``autoreset``,
    ``params``), declared there once with their defaults. ``params`` overrides Gymnasium's physics constants
    by name (see ``portkern.envs.ENVS[id].defaults``).

    An env's structural keywords go here too, by name: ``make("Chain-v0", N, links=3)``. They are ints
    fixed for the env's lifetime that set its sizes (state, observations, ``[N, action_dim]`` actions) and
    are compile-time constants of its kernels (``env.spec.defines``); each has a default and a range
    (``portkern.envs.ENVS[id].structure``). A keyword the env does not declare, a non-int or a value out of
    range raises ValueError naming it. A kernel backend without this env's kernel source raises
    :class:`portkern.backends.EnvKernelMissing` here, naming the env, the backend and the missing file.
    """
    return VectorEnv(env_id, num_envs, **options)


class VectorEnv:
    """A batch of environments whose state lives on one device, stepped by one kernel launch per call.

    Arrays returned by ``reset``/``step`` (and ``final_obs``) are the env's own device buffers,
    reused by the next call: copy them if you keep them across steps.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        backend: str | Backend = "numpy",
        device: str | None = None,
        seed: int = 0,
        dtype: str | np.dtype = "float32",
        autoreset: str = "same_step",
        params: Mapping[str, float] | None = None,
        **structure: int,
    ) -> None:
        self.spec = envs.get(env_id)
        if structure:  # the env's structural keywords (links=3): its concrete, fixed-size spec
            self.spec = self.spec.with_structure(**structure)
        self.num_envs = int_arg("num_envs", num_envs, 1, MAX_ENVS)
        self.seed = int_arg("seed", seed, 0, 2**32 - 1)
        self.dtype = dtype_arg(dtype)
        if autoreset not in AUTORESET_MODES:
            raise ValueError(
                f"autoreset: expected one of {', '.join(map(repr, AUTORESET_MODES))}, got {autoreset!r}"
            )
        self.autoreset = autoreset
        self.params = self.spec.resolve_params(params)
        self.backend = backend if isinstance(backend, Backend) else get_backend(backend, device)
        missing = self.backend.missing_env_kernel(self.spec)
        if missing is not None:  # here, at make, rather than as a file error inside the first launch
            raise EnvKernelMissing(missing)
        if self.dtype == np.float64 and not self.backend.supports_float64:
            raise ValueError(
                f"dtype: float64 is not supported by {self.backend.name} on {self.backend.device_name} "
                f"(no double precision); use dtype='float32'"
            )
        self._param_vector = self.spec.param_vector(self.params, self.dtype)
        self.metadata = {"autoreset_mode": autoreset, "env_id": self.spec.id}
        self._ready = False
        n, b = self.num_envs, self.backend
        self._check_fits(n)
        self._bufs = EnvBuffers(
            state=b.zeros((self.spec.state_dim, n), self.dtype),
            steps=b.zeros((n,), np.int32),
            episodes=b.zeros((n,), np.uint32),
            needs_reset=b.zeros((n,), np.bool_),
            obs=b.zeros((n, self.spec.obs_dim), self.dtype),
            final_obs=b.zeros((n, self.spec.obs_dim), self.dtype),
            reward=b.zeros((n,), self.dtype),
            terminated=b.zeros((n,), np.bool_),
            truncated=b.zeros((n,), np.bool_),
        )
        self._act_dtype = self.spec.action_dtype
        #: The device action buffer as the kernels read it: [N] (discrete, or a 1-wide Box), else [N, A].
        self._act_shape = (n,) if self.spec.action_dim == 1 else (n, self.spec.action_dim)
        self._actions = b.zeros(self._act_shape, self._act_dtype)

    def _check_fits(self, n: int) -> None:
        """Reject a batch the device cannot hold before allocating anything, naming the limit."""
        limits = self.backend.memory_limits()
        if limits is None:
            return
        max_alloc, total = limits
        item = self.dtype.itemsize
        spec = self.spec
        largest = n * max(spec.obs_dim, spec.state_dim) * item  # obs, final_obs and the [D, N] state
        # state, obs, final_obs, reward (env dtype); steps, episodes, actions (4 bytes); 3 flags
        needed = n * ((spec.state_dim + 2 * spec.obs_dim + 1) * item + 12 + 3)
        per_env = needed / n
        if max_alloc is not None and largest > max_alloc:
            raise ValueError(
                f"num_envs: {n} envs need a {largest:,}-byte buffer, over the largest allocation "
                f"{self.backend.device_name} allows ({max_alloc:,} bytes); use at most "
                f"{max_alloc // (max(spec.obs_dim, spec.state_dim) * item):,} envs per batch"
            )
        if total is not None and needed > total:
            raise ValueError(
                f"num_envs: {n} envs need {needed:,} bytes of device memory, over the "
                f"{total:,} bytes of {self.backend.device_name}; use at most {int(total // per_env):,} envs"
            )

    # ---- the loop ----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Any:
        """Reset every env. ``seed`` restarts the random streams; without it each env starts its next episode."""
        if seed is not None:
            self.seed = int_arg("seed", seed, 0, 2**32 - 1)
        fresh = seed is not None or not self._ready
        self.backend.env_reset(self.spec, self._bufs, self._param_vector, self.seed, fresh)
        self._ready = True
        return self._bufs.obs

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any]:
        """Advance every env one step: ``(obs, reward, terminated, truncated)``, with autoreset."""
        if not self._ready:
            raise RuntimeError("step() called before reset(): call env.reset() (or set_state()) first")
        device_actions = self._check_actions(actions)
        self.backend.env_step(
            self.spec, self._bufs, device_actions, self._param_vector, self.seed,
            self.spec.max_episode_steps, self.autoreset,
        )  # fmt: skip
        b = self._bufs
        return b.obs, b.reward, b.terminated, b.truncated

    #: Steps counts whose rollout() buffer (without ``buffer=``) an env keeps, the most recent first: a
    #: loop over a few T reuses each, one that tries every T does not hold every buffer it ever made.
    ROLLOUT_CACHE_SIZE = 4

    def rollout_buffer(self, steps: int, *, host: bool = False) -> RolloutBuffer:
        """A new time-major RolloutBuffer for ``steps`` steps, on the env's device (or the host), for
        ``rollout(..., buffer=)``. Its contents are undefined until a rollout writes them (nothing is
        filled): every path writes every element of every field, ``final_obs`` included (each step, for
        every env, whether or not its episode ended)."""
        steps = int_arg("steps", steps, 1, 2**31 - 1)
        n, d = self.num_envs, self.spec.obs_dim
        empty = (lambda shape, dt: np.empty(shape, dt)) if host else self.backend.empty
        return RolloutBuffer(
            obs=empty((steps, n, d), self.dtype),
            actions=empty((steps, *self._act_shape), self._act_dtype),
            rewards=empty((steps, n), self.dtype),
            terminated=empty((steps, n), np.bool_),
            truncated=empty((steps, n), np.bool_),
            final_obs=empty((steps, n, d), self.dtype),
        )

    def _own_rollout_buffer(self, steps: int, host: bool) -> RolloutBuffer:
        """rollout()'s buffer without ``buffer=``: the env's own for ``steps`` (device or host), made on the
        first such call and rewritten by the next; the ROLLOUT_CACHE_SIZE most recently used are kept."""
        cache: dict[tuple[int, bool], RolloutBuffer] = self.__dict__.setdefault("_rollout_cache", {})
        key = (steps, host)
        buf = cache.pop(key, None)
        if buf is None:
            buf = self.rollout_buffer(steps, host=host)
        cache[key] = buf  # last in: the most recently used
        while len(cache) > self.ROLLOUT_CACHE_SIZE:
            del cache[next(iter(cache))]
        return buf

    def rollout(
        self,
        steps: int,
        policy: Policy,
        buffer: RolloutBuffer | None = None,
        *,
        path: str = "fused",
        steps_per_launch: int | None = None,
    ) -> RolloutBuffer:
        """Run ``steps`` steps with ``policy`` choosing actions, recording a time-major rollout.

        ``path`` is the data path: ``"fused"`` (the policy runs inside the env kernel, up to
        ``steps_per_launch`` steps per launch, default all), ``"device"`` (the same kernel, one
        step per launch), or ``"host"`` (obs come back to the host every step, the policy runs
        there and actions go down: an off-device simulator's loop; the buffer is on the host).
        Every path gives the same result for the same seed and policy.

        ``buffer``: a RolloutBuffer of ``(steps, num_envs)`` (``rollout_buffer``), written in place and
        returned. Without it, the result is the env's own buffer for that ``steps`` (and for the host
        path or the device), reused by the next rollout of the same ``steps`` as the env's obs buffer is
        by the next ``step``, and as the buffer ops' outputs are: copy what you keep. Nothing is filled:
        a rollout writes every element.
        """
        if not self._ready:
            raise RuntimeError("rollout() called before reset(): call env.reset() (or set_state()) first")
        if not isinstance(policy, Policy):
            raise TypeError(f"policy: expected a portkern.policy.RandomPolicy or MLPPolicy, got {type(policy).__name__}")
        policy.check(self.spec)
        if path not in ("fused", "device", "host"):
            raise ValueError(f"path: expected 'fused', 'device' or 'host', got {path!r}")
        steps = int_arg("steps", steps, 1, 2**31 - 1)
        if buffer is None:
            buffer = self._own_rollout_buffer(steps, path == "host")
        elif not isinstance(buffer, RolloutBuffer):
            raise TypeError(f"buffer: expected a RolloutBuffer (env.rollout_buffer(steps)), got {type(buffer).__name__}")
        elif buffer.steps != steps or tuple(buffer.rewards.shape) != (steps, self.num_envs):
            raise ValueError(
                f"buffer: expected a rollout buffer for ({steps}, {self.num_envs}) steps x envs, "
                f"got {tuple(buffer.rewards.shape)}"
            )
        if path == "host":
            fields = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")
            if all(isinstance(getattr(buffer, f), np.ndarray) for f in fields):
                self._rollout_host(steps, policy, buffer)
                return buffer
            # A device buffer (env.rollout_buffer(steps)) on the host path: the host loop writes a host buffer
            # (item assignment, which not every backend's arrays take), copied into the given one at the end.
            for f in fields:
                a = getattr(buffer, f)
                if not self.backend.holds(a):
                    raise TypeError(f"buffer.{f}: expected a NumPy array or an array of this env's {self.backend.name} "
                                    f"device, got {type(a).__module__}.{type(a).__name__}")  # fmt: skip
            staging = self._own_rollout_buffer(steps, True)
            self._rollout_host(steps, policy, staging)
            for f in fields:
                setattr(buffer, f, self.backend.assign(getattr(buffer, f), getattr(staging, f)))
            return buffer
        spl = steps if steps_per_launch is None else int_arg("steps_per_launch", steps_per_launch, 1, steps)
        if path == "device":
            spl = 1
        self.load_policy(policy)
        self.backend.env_rollout(
            self.spec, self._bufs, policy, self._policy_dev, buffer, self._param_vector, self.seed,
            self.spec.max_episode_steps, self.autoreset, spl,
        )  # fmt: skip
        return buffer

    def load_policy(self, policy: Policy) -> None:
        """Upload ``policy``'s parameters to the device (a no-op when they are already there).

        ``rollout`` does this itself; calling it first lets a training loop time the upload as data
        movement and the rollout as stepping.
        """
        if not isinstance(policy, Policy):
            raise TypeError(f"policy: expected a portkern.policy.RandomPolicy or MLPPolicy, got {type(policy).__name__}")
        policy.check(self.spec)
        flat = policy.flat() if hasattr(policy, "flat") else np.zeros(1, np.float32)
        key = flat.tobytes()
        if getattr(self, "_policy_key", None) != key:
            self._policy_dev = self.backend.from_host(flat)
            self._policy_key = key
        self._loaded_policy = policy

    @property
    def loaded_policy(self) -> Policy | None:
        """The policy whose parameters are on the device (the last ``load_policy`` or ``rollout``)."""
        return getattr(self, "_loaded_policy", None)

    @property
    def obs(self) -> Any:
        """The current observations ([N, obs_dim], the env's own device buffer)."""
        return self._bufs.obs

    def _rollout_host(self, steps: int, policy: Policy, buf: RolloutBuffer) -> None:
        b, bufs = self.backend, self._bufs
        for t in range(steps):
            obs = b.to_host(bufs.obs)
            actions = sample_actions(policy, self.spec, obs, self.seed, b.to_host(bufs.episodes), b.to_host(bufs.steps))
            buf.obs[t] = obs
            buf.actions[t] = actions
            self._actions = b.assign(self._actions, actions)
            self.backend.env_step(
                self.spec, bufs, self._actions, self._param_vector, self.seed,
                self.spec.max_episode_steps, self.autoreset,
            )  # fmt: skip
            buf.rewards[t] = b.to_host(bufs.reward)
            buf.terminated[t] = b.to_host(bufs.terminated)
            buf.truncated[t] = b.to_host(bufs.truncated)
            buf.final_obs[t] = b.to_host(bufs.final_obs)

    @property
    def final_obs(self) -> Any:
        """Observation each env reached on the last step, before any autoreset ([N, obs_dim])."""
        return self._bufs.final_obs

    def _check_actions(self, actions: Any) -> Any:
        n, spec = self.num_envs, self.spec
        # The backend's own array on this env's device or context; one of another (a PoCL array handed to an
        # Intel env) goes through the host: a kernel given a buffer of another context crashes the process.
        native = self.backend.holds(actions) and not isinstance(actions, np.ndarray)
        if spec.is_discrete:
            expected = f"int array of shape ({n},) with values in [0, {spec.discrete_actions})"
            if native and dtype_of(actions) == np.int32 and tuple(actions.shape) == (n,):
                lo, hi = self.backend.index_range(actions)
                if lo < 0 or hi >= spec.discrete_actions:
                    raise ValueError(f"actions: expected {expected}, got values in [{lo}, {hi}]")
                return actions
            host = self._host_actions(actions, expected)
            if host.dtype.kind not in "iu":
                raise TypeError(f"actions: expected {expected}, got {describe(host)}")
            if host.shape != (n,):
                raise ValueError(f"actions: expected {expected}, got {describe(host)}")
            if host.size and (host.min() < 0 or host.max() >= spec.discrete_actions):
                raise ValueError(
                    f"actions: expected {expected}, got values in [{host.min()}, {host.max()}]"
                )
        else:
            a = spec.action_dim
            # A 1-wide Box also takes [N] (the classic-control envs' kernels read one float per env).
            shapes = ((n,), (n, 1)) if a == 1 else ((n, a),)
            shown = f"({n}, 1) or ({n},)" if a == 1 else f"({n}, {a})"
            expected = f"float array (float32 or float64) of shape {shown} with finite values"
            shape = tuple(getattr(actions, "shape", ()))
            if native and dtype_of(actions) == np.float32 and shape in shapes:
                if not self.backend.all_finite(actions):
                    raise ValueError(f"actions: expected {expected}, got NaN or inf")
                return actions.reshape(self._act_shape) if shape != self._act_shape else actions
            host = self._host_actions(actions, expected)
            if host.dtype not in (np.float32, np.float64):
                raise TypeError(f"actions: expected {expected}, got {describe(host)}")
            if host.shape not in shapes:
                raise ValueError(f"actions: expected {expected}, got {describe(host)}")
            if not np.isfinite(host).all():
                raise ValueError(f"actions: expected {expected}, got NaN or inf")
            host = host.reshape(self._act_shape)
        self._actions = self.backend.assign(self._actions, np.ascontiguousarray(host, dtype=self._act_dtype))
        return self._actions

    def _host_actions(self, actions: Any, expected: str) -> np.ndarray:
        return _host_array("actions", actions, self.backend, expected)

    # ---- state access ------------------------------------------------------------------------
    def get_state(self) -> dict[str, np.ndarray]:
        """Host copies: ``state`` [N, D] in Gymnasium's ``env.unwrapped.state`` order, ``steps`` [N]."""
        b = self.backend
        state = np.ascontiguousarray(b.to_host(self._bufs.state).T)  # [D, N] on the device
        return {"state": state, "steps": b.to_host(self._bufs.steps).astype(np.int64)}

    def set_state(self, state: Any = None, steps: Any = None) -> None:
        """Write state [N, D] and/or steps [N] back to the device (and the obs of that state); clears pending
        next-step resets."""
        n, d = self.num_envs, self.spec.state_dim
        host_state = host_steps = None
        if state is not None:
            host_state = _host_array("state", state, self.backend, f"a float array of shape ({n}, {d})")
            if host_state.dtype.kind not in "fiu":
                raise TypeError(f"state: expected a float array of shape ({n}, {d}), got {describe(host_state)}")
            if host_state.shape != (n, d):
                raise ValueError(
                    f"state: expected shape ({n}, {d}) ({', '.join(self.spec.state_names)}), "
                    f"got {describe(host_state)}"
                )
            if not np.isfinite(host_state).all():
                raise ValueError("state: expected finite values, got NaN or inf")
            if host_state.dtype.kind == "f" and host_state.dtype.itemsize > self.dtype.itemsize:
                big = np.abs(host_state) > np.finfo(self.dtype).max
                if big.any():  # finite in float64, inf once stored in the env's float32
                    raise ValueError(
                        f"state: expected values within the range of {self.dtype.name} (+-{np.finfo(self.dtype).max:.4g}), "
                        f"got {host_state[big][0]!r}"
                    )
            if self.spec.state_limit is not None:
                limit = np.asarray(self.spec.state_limit)
                over = np.abs(host_state) > limit
                if over.any():
                    j = int(np.nonzero(over.any(axis=0))[0][0])
                    raise ValueError(
                        f"state: {self.spec.state_names[j]} must be within +-{limit[j]:g}, "
                        f"got {host_state[over.any(axis=1), j][0]!r}"
                    )
        if steps is not None:
            host_steps = _host_array("steps", steps, self.backend, f"an int array of shape ({n},)")
            limit = self.spec.max_episode_steps
            if host_steps.dtype.kind not in "iu":
                raise TypeError(f"steps: expected an int array of shape ({n},), got {describe(host_steps)}")
            if host_steps.shape != (n,):
                raise ValueError(f"steps: expected shape ({n},), got {describe(host_steps)}")
            if host_steps.size and (host_steps.min() < 0 or host_steps.max() >= limit):
                raise ValueError(
                    f"steps: expected values in [0, {limit - 1}] (the episode limit is {limit}), "
                    f"got values in [{host_steps.min()}, {host_steps.max()}]"
                )
        # Everything checked: now write.
        b = self.backend
        if host_state is not None:
            dev_state = np.ascontiguousarray(host_state.T, dtype=self.dtype)
            self._bufs.state = b.assign(self._bufs.state, dev_state)
            # The obs of the new state (by the reference: trigonometric obs may differ from a kernel's in the
            # last ulp), so that env.obs and a rollout's first recorded obs describe the state just set.
            self._bufs.obs = b.assign(self._bufs.obs, np.ascontiguousarray(self.spec.observe(dev_state), dtype=self.dtype))
        if host_steps is not None:
            self._bufs.steps = b.assign(self._bufs.steps, host_steps.astype(np.int32))
        self._bufs.needs_reset = b.assign(self._bufs.needs_reset, np.zeros(n, dtype=np.bool_))
        self._ready = True

    # ---- Gymnasium spaces --------------------------------------------------------------------
    @property
    def single_observation_space(self):
        spaces = _gym_spaces()
        return spaces.Box(
            np.asarray(self.spec.obs_low, dtype=self.dtype),
            np.asarray(self.spec.obs_high, dtype=self.dtype),
            dtype=self.dtype,
        )

    @property
    def single_action_space(self):
        spaces = _gym_spaces()
        if self.spec.is_discrete:
            return spaces.Discrete(self.spec.discrete_actions)
        high = np.float32(self.spec.action_high)
        return spaces.Box(-high, high, shape=(self.spec.action_dim,), dtype=np.float32)

    @property
    def observation_space(self):
        from gymnasium.vector.utils import batch_space

        return batch_space(self.single_observation_space, self.num_envs)

    @property
    def action_space(self):
        from gymnasium.vector.utils import batch_space

        return batch_space(self.single_action_space, self.num_envs)

    def __repr__(self) -> str:
        structure = "".join(f", {k}={v}" for k, v in self.spec.structure_values.items())
        return (
            f"VectorEnv({self.spec.id!r}, num_envs={self.num_envs}{structure}, backend={self.backend.name!r}, "
            f"device={self.backend.device_name!r}, dtype={self.dtype.name!r}, autoreset={self.autoreset!r})"
        )


def _host_array(name: str, a: Any, own: Backend, expected: str) -> np.ndarray:
    """``a`` as a host NumPy array: a NumPy array as it is, any backend's array (``own``'s on its device, or
    another backend's or device's, e.g. a PoCL array handed to an Intel env) copied from its device, a list
    or scalar through NumPy; anything else a TypeError naming ``name``."""
    if isinstance(a, np.ndarray):
        return a
    try:
        if own.holds(a):
            return own.to_host(a)
        if not isinstance(a, (list, tuple, int, float, complex, str, bytes)) and a is not None:
            try:  # an array of another backend, or of this one on another device or context
                return np.asarray(backend_of(a).to_host(a))
            except TypeError:
                pass
        host = np.asarray(a)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name}: expected {expected}, got {type(a).__name__} ({exc})") from None
    if host.dtype == object:
        raise TypeError(f"{name}: expected {expected}, got {type(a).__name__} of Python objects")
    return host


def _gym_spaces():
    try:
        from gymnasium import spaces
    except ImportError:
        raise ImportError(
            "env spaces are Gymnasium spaces: pip install 'portkern[gym]'"
        ) from None
    return spaces
