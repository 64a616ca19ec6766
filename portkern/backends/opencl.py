"""The OpenCL backend: the OpenCL C kernels in kernels/opencl, run through pyopencl (PoCL on CPUs)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._kernels import load_source, source_hash
from ..envs.base import EnvSpec
from .base import AUTORESET_MODES, Backend, EnvBuffers, Probe
from .registry import register

try:  # optional dependency: a missing pyopencl surfaces in probe(), with the install hint
    import pyopencl as cl
    import pyopencl.array as cla
except ImportError:  # pragma: no cover - exercised only where pyopencl is absent
    cl = None
    cla = None

_INSTALL_HINT = "pip install 'portkern[opencl]'"
#: Device types a ``device=`` string may name instead of a substring of the platform/device names.
_TYPE_NAMES = ("gpu", "cpu", "accelerator")
#: Platforms that simulate a device (Oclgrind runs every work-item through an interpreter):
#: never chosen by default or by type, only when named.
_SIMULATORS = ("oclgrind",)
#: Unsigned OpenCL type of each element width: gather copies elements bit for bit.
_BITS_TYPE = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


class KernelBuildError(RuntimeError):
    """An OpenCL kernel file failed to build; the message names the file and carries the build log."""


def _all_devices() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair; an ICD loader without platforms raises cl.Error, read as none."""
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return []
    found = []
    for p in platforms:
        try:
            found.extend((p, d) for d in p.get_devices())
        except cl.Error:  # a platform with no devices raises DEVICE_NOT_FOUND
            continue
    return found


def _label(platform: Any, device: Any) -> str:
    return f"{platform.name.strip()}: {device.name.strip()}"


def _is_simulator(platform: Any) -> bool:
    return any(s in platform.name.lower() for s in _SIMULATORS)


def _type_matches(device: Any, type_name: str) -> bool:
    return bool(device.type & getattr(cl.device_type, type_name.upper()))


def _select_device(want: str | None) -> tuple[Any, Any]:
    """``want`` is a case-insensitive substring of platform name/vendor/device name, or a device type.

    Without one: the first GPU, else the first CPU, else the first device (simulators excepted).
    """
    found = _all_devices()
    real = [(p, d) for p, d in found if not _is_simulator(p)]
    if want is None:
        for type_name in ("gpu", "cpu"):
            for p, d in real:
                if _type_matches(d, type_name):
                    return p, d
        if real:
            return real[0]
    else:
        key = want.strip().lower()
        for p, d in found:
            names = f"{p.name} {p.vendor} {d.name}".lower()
            by_type = key in _TYPE_NAMES and not _is_simulator(p) and _type_matches(d, key)
            if key and (key in names or by_type):
                return p, d
    listed = "; ".join(_label(p, d) for p, d in found) or "none"
    raise ValueError(
        f"device: no OpenCL device matches {want!r}; devices found: {listed}. Pass a substring of "
        f"a platform or device name, or a type ({', '.join(_TYPE_NAMES)})"
    )


#: OpenCL status codes that mean "this allocation does not fit" (too large for one buffer, or no
#: memory left): reported as MemoryError naming the device's limits instead of a raw pyopencl error.
_ALLOC_FAILURES = ("INVALID_BUFFER_SIZE", "MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES",
                   "OUT_OF_HOST_MEMORY")  # fmt: skip


@register
class OpenCLBackend(Backend):
    name = "opencl"
    order = 10
    extra = "opencl"
    default_device_env = ("PORTKERN_DEVICE",)

    @classmethod
    def probe(cls) -> Probe:
        if cl is None:
            return Probe(False, f"pyopencl is not installed: {_INSTALL_HINT}")
        found = _all_devices()
        if not found:
            return Probe(
                False,
                f"pyopencl installed but no OpenCL platform/device found ({_INSTALL_HINT} brings PoCL)",
            )
        return Probe(
            True,
            devices=tuple(_label(p, d) for p, d in found),
            versions={"pyopencl": cl.VERSION_TEXT},
        )

    def __init__(self, device: str | None = None) -> None:
        if cl is None:
            raise ImportError(f"the opencl backend needs pyopencl: {_INSTALL_HINT}")
        self.platform, self.device = _select_device(device)
        self.device_name = _label(self.platform, self.device)
        self.supports_float64 = "cl_khr_fp64" in self.device.extensions.split()
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)
        #: Work-group size of the element-wise kernels; None lets the driver choose (a tuning knob).
        self.local_size: int | None = None
        #: Envs per work-item in env, rollout and MLP kernels (PK_VW: 1, 2, 4, 8 or 16); None picks
        #: the CPU's preferred vector width (CPU drivers do not vectorise sin/cos or the autoreset
        #: branches across work-items themselves) and 1 on GPUs (a tuning knob).
        self.env_vector_width: int | None = None
        #: Work-group size of the normalize reduction (PK_WG) and its number of partial groups.
        self.reduce_wg: int = 1 << int(math.log2(min(256, self.device.max_work_group_size)))
        self.reduce_groups: int = 1024
        fp32 = self.device.single_fp_config
        # OpenCL allows 2.5 ulp float division by default; the reference divides exactly.
        self._fp32_options: tuple[str, ...] = (
            ("-cl-fp32-correctly-rounded-divide-sqrt",)
            if fp32 & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
            else ()
        )

    def describe(self) -> dict[str, str]:
        d = self.device
        return {
            "backend": self.name,
            "device": self.device_name,
            "vendor": d.vendor.strip(),
            "driver": d.driver_version.strip(),
            "opencl": d.version.strip(),
            "pyopencl": cl.VERSION_TEXT,
        }

    def synchronize(self) -> None:
        self.queue.finish()

    def device_kind(self) -> str:
        """CL_DEVICE_TYPE as "gpu", "accelerator" or "cpu" (OpenCL drives all three)."""
        for kind in ("gpu", "accelerator", "cpu"):
            if _type_matches(self.device, kind):
                return kind
        return "accelerator"  # CL_DEVICE_TYPE_CUSTOM: neither the host CPU nor a GPU

    def memory_limits(self) -> tuple[int, int]:
        """(CL_DEVICE_MAX_MEM_ALLOC_SIZE, CL_DEVICE_GLOBAL_MEM_SIZE): one buffer may not exceed the first."""
        return int(self.device.max_mem_alloc_size), int(self.device.global_mem_size)

    def _device_key(self) -> tuple[str, str, str]:
        # The driver version is part of it: the shared cache hands device binaries to other contexts.
        d = self.device
        return (self.platform.name.strip(), d.name.strip(), d.driver_version.strip())

    # ---- programs and launches ---------------------------------------------------------------
    def _real_options(self, dtype: Any) -> tuple[str, ...]:
        dtype = np.dtype(dtype)
        if dtype == np.float32:
            return ("-DREAL=float",)
        if dtype == np.float64:
            if not self.supports_float64:
                raise TypeError(
                    f"dtype: float64 needs the cl_khr_fp64 extension, which {self.device_name} "
                    f"lacks; use float32 on this device"
                )
            return ("-DREAL=double", "-DPK_DOUBLE=1")
        raise TypeError(f"dtype: expected float32 or float64, got {dtype}")

    def _env_options(self, dtype: Any) -> tuple[tuple[str, ...], int]:
        """Build options of the env, rollout and MLP kernels, and their envs per work-item."""
        vw = self.env_vector_width
        if vw is None:
            d = self.device
            if d.type & cl.device_type.CPU:
                f64 = np.dtype(dtype) == np.float64
                pref = d.preferred_vector_width_double if f64 else d.preferred_vector_width_float
                vw = 1 << int(math.log2(max(1, min(16, pref))))
            else:
                vw = 1
        if vw not in (1, 2, 4, 8, 16):
            raise ValueError(f"env_vector_width: expected None, 1, 2, 4, 8 or 16, got {vw!r}")
        return (*self._real_options(dtype), f"-DPK_VW={vw}"), vw

    def _compile(self, filename: str, source: str, options: tuple[str, ...]) -> Any:
        try:
            return cl.Program(self.context, source).build(options=list(options))
        except cl.Error as exc:
            raise KernelBuildError(
                f"OpenCL build of kernels/opencl/{filename} failed on {self.device_name} "
                f"(options: {' '.join(options)}):\n{exc}"
            ) from None

    def _build(self, filename: str, source: str, options: tuple[str, ...]) -> Any:
        """The program for (source, options) on this backend's device and context, built once.

        The base class's program cache is shared by every instance on the device, but an OpenCL
        program belongs to the context it was built in: another instance (its own context) makes
        its program from the cached one's device binary instead of compiling the source again.
        """
        options = ("-cl-std=CL1.2", *options, *self._fp32_options)
        shared = self._program(source, options, lambda: self._compile(filename, source, options))
        if shared.context == self.context:
            return shared

        def from_binary() -> Any:
            try:
                return cl.Program(self.context, [self.device], shared.binaries).build(options=list(options))
            except cl.Error:  # a driver that cannot reload its own binaries: compile the source
                return self._compile(filename, source, options)

        return self._cache("program", source_hash(source, options), from_binary)

    def _kernel(self, filename: str, kernel: str, options: tuple[str, ...]) -> Any:
        """The kernel object, fetched once per (file, kernel, options) and reused by every launch."""
        return self._cache(
            "kernel", (filename, kernel, options),
            lambda: cl.Kernel(self._build(filename, load_source("opencl", filename), options), kernel),
        )  # fmt: skip

    def _ranges(self, n: int) -> tuple[tuple[int], tuple[int] | None]:
        """Global and local size for ``n`` work-items with the ``local_size`` knob."""
        ls = self.local_size
        if ls is not None and (not isinstance(ls, int) or ls < 1):
            raise ValueError(f"local_size: expected None or a positive int, got {ls!r}")
        if ls is None:
            return (n,), None
        return (-(-n // ls) * ls,), (ls,)  # the kernels bounds-check: round up to whole work-groups

    def _launch(self, kernel: Any, n: int, *args: Any) -> None:
        if n <= 0:
            return
        gs, ls = self._ranges(n)
        kernel(self.queue, gs, ls, *args)

    # ---- arrays -------------------------------------------------------------------------------
    def _allocation_error(self, exc: Any, shape: tuple[int, ...], dtype: np.dtype) -> Exception:
        """``exc`` as a MemoryError naming the array and the device's limits, if it is an allocation failure."""
        code = getattr(exc, "code", None)
        if not any(code == getattr(cl.status_code, name, None) for name in _ALLOC_FAILURES):
            return exc
        max_alloc, total = self.memory_limits()
        nbytes = math.prod(shape) * dtype.itemsize
        return MemoryError(
            f"a {shape} {dtype} array ({nbytes:,} bytes) does not fit on {self.device_name}: its "
            f"largest allocation is {max_alloc:,} bytes and it has {total:,} bytes in all "
            f"({' '.join(str(exc).split())})"
        )

    def _empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        shape, dt = tuple(int(x) for x in shape), np.dtype(dtype)
        try:
            return cla.empty(self.queue, shape, dt)
        except cl.Error as exc:
            raise self._allocation_error(exc, shape, dt) from None

    def zeros(self, shape, dtype):
        a = self._empty(shape, dtype)
        if a.nbytes:
            try:  # drivers may allocate lazily, on the first use of the buffer
                cl.enqueue_fill_buffer(self.queue, a.base_data, np.uint8(0), a.offset, a.nbytes)
            except cl.Error as exc:
                raise self._allocation_error(exc, a.shape, a.dtype) from None
        return a

    def from_host(self, a):
        host = np.ascontiguousarray(a)
        dev = self._empty(host.shape, host.dtype)
        try:
            dev.set(host, queue=self.queue)
        except cl.Error as exc:
            raise self._allocation_error(exc, host.shape, host.dtype) from None
        return dev

    def to_host(self, a):
        self._check_array(a, "a")
        return a.get(queue=self.queue)

    def write(self, dst, src):
        src = np.asarray(src)
        self._check_array(dst, "dst", src.dtype, src.shape)
        dst.set(np.ascontiguousarray(src), queue=self.queue)

    @classmethod
    def owns(cls, a: Any) -> bool:
        return cla is not None and isinstance(a, cla.Array)

    @classmethod
    def for_array(cls, a: Any) -> Backend:
        from . import registry

        for inst in registry._INSTANCES.values():
            if isinstance(inst, cls) and inst.context == a.context:
                return inst
        raise ValueError(
            "this pyopencl array lives in a context no portkern opencl backend created; pass "
            "backend= or create it with get_backend('opencl', device).from_host(...)"
        )

    # ---- environments ------------------------------------------------------------------------
    def _env_args(self, bufs: EnvBuffers) -> list[Any]:
        """The arguments every env kernel starts with: the [D, N] state, then the three counters."""
        return [bufs.state.data, bufs.steps.data, bufs.episodes.data, bufs.needs_reset.data]

    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        n = self._check_env(spec, bufs, params)
        opts, vw = self._env_options(params.dtype)
        k = self._kernel(f"{spec.kernel}.cl", f"pk_{spec.kernel}_reset", opts)
        self._launch(
            k, -(-n // vw), *self._env_args(bufs), bufs.obs.data, self._device_params(params).data,
            np.uint32(seed), np.int32(bool(fresh)), np.int32(n),
        )  # fmt: skip

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        # The per-step hot path: the buffers are the VectorEnv's own, checked by env_reset.
        n = bufs.steps.shape[0]
        mode = AUTORESET_MODES[autoreset]
        act = self._actions_on_device(actions, n, spec.action_dtype)
        opts, vw = self._env_options(params.dtype)
        k = self._kernel(f"{spec.kernel}.cl", f"pk_{spec.kernel}_step", opts)
        self._launch(
            k, -(-n // vw), *self._env_args(bufs), act.data, bufs.obs.data, bufs.final_obs.data,
            bufs.reward.data, bufs.terminated.data, bufs.truncated.data,
            self._device_params(params).data, np.uint32(seed), np.int32(max_steps),
            np.int32(mode), np.int32(n),
        )  # fmt: skip

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        n = self._check_env(spec, bufs, params)
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        steps, dt = out.steps, params.dtype
        opts, vw = self._env_options(dt)
        k = self._kernel(f"{spec.kernel}.cl", f"pk_{spec.kernel}_rollout", opts)
        # Arguments are set once; each launch only moves the time window (t0, t_count).
        args = [*self._env_args(bufs), bufs.obs.data, bufs.final_obs.data, bufs.reward.data,
                bufs.terminated.data, bufs.truncated.data, self._device_params(params).data,
                policy_params.data, np.int32(policy.kind), np.int32(hidden), out.obs.data,
                out.actions.data, out.rewards.data, out.terminated.data, out.truncated.data,
                out.final_obs.data, np.uint32(seed), np.int32(max_steps),
                np.int32(AUTORESET_MODES[autoreset]), np.int32(0), np.int32(0), np.int32(n)]  # fmt: skip
        k.set_args(*args)
        i_t0 = len(args) - 3
        gs, ls = self._ranges(-(-n // vw))
        for t0 in range(0, steps, steps_per_launch):
            k.set_arg(i_t0, np.int32(t0))
            k.set_arg(i_t0 + 1, np.int32(min(steps_per_launch, steps - t0)))
            cl.enqueue_nd_range_kernel(self.queue, k, gs, ls)

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, d = self._check_mlp(policy_params, obs, hidden, out_dim)
        out = self._empty((n, out_dim), np.float32)
        opts, vw = self._env_options(obs.dtype)
        k = self._kernel("mlp.cl", "pk_mlp_forward", opts)
        self._launch(
            k, -(-n // vw), policy_params.data, np.int32(hidden), np.int32(d), np.int32(out_dim),
            obs.data, out.data, np.int32(n),
        )  # fmt: skip
        return out

    # ---- rollout buffer ops ------------------------------------------------------------------
    def gae(self, rewards, values, next_values, terminated, truncated, advantages, returns, gamma, lam):
        dt = rewards.dtype
        shape = rewards.shape
        for name, a in (("rewards", rewards), ("values", values), ("next_values", next_values),
                        ("advantages", advantages), ("returns", returns)):  # fmt: skip
            self._check_array(a, name, dt, shape)
        self._check_array(terminated, "terminated", np.bool_, shape)
        self._check_array(truncated, "truncated", np.bool_, shape)
        T = dt.type
        steps, n = shape
        k = self._kernel("gae.cl", "pk_gae", self._real_options(dt))
        # gamma * lam is rounded in the env dtype on the host exactly as the reference does.
        self._launch(
            k, n, rewards.data, values.data, next_values.data, terminated.data, truncated.data,
            advantages.data, returns.data, T(gamma), T(T(gamma) * T(lam)), np.int32(steps), np.int32(n),
        )  # fmt: skip

    def discounted_returns(self, rewards, terminated, truncated, bootstrap, out, gamma):
        dt = rewards.dtype
        shape = rewards.shape
        steps, n = shape
        self._check_array(rewards, "rewards", dt, shape)
        self._check_array(out, "out", dt, shape)
        self._check_array(terminated, "terminated", np.bool_, shape)
        self._check_array(truncated, "truncated", np.bool_, shape)
        per_step = bootstrap.ndim == 2
        self._check_array(bootstrap, "bootstrap", dt, shape if per_step else (n,))
        k = self._kernel("discounted_returns.cl", "pk_discounted_returns", self._real_options(dt))
        self._launch(
            k, n, rewards.data, terminated.data, truncated.data, bootstrap.data, out.data,
            dt.type(gamma), np.int32(per_step), np.int32(steps), np.int32(n),
        )  # fmt: skip

    def normalize(self, x, out, eps):
        dt = x.dtype
        self._check_array(x, "x", dt)
        self._check_array(out, "out", dt, x.shape)
        n = x.size
        if n == 0:
            return
        wg = self.reduce_wg
        if not isinstance(wg, int) or wg < 1 or wg & (wg - 1):
            raise ValueError(f"reduce_wg: expected a power of two, got {wg!r}")
        opts = (*self._real_options(dt), f"-DPK_WG={wg}")
        groups = max(1, min(-(-n // wg), self.reduce_groups))
        # partials and stats: allocated once per (dtype, group count), reused by every call
        pcount = self._scratch(("normalize", "count"), (groups,), np.uint32)
        pmean = self._scratch(("normalize", "mean"), (groups,), dt)
        pm2 = self._scratch(("normalize", "m2"), (groups,), dt)
        stats = self._scratch(("normalize", "stats"), (2,), dt)
        partial = self._kernel("normalize.cl", "pk_normalize_partial", opts)
        finalize = self._kernel("normalize.cl", "pk_normalize_finalize", opts)
        apply = self._kernel("normalize.cl", "pk_normalize_apply", opts)
        partial(self.queue, (groups * wg,), (wg,), x.data, pcount.data, pmean.data, pm2.data,
                np.int32(n))
        finalize(self.queue, (wg,), (wg,), pcount.data, pmean.data, pm2.data, stats.data,
                 np.int32(groups))
        self._launch(apply, n, x.data, out.data, stats.data, dt.type(eps), np.int32(n))

    def gather(self, x, indices, out):
        self._check_array(x, "x")
        self._check_array(indices, "indices")
        b = indices.shape[0]
        self._check_array(out, "out", x.dtype, (b, *x.shape[1:]))
        kernel = {np.dtype(np.int64): "pk_gather", np.dtype(np.int32): "pk_gather_i32"}.get(indices.dtype)
        if kernel is None or indices.ndim != 1:
            raise TypeError(
                f"indices: expected a 1-D int64 or int32 array, got {indices.dtype} {indices.shape}"
            )
        row_len = math.prod(x.shape[1:])
        k = self._kernel("gather.cl", kernel, (f"-DREAL={_BITS_TYPE[x.dtype.itemsize]}",))
        self._launch(k, b * row_len, x.data, indices.data, out.data, np.int32(row_len), np.int32(b))

    def _validate_reduce(self, kernel: str, a: Any, outputs: tuple[Any, ...]) -> list[np.ndarray]:
        """Run one validate.cl reduction over ``a``; returns the per-group partials on the host.

        pyopencl's own reductions need Mako, which pyopencl does not install; these need nothing.
        """
        wg = self.reduce_wg
        groups = max(1, min(-(-a.size // wg), 64))  # few partials: the host folds them
        bufs = [self._scratch(("validate", kernel, i), (groups,), dt) for i, dt in enumerate(outputs)]
        k = self._kernel("validate.cl", kernel, (f"-DPK_WG={wg}",))
        k(self.queue, (groups * wg,), (wg,), a.data, *(b.data for b in bufs), np.int32(a.size))
        return [b.get(queue=self.queue) for b in bufs]

    def index_range(self, indices):
        self._check_array(indices, "indices")
        kernels = {np.dtype(np.int64): "pk_index_range", np.dtype(np.int32): "pk_index_range_i32"}
        kernel = kernels.get(indices.dtype)
        if kernel is None:
            raise TypeError(f"indices: expected an int64 or int32 array, got {indices.dtype}")
        if indices.size == 0:
            raise ValueError("indices: empty array has no range")
        lo, hi = self._validate_reduce(kernel, indices, (np.int64, np.int64))
        return int(lo.min()), int(hi.max())

    def all_finite(self, a):
        self._check_array(a, "a")
        kernel = {np.dtype(np.float32): "pk_count_nonfinite_f32",
                  np.dtype(np.float64): "pk_count_nonfinite_f64"}.get(a.dtype)  # fmt: skip
        if kernel is None:
            raise TypeError(f"a: expected a float32 or float64 array, got {a.dtype}")
        if a.size == 0:
            return True
        (count,) = self._validate_reduce(kernel, a, (np.uint32,))
        return int(count.sum()) == 0
