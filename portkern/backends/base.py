"""The backend contract: one small class per compute API, identical typed signatures in every subclass."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._kernels import KernelSourceMissing, source_hash
from .._validate import dtype_of
from ..envs.base import EnvSpec
from ..tuning import Resolved

#: autoreset modes as passed to kernels (``autoreset_mode`` argument).
AUTORESET_MODES = {"same_step": 0, "next_step": 1}


class BackendUnavailable(RuntimeError):
    """Raised when a known backend cannot run here; the message says why and how to fix it."""


@dataclass(frozen=True)
class Probe:
    """What a backend found on this machine."""

    available: bool
    reason: str = ""  # empty when available; else one line: why, and how to fix it
    devices: tuple[str, ...] = ()  # human-readable device names
    simulator: bool = False  # runs, but only in a simulator (Numba's CUDA simulator)
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class EnvBuffers:
    """Device-resident env state, allocated once per env and reused by every step (structure of arrays)."""

    state: Any  # [D, N] env dtype: variable-major, env-minor (element (j, i) at j * N + i)
    steps: Any  # [N] int32: steps taken in the current episode (truncation counter)
    episodes: Any  # [N] uint32: episodes started since the last seeded reset (RNG counter)
    needs_reset: Any  # [N] bool: next_step mode, the env finished on the previous call
    obs: Any  # [N, obs_dim] env dtype
    final_obs: Any  # [N, obs_dim] env dtype: obs reached by the last step, before any autoreset
    reward: Any  # [N] env dtype
    terminated: Any  # [N] bool
    truncated: Any  # [N] bool


class Unsupported(NotImplementedError):
    """An op this backend does not implement; it counts 0 in the functional matrix, with this reason."""


class EnvKernelMissing(Unsupported, KernelSourceMissing):
    """A kernel backend has no kernel source for this env (raised by ``make``, naming the env, the
    backend's API and the missing file): the env runs on the reference and array-API backends only."""


#: The ops of the contract. A backend implements what it can; the rest report unsupported.
OPS = ("env_reset", "env_step", "env_rollout", "mlp_forward", "gae", "discounted_returns", "normalize",
       "gather")  # fmt: skip

#: Bound of each per-instance cache (uploaded params, staging and scratch buffers).
_MAX_CACHE = 64

#: (backend name, device key, source hash) -> compiled program/module, shared by every instance.
_PROGRAMS: dict[tuple[str, Any, str], Any] = {}


class Backend(abc.ABC):
    """One compute API on one device: mechanism only (arrays, programs, launches, caches).

    Subclasses register with :func:`portkern.backends.registry.register`; their module name is
    the backend name, so a new module under ``portkern/backends/`` is found without editing a list.
    What every kernel backend needs and no API changes — uploading params once, staging host
    arrays through reused device buffers, scratch buffers, the program cache keyed by
    (device, source, options), checking native arrays — is written here once.
    """

    name: ClassVar[str]
    #: pip extra that installs this backend's dependencies, for error messages.
    extra: ClassVar[str | None] = None
    #: Position in listings (the reference first); ties sort by name.
    order: ClassVar[int] = 50
    #: Environment variables (after PORTKERN_<NAME>_DEVICE) that give the default ``device=``.
    default_device_env: ClassVar[tuple[str, ...]] = ()
    #: Why the backend's library did not import here ("" when it did), from the module's guarded import:
    #: its probe reports it, and the backend refuses to be constructed with it (BackendUnavailable).
    import_error: ClassVar[str] = ""

    #: Whether the backend's arrays cannot be written in place (jax): its buffer ops return new arrays
    #: and the public ``out=`` is refused for it.
    immutable_arrays: ClassVar[bool] = False

    #: get_backend(name), installed by portkern.backends.registry (which imports this module).
    _get_backend: ClassVar[Any]

    device_name: str
    supports_float64: bool

    @classmethod
    @abc.abstractmethod
    def probe(cls) -> Probe:
        """Check, without raising, whether this backend can run here (touching a device, not just importing)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Backend:
        if cls.import_error:
            raise BackendUnavailable(cls.import_error)
        return super().__new__(cls)

    @abc.abstractmethod
    def __init__(self, device: str | None = None) -> None: ...

    # ---- arrays -------------------------------------------------------------------------------
    @abc.abstractmethod
    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A zero-filled device array."""

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A device array whose contents are undefined, for outputs a kernel writes in full (no fill).

        Here a zero-filled one; backends whose allocator can skip the fill override it."""
        return self.zeros(shape, dtype)

    @abc.abstractmethod
    def from_host(self, a: np.ndarray) -> Any:
        """Copy a host array to a new device array of the same dtype and shape."""

    @abc.abstractmethod
    def to_host(self, a: Any) -> np.ndarray:
        """Copy a device array to a new host array."""

    @abc.abstractmethod
    def write(self, dst: Any, src: np.ndarray) -> None:
        """Copy host ``src`` into the existing device array ``dst`` (same shape and dtype)."""

    def assign(self, dst: Any, src: np.ndarray) -> Any:
        """Store host ``src`` as ``dst``'s new contents and return the array that holds them: ``dst``
        itself here; a new array on backends whose arrays are immutable (jax), which callers rebind."""
        self.write(dst, src)
        return dst

    @classmethod
    @abc.abstractmethod
    def owns(cls, a: Any) -> bool:
        """Whether ``a`` is this backend's native array type."""

    def holds(self, a: Any) -> bool:
        """Whether ``a`` is a native array this instance can launch on (its device, its context); backends
        with several devices or contexts narrow :meth:`owns` here."""
        return self.owns(a)

    @staticmethod
    def _span(a: Any) -> tuple[Any, int, int] | None:
        """(allocation, first byte, end byte) of a contiguous array, or None where it cannot be told."""
        for probe in (a, getattr(a, "_ary", None)):  # _ary: Numba's simulated device arrays
            iface = getattr(probe, "__cuda_array_interface__", None) or getattr(probe, "__array_interface__", None)
            if iface is not None:
                start = int(iface["data"][0])
                return None, start, start + int(a.nbytes)
        ptr = getattr(a, "data_ptr", None)  # torch
        if callable(ptr):
            return None, int(ptr()), int(ptr()) + a.numel() * a.element_size()
        ptr = getattr(a, "ptr", None)  # cuda_host
        if isinstance(ptr, int):
            return None, ptr, ptr + int(a.nbytes)
        return None

    def shares_memory(self, a: Any, b: Any) -> bool:
        """Whether native arrays ``a`` and ``b`` overlap in memory (an output aliasing an input)."""
        if a is b:
            return True
        sa, sb = self._span(a), self._span(b)
        if sa is None or sb is None:
            return False
        return sa[0] == sb[0] and sa[1] < sb[2] and sb[1] < sa[2] and sa[1] < sa[2] and sb[1] < sb[2]

    @classmethod
    def for_array(cls, a: Any) -> "Backend":
        """The instance that owns native array ``a``: the default instance where it :meth:`holds` ``a``, else the
        instance of ``a``'s device (:meth:`array_device`)."""
        inst = cls._get_backend(cls.name)
        device = None if inst.holds(a) else cls.array_device(a)
        return inst if device is None else cls._get_backend(cls.name, device)

    @classmethod
    def array_device(cls, a: Any) -> str | None:
        """The ``device`` argument of :func:`get_backend` for native array ``a``'s device; None where the backend
        has one device (its default instance holds every array it owns)."""
        return None

    def synchronize(self) -> None:
        """Wait for all queued work on this backend's device."""

    def describe(self) -> dict[str, str]:
        """Device and library versions for benchmark metadata."""
        return {"backend": self.name, "device": self.device_name}

    def knob_setting(self, knob: str) -> Any:
        """What knob attribute ``knob`` is set to (a sentinel such as tuning.TUNED included), for code that
        sets a knob and must put back exactly what was there; a property may read as the value in force."""
        return getattr(self, knob)

    def knob_in_force(self, knob: str, kernel: str, size: int | None = None) -> Resolved:
        """Value of tuning-knob attribute ``knob`` in the launches of benchmark kernel ``kernel``
        (``step:<env>``, ``rollout:<env>:<path>[:mlp]``, a buffer op) at ``size`` (the suite's size of
        the case), and where it came from.

        Here the attribute itself (source "attribute"). A backend whose knobs default to
        :data:`portkern.tuning.TUNED` resolves that the way its launches do (source "cache",
        "table <row>" or "fallback", in the size class of ``size``), so a benchmark records the values
        that ran, not the sentinel.
        """
        return Resolved(getattr(self, knob), "attribute", "")

    def describe_verbose(self) -> dict[str, str]:
        """describe() plus what ``portkern devices --verbose`` shows (how the driver was found, compiler output)."""
        return self.describe()

    def device_kind(self) -> str:
        """"cpu", "gpu" or "accelerator", as the API reports the device's type (never guessed from its
        name); backends that drive one kind only may keep this default."""
        return "cpu"

    @classmethod
    def missing_env_kernel(cls, spec: EnvSpec) -> str | None:
        """Why this backend cannot run ``spec``'s env kernels (its kernel source does not exist for this
        API: "Chain-v0 has no OpenCL kernel yet (kernels/opencl/chain.cl)"), or None when it can.

        Here None: a backend that runs the reference (numpy, torch, jax) runs every env. Kernel backends
        override it with where their sources live; ``make`` calls it before allocating anything."""
        return None

    def memory_limits(self) -> tuple[int | None, int | None] | None:
        """(largest single allocation, total memory) of the device in bytes, or None if unbounded/unknown."""
        return None

    # ---- which ops this backend has ------------------------------------------------------------
    @classmethod
    def unsupported(cls, op: str) -> str | None:
        """Why ``op`` is not available on this backend, or None when it is implemented."""
        if op not in OPS:
            raise ValueError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
        if getattr(cls, op) is getattr(Backend, op):
            return f"the {cls.name} backend does not implement {op}"
        return None

    def _unsupported(self, op: str) -> Unsupported:
        return Unsupported(self.unsupported(op) or f"{self.name}: {op} unsupported")

    # ---- shared plumbing (written once for every kernel backend) --------------------------------
    def _cache(self, kind: str, key: Any, make: Any) -> Any:
        """A per-instance, bounded cache: ``make()`` once per (kind, key)."""
        caches = self.__dict__.setdefault("_pk_caches", {})
        cache = caches.setdefault(kind, {})
        value = cache.get(key)
        if value is None:
            if len(cache) >= _MAX_CACHE:  # param sweeps: keep it bounded, oldest out first
                cache.pop(next(iter(cache)))
            value = cache[key] = make()
        return value

    def _device_params(self, params: Any) -> Any:
        """The env's params struct on the device, uploaded once per distinct value (no per-step copies)."""
        return self._cache("params", params.key, lambda: self.from_host(params.as_array()))

    def _scratch(self, key: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        """A device buffer reused across calls, allocated once per (key, shape, dtype)."""
        dt = np.dtype(dtype)
        return self._cache("scratch", (key, tuple(shape), dt.str), lambda: self.zeros(tuple(shape), dt))

    def output_buffer(self, slot: str, shape: tuple[int, ...], dtype: Any) -> Any:
        """The public buffer ops' result for ``slot`` without ``out=`` (portkern.buffer): one unfilled
        array per (slot, shape, dtype), returned again by the next call with the same key."""
        dt = np.dtype(dtype)
        return self._cache("outputs", (slot, tuple(shape), dt.str), lambda: self.empty(tuple(shape), dt))

    def _stage(self, what: str, host: np.ndarray) -> Any:
        """Copy a host array into a device buffer reused for every call with that shape and dtype."""
        buf = self._scratch(("stage", what), host.shape, host.dtype)
        self.write(buf, np.ascontiguousarray(host))
        return buf

    def _device_key(self) -> Any:
        """What identifies this backend's device for the program cache (override per API)."""
        return self.device_name

    def _program(self, source: str, options: tuple[str, ...], build: Any) -> Any:
        """The program for (device, source, options), built once by ``build()`` and shared by every instance."""
        key = (self.name, self._device_key(), source_hash(source, options))
        prg = _PROGRAMS.get(key)
        if prg is None:
            prg = _PROGRAMS[key] = build()
        return prg

    def _actions_on_device(self, actions: Any, n: int, dtype: np.dtype, width: int = 1) -> Any:
        """Native actions are checked and used as they are; host ones go through a staging buffer.
        ``width`` is the Box action's ``action_dim``: [N] when 1, else [N, width] row-major."""
        shape = (n,) if width == 1 else (n, width)
        if self.owns(actions) and not isinstance(actions, np.ndarray):
            self._check_array(actions, "actions", dtype, shape)
            return actions
        host = np.ascontiguousarray(actions, dtype=dtype)
        if host.shape != shape:
            raise ValueError(f"actions: expected shape {shape}, got {host.shape}")
        return self._stage("actions", host)

    @staticmethod
    def _contiguous(a: Any) -> bool:
        return bool(a.flags.c_contiguous)

    def _check_array(self, a: Any, what: str, dtype: Any = None, shape: tuple[int, ...] | None = None) -> None:
        """Raise unless ``a`` is a C-contiguous native array (of ``dtype`` and ``shape`` when given)."""
        if not self.owns(a):
            raise TypeError(
                f"{what}: expected a {self.name} device array, got {type(a).__module__}.{type(a).__name__}"
            )
        if dtype is not None and dtype_of(a) != np.dtype(dtype):
            raise TypeError(f"{what}: expected dtype {np.dtype(dtype)}, got {a.dtype}")
        if shape is not None and tuple(a.shape) != tuple(shape):
            raise ValueError(f"{what}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
        if not self._contiguous(a):
            raise ValueError(f"{what}: expected a C-contiguous array")

    def _check_env(self, spec: EnvSpec, bufs: EnvBuffers, params: Any) -> int:
        """Check the env buffers and params handed to an env kernel; returns N."""
        n = int(bufs.steps.shape[0])
        dt = params.dtype
        self._check_array(bufs.state, "state", dt, (spec.state_dim, n))
        for what, dtype, shape in (("steps", np.int32, (n,)), ("episodes", np.uint32, (n,)),
                                   ("needs_reset", np.bool_, (n,)), ("obs", dt, (n, spec.obs_dim)),
                                   ("final_obs", dt, (n, spec.obs_dim)), ("reward", dt, (n,)),
                                   ("terminated", np.bool_, (n,)), ("truncated", np.bool_, (n,))):  # fmt: skip
            self._check_array(getattr(bufs, what), what, dtype, shape)
        return n

    # ---- environments ------------------------------------------------------------------------
    def env_reset(
        self, spec: EnvSpec, bufs: EnvBuffers, params: Any, seed: int, fresh: bool
    ) -> None:
        """Reset every env: ``fresh`` restarts episode counters at 0, else each env's counter advances by one.

        Writes the reset state, steps=0, needs_reset=False and obs; draws come from
        Philox key (seed, env index), counter (episode, 0, STREAM_RESET, 0).
        """
        raise self._unsupported("env_reset")

    def env_step(
        self,
        spec: EnvSpec,
        bufs: EnvBuffers,
        actions: Any,
        params: Any,
        seed: int,
        max_steps: int,
        autoreset: str,
    ) -> None:
        """One step of every env with in-kernel autoreset; writes obs, final_obs, reward, flags."""
        raise self._unsupported("env_step")

    def env_rollout(
        self,
        spec: EnvSpec,
        bufs: EnvBuffers,
        policy: Any,
        policy_params: Any,
        out: Any,
        params: Any,
        seed: int,
        max_steps: int,
        autoreset: str,
        steps_per_launch: int,
    ) -> None:
        """Fused rollout: ``out.steps`` env steps with the policy evaluated in the kernel, writing
        the time-major RolloutBuffer ``out``; ``steps_per_launch`` steps per kernel launch.

        ``policy_params`` is ``policy.flat()`` on the device (empty for the random policy). Actions
        are drawn from Philox key (seed, env), counter (episode, steps, STREAM_POLICY, 0), with
        ``steps`` the env's step count before the step (see portkern.policy.sample_actions).
        """
        raise self._unsupported("env_rollout")

    # ---- argument checks shared by the kernel backends (before any launch) ---------------------
    def _check_rollout(
        self, spec: EnvSpec, bufs: EnvBuffers, policy: Any, policy_params: Any, out: Any,
        params: Any, steps_per_launch: int,
    ) -> int:  # fmt: skip
        """Check an ``env_rollout`` call; returns the MLP's hidden size (0 for the random policy)."""
        from ..policy import MAX_WIDTH

        n, steps, d, dt = bufs.steps.shape[0], out.steps, spec.obs_dim, params.dtype
        act_dtype = np.dtype(np.int32 if spec.is_discrete else np.float32)
        act_shape = (steps, n) if spec.action_dim == 1 else (steps, n, spec.action_dim)
        expected = {"obs": (dt, (steps, n, d)), "actions": (act_dtype, act_shape),
                    "rewards": (dt, (steps, n)), "terminated": (np.bool_, (steps, n)),
                    "truncated": (np.bool_, (steps, n)), "final_obs": (dt, (steps, n, d))}  # fmt: skip
        for name, (dtype, shape) in expected.items():
            self._check_array(getattr(out, name), f"buffer.{name}", dtype, shape)
        self._check_array(policy_params, "policy_params", np.float32)
        hidden = int(getattr(policy, "hidden", 0))
        if policy.kind == 1 and not 1 <= hidden <= MAX_WIDTH:
            raise ValueError(f"policy: hidden size must be in [1, {MAX_WIDTH}] for the kernel, got {hidden}")
        if not 1 <= steps_per_launch <= steps:
            raise ValueError(f"steps_per_launch: expected an int in [1, {steps}], got {steps_per_launch!r}")
        return hidden

    def _check_policy_size(self, spec: EnvSpec, policy: Any, policy_params: Any, hidden: int) -> None:
        """Check that an MLP policy's flat parameters hold exactly its layers, for the backends whose
        ``env_rollout`` slices the layers out of them (the frameworks: a slice of a short vector would
        silently come out short)."""
        if policy.kind != 1:
            return
        from ..policy import flat_size

        size = flat_size(spec.obs_dim, hidden, spec.discrete_actions if spec.is_discrete else spec.action_dim)
        if tuple(policy_params.shape) != (size,):
            raise ValueError(f"policy_params: expected {size} floats, got {tuple(policy_params.shape)}")

    def _check_mlp(self, policy_params: Any, obs: Any, hidden: int, out_dim: int) -> tuple[int, int]:
        """Check an ``mlp_forward`` call; returns (N, obs_dim)."""
        from ..policy import MAX_WIDTH, flat_size

        self._check_array(policy_params, "policy_params", np.float32)
        self._check_array(obs, "obs")
        if len(obs.shape) != 2:
            raise ValueError(f"obs: expected a 2-D [N, obs_dim] array, got shape {tuple(obs.shape)}")
        if dtype_of(obs) not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"obs: expected float32 or float64, got {obs.dtype}")
        n, d = (int(x) for x in obs.shape)
        for name, v in (("hidden", hidden), ("obs_dim", d), ("out_dim", out_dim)):
            if not 1 <= v <= MAX_WIDTH:
                raise ValueError(f"{name}: expected an int in [1, {MAX_WIDTH}] for the kernel, got {v}")
        size = flat_size(d, hidden, out_dim)
        if tuple(policy_params.shape) != (size,):
            raise ValueError(
                f"policy_params: expected {size} floats for this shape, got {tuple(policy_params.shape)}"
            )
        return n, d

    def mlp_forward(self, policy_params: Any, obs: Any, hidden: int, out_dim: int) -> Any:
        """The MLP policy's forward pass on the device (``pk_mlp_forward``): [N, out_dim] float32."""
        raise self._unsupported("mlp_forward")

    # ---- rollout buffer ops ([T, N] time-major) ---------------------------------------------
    def gae(self, rewards: Any, values: Any, next_values: Any, terminated: Any, truncated: Any,
            advantages: Any, returns: Any, gamma: float, lam: float) -> None:  # fmt: skip
        raise self._unsupported("gae")

    def discounted_returns(self, rewards: Any, terminated: Any, truncated: Any, bootstrap: Any, out: Any,
                           gamma: float) -> None:  # fmt: skip
        """``bootstrap`` is [N] (value after the last step) or [T, N] (value of each step's final obs)."""
        raise self._unsupported("discounted_returns")

    def normalize(self, x: Any, out: Any, eps: float) -> None:
        raise self._unsupported("normalize")

    def gather(self, x: Any, indices: Any, out: Any) -> None:
        """``out[b] = x[indices[b]]`` along the first axis; indices already range-checked."""
        raise self._unsupported("gather")

    def gather_checks_indices(self) -> bool:
        """Whether :meth:`gather` itself raises ``IndexError`` for an index outside ``[0, M)``, reading nothing out
        of bounds (so ``portkern.buffer.gather`` skips its range reduction, a second pass over the indices, and
        computes the range only to word the error). False: the range is checked before the launch."""
        return False

    # ---- validation helpers (before any launch); backends override with device reductions ------
    def index_range(self, indices: Any) -> tuple[int, int]:
        """(min, max) of a native integer array, for validating gather indices before the launch."""
        host = self.to_host(indices)
        if host.size == 0:
            raise ValueError("indices: empty array has no range")
        return int(host.min()), int(host.max())

    def all_finite(self, a: Any) -> bool:
        """Whether every element of a native float array is finite (validation, before any launch)."""
        return bool(np.isfinite(self.to_host(a)).all())
