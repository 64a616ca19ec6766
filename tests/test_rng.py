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
