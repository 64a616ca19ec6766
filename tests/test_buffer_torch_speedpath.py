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
