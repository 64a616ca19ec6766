"""Philox4x32-10 counter-based RNG (Salmon et al., SC'11): the reference every backend reproduces bit for bit."""

from __future__ import annotations

import math

import numpy as np

# Multipliers and Weyl key increments from Random123's philox.h.
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint32(0x9E3779B9)
PHILOX_W1 = np.uint32(0xBB67AE85)

#: Counter word 2 selects the stream, so resets and policy sampling never share draws.
STREAM_RESET = 0
STREAM_POLICY = 1

_M0, _M1, _W0, _W1, _MASK = int(PHILOX_M0), int(PHILOX_M1), int(PHILOX_W0), int(PHILOX_W1), 0xFFFFFFFF

#: Elements per pass of :func:`philox` (its words' working set: about a dozen uint64 arrays of this length).
_CHUNK = 8192
#: Up to this many elements :func:`philox` runs on Python ints, one element at a time: its ~140 NumPy ops cost
#: ~65 us at any small size, the rounds in ints ~4.5 us an element (1 element 13 us, 12: 61 us, 16: 78 us;
#: 2-core Xeon VM), and a step's autoreset draws for the few envs that finished.
_SCALAR_MAX = 12
#: A Philox word: a uint64 array holding uint32 values, or a Python int (a word the same for every element:
#: its rounds fold in Python until it meets an array).
Word = np.ndarray | int


def _rounds(c0: Word, c1: Word, c2: Word, c3: Word, k0: Word, k1: Word, rounds: int) -> tuple[Word, ...]:
    """Philox4x32's rounds in uint64 arithmetic on uint32 values: a 32 x 32-bit product fits a uint64 exactly,
    so each multiply is one op, its high and low words a shift and a mask (no casts). Ints stay ints."""
    for r in range(rounds):
        if r > 0:
            k0 = (k0 + _W0) & _MASK
            k1 = (k1 + _W1) & _MASK
        p0 = c0 * _M0
        p1 = c2 * _M1
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & _MASK, (p0 >> 32) ^ c3 ^ k1, p0 & _MASK
    return c0, c1, c2, c3


def philox(c0: int | np.ndarray, c1: int | np.ndarray, c2: int | np.ndarray, c3: int | np.ndarray,
           k0: int | np.ndarray, k1: int | np.ndarray, rounds: int = 10) -> np.ndarray:  # fmt: skip
    """Philox4x32 of counter ``(c0, c1, c2, c3)`` and key ``(k0, k1)``, each word an int (the same for every
    element) or a uint32 array; the arrays broadcast together -> ``[..., 4]`` uint32.

    A word the elements share stays a Python int, folded until it meets an array word; the elements run in
    blocks of ``_CHUNK``, so the dozen words a round keeps live stay in the core's caches (65,536 elements:
    2.4 ms in blocks of 8,192, 2.9 in 16,384, 3.0 in 4,096, 3.9-4.7 ms in one pass; 2-core Xeon VM).
    """
    words = [w if isinstance(w, np.ndarray) and w.dtype == np.uint32 else np.uint32(w) for w in
             (c0, c1, c2, c3, k0, k1)]  # as uint32 arrays take them  # fmt: skip
    shape = np.broadcast_shapes(*(w.shape for w in words))
    size = math.prod(shape)
    flat = [int(w) if w.ndim == 0 else (w if w.shape == shape else np.broadcast_to(w, shape)).reshape(size)
            for w in words]  # fmt: skip
    out = np.empty((size, 4), dtype=np.uint32)
    # A few elements (the envs one step finished): Python ints, no array op at all.
    if 0 < size <= _SCALAR_MAX:
        cols = [[w] * size if isinstance(w, int) else w.tolist() for w in flat]
        out[:] = [_rounds(*element, rounds=rounds) for element in zip(*cols)]
        return out.reshape(shape + (4,))
    for start in range(0, size, _CHUNK):
        s = slice(start, start + _CHUNK)
        part = [w if isinstance(w, int) else w[s].astype(np.uint64) for w in flat]
        for i, w in enumerate(_rounds(*part, rounds=rounds)):
            out[s, i] = w  # uint64 holding uint32 values (or an int < 2**32): an exact cast
    return out.reshape(shape + (4,))


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
    words = [np.broadcast_to(a[..., i], shape) for a, n in ((counter, 4), (key, 2)) for i in range(n)]
    return philox(*words, rounds=int(rounds))


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
    """Four uint32 draws per env: key (seed, env index), counter (episode, block, stream, 0).

    :func:`philox` of that counter and key: the seed, the stream, the last counter word and a scalar block are
    words every env shares. On the 2-core dev VM (Xeon), against full arrays and a cast around every multiply
    (interleaved, 30 rounds): 2.93x [2.88-2.98] at 6 envs (35 us, in ints), 1.54x at 1,024, 1.64x
    [1.56-1.91] at 65,536 (2.7 ms).
    """
    env_index = np.asarray(env_index, dtype=np.uint32)
    episode = np.asarray(episode, dtype=np.uint32)
    return philox(episode, block, stream, 0, seed, env_index)
