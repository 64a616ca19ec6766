"""The torch backend's eager buffer ops (whole-array terms, then 2 in-place ops per row; _torch_ops):
bit for bit the NumPy reference's rounding, in float32 and float64, with out=, both bootstrap
shapes, one-step rollouts, non-finite values, and the scratch the scans share between calls."""

from __future__ import annotations

import numpy as np
import pytest

from portkern import buffer
from portkern.backends import numpy as npb

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference's NaN arithmetic


def _inputs(shape, dtype, seed=0):
    g = np.random.default_rng(seed)
    r, v, nv = (g.standard_normal(shape).astype(dtype) for _ in range(3))
    return r, v, nv, g.random(shape) < 0.2, g.random(shape) < 0.1


def _t(*arrays):
    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 7), (2, 5), (33, 130)])
def test_gae_is_the_reference_bit_for_bit(dtype, shape):
    r, v, nv, term, trunc = _inputs(shape, dtype)
    want_adv, want_ret = npb.gae(r, v, nv, term, trunc, 0.99, 0.95)
    adv, ret = buffer.gae(*_t(r, v, nv, term, trunc), gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(adv.numpy(), want_adv)
    np.testing.assert_array_equal(ret.numpy(), want_ret)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("per_step", [False, True], ids=["bootstrap[N]", "bootstrap[T,N]"])
@pytest.mark.parametrize("steps", [1, 2, 40])
def test_discounted_returns_is_the_reference_bit_for_bit(dtype, per_step, steps):
    r, _, nv, term, trunc = _inputs((steps, 67), dtype, seed=3)
    boot = nv if per_step else nv[-1].copy()
    want = npb.discounted_returns(r, term, trunc, boot, 0.97)
    got = buffer.discounted_returns(*_t(r, term, trunc, boot), gamma=0.97)
    np.testing.assert_array_equal(got.numpy(), want)


def test_out_is_written_in_place_and_returned():
    r, v, nv, term, trunc = _inputs((9, 16), np.float32, seed=5)
    adv, ret = torch.empty(9, 16), torch.empty(9, 16)
    got = buffer.gae(*_t(r, v, nv, term, trunc), gamma=0.9, lam=0.8, out=(adv, ret))
    assert got[0] is adv and got[1] is ret
    np.testing.assert_array_equal(adv.numpy(), npb.gae(r, v, nv, term, trunc, 0.9, 0.8)[0])
    out = torch.empty(9, 16)
    assert buffer.discounted_returns(*_t(r, term, trunc, nv), gamma=0.9, out=out) is out
    np.testing.assert_array_equal(out.numpy(), npb.discounted_returns(r, term, trunc, nv, 0.9))


def test_non_finite_values_propagate_as_in_the_reference():
    # The masks are coefficients (gamma or 0), so inf * 0 is NaN here as in the reference's
    # (gamma * inf) * 0, not the 0 a select would give.
    r, v, nv, term, trunc = _inputs((6, 8), np.float32, seed=9)
    term[3, 2], nv[3, 2] = True, np.inf
    trunc[4, 5], nv[4, 5] = True, np.nan
    want_adv, _ = npb.gae(r, v, nv, term, trunc, 0.99, 0.95)
    assert np.isnan(want_adv[3, 2])
    adv, _ = buffer.gae(*_t(r, v, nv, term, trunc), gamma=0.99, lam=0.95)
    np.testing.assert_array_equal(adv.numpy(), want_adv)
    want = npb.discounted_returns(r, term, trunc, nv, 0.99)
    got = buffer.discounted_returns(*_t(r, term, trunc, nv), gamma=0.99)
    np.testing.assert_array_equal(got.numpy(), want)


def test_scans_share_scratch_without_mixing_results():
    # gae and discounted_returns use the same per-shape scratch; interleaved calls on two shapes
    # must each give their own result.
    a = _inputs((12, 10), np.float32, seed=1)
    b = _inputs((5, 10), np.float32, seed=2)
    for _ in range(2):
        for r, v, nv, term, trunc in (a, b):
            ret = buffer.discounted_returns(*_t(r, term, trunc, nv), gamma=0.9)
            np.testing.assert_array_equal(ret.numpy(), npb.discounted_returns(r, term, trunc, nv, 0.9))
            adv, _ = buffer.gae(*_t(r, v, nv, term, trunc), gamma=0.9, lam=0.9)
            np.testing.assert_array_equal(adv.numpy(), npb.gae(r, v, nv, term, trunc, 0.9, 0.9)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normalize_matches_the_reference_and_may_write_its_input(dtype):
    g = np.random.default_rng(4)
    x = (1000.0 + 3.0 * g.standard_normal((64, 257))).astype(dtype)  # a large mean: accumulation matters
    want = npb.normalize(x, 1e-8)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(buffer.normalize(torch.from_numpy(x.copy())).numpy(), want, rtol=tol, atol=tol)
    t = torch.from_numpy(x.copy())
    assert buffer.normalize(t, out=t) is t
    np.testing.assert_allclose(t.numpy(), want, rtol=tol, atol=tol)


def test_the_suite_times_the_public_call(monkeypatch):
    # A benchmark case's run is portkern.buffer's op as a user calls it, not the backend op behind it.
    from portkern.backends import get_backend
    from portkern.portability import suite

    calls = []
    real = buffer.gae
    monkeypatch.setattr(buffer, "gae", lambda *a, **k: calls.append(k) or real(*a, **k))
    prep = suite.prepare(get_backend("torch"), "gae", 1024)
    prep.run()
    assert calls and calls[-1]["gamma"] == suite.GAMMA and "out" not in calls[-1]
    assert prep.check().status == "pass"


# ---- the public call's checks, cheaper but all still there (dtype lookups memoised, no np.prod) --------
@pytest.mark.parametrize("x, err, says", [
    (torch.zeros(4, 3, dtype=torch.int32), TypeError, "x: expected a float32 or float64 array, got shape (4, 3) torch.int32"),
    (torch.zeros(4, 3, dtype=torch.float16), TypeError, "x: expected a float32 or float64 array"),
    (torch.zeros(4, 3, dtype=torch.bfloat16), TypeError, "x: expected a float32 or float64 array"),  # ml_dtypes' or none
    (torch.zeros(0, 3), ValueError, "x: expected at least one element"),
])  # fmt: skip
def test_normalize_still_refuses_bad_tensors_naming_them(x, err, says):
    for _ in range(2):  # the second call answers from the dtype memo: the same refusal
        with pytest.raises(err, match=says.replace("(", r"\(").replace(")", r"\)")):
            buffer.normalize(x)


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1e-8])
def test_normalize_still_refuses_a_bad_eps(eps):
    with pytest.raises(ValueError, match="eps: expected a finite float >= 0"):
        buffer.normalize(torch.ones(4, 3), eps)


def test_gather_still_refuses_a_non_float_tensor():
    with pytest.raises(TypeError, match="x: expected a float32 or float64 array"):
        buffer.gather(torch.zeros(4, 3, dtype=torch.int64), torch.zeros(2, dtype=torch.int64))


def test_dtype_lookups_answer_as_numpy_names_them():
    from portkern._validate import dtype_of

    for _ in range(2):  # first the lookup, then the memo
        assert dtype_of(torch.zeros(1)) == np.float32 and dtype_of(torch.zeros(1, dtype=torch.float64)) == np.float64
        assert dtype_of(torch.zeros(1, dtype=torch.bool)) == np.bool_
        assert dtype_of(np.zeros(1, ">f4")) == np.dtype(">f4")  # byte order kept: a NumPy dtype is itself


def test_a_result_passed_back_in_or_a_view_of_it_is_never_the_output():
    # the torch backend's own span (the tensor's pointer) sees overlaps of views as the generic one did
    from portkern.backends import get_backend

    b = get_backend("torch", "cpu")
    t = torch.zeros(10)
    assert b.shares_memory(t[2:6], t[5:]) and not b.shares_memory(t[:5], t[5:])
    x = torch.randn(4, 6)
    first = buffer.normalize(x)
    again = buffer.normalize(first)  # the cached output is this call's input: a new array for the result
    assert again.data_ptr() != first.data_ptr()
    want = (first - first.mean()) / (first.std(correction=0) + 1e-8)
    np.testing.assert_allclose(again.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
