"""The backend contract: one small class per compute API, identical typed signatures in every subclass."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ..envs.base import EnvSpec

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

    state: list[Any]  # one [N] array per state variable, env dtype
    steps: Any  # [N] int32: steps taken in the current episode (truncation counter)
    episodes: Any  # [N] uint32: episodes started since the last seeded reset (RNG counter)
    needs_reset: Any  # [N] bool: next_step mode, the env finished on the previous call
    obs: Any  # [N, obs_dim] env dtype
    final_obs: Any  # [N, obs_dim] env dtype: obs reached by the last step, before any autoreset
    reward: Any  # [N] env dtype
    terminated: Any  # [N] bool
    truncated: Any  # [N] bool


class Backend(abc.ABC):
    """One compute API on one device. Subclasses register with :func:`portkern.backends.registry.register`."""

    name: ClassVar[str]
    #: pip extra that installs this backend's dependencies, for error messages.
    extra: ClassVar[str | None] = None
    #: Environment variables (after PORTKERN_<NAME>_DEVICE) that give the default ``device=``.
    default_device_env: ClassVar[tuple[str, ...]] = ()

    device_name: str
    supports_float64: bool

    @classmethod
    @abc.abstractmethod
    def probe(cls) -> Probe:
        """Check, without raising, whether this backend can run here (touching a device, not just importing)."""

    @abc.abstractmethod
    def __init__(self, device: str | None = None) -> None: ...

    # ---- arrays -------------------------------------------------------------------------------
    @abc.abstractmethod
    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A zero-filled device array."""

    @abc.abstractmethod
    def from_host(self, a: np.ndarray) -> Any:
        """Copy a host array to a new device array of the same dtype and shape."""

    @abc.abstractmethod
    def to_host(self, a: Any) -> np.ndarray:
        """Copy a device array to a new host array."""

    @abc.abstractmethod
    def write(self, dst: Any, src: np.ndarray) -> None:
        """Copy host ``src`` into the existing device array ``dst`` (same shape and dtype)."""

    @classmethod
    @abc.abstractmethod
    def owns(cls, a: Any) -> bool:
        """Whether ``a`` is this backend's native array type."""

    @classmethod
    def for_array(cls, a: Any) -> "Backend":
        """The instance that owns native array ``a`` (backends with several devices override this)."""
        from .registry import get_backend

        return get_backend(cls.name)

    def synchronize(self) -> None:
        """Wait for all queued work on this backend's device."""

    def describe(self) -> dict[str, str]:
        """Device and library versions for benchmark metadata."""
        return {"backend": self.name, "device": self.device_name}

    # ---- environments ------------------------------------------------------------------------
    @abc.abstractmethod
    def env_reset(
        self, spec: EnvSpec, bufs: EnvBuffers, params: np.ndarray, seed: int, fresh: bool
    ) -> None:
        """Reset every env: ``fresh`` restarts episode counters at 0, else each env's counter advances by one.

        Writes the reset state, steps=0, needs_reset=False and obs; draws come from
        Philox key (seed, env index), counter (episode, 0, STREAM_RESET, 0).
        """

    @abc.abstractmethod
    def env_step(
        self,
        spec: EnvSpec,
        bufs: EnvBuffers,
        actions: Any,
        params: np.ndarray,
        seed: int,
        max_steps: int,
        autoreset: str,
    ) -> None:
        """One step of every env with in-kernel autoreset; writes obs, final_obs, reward, flags."""

    def env_rollout(
        self,
        spec: EnvSpec,
        bufs: EnvBuffers,
        policy: Any,
        policy_params: Any,
        out: Any,
        params: np.ndarray,
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
        raise NotImplementedError(f"the {self.name} backend has no fused rollout kernel yet")

    # ---- argument checks shared by the kernel backends (before any launch) ---------------------
    def _check_array(self, a: Any, what: str, dtype: Any = None, shape: tuple[int, ...] | None = None) -> None:
        """Raise unless ``a`` is a C-contiguous native array (of ``dtype`` and ``shape`` when given)."""
        raise NotImplementedError(f"the {self.name} backend does not check native arrays")

    def _check_rollout(
        self, spec: EnvSpec, bufs: EnvBuffers, policy: Any, policy_params: Any, out: Any,
        params: np.ndarray, steps_per_launch: int,
    ) -> int:  # fmt: skip
        """Check an ``env_rollout`` call; returns the MLP's hidden size (0 for the random policy)."""
        from ..policy import MAX_WIDTH

        n, steps, d, dt = bufs.steps.shape[0], out.steps, spec.obs_dim, params.dtype
        act_dtype = np.dtype(np.int32 if spec.is_discrete else np.float32)
        expected = {"obs": (dt, (steps, n, d)), "actions": (act_dtype, (steps, n)),
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

    def _check_mlp(self, policy_params: Any, obs: Any, hidden: int, out_dim: int) -> tuple[int, int]:
        """Check an ``mlp_forward`` call; returns (N, obs_dim)."""
        from ..policy import MAX_WIDTH, flat_size

        self._check_array(policy_params, "policy_params", np.float32)
        self._check_array(obs, "obs")
        if len(obs.shape) != 2:
            raise ValueError(f"obs: expected a 2-D [N, obs_dim] array, got shape {tuple(obs.shape)}")
        if np.dtype(obs.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
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
        raise NotImplementedError(f"the {self.name} backend has no MLP forward kernel yet")

    # ---- rollout buffer ops ([T, N] time-major) ---------------------------------------------
    @abc.abstractmethod
    def gae(
        self,
        rewards: Any,
        values: Any,
        next_values: Any,
        terminated: Any,
        truncated: Any,
        advantages: Any,
        returns: Any,
        gamma: float,
        lam: float,
    ) -> None: ...

    @abc.abstractmethod
    def discounted_returns(
        self,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        bootstrap: Any,
        out: Any,
        gamma: float,
    ) -> None:
        """``bootstrap`` is [N] (value after the last step) or [T, N] (value of each step's final obs)."""

    @abc.abstractmethod
    def normalize(self, x: Any, out: Any, eps: float) -> None: ...

    @abc.abstractmethod
    def gather(self, x: Any, indices: Any, out: Any) -> None:
        """``out[b] = x[indices[b]]`` along the first axis; indices already range-checked."""

    @abc.abstractmethod
    def index_range(self, indices: Any) -> tuple[int, int]:
        """(min, max) of a native integer array, for validating gather indices before the launch."""

    @abc.abstractmethod
    def all_finite(self, a: Any) -> bool:
        """Whether every element of a native float array is finite (validation, before any launch)."""
