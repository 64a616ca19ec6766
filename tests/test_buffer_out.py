"""The public buffer ops' outputs (``out=``, and the per-backend output buffers without it) and their
validation in one layer: the same bad input gives the same error, naming the argument, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

from portkern import buffer

T, N = 5, 7


def _inputs(b, dtype=np.float32):
    rng = np.random.default_rng(3)
    r, v, nv = (b.from_host(rng.standard_normal((T, N)).astype(dtype)) for _ in range(3))
    te, tr = (b.from_host(rng.random((T, N)) < 0.2) for _ in range(2))
    return r, v, nv, te, tr


def _host(b, a):
    return np.asarray(b.to_host(a))


def _mutable(b):
    if b.immutable_arrays:
        pytest.skip(f"{b.name}: arrays are immutable, out= is refused (test_out_is_refused_where_arrays_are_immutable)")


# ---- the same bad input, the same error on every backend ------------------------------------------
BAD_GAE = {
    "values dtype": (lambda b, a: {**a, "values": b.from_host(np.zeros((T, N), np.float64))}, TypeError, "values:"),
    "next_values shape": (lambda b, a: {**a, "next_values": b.from_host(np.zeros((T, N + 1), np.float32))},
                          ValueError, "next_values:"),  # fmt: skip
    "terminated not bool": (lambda b, a: {**a, "terminated": a["rewards"]}, TypeError, "terminated:"),
    "truncated shape": (lambda b, a: {**a, "truncated": b.from_host(np.zeros((T + 1, N), bool))},
                        ValueError, "truncated:"),  # fmt: skip
}


@pytest.mark.parametrize("case", list(BAD_GAE))
def test_gae_rejects_the_same_bad_input_alike_on_every_backend(backend, case):
    r, v, nv, te, tr = _inputs(backend)
    args = {"rewards": r, "values": v, "next_values": nv, "terminated": te, "truncated": tr}
    change, exc, match = BAD_GAE[case]
    with pytest.raises(exc, match=match):
        buffer.gae(**change(backend, args), gamma=0.99, lam=0.95, backend=backend)


def test_range_errors_are_the_same_on_every_backend(backend):
    r, v, nv, te, tr = _inputs(backend)
    with pytest.raises(ValueError, match=r"gamma: expected a float in \[0, 1\]"):
        buffer.gae(r, v, nv, te, tr, gamma=1.5, lam=0.95, backend=backend)
    x = backend.from_host(np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match=r"indices: expected values in \[0, 3\]"):
        buffer.gather(x, backend.from_host(np.array([0, 4], np.int64)), backend=backend)
    with pytest.raises(TypeError, match="indices: expected an int32 or int64 array"):
        buffer.gather(x, backend.from_host(np.array([0.0, 1.0], np.float32)), backend=backend)


def test_bad_out_is_rejected_naming_it_on_every_backend(backend):
    _mutable(backend)
    r, v, nv, te, tr = _inputs(backend)
    good = backend.empty((T, N), np.float32)
    wrong_dtype = backend.from_host(np.zeros((T, N), np.float64))
    wrong_shape = backend.empty((T, N + 1), np.float32)
    with pytest.raises(TypeError, match=r"out\[1\]: expected dtype float32"):
        buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.9, backend=backend, out=(good, wrong_dtype))
    with pytest.raises(ValueError, match=r"out\[0\]: expected shape \(5, 7\)"):
        buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.9, backend=backend, out=(wrong_shape, good))
    with pytest.raises(ValueError, match="out: expected shape"):
        buffer.discounted_returns(r, te, tr, nv, gamma=0.9, backend=backend, out=wrong_shape)
    with pytest.raises(TypeError, match="out: expected a pair"):
        buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.9, backend=backend, out=good)
    if backend.name != "numpy":  # a host array is not this backend's: outputs are never uploaded
        with pytest.raises(TypeError, match=f"out: expected a {backend.name} array"):
            buffer.normalize(r, backend=backend, out=np.zeros((T, N), np.float32))


def test_an_out_that_aliases_an_input_is_refused(backend):
    _mutable(backend)
    r, v, nv, te, tr = _inputs(backend)
    ret = backend.empty((T, N), np.float32)
    with pytest.raises(ValueError, match=r"out\[0\]: shares memory with values"):
        buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.9, backend=backend, out=(v, ret))
    with pytest.raises(ValueError, match=r"out\[1\]: shares memory with out\[0\]"):
        buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.9, backend=backend, out=(ret, ret))
    with pytest.raises(ValueError, match="out: shares memory with rewards"):
        buffer.discounted_returns(r, te, tr, nv, gamma=0.9, backend=backend, out=r)
    x = backend.from_host(np.arange(12, dtype=np.float32).reshape(6, 2))
    with pytest.raises(ValueError, match="out: shares memory with x"):
        buffer.gather(x, backend.from_host(np.array([1, 0, 2, 3, 4, 5], np.int64)), backend=backend, out=x)


# ---- out= gives the same results, in the caller's arrays ------------------------------------------
def test_out_is_written_and_returned_with_the_results_of_the_plain_call(backend):
    _mutable(backend)
    r, v, nv, te, tr = _inputs(backend)
    want_adv, want_ret = (_host(backend, a) for a in buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.8, backend=backend))
    adv, ret = backend.empty((T, N), np.float32), backend.empty((T, N), np.float32)
    got = buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.8, backend=backend, out=(adv, ret))
    assert got[0] is adv and got[1] is ret
    np.testing.assert_array_equal(_host(backend, adv), want_adv)
    np.testing.assert_array_equal(_host(backend, ret), want_ret)

    want = _host(backend, buffer.discounted_returns(r, te, tr, nv, gamma=0.9, backend=backend))
    out = backend.empty((T, N), np.float32)
    assert buffer.discounted_returns(r, te, tr, nv, gamma=0.9, backend=backend, out=out) is out
    np.testing.assert_array_equal(_host(backend, out), want)

    idx = backend.from_host(np.array([3, 0, 3], np.int32))
    want = _host(backend, buffer.gather(r, idx, backend=backend))
    out = backend.empty((3, N), np.float32)
    assert buffer.gather(r, idx, backend=backend, out=out) is out
    np.testing.assert_array_equal(_host(backend, out), want)

    want = _host(backend, buffer.normalize(r, backend=backend))
    out = backend.empty((T, N), np.float32)
    assert buffer.normalize(r, backend=backend, out=out) is out
    np.testing.assert_array_equal(_host(backend, out), want)
    x = backend.from_host(_host(backend, r))  # in place: the statistics are taken before any write
    assert buffer.normalize(x, backend=backend, out=x) is x
    np.testing.assert_array_equal(_host(backend, x), want)


def test_out_is_refused_where_arrays_are_immutable(backend):
    if not backend.immutable_arrays:
        pytest.skip(f"{backend.name}: arrays are written in place")
    r, v, nv, te, tr = _inputs(backend)
    with pytest.raises(TypeError, match="out: the .* backend's arrays are immutable"):
        buffer.normalize(r, backend=backend, out=r)


# ---- without out=: one output buffer per op, shape and dtype (copy what you keep) -----------------
def test_results_without_out_reuse_the_backends_buffer_and_never_alias_an_input(backend):
    _mutable(backend)
    r, v, nv, te, tr = _inputs(backend)
    adv1, ret1 = buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.8, backend=backend)
    kept = _host(backend, adv1)
    adv2, _ = buffer.gae(r, v, nv, te, tr, gamma=0.9, lam=0.8, backend=backend)
    assert adv2 is adv1  # the documented lifetime: the next call of the op reuses it
    np.testing.assert_array_equal(_host(backend, adv2), kept)
    # A previous result passed back in is an input: the op writes a new array, not the one it reads.
    want = _host(backend, buffer.normalize(backend.from_host(kept), backend=backend))
    first = buffer.normalize(adv1, backend=backend)
    assert not backend.shares_memory(first, adv1)
    np.testing.assert_array_equal(_host(backend, first), want)
    second = buffer.normalize(first, backend=backend)
    assert second is not first
    np.testing.assert_array_equal(_host(backend, second), _host(backend, buffer.normalize(backend.from_host(want),
                                                                                           backend=backend)))


def test_a_strided_host_array_is_copied_not_refused():
    """Host (NumPy) inputs are taken as the upload path takes them: a strided view is made contiguous."""
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = buffer.normalize(x[:, ::2], backend="numpy").copy()  # copy what you keep: the next call reuses it
    want = buffer.normalize(np.ascontiguousarray(x[:, ::2]), backend="numpy")
    assert got.shape == (4, 3) and np.isfinite(got).all()
    np.testing.assert_array_equal(got, want)
