"""cuda_host: the CUDA C kernels (kernels/cuda/*.cu) compiled as host C++ and run on the CPU.

A correctness harness, never a timed target: it lets a machine without a GPU run every CUDA
kernel through the same parity suite as the other backends. Each .cu file is built, as
ordinary C++ with the project's host compiler (g++, or ``$CXX``), into a shared library together
with ``kernels/cuda/host/pk_cuda_host.h``, a shim that maps CUDA's qualifiers, built-in indices,
intrinsics and math functions onto host code. A launch loops over the grid, block by block; a
block whose threads reach ``__syncthreads()`` runs phase by phase between its barriers (see the
shim). The op code is the CuPy backend's own (:class:`._cuda_kernels.CudaKernels`), so the
argument lists and launch shapes checked here are the ones CuPy sends to a GPU; every launch is
also checked against the kernel's C signature (count, scalar types, element sizes).

What it cannot tell you: warp semantics (there are none here), races within a barrier phase
(threads run in a fixed order), CUDA's math library (host libm instead: sin/cos may differ in
the last ulp, so tolerances are those of OpenCL devices), and anything about speed.
Builds use ``-ffp-contract=off`` and no fast-math, so host arithmetic rounds as NVRTC's
``--fmad=false -ftz=false`` does; they are cached on disk per (source, options, compiler) under
``$PORTKERN_CACHE_DIR`` (default ``~/.cache/portkern``). ``PORTKERN_CUDA_HOST_CXXFLAGS`` adds
flags to every build (e.g. ``-fsanitize=undefined``), and is part of the cache key.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .._kernels import kernel_dir, source_hash
from .._paths import cache_root
from ._cuda_kernels import CudaKernels
from .base import BackendUnavailable, Probe
from .registry import register

#: Host builds: C++17 as NVRTC's --std=c++17; no contraction into FMAs and no fast-math, so each
#: operation rounds once, as with --fmad=false; subnormals are kept (-ftz=false) by default on the host.
#: -O0 because this checks arithmetic, not speed: IEEE results are the same at any -O level without
#: fast-math, and -O0 builds in about half the time (a cold test run compiles some twenty files).
HOST_OPTIONS = ("-std=c++17", "-O0", "-fPIC", "-shared", "-ffp-contract=off", "-fno-fast-math",
                "-Wall", "-Wextra", "-Wno-unknown-pragmas")  # fmt: skip
_SHIM = ("host", "pk_cuda_host.h")
#: ``extern "C" __global__ void [__launch_bounds__(...)] name(`` in the preprocessed source.
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(')
_BUILD_TIMEOUT_S = 300
_MAX_ARGS = 64
_LAUNCH_LOCK = threading.Lock()  # one launch at a time: the shim's indices and scheduler are globals


class KernelBuildError(RuntimeError):
    """A CUDA kernel file failed to build as host C++; the message names the file and has the log."""


@lru_cache(maxsize=1)
def _compiler() -> tuple[tuple[str, ...], str] | str:
    """(command, version line) of the host C++ compiler ($CXX, else g++, else c++), or why there is none."""
    env = os.environ.get("CXX", "").strip()
    if env:
        cmd = tuple(shlex.split(env))
        if shutil.which(cmd[0]) is None:
            return f"$CXX={env!r} is not an executable on PATH"
    else:
        found = next((c for c in ("g++", "c++") if shutil.which(c)), None)
        if found is None:
            return "no host C++ compiler: install g++ (apt-get install g++) or set $CXX"
        cmd = (found,)
    try:
        out = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{' '.join(cmd)} --version failed: {type(exc).__name__}: {exc}".splitlines()[0]
    return cmd, (out.stdout.strip().splitlines() or ["unknown"])[0]


def _extra_flags() -> tuple[str, ...]:
    return tuple(shlex.split(os.environ.get("PORTKERN_CUDA_HOST_CXXFLAGS", "")))


def _cache_dir() -> Path:
    """Where built libraries are kept: never the checkout, so builds survive sessions but not commits."""
    root = os.environ.get("PORTKERN_CACHE_DIR") or cache_root()
    path = Path(root).expanduser() / "cuda_host"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    path = Path(tempfile.gettempdir()) / f"portkern-cuda_host-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _shim_text() -> str:
    return kernel_dir("cuda").joinpath(*_SHIM).read_text()


def _run_compiler(args: list[str], what: str, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(
            args, input=stdin, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelBuildError(f"{what}: {type(exc).__name__}: {exc}") from None
    if done.returncode != 0:
        log = "\n".join((done.stderr or done.stdout).strip().splitlines()[:60])
        raise KernelBuildError(f"{what} failed ({' '.join(args[:1])} exit {done.returncode}):\n{log}")
    return done.stdout


def build_library(filename: str, source: str, options: tuple[str, ...]) -> Path:
    """One kernel file as a shared library, built once per (shim, source, options, compiler), cached on disk.

    The file's ``extern "C" __global__`` kernels are found in its preprocessed text (the env files
    generate theirs with PK_ENV_KERNELS), and each gets two exports from the shim's
    PK_HOST_EXPORT: ``pk_host_launch_<kernel>`` and ``pk_host_signature_<kernel>``.
    """
    found = _compiler()
    if isinstance(found, str):
        raise BackendUnavailable(f"cuda_host: {found}")
    cmd, version = found
    shim = _shim_text()
    flags = HOST_OPTIONS + tuple(options) + _extra_flags()
    key = source_hash(shim + "\0" + source, (*flags, " ".join(cmd), version))
    cache = _cache_dir()
    lib = cache / f"{Path(filename).stem}-{key}.so"
    if lib.is_file():
        return lib
    pre = _run_compiler([*cmd, "-E", "-P", "-x", "c++", "-std=c++17", *options, "-"],
                        f"preprocessing {filename}", source)  # fmt: skip
    kernels = list(dict.fromkeys(_KERNEL.findall(pre)))
    if not kernels:
        raise KernelBuildError(f'{filename}: no extern "C" __global__ kernel found')
    exports = [f"PK_HOST_EXPORT({k})" for k in kernels]
    unit = "\n".join([shim, f"// ---- kernels/cuda/{filename}, as load_source gives it", source,
                      "// ---- the harness's exports", *exports, ""])  # fmt: skip
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cpp, out = Path(tmp) / f"{Path(filename).stem}.cpp", Path(tmp) / "lib.so"
        cpp.write_text(unit)
        _run_compiler(
            [*cmd, *flags, "-x", "c++", str(cpp), "-o", str(out)], f"building {filename} for the host"
        )
        os.replace(out, lib)  # atomic: concurrent sessions building the same key both end with a whole file
    return lib


class CudaHostArray:
    """Memory of the cuda_host "device": a C-contiguous NumPy buffer that only this backend reads.

    Deliberately not an ndarray (and with no ``__array__``): code that treats a device array as a
    host one fails here as it would with CuPy, instead of passing on the CPU only.
    """

    __slots__ = ("_a",)

    def __init__(self, a: np.ndarray) -> None:
        if not (isinstance(a, np.ndarray) and a.flags.c_contiguous):
            raise TypeError("CudaHostArray wraps a C-contiguous numpy.ndarray")
        self._a = a

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    flags = property(lambda self: self._a.flags)
    #: the "device pointer" a kernel gets
    ptr = property(lambda self: self._a.ctypes.data)

    def reshape(self, shape: tuple[int, ...]) -> CudaHostArray:
        return CudaHostArray(self._a.reshape(shape))

    def __len__(self) -> int:
        return len(self._a)

    def __repr__(self) -> str:
        return f"CudaHostArray(shape={self.shape}, dtype={self.dtype})"


class HostKernel:
    """One kernel of a built library: its launch export and its C signature, for checking every launch."""

    def __init__(self, lib: ctypes.CDLL, name: str, filename: str) -> None:
        try:
            self._launch = getattr(lib, f"pk_host_launch_{name}")
            sig = getattr(lib, f"pk_host_signature_{name}")
        except AttributeError:
            raise ValueError(f"kernel {name!r} is not in kernels/cuda/{filename}") from None
        self.name = name
        self._launch.restype = ctypes.c_int
        self._launch.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        kinds = ctypes.create_string_buffer(2 * _MAX_ARGS)
        sizes = (ctypes.c_uint * (2 * _MAX_ARGS))()
        sig.restype = ctypes.c_int
        count = sig(kinds, sizes, 2 * _MAX_ARGS)
        if count > _MAX_ARGS:
            raise ValueError(f"{name}: {count} parameters, more than the harness's {_MAX_ARGS}")
        k = kinds.raw
        #: per parameter: (kind, size, pointee kind, pointee size); kinds p(ointer) i u f s(truct) v(oid)
        self.params = tuple(
            (chr(k[2 * j]), sizes[2 * j], chr(k[2 * j + 1]), sizes[2 * j + 1]) for j in range(count)
        )
        self._error = lib.pk_host_error
        self._error.restype = ctypes.c_char_p

    def _arg(self, j: int, value: Any) -> tuple[int, bytes | None]:
        kind, size, pkind, psize = self.params[j]
        where = f"{self.name}: argument {j}"
        if kind == "p":
            if not isinstance(value, CudaHostArray):
                raise TypeError(
                    f"{where}: expected a cuda_host array (a pointer parameter), got {type(value).__name__}"
                )
            if pkind == "s" and value.nbytes != psize:
                raise TypeError(
                    f"{where}: expected a {psize}-byte struct, got {value.nbytes} bytes ({value.dtype})"
                )
            if pkind not in "sv" and value.dtype.itemsize != psize:
                raise TypeError(f"{where}: expected elements of {psize} bytes, got {value.dtype}")
            return value.ptr, None
        if not isinstance(value, np.generic):
            raise TypeError(
                f"{where}: expected a sized NumPy scalar (a {size}-byte {kind} parameter), got {value!r}"
            )
        got = "u" if value.dtype.kind == "b" else value.dtype.kind
        if got != kind or value.dtype.itemsize != size:
            raise TypeError(f"{where}: expected a {size}-byte scalar of kind {kind!r}, got {value.dtype}")
        return 0, value.tobytes()

    def __call__(self, grid: int, block: int, args: tuple) -> None:
        if len(args) != len(self.params):
            raise TypeError(f"{self.name}: expected {len(self.params)} arguments, got {len(args)}")
        # One 8-byte slot per argument holds its value (a pointer or a scalar's bytes); the kernel
        # gets an array of pointers to the slots, as cuLaunchKernel's kernelParams.
        slots = np.zeros(len(args), np.uint64)
        raw = slots.view(np.uint8)
        for j, value in enumerate(args):
            ptr, scalar = self._arg(j, value)
            if scalar is None:
                slots[j] = ptr
            else:
                raw[8 * j : 8 * j + len(scalar)] = np.frombuffer(scalar, np.uint8)
        pointers = slots.ctypes.data + 8 * np.arange(len(args), dtype=np.uint64)
        dims = np.array([grid, 1, 1, block, 1, 1], np.uint32)
        with _LAUNCH_LOCK:
            rc = self._launch(dims.ctypes.data, dims[3:].ctypes.data, pointers.ctypes.data)
            if rc != 0:
                raise RuntimeError(f"{self.name}: {self._error().decode(errors='replace')}")


@register
class CudaHostBackend(CudaKernels):
    """The CUDA C kernels on the host CPU: a correctness harness (parity without a GPU), never timed."""

    name = "cuda_host"
    order = 90

    @classmethod
    def probe(cls) -> Probe:
        found = _compiler()
        if isinstance(found, str):
            return Probe(False, found)
        if os.name != "posix":
            return Probe(False, "the cuda_host harness needs POSIX ucontext (Linux or macOS)")
        try:  # touch the toolchain: build and load the shim with a one-line kernel
            src = 'extern "C" __global__ void pk_probe(int *x) { x[threadIdx.x] = 1; }\n'
            kernel = HostKernel(ctypes.CDLL(str(build_library("probe.cu", src, ()))), "pk_probe", "probe.cu")
            out = CudaHostArray(np.zeros(2, np.int32))
            kernel(1, 2, (out,))
            if out._a.tolist() != [1, 1]:
                return Probe(False, f"cuda_host: the probe kernel wrote {out._a.tolist()}, expected [1, 1]")
        except Exception as exc:  # noqa: BLE001 - a probe reports, never raises
            return Probe(False, f"cuda_host: {type(exc).__name__}: {exc}".splitlines()[0])
        cmd, version = found
        return Probe(True, devices=(cls._device_label(),), simulator=True,
                     versions={"cxx": version, "cxx_command": " ".join(cmd)})  # fmt: skip

    @staticmethod
    def _device_label() -> str:
        return f"CUDA C on the host CPU ({platform.machine() or 'unknown'}): correctness harness, not timed"

    def __init__(self, device: str | None = None) -> None:
        if device not in (None, "cpu", "host"):
            raise ValueError(
                f"device: the cuda_host harness runs on the host only (None, 'cpu'), got {device!r}"
            )
        found = _compiler()
        if isinstance(found, str):
            raise BackendUnavailable(found)
        self._cxx = found
        self.device_name = self._device_label()
        self.supports_float64 = True
        # Small blocks: the tests' few dozen envs still span several blocks and a partial last one.
        # Few reduction blocks: grid-stride loops without thousands of coroutines.
        self.block_size = 16
        self.reduce_block_size = 256
        self.max_reduce_blocks = 4
        #: "ascending" or "descending": the order threads of a block run in each barrier phase. A
        #: kernel without races inside a phase gives the same bits in both (tests/test_cuda_host.py).
        self.phase_order = "ascending"

    def describe(self) -> dict[str, str]:
        return {"backend": self.name, "device": self.device_name, "cxx": self._cxx[1],
                "harness": "correctness only, not timed"}  # fmt: skip

    # ---- programs (the hooks of CudaKernels) ---------------------------------------------------
    def _build_options(self, dtype: np.dtype) -> tuple[str, ...]:
        if self.phase_order not in ("ascending", "descending"):
            raise ValueError(f"phase_order: expected 'ascending' or 'descending', got {self.phase_order!r}")
        reverse = ("-DPK_HOST_REVERSE_PHASES",) if self.phase_order == "descending" else ()
        return super()._build_options(dtype) + reverse

    def _build(self, filename: str, source: str, options: tuple[str, ...]) -> Any:
        return ctypes.CDLL(str(build_library(filename, source, options))), filename

    def _function(self, module: Any, kernel: str) -> Any:
        lib, filename = module
        return HostKernel(lib, kernel, filename)

    def _run(self, fn: Any, grid: int, block: int, args: tuple) -> None:
        fn(grid, block, args)

    # ---- arrays -------------------------------------------------------------------------------
    def zeros(self, shape, dtype):
        return CudaHostArray(np.zeros(shape, dtype=dtype))

    def empty(self, shape, dtype):
        return CudaHostArray(np.empty(shape, dtype=dtype))

    def from_host(self, a):
        return CudaHostArray(np.array(a, copy=True, order="C"))

    def to_host(self, a):
        return a._a.copy()

    def write(self, dst, src):
        src = np.asarray(src)
        if src.shape != dst.shape:
            raise ValueError(f"write: expected shape {dst.shape}, got {src.shape}")
        np.copyto(dst._a, src, casting="same_kind")

    @classmethod
    def owns(cls, a: Any) -> bool:
        return isinstance(a, CudaHostArray)

    # ---- environments: also check the buffers every step (a wrong one would corrupt this process) --
    def env_step(self, spec, bufs, actions, params, seed, max_steps, autoreset):
        self._check_env(spec, bufs, params)
        super().env_step(spec, bufs, actions, params, seed, max_steps, autoreset)
