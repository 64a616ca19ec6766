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
