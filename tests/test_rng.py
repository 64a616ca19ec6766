"""Philox4x32-10 against Random123's known-answer vectors, and the uniform conversion."""

from __future__ import annotations

import numpy as np
import pytest

from portkern import rng

U = np.uint32

# Random123 kat_vectors, philox4x32 with 7 and 10 rounds.
KAT = [
    pytest.param(10, [0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8], id="r10-zeros"),
    pytest.param(10, [0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2,
                 [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD], id="r10-ones"),
    pytest.param(10, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
                 [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1], id="r10-pi"),
    pytest.param(7, [0, 0, 0, 0], [0, 0], [0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48], id="r7-zeros"),
]  # fmt: skip


@pytest.mark.parametrize("rounds,ctr,key,expected", KAT)
def test_known_answer(rounds, ctr, key, expected):
    out = rng.philox4x32(np.array(ctr, U), np.array(key, U), rounds=rounds)
    assert out.tolist() == expected


def test_batched_equals_one_at_a_time():
    ctr = np.arange(40, dtype=U).reshape(10, 4)
    key = np.arange(20, dtype=U).reshape(10, 2)
    batched = rng.philox4x32(ctr, key)
    single = np.stack([rng.philox4x32(ctr[i], key[i]) for i in range(10)])
    np.testing.assert_array_equal(batched, single)


def test_rejects_wrong_dtype():
    with pytest.raises(TypeError, match="uint32"):
        rng.philox4x32(np.zeros(4, np.int64), np.zeros(2, U))


def test_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"\[\.\.\., 4\]"):
        rng.philox4x32(np.zeros(3, U), np.zeros(2, U))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_range_and_exactness(dtype):
    bits = np.array([0, 0xFFFFFFFF, 0x80000000, 0x000000FF], U)
    u = rng.uniform(bits, dtype)
    assert u.dtype == np.dtype(dtype)
    assert u[0] == 0.0 and u[1] == 1.0 - 2.0**-24 and u[2] == 0.5 and u[3] == 0.0


def test_symmetric_is_identical_in_both_precisions():
    bits = rng.philox4x32(np.arange(4000, dtype=U).reshape(1000, 4), np.zeros(2, U)).ravel()
    s32 = rng.symmetric(bits, np.float32)
    s64 = rng.symmetric(bits, np.float64)
    np.testing.assert_array_equal(s32.astype(np.float64), s64)
    assert s64.min() >= -1.0 and s64.max() < 1.0


def test_streams_differ():
    a = rng.draw(7, np.arange(5), np.zeros(5), rng.STREAM_RESET)
    b = rng.draw(7, np.arange(5), np.zeros(5), rng.STREAM_POLICY)
    assert not np.array_equal(a, b)


def _philox_by_hand(ctr: list[int], key: list[int]) -> list[int]:
    """Philox4x32-10 in Python ints, one element: Random123's rounds with nothing folded or vectorised."""
    m0, m1, w0, w1, mask = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF
    (c0, c1, c2, c3), (k0, k1) = ctr, key
    for r in range(10):
        if r:
            k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & mask, (p0 >> 32) ^ c3 ^ k1, p0 & mask
    return [c0, c1, c2, c3]


@pytest.mark.parametrize("block", ["scalar", "array"])
def test_draw_folds_the_shared_words_without_changing_a_bit(block):
    """draw keeps the seed, the stream, the last counter word and a scalar block as ints (folded in Python
    until they meet an env's word); every element must still be Philox of its own counter and key."""
    g = np.random.default_rng(3)
    n = 257
    seed, stream = int(g.integers(0, 2**32)), 1
    env = g.integers(0, 2**32, n, dtype=np.uint64).astype(U)
    ep = g.integers(0, 2**32, n, dtype=np.uint64).astype(U)
    blk = g.integers(0, 2**32, n, dtype=np.uint64).astype(U) if block == "array" else 0xFFFFFFFF
    got = rng.draw(seed, env, ep, stream, blk)
    assert got.dtype == U and got.shape == (n, 4)
    blocks = blk if block == "array" else np.full(n, blk, U)
    for i in (0, 1, 100, n - 1):
        assert got[i].tolist() == _philox_by_hand(
            [int(ep[i]), int(blocks[i]), stream, 0], [seed, int(env[i])]
        )
    ctr = np.stack([ep, blocks, np.full(n, stream, U), np.zeros(n, U)], axis=1)
    key = np.stack([np.full(n, seed, U), env], axis=1)
    np.testing.assert_array_equal(got, rng.philox4x32(ctr, key))
    # broadcasting: one episode for a [2, 3] block of envs
    grid = rng.draw(7, np.arange(6, dtype=U).reshape(2, 3), U(4), 0)
    assert grid.shape == (2, 3, 4) and grid[1, 2].tolist() == _philox_by_hand([4, 0, 0, 0], [7, 5])


def test_draw_takes_a_seed_per_env():
    seeds = np.array([5, 6, 7], U)
    got = rng.draw(seeds, np.arange(3, dtype=U), np.zeros(3, U), 0)
    assert [got[i].tolist() for i in range(3)] == [
        _philox_by_hand([0, 0, 0, 0], [5 + i, i]) for i in range(3)
    ]


def test_philox_takes_any_word_as_an_int_or_an_array():
    g = np.random.default_rng(9)
    n = 8192 + 5  # two blocks of rng._CHUNK
    words = [g.integers(0, 2**32, n, dtype=np.uint64).astype(U) for _ in range(6)]
    full = rng.philox4x32(np.stack(words[:4], axis=1), np.stack(words[4:], axis=1))
    np.testing.assert_array_equal(rng.philox(*words), full)
    shared = [int(words[i][0]) if i in (1, 3, 4) else words[i] for i in range(6)]  # three words as ints
    expect = rng.philox4x32(np.stack([np.broadcast_to(U(w), (n,)) for w in shared[:4]], axis=1),
                            np.stack([np.broadcast_to(U(w), (n,)) for w in shared[4:]], axis=1))  # fmt: skip
    np.testing.assert_array_equal(rng.philox(*shared), expect)
    assert rng.philox(1, 2, 3, 4, 5, 6).tolist() == _philox_by_hand([1, 2, 3, 4], [5, 6])
    assert rng.philox(np.zeros(0, U), 0, 0, 0, 0, 0).shape == (0, 4)


@pytest.mark.parametrize("n", [1, 5, 12])
def test_the_few_element_path_in_ints_equals_the_array_path(n, monkeypatch):
    g = np.random.default_rng(n)
    words = [g.integers(0, 2**32, n, dtype=np.uint64).astype(U) for _ in range(6)]
    words[2] = 1  # a shared word, as the stream is
    ints = rng.philox(*words)
    monkeypatch.setattr(rng, "_SCALAR_MAX", 0)
    np.testing.assert_array_equal(ints, rng.philox(*words))
