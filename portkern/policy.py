"""In-kernel policies for fused rollouts (Philox random, small tanh MLP) and their NumPy reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import rng
from .envs.base import EnvSpec

__all__ = ["MLPPolicy", "Policy", "RandomPolicy", "sample_actions"]

TWO_PI_F32 = np.float32(2.0 * np.pi)
#: Widest MLP layer (input, hidden and output) the kernels hold in private arrays: PK_MLP_MAX.
MAX_WIDTH = 64


def flat_size(obs_dim: int, hidden: int, out_dim: int) -> int:
    """Floats in :meth:`MLPPolicy.flat` for these sizes: w1 b1 w2 b2 w3 b3 log_std."""
    return obs_dim * hidden + hidden + hidden * hidden + hidden + hidden * out_dim + out_dim + 1


class Policy:
    """Base of the policies a fused rollout kernel can run; ``kind`` is the kernel's policy switch."""

    kind: int

    def check(self, spec: EnvSpec) -> None:
        """Raise if this policy cannot act in ``spec``'s action space."""


@dataclass(frozen=True)
class RandomPolicy(Policy):
    """Uniform actions: discrete ``((b0 >> 8) * n) >> 24``; continuous ``high * (2u - 1)`` (float32) per
    action component (see :func:`sample_actions` for which Philox word each component takes)."""

    kind: int = 0


@dataclass(frozen=True)
class MLPPolicy(Policy):
    """obs -> tanh(W1) -> tanh(W2) -> W3: logits (discrete, sampled by inverse CDF of the softmax)
    or a Gaussian mean per action component with one ``log_std`` shared by all of them (continuous,
    Box-Muller; PPO's Gaussian head shares one too), all float32.

    Weights are ``[in, out]`` row-major (``x @ W + b``); ``hidden`` is fixed at construction.
    """

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    w3: np.ndarray
    b3: np.ndarray
    log_std: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))
    kind: int = 1

    @classmethod
    def init(cls, spec: EnvSpec, hidden: int = 64, seed: int = 0, scale: float = 1.0) -> MLPPolicy:
        """Random weights (Gaussian, 1/sqrt(fan-in)) for ``spec``'s observation and action sizes."""
        g = np.random.default_rng(seed)
        out = _out_dim(spec)

        def layer(i: int, o: int) -> tuple[np.ndarray, np.ndarray]:
            w = (g.normal(size=(i, o)) * scale / np.sqrt(i)).astype(np.float32)
            return w, (g.normal(size=o) * 0.1).astype(np.float32)

        w1, b1 = layer(spec.obs_dim, hidden)
        w2, b2 = layer(hidden, hidden)
        w3, b3 = layer(hidden, out)
        return cls(w1, b1, w2, b2, w3, b3, np.full(1, -0.5, np.float32))

    def __post_init__(self) -> None:
        for name in ("w1", "b1", "w2", "b2", "w3", "b3", "log_std"):
            a = getattr(self, name)
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                raise TypeError(f"{name}: expected a float32 NumPy array, got {getattr(a, 'dtype', type(a))}")
            if not np.isfinite(a).all():
                raise ValueError(f"{name}: expected finite values")
        h = self.w1.shape[1]
        shapes = {"w1": (self.w1.shape[0], h), "b1": (h,), "w2": (h, h), "b2": (h,),
                  "w3": (h, self.w3.shape[1]), "b3": (self.w3.shape[1],), "log_std": (1,)}  # fmt: skip
        for name, shape in shapes.items():
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name}: expected shape {shape}, got {getattr(self, name).shape}")

    @classmethod
    def from_flat(cls, flat: np.ndarray, obs_dim: int, hidden: int, out_dim: int) -> MLPPolicy:
        """Inverse of :meth:`flat`."""
        size = flat_size(obs_dim, hidden, out_dim)
        if len(flat) != size:
            raise ValueError(f"policy parameters: expected {size} floats for this shape, got {len(flat)}")
        sizes = [("w1", (obs_dim, hidden)), ("b1", (hidden,)), ("w2", (hidden, hidden)), ("b2", (hidden,)),
                 ("w3", (hidden, out_dim)), ("b3", (out_dim,)), ("log_std", (1,))]  # fmt: skip
        parts, at = {}, 0
        for name, shape in sizes:
            n = int(np.prod(shape))
            parts[name] = np.asarray(flat[at : at + n], np.float32).reshape(shape)
            at += n
        return cls(**parts)

    @property
    def hidden(self) -> int:
        return int(self.w1.shape[1])

    def check(self, spec: EnvSpec) -> None:
        out = _out_dim(spec)
        if self.w1.shape[0] != spec.obs_dim or self.w3.shape[1] != out:
            raise ValueError(
                f"policy: {spec.id} needs an MLP from {spec.obs_dim} observations to {out} outputs, "
                f"got {self.w1.shape[0]} -> {self.w3.shape[1]}"
            )

    def forward(self, obs: np.ndarray) -> np.ndarray:
        """Reference forward pass in float32, summing each dot product in index order as kernels do."""
        x = obs.astype(np.float32)
        h1 = np.tanh(_dot(x, self.w1) + self.b1)
        h2 = np.tanh(_dot(h1, self.w2) + self.b2)
        return _dot(h2, self.w3) + self.b3

    def flat(self) -> np.ndarray:
        """All parameters in one float32 vector, the layout kernels read: w1 b1 w2 b2 w3 b3 log_std."""
        return np.concatenate([a.ravel() for a in (self.w1, self.b1, self.w2, self.b2, self.w3, self.b3, self.log_std)])


def _out_dim(spec: EnvSpec) -> int:
    """The MLP's outputs for ``spec``: one logit per discrete action, or one mean per Box component."""
    return spec.discrete_actions if spec.is_discrete else spec.action_dim


def _policy_bits(seed: int, n: int, episodes: np.ndarray, steps: np.ndarray, block: int) -> np.ndarray:
    """[N, 4] uint32: Philox key (seed, env), counter (episode, step, STREAM_POLICY, block). ``block`` is 0
    for every draw of a 1-wide action (rng.draw's counter); wider Box actions take blocks 1, 2, ... for
    their further components."""
    return rng.philox(np.asarray(episodes, np.uint32), np.asarray(steps).astype(np.uint32), rng.STREAM_POLICY,
                      block, seed, np.arange(n, dtype=np.uint32))  # fmt: skip


def _dot(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    # Sequential accumulation over the input index (not BLAS's blocked order), so a kernel's
    # loop reproduces it up to tanh/exp's ulp differences.
    acc = np.zeros((x.shape[0], w.shape[1]), np.float32)
    for k in range(w.shape[0]):
        acc = acc + x[:, k : k + 1] * w[k]
    return acc


def sample_actions(
    policy: Policy, spec: EnvSpec, obs: np.ndarray, seed: int, episodes: np.ndarray, steps: np.ndarray
) -> np.ndarray:
    """Reference actions for every env: Philox key (seed, env), counter (episode, step, STREAM_POLICY, block).

    Discrete and 1-wide Box actions ([N]) use block 0 only. A Box of ``action_dim`` A > 1 gives [N, A]:
    the random policy's component j is ``high * symmetric`` of word ``j % 4`` of block ``j // 4``; the
    MLP's component j is Box-Muller of words ``2 (j % 2)`` and ``2 (j % 2) + 1`` of block ``j // 2``.
    Component 0 is therefore exactly the 1-wide draw, and a kernel draws one block per 4 (or 2) components.
    """
    n = obs.shape[0]
    if not spec.is_discrete and spec.action_dim > 1:
        return _sample_box(policy, spec, obs, seed, episodes, steps)
    bits = rng.draw(seed, np.arange(n, dtype=np.uint32), episodes, rng.STREAM_POLICY, steps.astype(np.uint32))
    if isinstance(policy, RandomPolicy):
        if spec.is_discrete:
            k = (bits[:, 0] >> np.uint32(8)).astype(np.uint64) * np.uint64(spec.discrete_actions)
            return (k >> np.uint64(24)).astype(np.int32)
        return (np.float32(spec.action_high) * rng.symmetric(bits[:, 0], np.float32)).astype(np.float32)
    if isinstance(policy, MLPPolicy):
        out = policy.forward(obs)
        if spec.is_discrete:
            e = np.exp(out - out.max(axis=1, keepdims=True))
            total = np.zeros(n, np.float32)
            for k in range(e.shape[1]):
                total = total + e[:, k]
            threshold = rng.uniform(bits[:, 0], np.float32) * total
            action = np.full(n, e.shape[1] - 1, np.int32)
            acc = np.zeros(n, np.float32)
            chosen = np.zeros(n, bool)
            for k in range(e.shape[1]):
                acc = acc + e[:, k]
                take = ~chosen & (threshold < acc)
                action[take] = k
                chosen |= take
            return action
        u1 = np.float32(1.0) - rng.uniform(bits[:, 0], np.float32)  # (0, 1]: log is finite
        u2 = rng.uniform(bits[:, 1], np.float32)
        z = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(TWO_PI_F32 * u2)
        return (out[:, 0] + np.exp(policy.log_std[0]) * z).astype(np.float32)
    raise TypeError(f"policy: expected a RandomPolicy or MLPPolicy, got {type(policy).__name__}")


def _sample_box(policy: Policy, spec: EnvSpec, obs: np.ndarray, seed: int, episodes: np.ndarray,
                steps: np.ndarray) -> np.ndarray:  # fmt: skip
    """[N, A] actions of a Box env with action_dim A > 1 (see :func:`sample_actions` for the draws)."""
    n, a = obs.shape[0], spec.action_dim
    out = np.empty((n, a), np.float32)
    if isinstance(policy, RandomPolicy):
        for block in range(-(-a // 4)):
            bits = _policy_bits(seed, n, episodes, steps, block)
            for w in range(min(4, a - 4 * block)):
                out[:, 4 * block + w] = np.float32(spec.action_high) * rng.symmetric(bits[:, w], np.float32)
        return out
    if isinstance(policy, MLPPolicy):
        mean = policy.forward(obs)
        std = np.exp(policy.log_std[0])
        for j in range(a):
            bits = _policy_bits(seed, n, episodes, steps, j // 2)
            w = 2 * (j % 2)
            u1 = np.float32(1.0) - rng.uniform(bits[:, w], np.float32)  # (0, 1]: log is finite
            u2 = rng.uniform(bits[:, w + 1], np.float32)
            z = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(TWO_PI_F32 * u2)
            out[:, j] = mean[:, j] + std * z
        return out
    raise TypeError(f"policy: expected a RandomPolicy or MLPPolicy, got {type(policy).__name__}")


@dataclass
class RolloutBuffer:
    """Time-major device arrays a rollout writes: obs acted on, actions, rewards, flags, final obs."""

    obs: Any  # [T, N, obs_dim]
    actions: Any  # [T, N] int32 or float32; [T, N, A] float32 for a Box of action_dim A > 1
    rewards: Any  # [T, N]
    terminated: Any  # [T, N] bool
    truncated: Any  # [T, N] bool
    final_obs: Any  # [T, N, obs_dim]: obs step t reached, before any autoreset (for next_values)

    @property
    def steps(self) -> int:
        return int(self.rewards.shape[0])
