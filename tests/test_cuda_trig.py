"""pk_sin, pk_cos and pk_sincos of pk_common.cuh on NVIDIA GPUs: their large-argument path and the frame it saves.

NVIDIA builds send |x| >= 105615 to pk_trig_reduce, a register-only Payne-Hanek reduction made to give what
libdevice's own slow path gives, then to sinf / cosf / sincosf of the reduced argument. Here that path is built on
the host (-DPK_TRIG_HOST_TEST, the host's sinf and cosf standing in for CUDA's polynomials) and checked against
NumPy's float64 sin and cos; then the reason for it all: nvcc gives every env kernel no stack frame. That the
results are CUDA's sinf, cosf and sincosf bit for bit is checked on a GPU only: bench/gpu/trig_bits.py (run by
bench/gpu/gpu_bench.py's CUDA family).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from portkern._kernels import load_source
from portkern.backends import cuda_host
from portkern.backends._cuda_tools import compile_nvrtc, nvrtc_library, supported_archs
from portkern.backends.cupy import BASE_OPTIONS
from portkern.portability import port_check
from portkern.toolchains import toolchain_tools

ROOT = Path(__file__).resolve().parent.parent
LARGE = np.float32(105615.0)  # libdevice's threshold of its slow reduction

_EVAL = r"""
extern "C" void pk_eval(const float *x, long n, float *s, float *c, float *ss, float *cc, unsigned *q, float *r) {
    for (long k = 0; k < n; ++k) {
        s[k] = pk_sin(x[k]);
        c[k] = pk_cos(x[k]);
        pk_sincos(x[k], &ss[k], &cc[k]);
        r[k] = 0.0f;
        q[k] = std::fabs(x[k]) >= PK_TRIG_LARGE ? pk_trig_reduce(x[k], r[k]) : 0u;
    }
}
extern "C" void plain_eval(const float *x, long n, float *s, float *c, float *ss, float *cc) {
    for (long k = 0; k < n; ++k) {
        s[k] = sinf(x[k]);
        c[k] = cosf(x[k]);
        sincosf(x[k], &ss[k], &cc[k]);
    }
}
"""

#: A broken word index (j off by one): the tests below must fail on it, or they test nothing.
_WORD_INDEX = "const uint j = e >> 5, sh = e & 31u;"
_BROKEN_INDEX = "const uint j = (e >> 5) ^ 1u, sh = e & 31u;"


def _build(tmp_path: Path, common: str | None = None) -> ctypes.CDLL:
    """pk_common.cuh with -DPK_TRIG_HOST_TEST as host C++ (the cuda_host harness's shim, compiler and IEEE flags,
    optimised: millions of calls), its sinf, cosf and sincosf the host's."""
    found = cuda_host._compiler()
    if isinstance(found, str):
        pytest.skip(found)
    cmd, _ = found
    common = load_source("cuda", "pk_common.cuh") if common is None else common
    unit = "\n".join([cuda_host._shim_text(), "#define PK_TRIG_HOST_TEST 1", common, _EVAL])  # fmt: skip
    name = f"trig-host-{len(list(tmp_path.glob('*.so')))}"
    cpp, lib = tmp_path / f"{name}.cpp", tmp_path / f"{name}.so"
    cpp.write_text(unit)
    cuda_host._run_compiler([*cmd, *cuda_host.HOST_OPTIONS, "-O2", "-x", "c++", str(cpp), "-o", str(lib)], name)
    return ctypes.CDLL(str(lib))


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def _eval(lib: ctypes.CDLL, fn: str, x: np.ndarray) -> list[np.ndarray]:
    """sin, cos, sincos's sin and cos of x (and, from pk_eval, pk_trig_reduce's q and r)."""
    x = np.ascontiguousarray(x, np.float32)
    outs = [np.empty_like(x) for _ in range(4)]
    if fn == "pk_eval":
        outs += [np.empty(x.shape, np.uint32), np.empty_like(x)]
    getattr(lib, fn)(_ptr(x), ctypes.c_long(x.size), *(_ptr(o) for o in outs))
    return outs


def large_floats(stride: int = 113) -> np.ndarray:
    """Every stride-th float32 from 105615 to the largest finite one, both signs, and the edges: 105615 and the
    float below it, each power of two and binade's last float, the largest float, the infinities and NaNs."""
    lo, hi = int(LARGE.view(np.uint32)), int(np.float32(np.finfo(np.float32).max).view(np.uint32))
    bits = [np.arange(lo, hi + 1, stride, dtype=np.uint32), np.arange(lo, lo + 4096, dtype=np.uint32)]
    exps = np.arange((lo >> 23) + 1, 255, dtype=np.uint32) << 23
    bits += [exps, exps - 1, exps + 1, np.array([lo - 1, hi, 0x7F800000, 0x7FC00000, 0x7FC12345], np.uint32)]
    pos = np.unique(np.concatenate(bits))
    return np.concatenate([pos, pos | np.uint32(0x80000000)]).view(np.float32)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 steps (0 for two NaNs, huge for a NaN against a number)."""
    def key(a: np.ndarray) -> np.ndarray:
        i = a.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    d = np.abs(key(got) - key(want))
    both = np.isnan(got) & np.isnan(want)
    return np.where(both, 0, np.where(np.isnan(got) | np.isnan(want), 1 << 40, d))


#: Within this many float32 steps of sin and cos rounded from float64 (NumPy's libm). r carries the double product
#: rounded to float (1/2 step of r, up to 1 step of sin r where it is just below a power of two) and the host's
#: sinf its own (under 1 step): 2, CUDA's documented bound for sinf and cosf (the sweep's worst is 2 with the host's
#: sinf). A quadrant, sign or word slip is off by far more (the broken word index).
BOUND = 2


def _accuracy(lib: ctypes.CDLL, x: np.ndarray) -> dict[str, int]:
    s, c, ss, cc, _q, r = _eval(lib, "pk_eval", x)
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want_s, want_c = np.sin(x64).astype(np.float32), np.cos(x64).astype(np.float32)
    finite = np.isfinite(x)
    worst = {name: int(_ulps(got, want).max()) for name, got, want in
             (("sin", s, want_s), ("cos", c, want_c), ("sincos.s", ss, want_s), ("sincos.c", cc, want_c))}
    worst["|r| over pi/4"] = int(np.count_nonzero(np.abs(r[finite]) > np.float32(np.pi / 4)))
    return worst


@pytest.fixture(scope="module")
def host_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return _build(tmp_path_factory.mktemp("trig"))


@pytest.fixture(scope="module")
def sweep() -> np.ndarray:
    return large_floats()


def test_large_arguments_are_within_two_ulp_of_float64(host_lib: ctypes.CDLL, sweep: np.ndarray) -> None:
    assert sweep.size > 16_000_000
    worst = _accuracy(host_lib, sweep)
    assert max(worst[k] for k in ("sin", "cos", "sincos.s", "sincos.c")) <= BOUND, worst
    assert worst["|r| over pi/4"] == 0, worst


def test_inf_and_nan_give_nan(host_lib: ctypes.CDLL) -> None:
    x = np.array([np.inf, -np.inf, np.nan, -np.nan], np.float32)
    assert all(np.isnan(o).all() for o in _eval(host_lib, "pk_eval", x)[:4])


def _differ(a: list[np.ndarray], b: list[np.ndarray]) -> int:
    """How many results differ in their bits (two NaNs are the same: a GPU makes every NaN one)."""
    return sum(int(np.count_nonzero((u.view(np.uint32) != v.view(np.uint32)) & ~(np.isnan(u) & np.isnan(v))))
               for u, v in zip(a, b, strict=True))  # fmt: skip


def test_small_arguments_are_the_plain_calls(host_lib: ctypes.CDLL) -> None:
    # below 105615 (and NaN) pk_sin, pk_cos and pk_sincos are sinf, cosf and sincosf themselves
    x = np.random.default_rng(0).uniform(-105615, 105615, 200_000).astype(np.float32)
    below = np.nextafter(LARGE, np.float32(0))
    x = np.concatenate([x, np.array([below, -below, 0.0, -0.0, np.nan], np.float32)])
    assert _differ(_eval(host_lib, "pk_eval", x)[:4], _eval(host_lib, "plain_eval", x)) == 0


def test_a_broken_word_index_fails_the_accuracy_check(tmp_path: Path, sweep: np.ndarray) -> None:
    common = load_source("cuda", "pk_common.cuh")
    assert common.count(_WORD_INDEX) == 1
    x = sweep[::64]
    worst = _accuracy(_build(tmp_path, common=common.replace(_WORD_INDEX, _BROKEN_INDEX)), x)
    assert min(worst[k] for k in ("sin", "cos", "sincos.s", "sincos.c")) > 1000 * BOUND, worst


# ---- the stack frame -------------------------------------------------------------------------------------------
#: Every env kernel file: their float trig is pk_sin / pk_cos / pk_sincos (what the frame test below measures).
ENV_FILES = ("acrobot.cu", "cartpole.cu", "chain.cu", "mountain_car.cu", "mountain_car_continuous.cu",
             "pendulum.cu")  # fmt: skip


@pytest.mark.parametrize("name", ENV_FILES)
def test_env_files_call_no_float_trig_of_their_own(name: str) -> None:
    text = (ROOT / "kernels" / "cuda" / name).read_text()
    code = "\n".join(line.split("//")[0] for line in text.splitlines())
    assert not re.findall(r"(?<![\w.])(sin|cos|sincos|sinf|cosf|sincosf)\s*\(", code)


@pytest.mark.slow
def test_nvcc_gives_every_env_kernel_no_stack_frame() -> None:
    """ptxas -v through `portkern port-check`'s own jobs (the random and the MLP builds, float and double, sm_80 and
    sm_90): no stack frame and no spill in any env kernel, the 32-byte frame of libdevice's reduction included."""
    tool = toolchain_tools(["nvcc"])["nvcc"]
    if not tool:
        if os.environ.get("CI") == "true":
            pytest.fail(f"nvcc: {tool.missing()}")
        pytest.skip(f"nvcc: {tool.missing()}")
    jobs = [j for j in port_check.project_jobs(["sm_80", "sm_90"], ["float32", "float64"])
            if j.toolchain == "nvcc" and j.file in ENV_FILES]  # fmt: skip
    assert jobs
    rows, _ = port_check.run_jobs(jobs, workers=2)
    bad = [f"{r['target']} {r['dtype']} {r['kernel']}: builds={r['builds']} spills={r.get('spills')} "
           f"stack={r.get('scratch_bytes')} {r.get('error', '')}" for r in rows
           if not r["builds"] or r.get("spills") or r.get("scratch_bytes")]  # fmt: skip
    assert len(rows) >= len(ENV_FILES) * 2 * 2 * 4 and not bad, "\n".join(bad)


# ---- the GPU check's kernel builds here ------------------------------------------------------------------------
def _trig_bits():
    spec = importlib.util.spec_from_file_location("trig_bits", ROOT / "bench" / "gpu" / "trig_bits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_gpu_check_builds_through_nvrtc_with_the_backend_options() -> None:
    if not nvrtc_library():
        pytest.fail(f"NVRTC is needed to build the GPU check: {nvrtc_library().how}")
    mod = _trig_bits()
    image = compile_nvrtc(mod.source(), mod.OPTIONS, max(a for a in supported_archs() if a <= 90), "trig_bits.cu")
    assert image[:4] == b"\x7fELF" and b"pk_trig_bits" in image
    assert mod.OPTIONS[: len(BASE_OPTIONS)] == BASE_OPTIONS and "-DREAL=float" in mod.OPTIONS
    x = mod.inputs(1 << 12)
    assert x.dtype == np.uint32 and {0x7F800000, 0xFF800000, 0x7FC00000, 0x47CE4780, 0x7F7FFFFF} <= set(x.tolist())
    # no GPU here: the check says so instead of passing
    result = mod.check(1 << 12)
    assert "not_applicable" in result or result["mismatches"] == 0
    assert "not_applicable" in mod.check_numba(1 << 12)  # Numba's simulator here: both sides are Python's


# ---- the same for Numba-CUDA (portkern/backends/_numba/common.py, trig32) ---------------------------------------
def _numba_trig32():
    """trig32 as plain Python on NumPy scalars (the simulator's way): the host's sin and cos for sincosf."""
    import math

    from portkern.backends._numba.common import _plain, _plain_mul, trig32

    return trig32(_plain, lambda x: np.float32(x).view(np.uint32),
                  lambda r: (np.float32(math.sin(r)), np.float32(math.cos(r))), _plain_mul)  # fmt: skip


def test_numba_reduction_is_the_cuda_c_one(host_lib: ctypes.CDLL, sweep: np.ndarray) -> None:
    """Numba's reduction gives pk_trig_reduce's quadrant and reduced argument, bit for bit (two writings of one
    algorithm), and its sin and cos (the host's for the polynomials) are within BOUND of float64."""
    _sin, _cos, reduce = _numba_trig32()
    x = sweep[:: max(1, sweep.size // 20_000)]
    x = x[np.isfinite(x) & (np.abs(x) >= LARGE)]
    assert x.size > 15_000
    *_, q, r = _eval(host_lib, "pk_eval", x)
    got = [reduce(v) for v in x]
    assert all(int(gq) == int(wq) & 3 for (gq, _), wq in zip(got, q, strict=True))
    assert np.array_equal(np.array([gr for _, gr in got], np.float32).view(np.uint32), r.view(np.uint32))
    ns = np.array([_sin(v) for v in x], np.float32)
    nc = np.array([_cos(v) for v in x], np.float32)
    x64 = x.astype(np.float64)
    assert int(_ulps(ns, np.sin(x64).astype(np.float32)).max()) <= BOUND
    assert int(_ulps(nc, np.cos(x64).astype(np.float32)).max()) <= BOUND


@pytest.mark.slow
@pytest.mark.parametrize("which", ["toolkit", "math"])
def test_numba_trig_leaves_no_stack_frame(which: str, tmp_path: Path) -> None:
    """A rollout-like loop (sin and cos, then a division) through Numba-CUDA's NVVM and ptxas for sm_90: the toolkit's
    sin/cos (what the env and policy code call) leave no stack frame; math.sin/math.cos, the same loop, do."""
    from portkern.backends._cuda_tools import find_nvcc

    found = find_nvcc()
    if not found:
        pytest.fail("nvcc's wheel (ptxas) is needed: pip install nvidia-cuda-nvcc")
    ptxas = str(Path(found.path).with_name("ptxas"))
    script = tmp_path / "frame.py"
    script.write_text(f"""
import math, subprocess, sys
from types import SimpleNamespace
import numba.cuda.dispatcher as dispatcher
from numba import cuda, float32, int32
from portkern.backends._numba.common import toolkit
dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=(9, 0))  # no GPU here
k = toolkit("float32")
sin, cos, cosf = (k.sin, k.cos, k.cosf) if {which!r} == "toolkit" else (math.sin, math.cos, math.cos)
T = k.T
def kern(a, b, o, n):
    i = cuda.grid(1)
    if i < a.size:
        x = a[i]
        y = b[i]
        for t in range(n):
            x = (x + T(sin(x)) + T(cos(x)) + cosf(y)) / y
        o[i] = x
ptx, _ = cuda.compile_ptx(kern, (float32[:], float32[:], float32[:], int32), cc=(9, 0))
if {which!r} == "toolkit":  # the GPU check's Numba kernel (bench/gpu/trig_bits.py) compiles too
    import importlib.util
    from numba import uint32
    spec = importlib.util.spec_from_file_location("trig_bits", {str(ROOT / "bench" / "gpu" / "trig_bits.py")!r})
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "pk_trig_bits_numba" in cuda.compile_ptx(mod.numba_kernel(sin, cos), (float32[:], uint32[:]), cc=(9, 0))[0]
r = subprocess.run([{ptxas!r}, "-arch=sm_90", "-v", "-", "-o", "/dev/null"], input=ptx, capture_output=True, text=True)
print(r.returncode, [ln.strip() for ln in r.stderr.splitlines() if "stack frame" in ln])
""")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    frames = [int(m) for m in re.findall(r"(\d+) bytes stack frame", res.stdout)]
    assert frames, res.stdout
    assert (max(frames) == 0) if which == "toolkit" else (max(frames) >= 28), res.stdout
