"""The NumPy backend: the reference implementation every kernel is tested against."""

from __future__ import annotations

import os
import platform
from typing import Any

import numpy as np

from .. import rng
from ..envs.base import EnvSpec
from .base import AUTORESET_MODES, Backend, EnvBuffers, Probe
from .registry import register


def reset_states(spec: EnvSpec, params: np.ndarray, seed: int, env_index: np.ndarray, episode: np.ndarray):
    """Reference reset draw: Philox key (seed, env index), counter (episode, 0, STREAM_RESET, 0)."""
    bits = rng.draw(seed, env_index, episode, rng.STREAM_RESET)
    sym = rng.symmetric(bits, params.dtype)
    return spec.reset(sym, params)


def gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """Reference GAE, time-major; the trace is cut at terminated or truncated, bootstrapping only when not terminated."""
    T = rewards.dtype.type
    gamma = T(gamma)
    gamma_lam = T(gamma * T(lam))
    adv = np.empty_like(rewards)
    last = np.zeros(rewards.shape[1], dtype=rewards.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        nonterminal = (~terminated[t]).astype(rewards.dtype)
        notdone = (~(terminated[t] | truncated[t])).astype(rewards.dtype)
        delta = rewards[t] + gamma * next_values[t] * nonterminal - values[t]
        last = delta + gamma_lam * notdone * last
        adv[t] = last
    return adv, adv + values


def discounted_returns(rewards, terminated, truncated, bootstrap, gamma):
    """Reference discounted returns; a [T, N] bootstrap is each step's final-obs value (used where truncated)."""
    T = rewards.dtype.type
    gamma = T(gamma)
    steps = rewards.shape[0]
    per_step = bootstrap.ndim == 2
    out = np.empty_like(rewards)
    running = np.zeros(rewards.shape[1], dtype=rewards.dtype)
    for t in range(steps - 1, -1, -1):
        if per_step:
            nxt = bootstrap[t] if t == steps - 1 else np.where(truncated[t], bootstrap[t], running)
        else:
            nxt = bootstrap if t == steps - 1 else np.where(truncated[t], T(0), running)
        running = rewards[t] + gamma * nxt * (~terminated[t]).astype(rewards.dtype)
        out[t] = running
    return out


def normalize(x, eps):
    """Reference normalisation over all elements: (x - mean) / (std + eps), population std, float64 accumulation."""
    x64 = x.astype(np.float64)
    mean = x64.mean()
    std = np.sqrt(np.mean(np.square(x64 - mean)))
    T = x.dtype.type
    return ((x - T(mean)) / (T(std) + T(eps))).astype(x.dtype)


@register
class NumpyBackend(Backend):
    name = "numpy"
    order = 0

    @classmethod
    def probe(cls) -> Probe:
        return Probe(True, devices=(cls._cpu_name(),), versions={"numpy": np.__version__})

    @staticmethod
    def _cpu_name() -> str:
        return f"host CPU ({platform.machine() or 'unknown'})"

    def __init__(self, device: str | None = None) -> None:
        if device not in (None, "cpu", "host"):
            raise ValueError(f"device: the numpy backend runs on the host only (None, 'cpu'), got {device!r}")
        self.device_name = self._cpu_name()
        self.supports_float64 = True

    def describe(self) -> dict[str, str]:
        return {"backend": self.name, "device": self.device_name, "vendor": platform.processor() or "",
                "numpy": np.__version__}  # fmt: skip

    def memory_limits(self) -> tuple[int | None, int | None] | None:
        """(None, the host's physical memory): NumPy has no single-allocation limit of its own, and a batch
        larger than the machine's memory is refused before allocating (VectorEnv), as on a device."""
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # not POSIX: unknown, numpy's own MemoryError stays
            return None
        return (None, int(total)) if total > 0 else None

    # ---- arrays -------------------------------------------------------------------------------
    def zeros(self, shape, dtype):
        try:
            return np.zeros(shape, dtype=dtype)
        except MemoryError as exc:
            raise self._allocation_error(exc, shape, dtype) from None

    def empty(self, shape, dtype):
        try:
            return np.empty(shape, dtype=dtype)
        except MemoryError as exc:
            raise self._allocation_error(exc, shape, dtype) from None

    def _allocation_error(self, exc: MemoryError, shape: Any, dtype: Any) -> MemoryError:
        """numpy's MemoryError as the other backends word it: the array, its bytes, the device's memory."""
        limits = self.memory_limits()
        nbytes = int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype).itemsize
        has = f"it has {limits[1]:,} bytes in all" if limits and limits[1] else "its memory is unknown"
        return MemoryError(f"a {tuple(np.atleast_1d(shape).tolist())} {np.dtype(dtype)} array ({nbytes:,} bytes) does "
                           f"not fit on {self.device_name}: {has} ({' '.join(str(exc).split())})")  # fmt: skip

    def from_host(self, a):
        return np.array(a, copy=True)

    def to_host(self, a):
        return np.array(a, copy=True)

    def write(self, dst, src):
        dst[...] = src

    @classmethod
    def owns(cls, a: Any) -> bool:
        return isinstance(a, np.ndarray)

    # ---- environments ------------------------------------------------------------------------
    def env_reset(self, spec, bufs: EnvBuffers, params, seed, fresh):
        n = bufs.steps.shape[0]
        if fresh:
            bufs.episodes[:] = 0
        else:
            bufs.episodes += np.uint32(1)
        state = reset_states(spec, params, seed, np.arange(n, dtype=np.uint32), bufs.episodes)
        for j, src in enumerate(state):
            bufs.state[j] = src
        bufs.steps[:] = 0
        bufs.needs_reset[:] = False
        bufs.obs[:] = spec.observe(state)

    def env_step(self, spec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        mode = AUTORESET_MODES[autoreset]
        n = bufs.steps.shape[0]
        state = tuple(bufs.state)
        if mode == AUTORESET_MODES["next_step"]:
            resetting = bufs.needs_reset.copy()
        else:
            resetting = np.zeros(n, dtype=bool)
        new_state, reward, terminated = spec.step(state, actions, params)
        new_state = [np.asarray(s, dtype=params.dtype) for s in new_state]
        steps = bufs.steps + np.int32(1)
        truncated = steps >= max_steps
        if mode == AUTORESET_MODES["same_step"]:
            bufs.final_obs[:] = spec.observe(tuple(new_state))
            finished = terminated | truncated
        else:
            # next_step: envs that finished last call reset now instead of stepping (reward 0, flags false).
            finished = resetting
            reward = np.where(resetting, params.dtype.type(0), reward)
            terminated = terminated & ~resetting
            truncated = truncated & ~resetting
        if finished.any():
            idx = np.nonzero(finished)[0]
            bufs.episodes[idx] += np.uint32(1)
            fresh = reset_states(spec, params, seed, idx.astype(np.uint32), bufs.episodes[idx])
            for s, f in zip(new_state, fresh):
                s[idx] = f
            steps[idx] = 0
        for j, src in enumerate(new_state):
            bufs.state[j] = src
        bufs.steps[:] = steps
        bufs.obs[:] = spec.observe(tuple(new_state))
        if mode == AUTORESET_MODES["next_step"]:
            bufs.final_obs[:] = bufs.obs
            bufs.needs_reset[:] = terminated | truncated
        bufs.reward[:] = reward
        bufs.terminated[:] = terminated
        bufs.truncated[:] = truncated

    def env_rollout(self, spec, bufs, policy, policy_params, out, params, seed, max_steps, autoreset,
                    steps_per_launch):  # fmt: skip
        # The reference: T single steps with the policy sampled from the obs each step acts on.
        from ..policy import sample_actions

        for t in range(out.steps):
            actions = sample_actions(policy, spec, bufs.obs, seed, bufs.episodes, bufs.steps)
            out.obs[t] = bufs.obs
            out.actions[t] = actions
            self.env_step(spec, bufs, actions, params, seed, max_steps, autoreset)
            out.rewards[t] = bufs.reward
            out.terminated[t] = bufs.terminated
            out.truncated[t] = bufs.truncated
            out.final_obs[t] = bufs.final_obs

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        from ..policy import MLPPolicy

        return MLPPolicy.from_flat(policy_params, obs.shape[1], hidden, out_dim).forward(obs)

    # ---- rollout buffer ops ------------------------------------------------------------------
    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        adv, ret = gae(rewards, values, next_values, terminated, truncated, gamma, lam)
        advantages[...] = adv
        returns[...] = ret

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        out[...] = discounted_returns(rewards, terminated, truncated, bootstrap, gamma)

    def normalize(self, x, out, eps):
        out[...] = normalize(x, eps)

    def gather(self, x, indices, out):
        np.take(x, indices, axis=0, out=out)

    def index_range(self, indices):
        return int(indices.min()), int(indices.max())

    def all_finite(self, a):
        return bool(np.isfinite(a).all())
