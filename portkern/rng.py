"""Philox4x32-10 counter-based RNG (Salmon et al., SC'11): the reference every backend reproduces bit for bit."""

from __future__ import annotations

import numpy as np

# Multipliers and Weyl key increments from Random123's philox.h.
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint32(0x9E3779B9)
PHILOX_W1 = np.uint32(0xBB67AE85)

#: Counter word 2 selects the stream, so resets and policy sampling never share draws.
STREAM_RESET = 0
STREAM_POLICY = 1

_MASK32 = np.uint64(0xFFFFFFFF)


def _mulhilo(a: np.uint64, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    prod = a * b.astype(np.uint64)
    return (prod >> np.uint64(32)).astype(np.uint32), (prod & _MASK32).astype(np.uint32)


def philox4x32(counter: np.ndarray, key: np.ndarray, rounds: int = 10) -> np.ndarray:
    """Philox4x32 with ``rounds`` rounds on uint32 arrays: counter ``[..., 4]``, key ``[..., 2]`` -> ``[..., 4]``."""
    counter = np.asarray(counter)
    key = np.asarray(key)
    if counter.dtype != np.uint32 or key.dtype != np.uint32:
        raise TypeError(
            f"philox4x32: counter and key must be uint32 arrays, got {counter.dtype} and {key.dtype}"
        )
    if counter.shape[-1:] != (4,) or key.shape[-1:] != (2,):
        raise ValueError(
            f"philox4x32: counter must have shape [..., 4] and key [..., 2], "
            f"got {counter.shape} and {key.shape}"
        )
    if not isinstance(rounds, (int, np.integer)) or not 1 <= rounds <= 16:
        raise ValueError(f"philox4x32: rounds must be an int in [1, 16], got {rounds!r}")
    shape = np.broadcast_shapes(counter.shape[:-1], key.shape[:-1])
    c = [np.broadcast_to(counter[..., i], shape).copy() for i in range(4)]
    k0 = np.broadcast_to(key[..., 0], shape).copy()
    k1 = np.broadcast_to(key[..., 1], shape).copy()
    with np.errstate(over="ignore"):
        for r in range(rounds):
            if r > 0:
                k0 = k0 + PHILOX_W0
                k1 = k1 + PHILOX_W1
            hi0, lo0 = _mulhilo(PHILOX_M0, c[0])
            hi1, lo1 = _mulhilo(PHILOX_M1, c[2])
            c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return np.stack(c, axis=-1)


def uniform(bits: np.ndarray, dtype: np.dtype | str = np.float32) -> np.ndarray:
    """uint32 -> uniform floats in [0, 1) from the top 24 bits.

    24 bits are exact in float32 and float64 alike, so a kernel in either precision
    produces the same value with one shift and one multiply (no rounding at all).
    """
    dtype = np.dtype(dtype)
    return (np.asarray(bits, dtype=np.uint32) >> np.uint32(8)).astype(dtype) * dtype.type(2.0**-24)


def symmetric(bits: np.ndarray, dtype: np.dtype | str = np.float32) -> np.ndarray:
    """uint32 -> uniform floats in [-1, 1): ``2u - 1``, which is exact in both precisions."""
    dtype = np.dtype(dtype)
    u = uniform(bits, dtype)
    return u * dtype.type(2.0) - dtype.type(1.0)


def draw(
    seed: int, env_index: np.ndarray, episode: np.ndarray, stream: int, block: int | np.ndarray = 0
) -> np.ndarray:
    """Four uint32 draws per env: key (seed, env index), counter (episode, block, stream, 0)."""
    env_index = np.asarray(env_index, dtype=np.uint32)
    episode = np.asarray(episode, dtype=np.uint32)
    n = np.broadcast_shapes(env_index.shape, episode.shape, np.shape(block))
    key = np.empty(n + (2,), dtype=np.uint32)
    key[..., 0] = np.uint32(seed)
    key[..., 1] = env_index
    ctr = np.zeros(n + (4,), dtype=np.uint32)
    ctr[..., 0] = episode
    ctr[..., 1] = np.asarray(block, dtype=np.uint32)
    ctr[..., 2] = np.uint32(stream)
    return philox4x32(ctr, key)
