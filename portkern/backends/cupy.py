"""The CuPy backend: CUDA C kernels (kernels/cuda/*.cu) built with NVRTC, launched through CuPy."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._cuda_common import one_line, resolve_device, version_text
from ._cuda_kernels import COPY_UNITS, DTYPE_OPTIONS, REAL_OPTIONS, CudaKernels
from ._cuda_tools import compile_nvrtc
from .base import Probe
from .registry import register

try:
    import cupy
    from cupy.cuda.function import Module
except ImportError:
    cupy = None
    _IMPORT_ERROR = "cupy is not installed: pip install 'portkern[cuda]'"
except Exception as exc:  # a broken install (wrong CUDA wheel, ABI mismatch) must not break portkern
    cupy = None
    _IMPORT_ERROR = f"cupy failed to import: {type(exc).__name__}: {exc}".splitlines()[0]
else:
    _IMPORT_ERROR = ""

#: Contraction off and subnormals kept, so every kernel rounds exactly as the NumPy reference does.
BASE_OPTIONS = ("--fmad=false", "-ftz=false", "--std=c++17")
#: What each build adds to BASE_OPTIONS (tests/test_nvrtc_compile.py builds every kernel with these).
_DTYPE_OPTIONS = REAL_OPTIONS
_COPY_UNITS = COPY_UNITS
_COPY_OPTIONS = DTYPE_OPTIONS


def _device_names() -> list[str]:
    rt = cupy.cuda.runtime
    return [rt.getDeviceProperties(i)["name"].decode() for i in range(rt.getDeviceCount())]


@register
class CupyBackend(CudaKernels):
    name = "cupy"
    order = 20
    extra = "cuda"
    import_error = _IMPORT_ERROR

    @classmethod
    def probe(cls) -> Probe:
        if cupy is None:
            return Probe(False, _IMPORT_ERROR)
        if not cupy.is_available():
            try:
                count = cupy.cuda.runtime.getDeviceCount()
                why = f"cudaGetDeviceCount() found {count} devices"
            except Exception as exc:
                why = one_line(exc)
            return Probe(False, f"CuPy installed but no CUDA GPU/driver found: {why}")
        rt = cupy.cuda.runtime
        versions = {"cupy": cupy.__version__, "cuda_driver": version_text(rt.driverGetVersion()),
                    "cuda_runtime": version_text(rt.runtimeGetVersion())}  # fmt: skip
        return Probe(True, devices=tuple(_device_names()), versions=versions)

    def __init__(self, device: str | None = None) -> None:
        self.device_id = resolve_device(device, _device_names(), cupy.cuda.runtime.getDevice())
        self._device = cupy.cuda.Device(self.device_id)
        props = cupy.cuda.runtime.getDeviceProperties(self.device_id)
        self.device_name = props["name"].decode()
        self.compute_capability = f"{props['major']}.{props['minor']}"
        self._arch = 10 * int(props["major"]) + int(props["minor"])
        self.supports_float64 = True
        #: threads per block for elementwise and per-env kernels; set it to re-tune.
        self.block_size = min(256, int(props["maxThreadsPerBlock"]))
        #: threads per block of normalize's reductions (PK_WG, a power of two).
        self.reduce_block_size = 256
        # Enough blocks to fill the device a few times over.
        self.max_reduce_blocks = 8 * int(props["multiProcessorCount"])

    def describe(self) -> dict[str, str]:
        rt = cupy.cuda.runtime
        return {"backend": self.name, "device": self.device_name, "vendor": "NVIDIA",
                "compute_capability": self.compute_capability,
                "cuda_driver": version_text(rt.driverGetVersion()),
                "cuda_runtime": version_text(rt.runtimeGetVersion()), "cupy": cupy.__version__}  # fmt: skip

    def device_kind(self) -> str:
        # CuPy drives CUDA (or HIP) devices only: GPUs, integrated ones included.
        return "gpu"

    def memory_limits(self) -> tuple[int | None, int | None]:
        # CUDA has no per-allocation limit below the device's memory; total is what cudaMemGetInfo says.
        _free, total = self._device.mem_info
        return None, int(total)

    def synchronize(self) -> None:
        self._device.synchronize()

    # ---- programs (the hooks of CudaKernels) ---------------------------------------------------
    def _device_key(self) -> Any:
        return self.device_id  # two GPUs of one model share a name, not their loaded modules

    def _build_options(self, dtype: np.dtype) -> tuple[str, ...]:
        return BASE_OPTIONS + super()._build_options(dtype)

    def _build(self, filename: str, source: str, options: tuple[str, ...]) -> Any:
        # NVRTC directly and Module.load, not cupy.RawModule: RawModule appends -ftz=true.
        with self._device:
            module = Module()
            module.load(compile_nvrtc(source, options, self._arch, filename))
        return module

    def _function(self, module: Any, kernel: str) -> Any:
        with self._device:
            return module.get_function(kernel)

    def _run(self, fn: Any, grid: int, block: int, args: tuple) -> None:
        with self._device:
            fn((grid,), (block,), args)

    def _empty(self, shape, dtype):
        with self._device:
            return cupy.empty(shape, dtype=dtype)

    # ---- arrays -------------------------------------------------------------------------------
    def zeros(self, shape, dtype):
        with self._device:
            return cupy.zeros(shape, dtype=dtype)

    def empty(self, shape, dtype):
        with self._device:
            return cupy.empty(shape, dtype=dtype)

    def from_host(self, a):
        with self._device:
            return cupy.array(a, copy=True)

    def to_host(self, a):
        with self._device:
            return cupy.asnumpy(a)

    def write(self, dst, src):
        with self._device:
            dst.set(np.ascontiguousarray(src, dtype=dst.dtype))

    @classmethod
    def owns(cls, a: Any) -> bool:
        return cupy is not None and isinstance(a, cupy.ndarray)

    @classmethod
    def array_device(cls, a: Any) -> str:
        return f"cuda:{a.device.id}"

    def holds(self, a: Any) -> bool:
        # An array on another GPU cannot be passed to this device's kernels.
        return self.owns(a) and a.device.id == self.device_id

    # ---- validation helpers: CuPy's own reductions, on the device ------------------------------
    def index_range(self, indices):
        with self._device:
            lo, hi = cupy.stack((indices.min(), indices.max())).get()
        return int(lo), int(hi)

    def all_finite(self, a):
        with self._device:
            return bool(cupy.isfinite(a).all())
