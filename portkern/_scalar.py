"""One env on the host, one NumPy scalar at a time: the fast path behind ``gymnasium.make("portkern/<id>")``.

The batched NumPy backend runs the reference dynamics (``spec.step``) on ``[N]`` arrays; for a batch of
one, array creation and array-API dispatch cost ~100 us a step, ten times Gymnasium's own env. Here the
*same* reference functions run on NumPy scalars of the env dtype (``np.float32`` by default) through
:data:`SCALAR_NS`, a minimal array-API namespace for scalars. NumPy scalar arithmetic is IEEE arithmetic
in that dtype, and ``np.cos``/``np.sin``/``np.remainder`` on a scalar run the same ufunc loop as on an
array, so every step is bit-identical to env 0 of a batched env (tests/test_gym_single.py checks this on
every env, state by state and through autoresets). Plain Python floats would not be: they compute in
float64, and NumPy's float32 ``cos`` is not float64 ``cos`` rounded.

Resets draw from the same Philox4x32-10 stream as the batched env's env i (key ``(seed, i)``, counter
``(episode, 0, STREAM_RESET, 0)``) with ``rng.draw`` itself, a block of episodes per call.
:class:`ScalarBatch` loops over a few such envs: the small-batch path of ``gymnasium.make_vec`` on numpy.
An env whose reference does not run exactly on scalars (``supports_scalar_path``) keeps the array path.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import envs, rng
from ._validate import int_arg
from .envs import base as _base

__all__ = ["FAST_STEPS", "HOST_LOOP_MAX_ENVS", "SCALAR_NS", "ScalarBatch", "ScalarEnv", "supports_scalar_path"]


# ---- an array-API namespace for NumPy scalars --------------------------------------------------
_TYPES: dict[Any, type] = {}


def _scalar_type(dtype: Any) -> type:
    t = _TYPES.get(dtype)
    if t is None:
        t = _TYPES[dtype] = np.dtype(dtype).type
    return t


def _astype(x: Any, dtype: Any) -> Any:
    return _scalar_type(dtype)(x)


def _where(cond: Any, a: Any, b: Any) -> Any:
    return a if cond else b


def _like(x: Any, value: float = 0, dtype: Any = None) -> Any:
    return (type(x) if dtype is None else _scalar_type(dtype))(value)


class _ScalarNamespace:
    """The array-API functions the env references use, for 0-d NumPy scalars.

    Each one computes what the NumPy function computes on a one-element array: the ufuncs are NumPy's own
    (same loops on a scalar as on an array); ``minimum``/``maximum`` keep NumPy's tie rule (the first
    argument wins when the two compare equal, so signed zeros come out the same; NaN never reaches them:
    actions are checked finite and the dynamics keep states finite).
    """

    float32 = np.float32
    float64 = np.float64
    int64 = np.int64
    int32 = np.int32
    bool = np.bool_
    cos = staticmethod(np.cos)
    sin = staticmethod(np.sin)
    remainder = staticmethod(np.remainder)
    astype = staticmethod(_astype)
    where = staticmethod(_where)

    @staticmethod
    def square(x: Any) -> Any:
        return x * x  # one correctly rounded multiply, as np.square

    @staticmethod
    def minimum(a: Any, b: Any) -> Any:
        return a if a <= b else b

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        return a if a >= b else b

    @staticmethod
    def zeros_like(x: Any, dtype: Any = None) -> Any:
        return _like(x, 0, dtype)

    @staticmethod
    def ones_like(x: Any, dtype: Any = None) -> Any:
        return _like(x, 1, dtype)

    @staticmethod
    def full_like(x: Any, value: float, dtype: Any = None) -> Any:
        return _like(x, value, dtype)

    @staticmethod
    def any(x: Any) -> bool:
        return bool(x)

    @staticmethod
    def stack(values: Any, axis: int = 0) -> np.ndarray:
        # The observation of one env: [obs_dim] (the batched observe gives [N, obs_dim]).
        return np.array(values)

    def __getattr__(self, name: str) -> Any:
        # Anything else an env's reference uses: array_api_compat's NumPy function, which computes on
        # scalars what it computes on arrays (slower; supports_scalar_path() checks the result).
        import array_api_compat.numpy as xp

        return getattr(xp, name)


SCALAR_NS = _ScalarNamespace()
# envs.base.namespace() looks the namespace up by the arguments' types; registering the scalar types
# there is what routes a reference call on scalars to SCALAR_NS (array_api_compat's numpy namespace
# would also accept scalars, but answers with 0-d arrays at ~5x the cost per operation).
for _t in (np.float32, np.float64):
    _base._NAMESPACES[(_t,)] = SCALAR_NS


# ---- hand-specialised steps -------------------------------------------------------------------
# A Python float literal in the reference (``3.0 * position``) is weak: NumPy converts it to the dtype,
# then operates; the constants below are those conversions, made once.
# The reference on scalars pays a namespace lookup and a Python call per array-API function; for the
# envs whose Gymnasium step is cheapest that overhead alone would make the single env slower than
# Gymnasium's. These are the reference functions with the same operations, in the same order, on the
# same dtype scalars, with the params bound once. tests/test_gym_single.py holds them bit-identical to
# the batched reference (any env without an entry here runs the reference itself on scalars).


def _cartpole(p: Any, T: type) -> tuple[Any, Any]:
    gravity, masspole, total_mass, length = p.gravity, p.masspole, p.total_mass, p.length
    polemass_length, force_mag, tau = p.polemass_length, p.force_mag, p.tau
    x_thr, th_thr, one, four_thirds = p.x_threshold, p.theta_threshold_radians, T(1), T(4.0 / 3.0)
    neg_force, neg_x_thr, neg_th_thr = -force_mag, -x_thr, -th_thr
    cos, sin, array = np.cos, np.sin, np.array

    def step(state: tuple[Any, ...], action: int, _p: Any) -> tuple[tuple[Any, ...], Any, bool]:
        x, x_dot, theta, theta_dot = state
        force = force_mag if action == 1 else neg_force
        costheta = cos(theta)
        sintheta = sin(theta)
        temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            length * (four_thirds - masspole * (costheta * costheta) / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x = x + tau * x_dot
        x_dot = x_dot + tau * xacc
        theta = theta + tau * theta_dot
        theta_dot = theta_dot + tau * thetaacc
        terminated = x < neg_x_thr or x > x_thr or theta < neg_th_thr or theta > th_thr
        return (x, x_dot, theta, theta_dot), one, terminated

    return step, array


def _mountain_car(p: Any, T: type) -> tuple[Any, Any]:
    min_pos, max_pos, max_speed, force = p.min_position, p.max_position, p.max_speed, p.force
    goal_pos, goal_vel, neg_gravity, neg_max_speed = p.goal_position, p.goal_velocity, -p.gravity, -p.max_speed
    zero, reward, three = T(0), T(-1.0), T(3.0)
    cos = np.cos

    def step(state: tuple[Any, ...], action: int, _p: Any) -> tuple[tuple[Any, ...], Any, bool]:
        position, velocity = state
        velocity = velocity + (T(action - 1) * force + cos(three * position) * neg_gravity)
        velocity = velocity if velocity >= neg_max_speed else neg_max_speed  # maximum, then minimum
        velocity = velocity if velocity <= max_speed else max_speed
        position = position + velocity
        position = position if position >= min_pos else min_pos
        position = position if position <= max_pos else max_pos
        if position == min_pos and velocity < 0:
            velocity = zero
        return (position, velocity), reward, bool(position >= goal_pos and velocity >= goal_vel)

    return step, np.array


def _mountain_car_continuous(p: Any, T: type) -> tuple[Any, Any]:
    min_action, max_action, power, gravity = p.min_action, p.max_action, p.power, p.gravity
    min_pos, max_pos, max_speed, neg_max_speed = p.min_position, p.max_position, p.max_speed, -p.max_speed
    goal_pos, goal_vel, zero, hundred = p.goal_position, p.goal_velocity, T(0), T(100.0)
    three, tenth = T(3.0), T(0.1)
    cos = np.cos

    def step(state: tuple[Any, ...], action: Any, _p: Any) -> tuple[tuple[Any, ...], Any, bool]:
        position, velocity = state
        a = action if type(action) is T else T(action)
        f = a if a >= min_action else min_action
        f = f if f <= max_action else max_action
        velocity = velocity + (f * power - gravity * cos(three * position))
        velocity = velocity if velocity <= max_speed else max_speed  # minimum, then maximum
        velocity = velocity if velocity >= neg_max_speed else neg_max_speed
        position = position + velocity
        position = position if position <= max_pos else max_pos
        position = position if position >= min_pos else min_pos
        if position == min_pos and velocity < 0:
            velocity = zero
        terminated = bool(position >= goal_pos and velocity >= goal_vel)
        return (position, velocity), (hundred if terminated else zero) - a * a * tenth, terminated

    return step, np.array


#: kernel name -> (params view, scalar type) -> (step, observe): the specialised steps. Keyed by kernel,
#: since an env's variants (envs.base.variant) keep its kernel, reference step and params struct.
FAST_STEPS = {
    "cartpole": _cartpole,
    "mountain_car": _mountain_car,
    "mountain_car_continuous": _mountain_car_continuous,
}


# ---- the reset stream --------------------------------------------------------------------------
#: Reset draws computed per call of the vectorised Philox: one draw costs as much as ~100 (NumPy's
#: per-call overhead), so an env draws its next episodes' initial states in blocks.
_FIRST_BLOCK, _BLOCK = 64, 1024
_M32 = 0xFFFFFFFF


class _Row:
    """One env's ``sym`` draws where the reference reads ``sym[:, i]`` from an [N, 4] array: scalar i."""

    __slots__ = ("values",)

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def __getitem__(self, index: tuple[slice, int]) -> Any:
        return self.values[index[1]]


# ---- the env -----------------------------------------------------------------------------------
class ScalarEnv:
    """A batch of one on the host, stepped on NumPy scalars; the same loop as env ``env_index`` of
    ``portkern.step.make(env_id, N, seed=s, autoreset=autoreset)`` on the numpy backend.

    With ``next_step`` autoreset (the default), ``step`` after an episode ended (terminated or truncated)
    starts the next episode instead of stepping (reward 0, flags false); with ``same_step`` the step that
    ends an episode returns the next episode's first obs (the last one is in ``final_obs``).
    ``max_episode_steps`` is where it truncates
    (the env's own limit by default; any positive limit is accepted here, since nothing is compiled).
    ``get_state``/``set_state`` take and give ``[1, D]`` / ``[1]`` arrays like ``VectorEnv``'s.
    ``fast=False`` runs the reference functions on scalars even where :data:`FAST_STEPS` has a step.
    """

    num_envs = 1

    def __init__(
        self,
        env_id: str,
        *,
        seed: int = 0,
        dtype: str | np.dtype = "float32",
        params: Mapping[str, float] | None = None,
        max_episode_steps: int | None = None,
        fast: bool = True,
        env_index: int = 0,
        autoreset: str = "next_step",
    ) -> None:
        from .step import VectorEnv  # validation (dtype, params, seed) exactly as the batched env's

        # A batch of one whose arguments were checked; it also validates set_state for us.
        self._checker = VectorEnv(env_id, 1, seed=seed, dtype=dtype, autoreset=autoreset, params=params)
        self.autoreset = autoreset
        self._same_step = autoreset == "same_step"
        self.env_index = int_arg("env_index", env_index, 0, 2**31 - 1)
        self.spec = self._checker.spec
        self.dtype = self._checker.dtype
        self.seed = self._checker.seed
        self.params = self._checker.params
        self.backend = self._checker.backend
        kp = self._checker._param_vector
        # The params as plain attributes (ParamView): the reference reads ~10 of them a step, and a
        # KernelParams answers through __getattr__, several times slower.
        self._p = _base.ParamView(self.spec.field_names, [kp[n] for n in self.spec.field_names], self.dtype)
        limit = self.spec.max_episode_steps if max_episode_steps is None else max_episode_steps
        self.max_episode_steps = int_arg("max_episode_steps", limit, 1, 2**31 - 1)
        self._T = self.dtype.type
        self._step_fn, self._observe, self._reset_fn = self.spec.step, self.spec.observe, self.spec.reset
        if self.spec.kernel in FAST_STEPS and fast:
            self._step_fn, self._observe = FAST_STEPS[self.spec.kernel](self._p, self._T)
        self._state: tuple[Any, ...] = ()
        self._block: tuple[int, Any] = (0, ())  # (first episode, its [B, 4] sym draws)
        self._steps = 0
        self._episode = 0
        self._needs_reset = False
        self._ready = False
        self.obs: np.ndarray | None = None
        self.final_obs: np.ndarray | None = None

    # ---- the loop ------------------------------------------------------------------------------
    def _fresh_state(self) -> tuple[Any, ...]:
        ep = self._episode
        start, block = self._block
        if not start <= ep < start + len(block):
            # rng.draw + rng.symmetric, as the batched reset: this env's draws for the next episodes.
            n = _BLOCK if len(block) else _FIRST_BLOCK
            episodes = (np.arange(n, dtype=np.uint64) + ep).astype(np.uint32)  # wraps as the uint32 counter
            bits = rng.draw(self.seed, np.full(n, self.env_index, dtype=np.uint32), episodes, rng.STREAM_RESET)
            self._block = start, block = ep, rng.symmetric(bits, self.dtype)
        return tuple(self._reset_fn(_Row(block[ep - start]), self._p))

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode: ``seed`` restarts the stream at episode 0; without it, the next episode."""
        if seed is not None:
            self.seed = int_arg("seed", seed, 0, 2**32 - 1)
            self._block = (0, ())
        if seed is not None or not self._ready:
            self._episode = 0
        else:
            self._episode = (self._episode + 1) & _M32
        self._state = self._fresh_state()
        self._steps = 0
        self._needs_reset = False
        self._ready = True
        self.obs = self._observe(self._state)
        return self.obs

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool]:
        """One step with a checked action (an int, or a float of the action dtype): obs, reward, flags."""
        if self._needs_reset:
            self._episode = (self._episode + 1) & _M32
            self._state = self._fresh_state()
            self._steps = 0
            self._needs_reset = False
            self.obs = self.final_obs = self._observe(self._state)
            return self.obs, self._T(0), False, False
        if not self._ready:
            raise RuntimeError("step() called before reset(): call env.reset() (or set_state()) first")
        state, reward, terminated = self._step_fn(self._state, action, self._p)
        self._state = state
        self._steps += 1
        terminated = bool(terminated)
        truncated = self._steps >= self.max_episode_steps
        self.obs = self.final_obs = self._observe(state)
        if not (terminated or truncated):
            return self.obs, reward, terminated, truncated
        if self._same_step:  # the next episode starts now; the obs it ended with stays in final_obs
            self._episode = (self._episode + 1) & _M32
            self._state = self._fresh_state()
            self._steps = 0
            self.obs = self._observe(self._state)
        else:
            self._needs_reset = True
        return self.obs, reward, terminated, truncated

    # ---- state access --------------------------------------------------------------------------
    def get_state(self) -> dict[str, np.ndarray]:
        """``state`` [1, D] in Gymnasium's ``env.unwrapped.state`` order and ``steps`` [1], as VectorEnv's."""
        return {"state": np.array([self._state], dtype=self.dtype), "steps": np.array([self._steps], np.int64)}

    def set_state(self, state: Any = None, steps: Any = None) -> None:
        """Write state [1, D] and/or steps [1], checked as ``VectorEnv.set_state`` checks them; clears a
        pending next-step reset."""
        if steps is not None and self.max_episode_steps != self.spec.max_episode_steps:
            host = np.asarray(steps)
            if host.dtype.kind not in "iu" or host.shape != (1,) or not 0 <= int(host[0]) < self.max_episode_steps:
                raise ValueError(
                    f"steps: expected an int array [1] in [0, {self.max_episode_steps - 1}], got {steps!r}"
                )
            self._checker.set_state(state, None)
        else:
            self._checker.set_state(state, steps)
        got = self._checker.get_state()
        if state is not None:
            self._state = tuple(self._T(v) for v in got["state"][0])
            self.obs = self._observe(self._state)
        if steps is not None:
            self._steps = int(np.asarray(steps)[0])
        self._needs_reset = False
        self._ready = True

    def __repr__(self) -> str:
        return f"ScalarEnv({self.spec.id!r}, dtype={self.dtype.name!r}, max_episode_steps={self.max_episode_steps})"


class ScalarBatch:
    """``num_envs`` :class:`ScalarEnv` s stepped in a loop: a small batch on the host with the interface of
    ``portkern.step.VectorEnv`` that ``portkern.gym.PortkernVectorEnv`` uses, bit-identical to it.

    The batched NumPy backend pays ~100 us of array overhead per step whatever the batch size; a loop over
    scalar envs pays a few us per env, so up to :data:`HOST_LOOP_MAX_ENVS` envs the loop is the faster
    (and what Gymnasium's SyncVectorEnv of its own env is measured against). Actions and states are
    checked by a ``VectorEnv`` of the same size, so errors read exactly as the batch's.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        seed: int = 0,
        dtype: str | np.dtype = "float32",
        autoreset: str = "same_step",
        params: Mapping[str, float] | None = None,
    ) -> None:
        from .step import VectorEnv

        self._checker = c = VectorEnv(env_id, num_envs, seed=seed, dtype=dtype, autoreset=autoreset, params=params)
        self.spec, self.num_envs, self.dtype, self.seed = c.spec, c.num_envs, c.dtype, c.seed
        self.params, self.backend, self.autoreset, self.metadata = c.params, c.backend, c.autoreset, c.metadata
        self._param_vector = c._param_vector
        self.envs = [
            ScalarEnv(env_id, seed=c.seed, dtype=dtype, params=params, env_index=i, autoreset=autoreset)
            for i in range(c.num_envs)
        ]
        self._discrete = c.spec.is_discrete
        self._ready = False

    # The spaces, as the batch declares them.
    single_observation_space = property(lambda self: self._checker.single_observation_space)
    single_action_space = property(lambda self: self._checker.single_action_space)
    observation_space = property(lambda self: self._checker.observation_space)
    action_space = property(lambda self: self._checker.action_space)

    def reset(self, seed: int | None = None) -> np.ndarray:
        if seed is not None:
            self.seed = int_arg("seed", seed, 0, 2**32 - 1)
        self._ready = True
        return np.stack([e.reset(seed) for e in self.envs])

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if not self._ready:
            raise RuntimeError("step() called before reset(): call env.reset() (or set_state()) first")
        checked = self._checker._check_actions(actions)  # the batch's checks and messages, once per call
        acts = checked.tolist() if self._discrete else list(checked)  # ints, or float32 scalars
        out = [e.step(a) for e, a in zip(self.envs, acts)]
        obs, rew, term, trunc = zip(*out)
        return (np.stack(obs), np.array(rew, dtype=self.dtype), np.array(term, dtype=np.bool_),
                np.array(trunc, dtype=np.bool_))  # fmt: skip

    @property
    def obs(self) -> np.ndarray:
        return np.stack([e.obs for e in self.envs])

    @property
    def final_obs(self) -> np.ndarray:
        return np.stack([e.final_obs for e in self.envs])

    def get_state(self) -> dict[str, np.ndarray]:
        return {
            "state": np.array([e._state for e in self.envs], dtype=self.dtype),
            "steps": np.array([e._steps for e in self.envs], dtype=np.int64),
        }

    def set_state(self, state: Any = None, steps: Any = None) -> None:
        self._checker.set_state(state, steps)  # every check, on the whole batch, before anything changes
        for i, e in enumerate(self.envs):
            e.set_state(None if state is None else np.asarray(state)[i : i + 1],
                        None if steps is None else np.asarray(steps)[i : i + 1])  # fmt: skip
        self._ready = True

    def __repr__(self) -> str:
        return (f"ScalarBatch({self.spec.id!r}, num_envs={self.num_envs}, dtype={self.dtype.name!r}, "
                f"autoreset={self.autoreset!r})")  # fmt: skip


#: Up to this many envs, ``gymnasium.make_vec("portkern/<id>", N)`` on numpy loops over scalar envs.
HOST_LOOP_MAX_ENVS = 16


_SUPPORTED: dict[tuple[str, str], bool] = {}


def scalar_engine_runs(env_id: str) -> bool:
    """Whether the scalar engine can run ``env_id`` at all: it steps one env at its declared sizes with one
    int or float action, so an env with structural keywords or a wider Box takes the array path."""
    spec = envs.get(env_id)
    return not spec.structure and spec.action_dim == 1


def supports_scalar_path(env_id: str, dtype: str | np.dtype = "float32") -> bool:
    """Whether ``env_id`` runs on scalars exactly as its batch does, checked once per env and dtype.

    The five classic-control envs are held to it by the tests; an env added later whose reference uses
    something scalars do not support (or that comes out different) gets the array path instead: a few
    episodes of random steps through autoresets, compared bit for bit with env 0 of a batch.
    """
    from .step import VectorEnv

    dtype = np.dtype(dtype)
    key = (env_id, dtype.name)
    if not scalar_engine_runs(env_id):
        return False
    if key not in _SUPPORTED:
        spec = envs.get(env_id)
        try:
            single = ScalarEnv(env_id, seed=1, dtype=dtype)
            batch = VectorEnv(env_id, 1, seed=1, dtype=dtype, autoreset="next_step")
            ok = single.reset().tobytes() == batch.reset()[0].tobytes()
            rng_ = np.random.default_rng(0)
            for _ in range(64 if ok else 0):
                actions = spec.random_actions(rng_, 1)
                a = int(actions[0]) if spec.is_discrete else np.float32(actions[0, 0])
                obs, reward, term, trunc = single.step(a)
                b_obs, b_rew, b_term, b_trunc = batch.step(actions)
                if (obs.tobytes(), np.asarray(reward).tobytes(), term, trunc) != (
                    b_obs[0].tobytes(), b_rew[0].tobytes(), bool(b_term[0]), bool(b_trunc[0])
                ):
                    ok = False
                    break
        except Exception:  # the scalar path cannot run this env's reference: the array path can
            ok = False
        _SUPPORTED[key] = ok
    return _SUPPORTED[key]
