"""The OpenCL buffer ops in every layout their knobs select (what ``portkern tune`` sweeps) on every
OpenCL CPU driver: gae, discounted returns and gather bit for bit against the reference, normalize
within the parity tolerance; bad knob values rejected by name; every layout clean under Oclgrind."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from portkern import buffer
from portkern.backends import get_backend, probe
from portkern.backends import numpy as npb

#: (scan_vector_width, scan_vectors_per_item): the GPU shape, partial and whole blocks, each width.
SCAN_LAYOUTS = [(1, 1), (2, 3), (4, 1), (8, 4), (16, 2), (8, 128)]
#: (reduce_chunk, reduce_vector_width): the GPU shape, chunks shorter than a vector step, longer ones.
NORM_LAYOUTS = [(0, 1), (1, 8), (7, 4), (100, 16), (4096, 8), (4096, 1)]
#: (rows per work-item, vector width, row as one vector): the last is ignored by the GPU shape (rows 0) and by
#: rows that are not 8, 16, 32 or 64 bytes (gather.cl, PK_GROWVEC).
GATHER_LAYOUTS = [(0, 1, 0), (1, 1, 0), (3, 2, 0), (16, 4, 0), (5, 16, 0), (0, 1, 1), (1, 1, 1), (3, 2, 1), (16, 4, 1)]


def _gather_id(x: tuple[int, int, int]) -> str:
    """A gather layout's test id."""
    return f"rows{x[0]}xvw{x[1]}" + ("-rowvec" if x[2] else "")


TOL = {"float32": 1e-5, "float64": 1e-12}


def _devices() -> list:
    p = probe("opencl")
    if not p.available:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"opencl: {p.reason}"), id="opencl")]
    platforms = []
    for label in p.devices:
        platform = label.split(": ", 1)[0]
        if "oclgrind" not in platform.lower() and platform not in platforms:
            platforms.append(platform)
    return [pytest.param(pl, id=pl.split()[0].lower()) for pl in platforms]


@pytest.fixture(params=_devices())
def ocl(request):
    b = get_backend("opencl", request.param)
    knobs = ("scan_vector_width", "scan_vectors_per_item", "reduce_chunk", "reduce_vector_width",
             "gather_rows_per_item", "gather_vector_width", "gather_prefetch", "gather_row_vector")  # fmt: skip
    saved = {k: getattr(b, k) for k in knobs}
    yield b
    for k, v in saved.items():  # the instance is shared (registry): leave its knobs as found
        setattr(b, k, v)


def _rollout(shape, dtype, rng, specials=False):
    r, v, nv = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    if specials:  # NaN and inf propagate exactly as in the reference (masks multiply, never branch)
        r.flat[:: max(1, r.size // 5)] = np.inf
        nv.flat[1 :: max(1, nv.size // 3)] = np.nan
    return r, v, nv, rng.random(shape) < 0.1, rng.random(shape) < 0.05


def _dtypes(b):
    return ["float32", "float64"] if b.supports_float64 else ["float32"]


def _fitting(b, lanes, dtypes):
    """The dtypes whose ``lanes``-wide vectors this device's compiler builds (OpenCLBackend.max_vector_bytes:
    a PoCL whose LLVM targets a CPU without AVX-512 on one whose kernel library uses it); a layout that
    fits none is skipped, saying why, never run to a compiler crash."""
    fits = [d for d in dtypes if b.max_vector_bytes is None or lanes * np.dtype(d).itemsize <= b.max_vector_bytes]
    if not fits:
        pytest.skip(f"{b.device_name} builds {b.max_vector_bytes * 8}-bit vectors at most: {lanes} lanes of "
                    f"{', '.join(dtypes)} do not fit")
    return fits


def _lanes(b, dtype, want=16):
    """The widest vector width up to ``want`` that this device builds for ``dtype``."""
    cap = b.max_vector_bytes
    return want if cap is None else min(want, cap // np.dtype(dtype).itemsize)


@pytest.mark.parametrize("layout", SCAN_LAYOUTS, ids=lambda x: f"vw{x[0]}xnv{x[1]}")
@pytest.mark.parametrize("shape", [(1, 1), (7, 1037), (33, 64), (4, 2050)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_gae_every_layout_is_bit_identical_to_the_reference(ocl, layout, shape, rng):
    ocl.scan_vector_width, ocl.scan_vectors_per_item = layout
    for dtype in _fitting(ocl, layout[0], _dtypes(ocl)):
        for specials in (False, True):
            host = _rollout(shape, dtype, rng, specials)
            want = npb.gae(*host, 0.99, 0.95)
            got = buffer.gae(*host, gamma=0.99, lam=0.95, backend=ocl)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(ocl.to_host(g), w)


@pytest.mark.parametrize("layout", SCAN_LAYOUTS, ids=lambda x: f"vw{x[0]}xnv{x[1]}")
@pytest.mark.parametrize("per_step", [False, True], ids=["bootstrap-N", "bootstrap-TN"])
@pytest.mark.parametrize("shape", [(1, 1), (7, 1037), (33, 64), (4, 2050)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_discounted_returns_every_layout_is_bit_identical_to_the_reference(ocl, layout, per_step, shape, rng):
    ocl.scan_vector_width, ocl.scan_vectors_per_item = layout
    for dtype in _fitting(ocl, layout[0], _dtypes(ocl)):
        for specials in (False, True):
            r, _, nv, term, trunc = _rollout(shape, dtype, rng, specials)
            boot = nv if per_step else nv[-1].copy()
            want = npb.discounted_returns(r, term, trunc, boot, 0.97)
            got = buffer.discounted_returns(r, term, trunc, boot, gamma=0.97, backend=ocl)
            np.testing.assert_array_equal(ocl.to_host(got), want)


@pytest.mark.parametrize("layout", NORM_LAYOUTS, ids=lambda x: f"chunk{x[0]}xvw{x[1]}")
@pytest.mark.parametrize("size", [1, 255, 257, 4097, 100_003])
def test_normalize_every_layout_matches_the_reference(ocl, layout, size, rng):
    ocl.reduce_chunk, ocl.reduce_vector_width = layout
    for dtype in _fitting(ocl, layout[1] if layout[0] else 1, _dtypes(ocl)):
        for offset in (5.0, 1000.0):  # a mean far from 0 in float32: the reduction must not cancel
            x = (rng.standard_normal(size) * 3 + offset).astype(dtype)
            want = npb.normalize(x, 1e-8)
            got = ocl.to_host(buffer.normalize(x, backend=ocl))
            # The mean itself is rounded to dtype (in the reference too): one ulp of it, over std 3.
            atol = TOL[dtype] + 2 * float(np.spacing(np.dtype(dtype).type(offset))) / 3
            np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=atol)


def test_normalize_chunk_layout_of_a_constant_is_zero_not_nan(ocl):
    ocl.reduce_chunk, ocl.reduce_vector_width = 64, 8
    out = ocl.to_host(buffer.normalize(np.full(1000, 3.5, np.float32), backend=ocl))
    np.testing.assert_array_equal(out, np.zeros(1000, np.float32))


@pytest.mark.parametrize(
    "chunk, size, combined_in_apply",
    [(4096, 1_000_003, True), (4096, 4097, True), (7, 100_003, False), (64, 1000, False), (0, 100_003, False)],
)
def test_normalize_combines_the_partials_in_the_apply_pass_only_where_they_are_few(
    ocl, monkeypatch, rng, chunk, size, combined_in_apply
):
    """The chunk layout's apply pass combines the partials itself (no finalize launch) where their reads, 2 x
    groups^2, stay under a quarter of the elements (245 and 2 groups above); a finer chunk (14,287 and 16
    groups) and the work-group tree keep the finalize group. Either way the reference's result, with a mean
    far from 0 (1000 over a spread of 3), where a plain sum of the partial means would round the spread away."""
    ocl.reduce_chunk, ocl.reduce_vector_width = chunk, 8 if chunk else 1
    names: list[str] = []
    fetch = ocl._kernel

    def spy(filename, name, options):
        names.append(name)
        return fetch(filename, name, options)

    monkeypatch.setattr(ocl, "_kernel", spy)
    x = (rng.standard_normal(size) * 3 + 1000.0).astype(np.float32)
    got = ocl.to_host(buffer.normalize(x, backend=ocl))
    assert ("pk_normalize_apply_partials" in names) == combined_in_apply, names
    assert ("pk_normalize_finalize" in names) != combined_in_apply, names
    atol = TOL["float32"] + 2 * float(np.spacing(np.float32(1000.0))) / 3
    np.testing.assert_allclose(got, npb.normalize(x, 1e-8), rtol=TOL["float32"], atol=atol)
    const = ocl.to_host(buffer.normalize(np.full(size, 3.5, np.float32), backend=ocl))
    np.testing.assert_array_equal(const, np.zeros(size, np.float32))  # zero spread: 0, never NaN


@pytest.mark.parametrize("layout", GATHER_LAYOUTS, ids=_gather_id)
@pytest.mark.parametrize(  # rows of 8 to 128 bytes: every row vector (uint2 to uint16), and one too long for any
    "row", [(), (2,), (3,), (4,), (5,), (8,), (16,), (17,), (2, 3), (70,)], ids=lambda r: "x".join(map(str, r)) or "scalar"
)
def test_gather_every_layout_copies_rows_bit_for_bit(ocl, layout, row, rng):
    ocl.gather_rows_per_item, ocl.gather_vector_width, ocl.gather_row_vector = layout
    # gather copies bits: float64 needs no cl_khr_fp64
    for dtype in _fitting(ocl, layout[1] if layout[0] else 1, ("float32", "float64")):
        x = rng.standard_normal((300, *row)).astype(dtype)
        for idt, prefetch in ((np.int32, 0), (np.int64, 0), (np.int64, 2), (np.int32, 16)):
            ocl.gather_prefetch = prefetch  # rows ahead: inside, at and past a work-item's rows
            idx = np.concatenate([rng.permutation(300)[:76], [299]]).astype(idt)
            got = ocl.to_host(buffer.gather(x, idx, backend=ocl))
            np.testing.assert_array_equal(got, x[idx])


@pytest.mark.parametrize("layout", GATHER_LAYOUTS, ids=_gather_id)
@pytest.mark.parametrize("bad", [-1, 300, 2**40], ids=["negative", "past-the-end", "far-past"])
def test_gather_refuses_a_bad_index_in_every_layout_without_a_range_pass(ocl, layout, bad, rng, monkeypatch):
    """The checked kernels test each index as they read it (no range reduction before the launch: a call with
    good indices never runs index_range), flag a bad one among good ones wherever it sits, with or without the
    prefetch of rows ahead (a bad row ahead is clamped, never read), and the public call words the error with
    the range found; the backend op itself raises IndexError."""
    ocl.gather_rows_per_item, ocl.gather_vector_width, ocl.gather_row_vector = layout
    _fitting(ocl, layout[1] if layout[0] else 1, ("float32",))  # skips a width this device cannot build
    assert ocl.gather_checks_indices()
    x = rng.standard_normal((300, 4)).astype(np.float32)
    ranges = []
    real_range = ocl.index_range
    monkeypatch.setattr(ocl, "index_range", lambda i: ranges.append(1) or real_range(i))
    for prefetch in (0, 2, 16):
        ocl.gather_prefetch = prefetch
        good = rng.permutation(300)[:77].astype(np.int64)
        np.testing.assert_array_equal(ocl.to_host(buffer.gather(x, good, backend=ocl)), x[good])
        assert not ranges  # good indices: no range pass
        for where in (0, 40, 76):
            idx = good.copy()
            idx[where] = bad
            want = f"got values in \\[{int(idx.min())}, {int(idx.max())}\\]"
            with pytest.raises(ValueError, match=f"indices: expected values in \\[0, 299\\].*{want}"):
                buffer.gather(x, idx, backend=ocl)
            with pytest.raises(IndexError, match="indices: a value outside"):
                ocl.gather(ocl.from_host(x), ocl.from_host(idx), ocl.empty((77, 4), np.float32))
        assert len(ranges) == 3  # the range computed only to word each refusal
        ranges.clear()
        np.testing.assert_array_equal(ocl.to_host(buffer.gather(x, good, backend=ocl)), x[good])  # flag reset


def test_gather_row_vector_copies_a_row_as_one_element_only_where_it_fits(ocl, monkeypatch, rng):
    """gather_row_vector = 1 builds REAL as the row's own unsigned vector (rows of 8-64 bytes the device's
    compiler builds) and says so (PK_GROWVEC=1); any other row, or 0, keeps the element copy."""
    built = []
    fetch = ocl._kernel
    monkeypatch.setattr(ocl, "_kernel", lambda f, name, opts: built.append(dict(o[2:].split("=", 1) for o in opts))
                        or fetch(f, name, opts))  # fmt: skip
    ocl.gather_rows_per_item, ocl.gather_vector_width, ocl.gather_prefetch = 4, 1, 0
    cap = ocl.max_vector_bytes
    cases = [(1, (4,), "float32", "uint4"), (1, (2,), "float64", "uint4"), (1, (2,), "float32", "uint2"),
             (1, (8,), "float32", "uint8"), (1, (16,), "float32", "uint16" if cap is None or cap >= 64 else "uint"),
             (1, (3,), "float32", "uint"), (1, (), "float32", "uint"), (0, (4,), "float32", "uint")]  # fmt: skip
    for rowvec, row, dtype, real in cases:
        ocl.gather_row_vector = rowvec
        x = rng.standard_normal((50, *row)).astype(dtype)
        idx = rng.permutation(50)[:20]
        built.clear()
        np.testing.assert_array_equal(ocl.to_host(buffer.gather(x, idx, backend=ocl)), x[idx])
        (opts,) = [o for o in built if "PK_ROWS" in o]
        fits = real.startswith("uint") and real != "uint"
        assert (opts["REAL"], opts["PK_GROWVEC"]) == (real if fits else ("ulong" if dtype == "float64" else "uint"),
                                                     "1" if fits else "0"), (rowvec, row, dtype)  # fmt: skip
        if fits:
            assert opts["PK_ROW_LEN"] == "1"


def test_scalar_arguments_are_declared_once_and_still_change_every_call(ocl, rng, monkeypatch):
    """A kernel object's scalar dtypes are declared to pyopencl at its first launch (the fast invoker): every
    argument a launch passes is a buffer or a NumPy scalar (a Python number would have no declared dtype), and a
    scalar that changes between calls of the same kernel (gamma, eps, gather's stamp) takes its new value."""
    import pyopencl as cl

    seen = []
    enqueue = ocl._enqueue
    monkeypatch.setattr(ocl, "_enqueue", lambda k, gs, ls, args: seen.append(args) or enqueue(k, gs, ls, args))
    host = _rollout((9, 70), np.float32, rng)
    for gamma, lam in ((0.99, 0.95), (0.5, 0.8), (0.99, 0.95)):
        got = buffer.gae(*host, gamma=gamma, lam=lam, backend=ocl)
        for g, w in zip(got, npb.gae(*host, gamma, lam)):
            np.testing.assert_array_equal(ocl.to_host(g), w)
    x = rng.standard_normal(5000).astype(np.float32)
    for eps in (1e-8, 10.0, 1e-8):
        want = npb.normalize(x, eps)
        np.testing.assert_allclose(ocl.to_host(buffer.normalize(x, eps, backend=ocl)), want, rtol=1e-5, atol=1e-6)
    rows = rng.standard_normal((40, 4)).astype(np.float32)
    for _ in range(3):  # a new stamp every call: a bad index is still caught after good calls
        idx = rng.permutation(40)[:17]
        np.testing.assert_array_equal(ocl.to_host(buffer.gather(rows, idx, backend=ocl)), rows[idx])
    with pytest.raises(ValueError, match="indices"):
        buffer.gather(rows, np.array([3, 40]), backend=ocl)
    # The env kernels too: a step, and rollouts whose every launch moves the time window (t0, t_count), whose
    # three data paths must agree step for step.
    from portkern import step
    from portkern.policy import RandomPolicy

    rolls = {}
    for path, spl in (("fused", None), ("fused", 3), ("device", None)):
        env = step.make("CartPole-v1", num_envs=37, backend=ocl)
        env.reset(seed=5)
        env.step(np.ones(37, dtype=np.int64))
        got = env.rollout(10, RandomPolicy(), path=path, steps_per_launch=spl)
        rolls[path, spl] = [ocl.to_host(getattr(got, f)).copy() for f in ("obs", "actions", "rewards", "terminated")]
    for other in list(rolls)[1:]:
        for a, b in zip(rolls[("fused", None)], rolls[other]):
            np.testing.assert_array_equal(a, b)
    assert seen
    odd = [type(a).__name__ for args in seen for a in args if not isinstance(a, (np.generic, cl.MemoryObjectHolder))]
    assert not odd, odd


@pytest.mark.parametrize(
    "knob, value",
    [("scan_vector_width", 3), ("scan_vector_width", True), ("scan_vectors_per_item", 0),
     ("scan_vectors_per_item", 2.0), ("reduce_chunk", -1), ("reduce_vector_width", 32),
     ("gather_rows_per_item", None), ("gather_vector_width", 0), ("gather_row_vector", 2),
     ("gather_row_vector", True)],
)  # fmt: skip
def test_bad_layout_knob_is_rejected_by_name(ocl, knob, value):
    setattr(ocl, knob, value)
    op = {"scan": "gae", "reduce": "normalize", "gather": "gather"}[knob.split("_")[0]]
    with pytest.raises(ValueError, match=knob):
        _run(ocl, op)


def test_scan_block_over_8192_envs_is_rejected(ocl):
    ocl.scan_vector_width, ocl.scan_vectors_per_item = 16, 1024
    with pytest.raises(ValueError, match="scan_vectors_per_item"):
        _run(ocl, "gae")


@pytest.mark.parametrize("op", ["gae", "discounted_returns"])
def test_a_work_group_too_large_for_its_private_carry_is_refused_not_launched(ocl, op):
    """256 work-items x 8192 float32 carries each (8 MiB per group) crashed PoCL's CPU driver in `portkern tune`
    (a segmentation fault inside the launch); the backend refuses it with the limit named, writes nothing, and
    runs the same layout with a work-group that fits."""
    saved = ocl.local_size
    try:
        lanes = _lanes(ocl, "float32")  # 16 where the device builds it: 8192 float32 carries per work-item
        ocl.scan_vector_width, ocl.scan_vectors_per_item, ocl.local_size = lanes, 8192 // lanes, 256
        rng = np.random.default_rng(1)
        r, v, nv, term, trunc = _rollout((2, 2 * 8192), "float32", rng)
        dev = [ocl.from_host(a) for a in (r, v, nv, term, trunc)]
        out = ocl.zeros(r.shape, np.float32)
        out2 = ocl.zeros(r.shape, np.float32)
        call = (lambda: ocl.gae(*dev, out, out2, 0.99, 0.95)) if op == "gae" else \
            (lambda: ocl.discounted_returns(dev[0], dev[3], dev[4], ocl.from_host(nv[0].copy()), out, 0.99))
        with pytest.raises(ValueError, match=r"local_size: 256 work-items .* exceed 2 MiB per work-group; use a "
                                             r"local_size of at most 64"):
            call()
        assert not ocl.to_host(out).any()  # nothing launched
        ocl.local_size = 64
        call()
        want = np.zeros(r.shape, np.float32)
        if op == "gae":
            npb.NumpyBackend().gae(r, v, nv, term, trunc, want, np.zeros_like(want), 0.99, 0.95)
        else:
            npb.NumpyBackend().discounted_returns(r, term, trunc, nv[0].copy(), want, 0.99)
        np.testing.assert_array_equal(ocl.to_host(out), want)
    finally:
        ocl.local_size = saved


def test_a_tuned_work_group_too_large_for_float64_carry_is_halved_not_refused(ocl, monkeypatch):
    """A tuned local_size measured in float32 (64 x 32 KiB) holds twice the carry in float64: the default is
    halved until it fits, and the result is the reference's, bit for bit."""
    from portkern import tuning

    if not ocl.supports_float64:
        pytest.skip(f"{ocl.device_name}: no float64")
    lanes = _lanes(ocl, "float64")  # 16 where the device builds it: 8192 float64 carries per work-item
    ocl.scan_vector_width, ocl.scan_vectors_per_item = lanes, 8192 // lanes
    assert ocl.knob_setting("local_size") == tuning.TUNED
    monkeypatch.setattr(ocl, "_ranges", lambda n, kernel=None: ((-(-n // 64) * 64,), (64,)))  # a tuned 64
    r, v, nv, term, trunc = _rollout((3, 3 * 8192), "float64", np.random.default_rng(2))
    got = buffer.gae(r, v, nv, term, trunc, gamma=0.99, lam=0.95, backend=ocl)
    want = buffer.gae(r, v, nv, term, trunc, gamma=0.99, lam=0.95, backend="numpy")
    for g, w in zip(got, want):
        np.testing.assert_array_equal(ocl.to_host(g), w)


def _run(b, op):
    rng = np.random.default_rng(0)
    if op == "gae":
        return buffer.gae(*_rollout((3, 40), "float32", rng), gamma=0.9, lam=0.9, backend=b)
    if op == "normalize":
        return buffer.normalize(np.ones(40, np.float32), backend=b)
    return buffer.gather(np.ones((40, 4), np.float32), np.arange(4), backend=b)


def test_layout_knobs_default_to_the_tuned_entry_else_the_gpu_shape(ocl, monkeypatch):
    from portkern import tuning

    for k in ("scan_vector_width", "scan_vectors_per_item", "reduce_chunk", "gather_rows_per_item"):
        setattr(ocl, k, tuning.TUNED)
    d = ocl.tuned_defaults
    monkeypatch.setattr(d, "sources", [])
    monkeypatch.setattr(d, "_memo", {})
    assert (
        ocl._buffer_knob("gae", "scan_vector_width"),
        ocl._buffer_knob("gae", "scan_vectors_per_item"),
    ) == (1, 1)
    assert ocl._buffer_knob("normalize", "reduce_chunk") == 0
    assert ocl._buffer_knob("gather", "gather_rows_per_item") == 0
    ocl.gather_prefetch = ocl.gather_row_vector = tuning.TUNED
    assert ocl._buffer_knob("gather", "gather_prefetch") == 0
    assert ocl._buffer_knob("gather", "gather_row_vector") == 0
    entry = {"kernels": {"gae": {"scan_vector_width": 8, "scan_vectors_per_item": 32}}}
    monkeypatch.setattr(d, "sources", [("cache", entry)])
    monkeypatch.setattr(d, "_memo", {})
    assert ocl._buffer_knob("gae", "scan_vector_width") == 8
    assert ocl._buffer_knob("gae", "scan_vectors_per_item") == 32
    assert ocl._buffer_knob("discounted_returns", "scan_vectors_per_item") == 1  # per op


# ---- Oclgrind: every layout above, tiny sizes, in a subprocess on the simulator -----------------


def test_every_layout_runs_clean_under_oclgrind(tmp_path: Path) -> None:
    from tests.test_oclgrind import INSTALL, _oclgrind_platform, run_clean_under_oclgrind

    if os.environ.get("PORTKERN_SKIP_OCLGRIND") == "1":
        pytest.skip("PORTKERN_SKIP_OCLGRIND=1")
    cmd = [sys.executable, str(Path(__file__).resolve())]
    if not _oclgrind_platform():
        pytest.fail(f"Oclgrind is not installed: {INSTALL} (or set PORTKERN_SKIP_OCLGRIND=1)")
    proc = run_clean_under_oclgrind(cmd, tmp_path)
    assert "ran every layout" in proc.stdout, proc.stdout + proc.stderr


def _drive() -> None:
    from portkern.backends.opencl import OpenCLBackend

    be = OpenCLBackend(os.environ["PORTKERN_DEVICE"])
    assert "oclgrind" in be.device_name.lower(), be.device_name
    keep: list[object] = []

    def dev(a: np.ndarray) -> object:
        # Uploaded arrays only, kept alive to the end: see tests/test_oclgrind.py (Oclgrind 21.10
        # misreads filled and reused buffers as uninitialised).
        keep.append(be.from_host(a))
        return keep[-1]

    be.zeros = lambda shape, dtype: dev(np.zeros(shape, dtype))
    be.reduce_wg = 16  # the simulator interprets every work-item: keep reductions small
    rng = np.random.default_rng(0)
    t, n = 3, 37  # a whole block and a partial one for the wider layouts
    for dt in (np.float32, np.float64):
        r, v, nv = (rng.standard_normal((t, n)).astype(dt) for _ in range(3))
        te, tr = rng.random((t, n)) < 0.3, rng.random((t, n)) < 0.3
        args = [dev(a) for a in (r, v, nv, te, tr)]
        for vw, nvec in ((2, 3), (4, 1), (8, 4), (16, 2)):
            be.scan_vector_width, be.scan_vectors_per_item = vw, nvec
            adv, ret, out = (dev(np.zeros((t, n), dt)) for _ in range(3))
            be.gae(*args, adv, ret, 0.99, 0.95)
            assert np.array_equal(be.to_host(adv), npb.gae(r, v, nv, te, tr, 0.99, 0.95)[0]), (vw, nvec)
            for boot in (nv[-1].copy(), nv):
                be.discounted_returns(args[0], args[3], args[4], dev(boot), out, 0.99)
                assert np.array_equal(be.to_host(out), npb.discounted_returns(r, te, tr, boot, 0.99))
        x = rng.standard_normal(300).astype(dt)
        for chunk, vw in ((7, 4), (64, 16), (5, 1), (150, 4)):  # 64 and 150: the apply pass combines the partials
            be.reduce_chunk, be.reduce_vector_width = chunk, vw
            y = dev(np.zeros(300, dt))
            be.normalize(dev(x), y, 1e-8)
            assert np.allclose(be.to_host(y), npb.normalize(x, 1e-8), rtol=1e-5, atol=1e-6), (chunk, vw)
        for row in ((4,), (3,), (70,)):
            rows = rng.standard_normal((7, *row)).astype(dt)
            for rpi, vw, pf, rv in ((1, 1, 0, 0), (3, 2, 1, 0), (16, 4, 2, 0), (1, 1, 0, 1), (3, 1, 1, 1), (16, 1, 2, 1)):
                be.gather_rows_per_item, be.gather_vector_width, be.gather_prefetch = rpi, vw, pf
                be.gather_row_vector = rv  # rows of 4 float32 (uint4) and float64 (uint8): one vector each
                for idt in (np.int64, np.int32):
                    idx = np.array([6, 0, 3, 3, 5], dtype=idt)
                    got = dev(np.zeros((5, *row), dt))
                    be.gather(dev(rows), dev(idx), got)
                    assert np.array_equal(be.to_host(got), rows[idx]), (row, rpi, vw, rv)
                    # A bad index among good ones (and in the prefetch's reach): flagged, never read.
                    for bad in (-1, 7, 2**40):
                        try:
                            be.gather(dev(rows), dev(np.array([6, 0, bad, 3, 5], dtype=np.int64)), got)
                        except IndexError:
                            continue
                        raise AssertionError(f"index {bad} not refused {(row, rpi, vw, pf, rv)}")
    be.synchronize()
    print("ran every layout")


if __name__ == "__main__":
    _drive()
