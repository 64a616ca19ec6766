"""The CuPy backend: CUDA C kernels (kernels/cuda/*.cu) built with NVRTC, launched through CuPy."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._kernels import load_source, source_hash
from ..envs.base import EnvSpec
from .base import AUTORESET_MODES, Backend, BackendUnavailable, EnvBuffers, Probe
from .registry import register

try:
    import cupy
    from cupy.cuda.function import Module
    from cupy_backends.cuda.libs import nvrtc
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
_DTYPE_OPTIONS = {
    np.dtype(np.float32): ("-DREAL=float",),
    np.dtype(np.float64): ("-DREAL=double", "-DPK_DOUBLE=1"),
}
#: gather only copies bits, so it runs any element type through the build of a type of the same size.
_COPY_UNITS = {8: np.dtype(np.float64), 4: np.dtype(np.float32), 1: np.dtype(np.uint8)}
_COPY_OPTIONS = {**_DTYPE_OPTIONS, np.dtype(np.uint8): ("-DREAL=uchar",)}
_MAX_PARTIALS = 1024  # normalize's per-block partials; the scratch is allocated once at this size

#: (device id, source hash, options) -> loaded module, shared by every instance.
_MODULES: dict[tuple[int, str, tuple[str, ...]], Any] = {}


def compile_nvrtc(source: str, options: tuple[str, ...], arch: int, name: str = "kernel.cu") -> bytes:
    """NVRTC build: a cubin for ``sm_<arch>``, or PTX for the newest older arch this NVRTC knows.

    Not ``cupy.RawModule(code=...)``: CuPy appends ``-ftz=true`` to every NVRTC build, which
    flushes float32 subnormals the reference keeps; the options here are exactly ours.
    """
    archs = nvrtc.getSupportedArchs()
    cubin = arch in archs
    target = f"-arch=sm_{arch}" if cubin else f"-arch=compute_{max(a for a in archs if a <= arch)}"
    prog = nvrtc.createProgram(source, name, (), ())
    try:
        try:
            nvrtc.compileProgram(prog, [*options, target])
        except nvrtc.NVRTCError:
            log = " ".join(nvrtc.getProgramLog(prog).split())
            raise RuntimeError(f"NVRTC could not build {name} with {' '.join(options)}: {log}") from None
        return nvrtc.getCUBIN(prog) if cubin else nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _device_names() -> list[str]:
    rt = cupy.cuda.runtime
    return [rt.getDeviceProperties(i)["name"].decode() for i in range(rt.getDeviceCount())]


def _resolve_device(device: str | None, names: list[str]) -> int:
    """``None`` -> the current device; ``"cuda:1"`` or ``"1"`` -> that index; else a name substring."""
    if device is None:
        return cupy.cuda.runtime.getDevice()
    key = device.strip().lower()
    key = key.removeprefix("cuda:")
    listing = ", ".join(f"{i}: {n}" for i, n in enumerate(names))
    if key.isdigit():
        if int(key) < len(names):
            return int(key)
        raise ValueError(f"device: no CUDA device {device!r}; devices here: {listing}")
    for i, n in enumerate(names):
        if key and key in n.lower():
            return i
    raise ValueError(f"device: no CUDA device matches {device!r}; devices here: {listing}")


def _check(a: Any, what: str) -> None:
    if not isinstance(a, cupy.ndarray):
        raise TypeError(f"{what}: expected a cupy array, got {type(a).__module__}.{type(a).__name__}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what}: expected a C-contiguous array")


def _check_as(a: Any, what: str, dtype: Any, shape: tuple[int, ...] | None = None) -> None:
    _check(a, what)
    if a.dtype != np.dtype(dtype):
        raise TypeError(f"{what}: expected dtype {np.dtype(dtype)}, got {a.dtype}")
    if shape is not None and tuple(a.shape) != shape:
        raise ValueError(f"{what}: expected shape {shape}, got {tuple(a.shape)}")


@register
class CupyBackend(Backend):
    name = "cupy"
    extra = "cuda"

    @classmethod
    def probe(cls) -> Probe:
        if cupy is None:
            return Probe(False, _IMPORT_ERROR)
        if not cupy.is_available():
            try:
                count = cupy.cuda.runtime.getDeviceCount()
                why = f"cudaGetDeviceCount() found {count} devices"
            except Exception as exc:
                why = _one_line(exc)
            return Probe(False, f"CuPy installed but no CUDA GPU/driver found: {why}")
        rt = cupy.cuda.runtime
        versions = {"cupy": cupy.__version__, "cuda_driver": _version(rt.driverGetVersion()),
                    "cuda_runtime": _version(rt.runtimeGetVersion())}  # fmt: skip
        return Probe(True, devices=tuple(_device_names()), versions=versions)

    def __init__(self, device: str | None = None) -> None:
        if cupy is None:
            raise BackendUnavailable(_IMPORT_ERROR)
        self.device_id = _resolve_device(device, _device_names())
        self._device = cupy.cuda.Device(self.device_id)
        props = cupy.cuda.runtime.getDeviceProperties(self.device_id)
        self.device_name = props["name"].decode()
        self.compute_capability = f"{props['major']}.{props['minor']}"
        self._arch = 10 * int(props["major"]) + int(props["minor"])
        self.supports_float64 = True
        self._sm_count = int(props["multiProcessorCount"])
        #: threads per block for elementwise and per-env kernels; set it to re-tune.
        self.block_size: int = min(256, int(props["maxThreadsPerBlock"]))
        #: threads per block of normalize's reductions (PK_WG, a power of two).
        self.reduce_block_size: int = 256
        self._kernels: dict[tuple[str, str, np.dtype, tuple[str, ...]], Any] = {}
        self._params: dict[tuple[bytes, str], Any] = {}
        self._actions: dict[tuple[int, str], Any] = {}
        self._scratch: dict[str, Any] = {}

    def describe(self) -> dict[str, str]:
        rt = cupy.cuda.runtime
        return {"backend": self.name, "device": self.device_name, "vendor": "NVIDIA",
                "compute_capability": self.compute_capability,
                "cuda_driver": _version(rt.driverGetVersion()),
                "cuda_runtime": _version(rt.runtimeGetVersion()), "cupy": cupy.__version__}  # fmt: skip

    def synchronize(self) -> None:
        self._device.synchronize()

    # ---- programs -----------------------------------------------------------------------------
    def _kernel(self, filename: str, kernel: str, dtype: np.dtype, extra: tuple[str, ...] = ()) -> Any:
        key = (filename, kernel, dtype, extra)
        fn = self._kernels.get(key)
        if fn is None:
            source = load_source("cuda", filename)
            options = BASE_OPTIONS + _COPY_OPTIONS[dtype] + extra
            mkey = (self.device_id, source_hash(source, options), options)
            with self._device:
                module = _MODULES.get(mkey)
                if module is None:
                    module = Module()
                    module.load(compile_nvrtc(source, options, self._arch, filename))
                    _MODULES[mkey] = module
                fn = self._kernels[key] = module.get_function(kernel)
        return fn

    def _launch(self, fn: Any, work_items: int, args: tuple, block: int | None = None) -> None:
        block = block or self.block_size
        if work_items == 0:
            return
        with self._device:
            fn(((work_items + block - 1) // block,), (block,), args)

    def _device_params(self, params: np.ndarray) -> Any:
        key = (params.tobytes(), params.dtype.str)
        arr = self._params.get(key)
        if arr is None:
            if len(self._params) >= 64:  # param sweeps: keep the cache bounded
                self._params.clear()
            with self._device:
                arr = self._params[key] = cupy.asarray(params)
        return arr

    # ---- arrays -------------------------------------------------------------------------------
    def zeros(self, shape, dtype):
        with self._device:
            return cupy.zeros(shape, dtype=dtype)

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
    def for_array(cls, a: Any) -> Backend:
        from .registry import get_backend

        inst = get_backend(cls.name)
        if getattr(inst, "device_id", None) == a.device.id:
            return inst
        return get_backend(cls.name, f"cuda:{a.device.id}")

    def _check_array(self, a, what, dtype=None, shape=None):
        if dtype is None:
            _check(a, what)
        else:
            _check_as(a, what, dtype, shape)

    # ---- environments ------------------------------------------------------------------------
    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        fn = self._kernel(f"{spec.kernel}.cu", f"pk_{spec.kernel}_reset", params.dtype)
        n = bufs.steps.shape[0]
        args = (*bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs,
                self._device_params(params), np.uint32(seed), np.int32(bool(fresh)), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        fn = self._kernel(f"{spec.kernel}.cu", f"pk_{spec.kernel}_step", params.dtype)
        n = bufs.steps.shape[0]
        act_dtype = np.dtype(np.int32 if spec.is_discrete else np.float32)
        if isinstance(actions, np.ndarray):  # host actions go through one reused device buffer
            buf = self._actions.get((n, act_dtype.str))
            if buf is None:
                buf = self._actions[(n, act_dtype.str)] = self.zeros((n,), act_dtype)
            self.write(buf, actions)
            actions = buf
        if actions.dtype != act_dtype or actions.shape != (n,):
            raise TypeError(
                f"actions: expected a [{n}] {act_dtype} array, got {actions.shape} {actions.dtype}"
            )
        args = (*bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, actions, bufs.obs, bufs.final_obs,
                bufs.reward, bufs.terminated, bufs.truncated, self._device_params(params), np.uint32(seed),
                np.int32(max_steps), np.int32(AUTORESET_MODES[autoreset]), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        n, steps, dt = bufs.steps.shape[0], out.steps, params.dtype
        fn = self._kernel(f"{spec.kernel}.cu", f"pk_{spec.kernel}_rollout", dt)
        head = (*bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs, bufs.final_obs, bufs.reward,
                bufs.terminated, bufs.truncated, self._device_params(params), policy_params,
                np.int32(policy.kind), np.int32(hidden), out.obs, out.actions, out.rewards, out.terminated,
                out.truncated, out.final_obs, np.uint32(seed), np.int32(max_steps),
                np.int32(AUTORESET_MODES[autoreset]))  # fmt: skip
        # ceil(T / steps_per_launch) launches; each moves the time window (t0, t_count) on.
        for t0 in range(0, steps, steps_per_launch):
            count = min(steps_per_launch, steps - t0)
            self._launch(fn, n, (*head, np.int32(t0), np.int32(count), np.int32(n)))

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, d = self._check_mlp(policy_params, obs, hidden, out_dim)
        with self._device:
            out = cupy.empty((n, out_dim), np.float32)
        fn = self._kernel("mlp.cu", "pk_mlp_forward", obs.dtype)
        args = (policy_params, np.int32(hidden), np.int32(d), np.int32(out_dim), obs, out, np.int32(n))
        self._launch(fn, n, args)
        return out

    # ---- rollout buffer ops ------------------------------------------------------------------
    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        for a, what in ((rewards, "rewards"), (values, "values"), (next_values, "next_values"),
                        (terminated, "terminated"), (truncated, "truncated"),
                        (advantages, "advantages"), (returns, "returns")):  # fmt: skip
            _check(a, what)
        T = rewards.dtype.type
        steps, n = rewards.shape
        fn = self._kernel("gae.cu", "pk_gae", rewards.dtype)
        args = (rewards, values, next_values, terminated, truncated, advantages, returns,
                T(gamma), T(T(gamma) * T(lam)), np.int32(steps), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        for a, what in ((rewards, "rewards"), (terminated, "terminated"), (truncated, "truncated"),
                        (bootstrap, "bootstrap"), (out, "out")):  # fmt: skip
            _check(a, what)
        T = rewards.dtype.type
        steps, n = rewards.shape
        fn = self._kernel("discounted_returns.cu", "pk_discounted_returns", rewards.dtype)
        args = (rewards, terminated, truncated, bootstrap, out, T(gamma),
                np.int32(bootstrap.ndim == 2), np.int32(steps), np.int32(n))  # fmt: skip
        self._launch(fn, n, args)

    def normalize(self, x, out, eps):
        _check(x, "x")
        _check(out, "out")
        T = x.dtype.type
        n = x.size
        if n == 0:
            return
        wg = self.reduce_block_size
        extra = (f"-DPK_WG={wg}",)
        partial_fn = self._kernel("normalize.cu", "pk_normalize_partial", x.dtype, extra)
        finalize_fn = self._kernel("normalize.cu", "pk_normalize_finalize", x.dtype, extra)
        apply_fn = self._kernel("normalize.cu", "pk_normalize_apply", x.dtype, extra)
        if "pcount" not in self._scratch:  # partials, allocated once at the largest block count
            self._scratch["pcount"] = self.zeros((_MAX_PARTIALS,), np.uint32)
            self._scratch["pmean"] = self.zeros((_MAX_PARTIALS,), np.float64)
            self._scratch["pm2"] = self.zeros((_MAX_PARTIALS,), np.float64)
        stats = self._scratch.get(x.dtype.str)
        if stats is None:
            stats = self._scratch[x.dtype.str] = self.zeros((2,), x.dtype)
        pcount, pmean, pm2 = self._scratch["pcount"], self._scratch["pmean"], self._scratch["pm2"]
        # Enough blocks to fill the device a few times over; each thread folds a grid-stride slice.
        blocks = max(1, min((n + wg - 1) // wg, 8 * self._sm_count, _MAX_PARTIALS))
        with self._device:
            partial_fn((blocks,), (wg,), (x, pcount, pmean, pm2, np.int32(n)))
            finalize_fn((1,), (wg,), (pcount, pmean, pm2, stats, np.int32(blocks)))
        self._launch(apply_fn, n, (x, out, stats, T(eps), np.int32(n)))

    def gather(self, x, indices, out):
        _check(x, "x")
        _check(indices, "indices")
        _check(out, "out")
        kernel = {np.dtype(np.int64): "pk_gather", np.dtype(np.int32): "pk_gather_i32"}.get(indices.dtype)
        if kernel is None:
            raise TypeError(f"indices: expected int64 or int32, got {indices.dtype}")
        unit = next(u for u in _COPY_UNITS if x.dtype.itemsize % u == 0)
        row_len = math.prod(x.shape[1:]) * x.dtype.itemsize // unit
        total = row_len * indices.size
        if total == 0:
            return
        fn = self._kernel("gather.cu", kernel, _COPY_UNITS[unit])
        self._launch(fn, total, (x, indices, out, np.int32(row_len), np.int32(indices.size)))

    def index_range(self, indices):
        with self._device:
            lo, hi = cupy.stack((indices.min(), indices.max())).get()
        return int(lo), int(hi)

    def all_finite(self, a):
        with self._device:
            return bool(cupy.isfinite(a).all())
