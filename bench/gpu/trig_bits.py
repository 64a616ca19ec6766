"""pk_sin, pk_cos and pk_sincos (kernels/cuda/pk_common.cuh) against CUDA's sinf, cosf and sincosf, bit for bit, on
an NVIDIA GPU; and Numba-CUDA's (check_numba: the toolkit's sin and cos against math.sin and math.cos).

The env kernels' float sin and cos on NVIDIA GPUs are sinf, cosf and sincosf below 105615 and, above it, a
register-only Payne-Hanek reduction made to give libdevice's, followed by libdevice's polynomials (no stack frame: pk_common.cuh says
why). One kernel computes both for 2^24 float bit patterns spread evenly over every sign and exponent (the low bits
pseudo-random) and the edges (105615 and its neighbours, the first floats above it, each binade's first and last
float from there up, the largest float, zeros, infinities, NaNs), built as the CuPy backend builds its kernels
(NVRTC with its options, then Module.load: cupy.RawModule would add -ftz=true), and counts every result whose bits
differ. Exit status 1 on any.

    python3 bench/gpu/trig_bits.py [--log2 24]

bench/gpu/gpu_bench.py runs it as the CUDA family's trig_bits section, whose failure fails that process. Without a
GPU the kernel is built through NVRTC and the result says the check did not run (tests/test_cuda_trig.py builds it
so on every CI run, and checks the reduction's accuracy on the host).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from portkern._kernels import load_source
from portkern.backends._cuda_kernels import REAL_OPTIONS
from portkern.backends._cuda_tools import compile_nvrtc, supported_archs
from portkern.backends.cupy import BASE_OPTIONS

#: The CuPy backend's options for a float32 env kernel.
OPTIONS = BASE_OPTIONS + REAL_OPTIONS[np.dtype(np.float32)]
LARGE_BITS = 0x47CE4780  # 105615.0f, where libdevice's slow reduction starts

_KERNEL = r"""
// One input a thread: pk_sin, pk_cos, pk_sincos against sinf, cosf, sincosf. A mismatch counts, and the first
// cap of them leave their input's bits and which of the four differed (bits 0-3: sin, cos, sincos's sin, its cos).
extern "C" __global__ void pk_trig_bits(const uint *__restrict__ bits, int n, uint *__restrict__ count,
                                        uint *__restrict__ bad, int cap) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = __uint_as_float(bits[i]);
    float s, c, rs, rc;
    pk_sincos(x, &s, &c);
    sincosf(x, &rs, &rc);
    const uint miss = (__float_as_uint(pk_sin(x)) != __float_as_uint(sinf(x)) ? 1u : 0u) |
                      (__float_as_uint(pk_cos(x)) != __float_as_uint(cosf(x)) ? 2u : 0u) |
                      (__float_as_uint(s) != __float_as_uint(rs) ? 4u : 0u) |
                      (__float_as_uint(c) != __float_as_uint(rc) ? 8u : 0u);
    if (miss) {
        const uint k = atomicAdd(count, 1u);
        if (k < (uint)cap) {
            bad[2 * k] = bits[i];
            bad[2 * k + 1] = miss;
        }
    }
}
"""
_FUNCTIONS = ("sin", "cos", "sincos.sin", "sincos.cos")


def source() -> str:
    """pk_common.cuh as the backends build it (includes inlined), then the check's kernel."""
    return load_source("cuda", "pk_common.cuh") + _KERNEL


def inputs(n: int) -> np.ndarray:
    """``n`` (a power of two) bit patterns spread evenly over all 2^32 (the top log2(n) bits counting, the rest a
    hash of the count), then the edges."""
    shift = 32 - (n.bit_length() - 1)
    k = np.arange(n, dtype=np.uint64)
    low = (k * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - shift) if shift else np.zeros_like(k)
    spread = ((k << np.uint64(shift)) | low).astype(np.uint32)
    exps = np.arange((LARGE_BITS >> 23) + 1, 255, dtype=np.uint32) << np.uint32(23)
    edges = np.concatenate([
        np.arange(LARGE_BITS - 16, LARGE_BITS + 4096, dtype=np.uint32), exps, exps - np.uint32(1),
        np.array([0, 0x7F7FFFFF, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF], np.uint32),
    ])  # fmt: skip
    edges = np.concatenate([edges, edges | np.uint32(0x80000000)])
    return np.concatenate([spread, edges])


def check(n: int = 1 << 24, cap: int = 64) -> dict[str, Any]:
    """Launch the kernel on the default GPU; raise AssertionError, naming inputs, on any mismatch. Without a GPU
    (CuPy missing or no device), build it through NVRTC and return ``not_applicable``."""
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any reason there is no GPU here
        arch = max(a for a in supported_archs() if a <= 90)
        image = compile_nvrtc(source(), OPTIONS, arch, "trig_bits.cu")
        why = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        return {"not_applicable": f"no CUDA GPU ({why}): the kernel built through NVRTC only",
                "nvrtc_build": f"sm_{arch}, {len(image)} bytes"}  # fmt: skip
    from cupy.cuda.function import Module

    t0 = time.perf_counter()
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    arch = 10 * int(props["major"]) + int(props["minor"])
    module = Module()
    module.load(compile_nvrtc(source(), OPTIONS, arch, "trig_bits.cu"))
    fn = module.get_function("pk_trig_bits")
    host = inputs(n)
    bits = cupy.asarray(host)
    count, bad = cupy.zeros(1, cupy.uint32), cupy.zeros(2 * cap, cupy.uint32)
    fn(((host.size + 255) // 256,), (256,), (bits, np.int32(host.size), count, bad, np.int32(cap)))
    dev.synchronize()
    total = int(count.get()[0])
    first = bad.get().reshape(-1, 2)[: min(total, cap)]
    result = {"inputs": int(host.size), "mismatches": total, "device": props["name"].decode(), "arch": f"sm_{arch}",
              "options": list(OPTIONS), "seconds": round(time.perf_counter() - t0, 3)}  # fmt: skip
    if total:
        shown = [f"{int(b):#010x} ({np.uint32(b).view(np.float32)!r}: "
                 f"{', '.join(f for i, f in enumerate(_FUNCTIONS) if int(m) >> i & 1)})" for b, m in first[:8]]  # fmt: skip
        raise AssertionError(f"TRIG BITS MISMATCH: pk_sin/pk_cos/pk_sincos differ from sinf/cosf/sincosf on {total} "
                             f"of {host.size} inputs on {result['device']} ({result['arch']}); first: "
                             + "; ".join(shown))  # fmt: skip
    return result


def numba_kernel(sin: Any, cos: Any) -> Any:
    """check_numba's kernel as a Python function (tests/test_cuda_trig.py compiles it to PTX without a GPU):
    counts the inputs x[i] where sin or cos differ in their bits from math.sin or math.cos."""
    import math

    from numba import cuda
    from numba.cuda import libdevice

    def pk_trig_bits_numba(x, count):
        i = cuda.grid(1)
        if i < x.size:
            v = x[i]
            if (libdevice.float_as_int(sin(v)) != libdevice.float_as_int(math.sin(v))
                    or libdevice.float_as_int(cos(v)) != libdevice.float_as_int(math.cos(v))):  # fmt: skip
                cuda.atomic.add(count, 0, 1)

    return pk_trig_bits_numba


def check_numba(n: int = 1 << 22) -> dict[str, Any]:
    """The same for Numba-CUDA: the toolkit's float32 sin and cos (portkern/backends/_numba/common.py, trig32)
    against math.sin and math.cos (libdevice's sinf and cosf) in one Numba kernel; AssertionError on any
    mismatch. Without a GPU (or in Numba's simulator, where both are Python's): ``not_applicable``."""
    import numba
    from numba import cuda

    if numba.config.ENABLE_CUDASIM or not cuda.is_available():
        return {"not_applicable": "no CUDA GPU for Numba (or its simulator, where both sides are Python's math)"}
    from portkern.backends._numba.common import toolkit

    k = toolkit("float32")
    pk_trig_bits_numba = cuda.jit(numba_kernel(k.sin, k.cos))
    t0 = time.perf_counter()
    host = inputs(n).view(np.float32)
    count = cuda.to_device(np.zeros(1, np.uint32))
    pk_trig_bits_numba[(host.size + 255) // 256, 256](cuda.to_device(host), count)
    total = int(count.copy_to_host()[0])
    result = {"inputs": int(host.size), "mismatches": total, "seconds": round(time.perf_counter() - t0, 3)}
    if total:
        raise AssertionError(f"TRIG BITS MISMATCH (Numba): the toolkit's sin/cos differ from math.sin/math.cos on "
                             f"{total} of {host.size} inputs")  # fmt: skip
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log2", type=int, default=24, help="inputs spread over all 2^32 bit patterns (log2)")
    args = ap.parse_args(argv)
    try:
        result = {"cuda_c": check(1 << args.log2), "numba": check_numba(1 << min(args.log2, 22))}
    except AssertionError as exc:
        print(exc)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
