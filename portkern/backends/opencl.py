"""The OpenCL backend: the OpenCL C kernels in kernels/opencl, run through pyopencl (PoCL, Intel's CPU
runtime and any installed GPU driver)."""

from __future__ import annotations

import math
import re
import sys
from typing import Any

import numpy as np

from .. import _abi, tuning
from .._kernels import missing_source as _missing_source
from .._kernels import mlp_width_option
from ..envs.base import EnvSpec
from . import _opencl_drivers
from .base import AUTORESET_MODES, Backend, EnvBuffers, Probe
from .registry import register

# PyPI drivers (Intel's CPU runtime) are made visible to the ICD loader before pyopencl is imported:
# the loader reads its vendor folders once, when platforms are first listed.
if "pyopencl" in sys.modules:
    _opencl_drivers.REPORT.append(
        "pyopencl was imported before portkern: if it had listed platforms already, PyPI OpenCL drivers "
        "appear only in a new process (import portkern first)"
    )
_opencl_drivers.register()

try:  # optional dependency: a missing pyopencl surfaces in probe(), with the install hint
    import pyopencl as cl
    import pyopencl.array as cla
except ImportError:  # pragma: no cover - exercised only where pyopencl is absent
    cl = None
    cla = None

# The op modules import pyopencl too: after the drivers are registered above.
from ._opencl_buffers import OpenCLBufferOps  # noqa: E402
from ._opencl_build import KernelBuildError, OpenCLPrograms, _data  # noqa: E402,F401
from ._opencl_devices import (  # noqa: E402,F401  (re-exported: tests and tools use them from here)
    _all_devices, _is_simulator, _label, _select_device, _type_matches, device_ids, platform_id,
)
from ._opencl_knobs import _FALLBACK_CPU_VW, _GPU_SHAPE, _VECTOR_WIDTHS, OpenCLKnobs  # noqa: E402,F401

_INSTALL_HINT = "pip install 'portkern[opencl]'"
#: LLVM 14's names of the x86 CPUs with AVX-512 (PoCL 3.0 targets one of these, or another, by name).
_AVX512_LLVM_CPUS = frozenset({
    "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
    "tigerlake", "sapphirerapids", "knl", "knm", "znver4", "znver5", "graniterapids", "emeraldrapids",
})


def _host_has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return False


def _pocl_target(version: str) -> str | None:
    """The LLVM CPU PoCL compiles for, from its device version's "HSTR: pthread-<arch>-<vendor>-<os>-<env>-<cpu>"."""
    m = re.search(r"HSTR:\s*[^-\s]+-[^-\s]+-[^-\s]+-[^-\s]+-[^-\s]+-(\S+)", version)
    return m.group(1) if m else None


def _max_vector_bytes(platform: Any, device: Any) -> int | None:
    """The widest vector (bytes) the device's compiler handles, where known to be narrower than 64.

    PoCL 3.0 (LLVM 14) names its target CPU after the host but links the kernel library variant
    chosen from the host's CPU flags. On a CPU with AVX-512 that LLVM 14 does not know (AMD Zen 4
    is compiled for "znver3"), the two disagree: 16 float or 8+ double lanes (512-bit vectors) then
    abort LLVM's code generator ("Cannot emit physreg copy instruction", std::bad_alloc, a segfault),
    and a program whose build warned about the AVX-512 vector ABI comes back from PoCL's kernel
    cache with no kernels (INVALID_KERNEL_NAME). 256-bit vectors build, run and cache correctly
    there (measured). PoCL says its target in the device version ("HSTR: pthread-<triple>-<cpu>").
    """
    if "portable computing language" not in platform.name.lower() or not device.type & cl.device_type.CPU:
        return None
    target = _pocl_target(device.version)
    if target is None or target in _AVX512_LLVM_CPUS or not _host_has_avx512():
        return None
    return 32


#: OpenCL status codes that mean "this allocation does not fit" (too large for one buffer, or no
#: memory left): reported as MemoryError naming the device's limits instead of a raw pyopencl error.
_ALLOC_FAILURES = ("INVALID_BUFFER_SIZE", "MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES",
                   "OUT_OF_HOST_MEMORY")  # fmt: skip


@register
class OpenCLBackend(OpenCLBufferOps, OpenCLKnobs, OpenCLPrograms, Backend):
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
            left = "".join(f"; {name} left out: {why}" for name, why in _opencl_drivers.left_out().items())
            return Probe(
                False,
                f"pyopencl installed but no OpenCL platform/device found ({_INSTALL_HINT} brings PoCL){left}",
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
        #: Widest vector in bytes the device's compiler is known to handle (None: no known limit);
        #: tuned widths above it are narrowed to it, explicit ones refused (_width).
        self.max_vector_bytes = _max_vector_bytes(self.platform, self.device)
        self.context = cl.Context([self.device])
        self.queue = cl.CommandQueue(self.context)
        # Tuning knobs. Each starts at tuning.TUNED: the tuned default of the kernel being launched,
        # from the per-machine cache, else the shipped table, else _fallback() (see portkern.tuning;
        # describe() says which). Set one to a value to run that value for every kernel.
        #: Work-group size of the element-wise kernels; None lets the driver choose.
        self.local_size: int | None | str = tuning.TUNED
        #: Envs per work-item in env, rollout and MLP kernels (PK_VW: 1, 2, 4, 8 or 16); None: the
        #: driver's preferred vector width (a value to compare against, never a default).
        self.env_vector_width: int | None | str = tuning.TUNED
        #: Work-group size of the normalize reduction (PK_WG, a power of two; a property that reads
        #: as the value in force) and its number of partial groups.
        self.reduce_wg = tuning.TUNED
        self.reduce_groups: int = 1024
        self.tuned_defaults = tuning.Defaults(
            tuning.Identity(self.name, *self._device_key(), self.device_kind()), self._fallback(), self._fits
        )  # fmt: skip
        #: Non-empty compiler output of the programs this instance built ("file options" -> log).
        #: Intel's CPU compiler always writes one; it is kept for describe_verbose() and errors.
        self.build_logs: dict[str, str] = {}
        # Layout knobs of the buffer ops (pk_scan.h, normalize.cl, gather.cl). A CPU driver runs a
        # work-group's items one after another on one core, so the GPU's one-element-per-work-item
        # shape is slow there; these choose the shape, and tuning (not a device test) picks them.
        # tuning.TUNED: the op's tuned default; without one, the GPU shape (_buffer_knob).
        #: gae / discounted_returns: envs per vector (PK_VW: 1, 2, 4, 8, 16) and vectors per
        #: work-item (PK_NV); each work-item owns their product of consecutive envs. 1 and 1 is the GPU shape.
        self.scan_vector_width: int | str = tuning.TUNED
        self.scan_vectors_per_item: int | str = tuning.TUNED
        #: normalize: elements per work-item of the partial and apply passes (0: the GPU shape,
        #: grid-strided Welford plus a work-group tree of reduce_wg) and their vector width.
        self.reduce_chunk: int | str = tuning.TUNED
        self.reduce_vector_width: int | str = tuning.TUNED
        #: gather: rows per work-item (0: the GPU shape, one element per work-item) and elements
        #: per vector load within a row.
        self.gather_rows_per_item: int | str = tuning.TUNED
        self.gather_vector_width: int | str = tuning.TUNED
        #: gather's row layout: prefetch the row this many rows ahead (0: none; OpenCL's prefetch()).
        self.gather_prefetch: int | str = tuning.TUNED
        #: gather's row layout: 1 copies a row of 8, 16, 32 or 64 bytes as one vector, each work-item's rows
        #: left unvectorised across work-items (gather.cl, PK_GROWVEC); 0 (and other rows): element copies.
        self.gather_row_vector: int | str = tuning.TUNED
        fp32 = self.device.single_fp_config
        # OpenCL allows 2.5 ulp float division by default; the reference divides exactly.
        self._fp32_options: tuple[str, ...] = (
            ("-cl-fp32-correctly-rounded-divide-sqrt",)
            if fp32 & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
            else ()
        )
        # CPU drivers run a work-group's work-items in loops over one thread's stack: the fused rollout's
        # per-work-item body is a call there (kernels/opencl/pk_env.h, PK_ROLLOUT_ONE).
        self._device_options: tuple[str, ...] = (
            ("-DPK_CPU_DEVICE=1",) if self.device.type & cl.device_type.CPU else ()
        )

    def describe(self) -> dict[str, str]:
        d = self.device
        out = {
            "backend": self.name,
            "device": self.device_name,
            "platform": self.platform.name.strip(),
            "kind": self.device_kind(),
            "vendor": d.vendor.strip(),
            "driver": d.driver_version.strip(),
            "opencl": d.version.strip(),
            "pyopencl": cl.VERSION_TEXT,
            # Where the knobs' defaults come from, and their values per kernel family.
            "tuned_defaults": self.tuned_defaults.origin(),
        }
        if self.max_vector_bytes:
            out["vector limit"] = (
                f"{self.max_vector_bytes * 8}-bit vectors at most: PoCL's compiler targets "
                f"{_pocl_target(d.version)} (no AVX-512) on a CPU whose kernel library uses "
                f"AVX-512; wider tuned widths are narrowed"
            )
        out.update({f"defaults {fam}": text for fam, text in self.tuned_defaults.summary().items()})
        return out

    def describe_verbose(self) -> dict[str, str]:
        """describe(), plus what ``portkern devices --verbose`` adds: how the driver was found, what
        the device advertises, and the compiler's output for one of portkern's kernels."""
        d = self.device
        out = self.describe()
        out["icd"] = "; ".join(_opencl_drivers.REPORT) or "the ICD loader's own vendor folders"
        out["advertised"] = (
            f"preferred vector width float {d.preferred_vector_width_float}, double "
            f"{d.preferred_vector_width_double} (not used as defaults); max work-group {d.max_work_group_size}; "
            f"{d.max_compute_units} compute units; fp64 {'yes' if self.supports_float64 else 'no'}"
        )
        try:  # one real build, so that a compiler that talks (Intel's) is heard here, not in tests
            self._kernel("cartpole.cl", "pk_cartpole_step", self._env_options(np.float32, "step:CartPole-v1", "step")[0])
        except KernelBuildError as exc:
            out["build cartpole.cl"] = str(exc)
        for what, log in self.build_logs.items():
            out[f"build log {what}"] = log
        return out

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

    def empty(self, shape, dtype):
        return self._empty(shape, dtype)

    def zeros(self, shape, dtype):
        a = self._empty(shape, dtype)
        if a.nbytes:
            try:  # drivers may allocate lazily, on the first use of the buffer
                cl.enqueue_fill_buffer(self.queue, a.base_data, np.uint8(0), a.offset, a.nbytes)
            except cl.Error as exc:
                raise self._allocation_error(exc, a.shape, a.dtype) from None
        return a

    def from_host(self, a):
        host = np.require(a, requirements="C")  # its shape kept: np.ascontiguousarray makes a 0-d array 1-d
        dev = self._empty(host.shape, host.dtype)
        if host.size == 0:  # nothing to copy (pyopencl's set() refuses an empty array's strides)
            return dev
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

    def holds(self, a: Any) -> bool:
        # An array of another context (another device or instance) cannot be passed to this one's kernels.
        return self.owns(a) and a.context == self.context

    def _check_array(self, a: Any, what: str, dtype: Any = None, shape: tuple[int, ...] | None = None) -> None:
        super()._check_array(a, what, dtype, shape)
        if a.context != self.context:  # a kernel given another context's buffer crashes the driver (segfault)
            raise TypeError(f"{what}: this opencl array lives on another device or context than {self.device_name}")

    @staticmethod
    def _span(a: Any) -> tuple[Any, int, int] | None:
        if a.base_data is None:  # an empty array has no buffer: it overlaps nothing
            return None
        return a.base_data.int_ptr, a.offset, a.offset + a.nbytes

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
    @classmethod
    def missing_env_kernel(cls, spec: EnvSpec) -> str | None:
        return _missing_source(spec, "opencl", ".cl", "OpenCL")

    def env_reset(self, spec: EnvSpec, bufs: EnvBuffers, params, seed, fresh):
        n = self._check_env(spec, bufs, params)
        self._sized(n)  # the knobs of this launch's size class
        bench_name = f"step:{tuning.env_label(spec)}"  # a chain's K in it: its own tuned entries
        opts, vw = self._env_options(params.dtype, bench_name, "step")
        name = _abi.env_entry(spec.kernel, "reset")
        k = self._kernel(f"{spec.kernel}.cl", name, (*opts, *spec.define_options))
        values = {"params": self._device_params(params), "seed": seed,
                  "fresh": int(bool(fresh)), "n": n}  # fmt: skip
        self._launch(k, -(-n // vw), *_abi.pack(name, values, _data, params.dtype, env=bufs), key=(bench_name, "step"))

    def env_step(self, spec: EnvSpec, bufs: EnvBuffers, actions, params, seed, max_steps, autoreset):
        # The per-step hot path: the buffers are the VectorEnv's own, checked by env_reset.
        n = bufs.steps.shape[0]
        mode = AUTORESET_MODES[autoreset]
        act = self._actions_on_device(actions, n, spec.action_dtype, spec.action_dim)
        self._sized(n)
        bench_name = f"step:{tuning.env_label(spec)}"
        opts, vw = self._env_options(params.dtype, bench_name, "step")
        name = _abi.env_entry(spec.kernel, "step")
        k = self._kernel(f"{spec.kernel}.cl", name, (*opts, *spec.define_options))
        values = {"actions": act, "params": self._device_params(params), "seed": seed,
                  "max_steps": max_steps, "autoreset_mode": mode, "n": n}  # fmt: skip
        self._launch(k, -(-n // vw), *_abi.pack(name, values, _data, params.dtype, env=bufs), key=(bench_name, "step"))

    def env_rollout(self, spec: EnvSpec, bufs: EnvBuffers, policy, policy_params, out, params, seed,
                    max_steps, autoreset, steps_per_launch):  # fmt: skip
        n = self._check_env(spec, bufs, params)
        hidden = self._check_rollout(spec, bufs, policy, policy_params, out, params, steps_per_launch)
        steps, dt = out.steps, params.dtype
        # One step per launch is the device data path: its own tuned entry (the family's, "fused", without one).
        path = "device" if steps_per_launch == 1 else "fused"
        bench_name = f"rollout:{tuning.env_label(spec)}:{path}" + (":mlp" if policy.kind == 1 else "")
        self._sized(n)
        opts, vw = self._env_options(dt, bench_name, "fused")
        name = _abi.env_entry(spec.kernel, "rollout")
        k = self._kernel(f"{spec.kernel}.cl", name,
                         (*opts, *spec.define_options, *self._mlp_width(policy.kind, hidden)))  # fmt: skip
        # Arguments are packed once; each launch only moves the time window (t0, t_count). Every launch sets
        # them through the declared-dtype invoker (_enqueue): 10-15 us a launch, where pyopencl's set_arg of one
        # NumPy scalar alone took 16 us (two per launch, on the device path's one launch per step).
        pack = _abi.packer(name, _data, dt)
        args = list(pack({**_abi.rollout_values(out), "params": self._device_params(params),
                          "policy": policy_params, "policy_kind": policy.kind, "hidden": hidden, "seed": seed,
                          "max_steps": max_steps, "autoreset_mode": AUTORESET_MODES[autoreset], "t0": 0,
                          "t_count": 0, "n": n}, env=bufs))  # fmt: skip
        i_t0, i_count = pack.index("t0"), pack.index("t_count")
        gs, ls = self._ranges(-(-n // vw), k)
        for t0 in range(0, steps, steps_per_launch):
            args[i_t0], args[i_count] = np.int32(t0), np.int32(min(steps_per_launch, steps - t0))
            self._enqueue(k, gs, ls, tuple(args))

    #: Build MLP policies' kernels for their hidden width (pk_policy.h's PK_MLP_HIDDEN), one build per width
    #: in use; False: the run-time-width build every policy shares. The same results either way.
    fixed_mlp_width: bool = True

    def _mlp_width(self, kind: int, hidden: int) -> tuple[str, ...]:
        return mlp_width_option(kind, hidden, fixed=self.fixed_mlp_width)

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, d = self._check_mlp(policy_params, obs, hidden, out_dim)
        out = self._empty((n, out_dim), np.float32)
        self._sized(n)
        opts, vw = self._env_options(obs.dtype, None, "rollout")  # the per-step paths' MLP
        k = self._kernel("mlp.cl", "pk_mlp_forward", (*opts, *self._mlp_width(1, hidden)))
        values = {"policy": policy_params, "hidden": hidden, "obs_dim": d, "out_dim": out_dim, "obs": obs,
                  "out": out, "n": n}  # fmt: skip
        self._launch(k, -(-n // vw), *_abi.pack("pk_mlp_forward", values, _data, obs.dtype))
        return out
