"""Fuzzing every ``portkern.buffer`` op and its ``out=`` on every backend that runs here: shapes (empty, 1-D, 3-D,
mismatched), dtypes, NaN/inf/huge values, non-contiguous, read-only and Fortran-order arrays, lists, arrays of
another backend or device, and ``out=`` of every wrong kind. Allowed: the NumPy reference's answer, or a
ValueError/TypeError naming the argument, the inputs (and ``out``) as they were."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from portkern import buffer
from portkern.backends import get_backend
from tests._fuzz_helpers import (
    ANY_DTYPES, CHEAP, COMPILING, FORMS, Rejected, allowed, as_form, backend_params, form_available, host,
    long_profile, open_backend, wild_floats,
)  # fmt: skip
from tests._hypothesis_profiles import fuzz

PAIRS = backend_params(CHEAP + COMPILING)
REF = get_backend("numpy")


def _compiling(b) -> bool:
    return (b.name, None) in COMPILING


@st.composite
def _shape(draw, b, ndim=2):
    if _compiling(b) and not long_profile():  # one program per op: compiled once per run
        return (3, 2)[:ndim] if ndim <= 2 else (3, 2, 2)
    return tuple(draw(st.integers(1, 6)) for _ in range(ndim))


@st.composite
def _array(draw, b, shape, dtype, kind="float"):
    """An array of ``shape``/``dtype`` in some form, sometimes wrong in one way (shape, dtype, emptiness)."""
    how = draw(st.sampled_from(["ok"] * 6 + ["shape", "dtype", "empty", "scalar"]))
    if how == "shape":
        shape = draw(st.sampled_from([shape[:-1], (*shape, 2), tuple(s + 1 for s in shape), shape[::-1]]))
    elif how == "empty":
        shape = (0, *shape[1:])
    elif how == "scalar":
        shape = ()
    if how == "dtype":
        dtype = draw(st.sampled_from(ANY_DTYPES))
    n = int(np.prod(shape))
    if np.dtype(dtype) == np.bool_:
        vals = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    elif np.dtype(dtype).kind in "iu":
        vals = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), dtype)
    else:
        vals = np.array(draw(st.lists(wild_floats, min_size=n, max_size=n)), np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            vals = vals.astype(dtype)
    vals = vals.reshape(shape)
    form = draw(st.sampled_from(["native"] * 3 + [f for f in FORMS if form_available(f)]))
    if form == "native":
        if b.name == "numpy" or vals.dtype.kind == "c" or (b.name in ("jax",) and vals.dtype.itemsize > 4):
            return vals
        try:
            return b.from_host(vals)
        except (TypeError, ValueError):  # a dtype the library has no type for: a NumPy array then
            return vals
    return as_form(vals, form)


_unit = st.one_of(st.floats(0, 1), st.sampled_from([float("nan"), -0.1, 1.5, float("inf"), "0.9", None, True]),
                  st.just(np.float32(0.95)), st.integers(-1, 2))  # fmt: skip


def _out(draw, b, shape, dtype, inputs):
    kind = draw(st.sampled_from(["none", "none", "right", "right", "numpy", "shape", "dtype", "alias", "strided",
                                 "list"]))  # fmt: skip
    if kind == "none":
        return None
    if kind == "right":
        return b.empty(shape, dtype) if not b.immutable_arrays else REF.empty(shape, dtype)
    if kind == "numpy":
        return np.zeros(shape, dtype)
    if kind == "shape":
        return b.empty((shape[0] + 1, *shape[1:]), dtype)
    if kind == "dtype":
        return b.empty(shape, np.float64 if np.dtype(dtype) == np.float32 else np.float32)
    if kind == "alias":
        native = [a for a in inputs if b.owns(a) and tuple(a.shape) == tuple(shape)]
        return native[0] if native else None
    if kind == "strided":
        if b.name == "numpy":
            return np.zeros((*shape[:-1], 2 * shape[-1]), dtype)[..., ::2]
        if b.name in ("torch", "torch_compile"):
            import torch

            return torch.zeros((*shape[:-1], 2 * shape[-1]), dtype=getattr(torch, np.dtype(dtype).name))[..., ::2]
        return b.empty(shape, dtype)
    return np.zeros(shape, dtype).tolist()


def _hosts(arrays) -> list[np.ndarray | None]:
    out = []
    for a in arrays:
        try:
            out.append(np.array(host(a), copy=True))
        except Exception:
            out.append(None)
    return out


def _assert_same(before, arrays, what="input"):
    for i, (b0, a) in enumerate(zip(before, arrays)):
        if b0 is not None:
            np.testing.assert_array_equal(host(a), b0, err_msg=f"{what} {i} changed")


def _compare(got, want, inputs) -> None:
    got, want = np.asarray(host(got)), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    scale = max([1.0] + [float(np.max(np.abs(x[np.isfinite(x)]), initial=0)) for x in inputs if x.dtype.kind == "f"])
    finite = np.isfinite(want) & (np.abs(want) < 1e20)
    tol = (1e-4 if want.dtype == np.float32 else 1e-9) * scale * max(want.shape[0] if want.ndim else 1, 1)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=tol)
    assert not np.isfinite(got[~np.isfinite(want)]).any(), "a NaN/inf in the reference's result came out finite"


def _reference_inputs(arrays, dtype_from):
    return [np.array(host(a), order="C") for a in arrays]  # shape kept (ascontiguousarray makes 0-d 1-d)


@pytest.mark.parametrize("pair", PAIRS)
@given(data=st.data())
@fuzz(15)
def test_gae(pair, data):
    b = open_backend(pair)
    shape = data.draw(_shape(b), label="shape")
    dtype = data.draw(st.sampled_from([np.float32, np.float32, np.float64]) if b.supports_float64 else st.just(np.float32))
    names = ("rewards", "values", "next_values", "terminated", "truncated")
    arrays = [data.draw(_array(b, shape, dtype if i < 3 else np.bool_), label=n) for i, n in enumerate(names)]
    gamma, lam = data.draw(_unit, label="gamma"), data.draw(_unit, label="lam")
    out_kind = data.draw(st.sampled_from(["none", "pair", "single", "triple"]), label="out kind")
    out = None
    if out_kind == "pair":
        out = (_out(data.draw, b, shape, dtype, arrays), _out(data.draw, b, shape, dtype, arrays))
    elif out_kind == "single":
        out = _out(data.draw, b, shape, dtype, arrays)
    elif out_kind == "triple":
        out = (b.empty(shape, dtype),) * 3
    before = _hosts(arrays)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None and not isinstance(o, list)]
    out_before = _hosts(outs)
    try:
        with allowed(*names, "gamma", "lam", "out", "out[0]", "out[1]", "backend"):
            adv, ret = buffer.gae(*arrays, gamma=gamma, lam=lam, backend=b, out=out)
    except Rejected:
        _assert_same(before, arrays)
        _assert_same(out_before, outs, "out")
        return
    _assert_same(before, arrays)
    ref = _reference_inputs(arrays, dtype)
    want_adv, want_ret = buffer.gae(*ref, gamma=gamma, lam=lam, backend=REF)
    _compare(adv, want_adv, ref[:3])
    _compare(ret, want_ret, ref[:3])


@pytest.mark.parametrize("pair", PAIRS)
@given(data=st.data())
@fuzz(15)
def test_discounted_returns(pair, data):
    b = open_backend(pair)
    shape = data.draw(_shape(b), label="shape")
    dtype = data.draw(st.sampled_from([np.float32, np.float64]) if b.supports_float64 else st.just(np.float32))
    rewards = data.draw(_array(b, shape, dtype), label="rewards")
    term = data.draw(_array(b, shape, np.bool_), label="terminated")
    trunc = data.draw(_array(b, shape, np.bool_), label="truncated")
    boot_shape = data.draw(st.sampled_from([shape, shape[1:]]), label="bootstrap shape")
    boot = data.draw(_array(b, boot_shape, dtype), label="bootstrap")
    gamma = data.draw(_unit, label="gamma")
    arrays = [rewards, term, trunc, boot]
    out = _out(data.draw, b, shape, dtype, arrays)
    before, out_before = _hosts(arrays), _hosts([out] if out is not None and not isinstance(out, list) else [])
    try:
        with allowed("rewards", "terminated", "truncated", "bootstrap", "gamma", "out", "backend"):
            got = buffer.discounted_returns(rewards, term, trunc, boot, gamma=gamma, backend=b, out=out)
    except Rejected:
        _assert_same(before, arrays)
        if out_before:
            _assert_same(out_before, [out], "out")
        return
    _assert_same(before, arrays)
    ref = _reference_inputs(arrays, dtype)
    _compare(got, buffer.discounted_returns(*ref, gamma=gamma, backend=REF), [ref[0], ref[3]])


_eps = st.one_of(st.floats(0, 1), st.sampled_from([1e-8, float("nan"), float("inf"), -1e-3, "1e-8", None, False]),
                 st.just(np.float64(1e-5)))  # fmt: skip


def _backend_and_x(pair, data, shape_label):
    """The backend of ``pair`` and an input x drawn for it: 1-3 dims, float32 (float64 where the device has it)."""
    b = open_backend(pair)
    ndim = data.draw(st.integers(1, 3), label="ndim")
    shape = data.draw(_shape(b, ndim), label=shape_label)
    dtype = data.draw(st.sampled_from([np.float32, np.float64]) if b.supports_float64 else st.just(np.float32))
    return b, shape, dtype, data.draw(_array(b, shape, dtype), label="x")


@pytest.mark.parametrize("pair", PAIRS)
@given(data=st.data())
@fuzz(15)
def test_normalize(pair, data):
    b, shape, dtype, x = _backend_and_x(pair, data, "shape")
    eps = data.draw(_eps, label="eps")
    in_place = data.draw(st.booleans(), label="out=x")
    out = x if in_place and b.owns(x) and not b.immutable_arrays else _out(data.draw, b, shape, dtype, [])
    before = _hosts([x])
    out_before = _hosts([out] if out is not None and out is not x and not isinstance(out, list) else [])
    try:
        with allowed("x", "eps", "out", "backend"):
            got = buffer.normalize(x, eps, backend=b, out=out)
    except Rejected:
        _assert_same(before, [x])
        if out_before:
            _assert_same(out_before, [out], "out")
        return
    if out is not x:
        _assert_same(before, [x])
    ref = _reference_inputs([before[0]], dtype)[0]
    _compare(got, buffer.normalize(ref, eps, backend=REF), [ref])


@pytest.mark.parametrize("pair", PAIRS)
@given(data=st.data())
@fuzz(15)
def test_gather(pair, data):
    b, shape, dtype, x = _backend_and_x(pair, data, "x shape")
    m = shape[0]
    count = 3 if _compiling(b) and not long_profile() else data.draw(st.integers(0, 7))
    idx_values = data.draw(st.lists(st.one_of(st.integers(0, m - 1), st.sampled_from([-1, m, 2**31 - 1, -(2**31)])),
                                    min_size=count, max_size=count), label="indices")  # fmt: skip
    idx_dtype = data.draw(st.sampled_from([np.int32, np.int64, np.int64, np.uint32, np.float32, np.int16]))
    idx = data.draw(st.sampled_from(["native"] + [f for f in FORMS if form_available(f)]), label="indices form")
    host_idx = np.array(idx_values, np.int64).astype(idx_dtype)
    indices = (b.from_host(host_idx) if b.name != "numpy" else host_idx) if idx == "native" else as_form(host_idx, idx)
    out_shape = (count, *shape[1:])
    out = _out(data.draw, b, out_shape, dtype, [x])
    before = _hosts([x, indices])
    try:
        with allowed("x", "indices", "out", "backend"):
            got = buffer.gather(x, indices, backend=b, out=out)
    except Rejected:
        _assert_same(before, [x, indices])
        return
    _assert_same(before, [x, indices])
    ref_x, ref_idx = (np.array(a, order="C") for a in before)
    _compare(got, buffer.gather(ref_x, ref_idx, backend=REF), [ref_x])


@pytest.mark.parametrize("pair", PAIRS)
def test_normalize_of_an_empty_array_is_a_value_error(pair):
    """Found by the issue and by test_normalize: an empty float32 array on OpenCL raised pyopencl's RuntimeError
    ("Setting array from one with different strides/storage order") while being uploaded."""
    b = open_backend(pair)
    for shape in ((0,), (0, 3), (3, 0)):
        with pytest.raises(ValueError, match="^x: expected at least one element"):
            buffer.normalize(np.zeros(shape, np.float32), backend=b)


def _huge_spread(case: str) -> np.ndarray:
    """A float32 x whose sum of squared deviations (M2) passes float32's range, the reference's answer finite."""
    rng = np.random.default_rng(45)
    if case == "issue":  # M2 7.7e76
        return np.array([0, 3.4e38, 3.4e38], np.float32)
    if case == "both signs":  # differences past float32's range too (6.8e38)
        return np.array([-3.4e38, 3.4e38, -1.7e38, 1.7e38, 0.0, 1e-30, -2.5e38, 2.5e38, 3.4e38, -3.4e38], np.float32)
    if case == "wide":  # 100,000 elements, every work-group's M2 past the range; tiny elements among them
        x = rng.uniform(-3e38, 3e38, 100_000)
        x[::7] = rng.standard_normal(x[::7].size) * 1e-3
        return x.astype(np.float32)
    if case == "far":  # a mean far from 0 (2e38)
        return (2e38 + rng.uniform(-1e38, 1e38, 100_000)).astype(np.float32)
    # "sum": each element's square fits (4e34), a slice's sum may, the whole (4e39) does not
    return (rng.standard_normal(100_000) * 2e17).astype(np.float32)


HUGE_SPREADS = ["issue", "both signs", "wide", "far", "sum"]

def _assert_normalized_like_the_reference(got, x) -> None:
    got, want = np.asarray(host(got)), buffer.normalize(x, 1e-5, backend=REF)
    assert got.dtype == np.float32 and np.isfinite(want).all()
    assert np.isfinite(got).all(), "NaN/inf where the reference's float64 statistics are finite"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", HUGE_SPREADS)
@pytest.mark.parametrize("pair", PAIRS)
def test_normalize_of_values_near_float32_max(pair, case):
    """Found by test_normalize: a float32 x whose squared deviations pass float32's range. torch (and torch_compile,
    which runs the eager op on a CPU) took the statistics in float32 and returned NaN; fixed (float64 when float32
    overflows). OpenCL's kernel did too ((count, mean, M2) in REAL: inf, then NaN or zeros); fixed in float32
    (kernels/opencl/normalize.cl, PK_RESCUE: float32-only devices build it). The CUDA kernels take them in double.
    jax's statistics were right but XLA's CPU array / scalar is array * (1 / scalar), 0 past 2^126: all zeros for
    "issue", "both signs" and "wide"; fixed (portkern/backends/_jax_ops.normalize scales both sides there)."""
    b = open_backend(pair)
    x = _huge_spread(case)
    got = buffer.normalize(x, 1e-5, backend=b)
    _assert_normalized_like_the_reference(got, x)


#: (reduce_wg, reduce_chunk, reduce_vector_width) of normalize.cl: the GPU shape (work-group trees, then the
#: finalize group), chunks combined by the finalize group (7 and 100: 14,286 and 1,000 partials), chunks combined
#: in the apply pass (4096: 25 partials of 100,000 elements; tests/test_opencl_buffers.py checks which runs).
OPENCL_LAYOUTS = [(64, 0, 1), (256, 0, 1), (16, 7, 4), (64, 100, 16), (64, 4096, 8), (256, 4096, 1)]


@pytest.mark.parametrize("layout", OPENCL_LAYOUTS, ids=lambda v: "wg{}-chunk{}xvw{}".format(*v))
@pytest.mark.parametrize("pair", [p for p in PAIRS if p.values[0][0] == "opencl"])
def test_normalize_of_values_near_float32_max_in_every_opencl_layout(pair, layout):
    """The float32 rescue of every partial pass (a work-item's slice, a chunk), of the trees and the finalize group
    that combine them, and of the apply pass that combines them itself; plain and scaled partials mixed ("sum")."""
    b = open_backend(pair)
    knobs = ("reduce_wg", "reduce_chunk", "reduce_vector_width")
    saved = {k: b.knob_setting(k) for k in knobs}  # as set (tuning.TUNED included), not as in force
    try:
        b.reduce_wg, b.reduce_chunk, b.reduce_vector_width = layout
        for case in HUGE_SPREADS:
            x = _huge_spread(case)
            _assert_normalized_like_the_reference(buffer.normalize(x, 1e-5, backend=b), x)
    finally:
        for k, v in saved.items():  # the instance is shared (registry): leave its knobs as found
            setattr(b, k, v)


@pytest.mark.parametrize("pair", PAIRS)
def test_normalize_of_a_0d_array_keeps_its_shape(pair):
    """Found by test_normalize: the numpy, opencl and numba backends made a 0-d x 1-d on the way in
    (np.ascontiguousarray), so their result's shape differed from torch's and from x's."""
    b = open_backend(pair)
    got = buffer.normalize(np.array(2.5, np.float32), backend=b)
    assert tuple(got.shape) == () and np.asarray(host(got)).shape == ()


def test_a_read_only_out_is_a_value_error_naming_out():
    """Found by test_normalize (long profile): out= a read-only NumPy array on the numpy backend raised NumPy's
    "assignment destination is read-only", which names no argument."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ro = x.copy()
    ro.flags.writeable = False
    flags = np.zeros((2, 3), bool)
    for call in (lambda: buffer.normalize(ro, out=ro, backend="numpy"),
                 lambda: buffer.normalize(x, out=ro, backend="numpy"),
                 lambda: buffer.discounted_returns(x, flags, flags, x[0], gamma=0.9, out=ro, backend="numpy"),
                 lambda: buffer.gather(x, np.array([1, 0]), out=ro, backend="numpy")):
        with pytest.raises(ValueError, match=r"^out: expected a writable array"):
            call()
    np.testing.assert_array_equal(ro, x)
