"""The OpenCL backend: the OpenCL C kernels in kernels/opencl, run through pyopencl (PoCL, Intel's CPU
runtime and any installed GPU driver)."""

from __future__ import annotations

import math
import re
import sys
import warnings
from typing import Any

import numpy as np

from .. import tuning
from .._kernels import load_source, source_hash
from ..envs import ENVS
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

_INSTALL_HINT = "pip install 'portkern[opencl]'"
#: Device types a ``device=`` string may name instead of a substring of the platform/device names.
_TYPE_NAMES = ("gpu", "cpu", "accelerator")
#: Platforms that simulate a device (Oclgrind runs every work-item through an interpreter):
#: never chosen by default or by type, only when named.
_SIMULATORS = ("oclgrind",)
#: Short names of OpenCL implementations (platform name prefix -> id), for test ids and ``device=``.
_PLATFORM_IDS = (
    ("portable computing language", "pocl"), ("intel(r) opencl graphics", "intel-gpu"),
    ("intel(r) opencl", "intel"), ("intel(r) fpga emulation", "intel-fpga-emu"), ("nvidia", "nvidia"),
    ("amd accelerated parallel processing", "amd"), ("rusticl", "rusticl"), ("clover", "clover"),
    ("apple", "apple"), ("oclgrind", "oclgrind"),
)  # fmt: skip
#: Among CPU implementations the default device is PoCL (what ``portkern[opencl]`` brings): installing
#: another driver adds a device without moving the default. Any GPU still comes first.
_DEFAULT_CPU_PLATFORMS = ("pocl",)
#: Unsigned OpenCL type of each element width: gather copies elements bit for bit.
_BITS_TYPE = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
_VECTOR_WIDTHS = (1, 2, 4, 8, 16)
#: Knob values used when neither the per-machine cache nor the shipped table has the device
#: (portkern.tuning): safe rather than fast, and never the width the driver advertises. GPUs: one
#: env per work-item (the SIMT hardware vectorises across work-items) and the driver's work-group
#: size. CPUs: 16 envs per work-item, the width with the best worst case over the CPU drivers
#: measured (bench/results/dev-vm-2core-epyc-tune-*: at least 0.78 of each step kernel's best and
#: 0.64 of each rollout's on PoCL and Intel, against 0.73 and 0.55 for 8, 0.42 and 0.37 for 4); CPU
#: drivers do not vectorise sin/cos or the autoreset branches across work-items by themselves.
#: reduce_wg: the largest power of two up to 256 the device runs.
_FALLBACK_CPU_VW = 16
#: Layout knobs of the buffer ops without a tuned entry: the GPU shape, i.e. the original kernels (one
#: element or env per work-item). Never chosen by device type: a CPU gets its layout from tuning.
_GPU_SHAPE = {"scan_vector_width": 1, "scan_vectors_per_item": 1, "reduce_chunk": 0, "reduce_vector_width": 1,
              "gather_rows_per_item": 0, "gather_vector_width": 1}  # fmt: skip


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


def _label(platform: Any, device: Any) -> str:
    return f"{platform.name.strip()}: {device.name.strip()}"


def _is_simulator(platform: Any) -> bool:
    return any(s in platform.name.lower() for s in _SIMULATORS)


def _type_matches(device: Any, type_name: str) -> bool:
    return bool(device.type & getattr(cl.device_type, type_name.upper()))


def platform_id(platform_name: str) -> str:
    """The short name of an OpenCL implementation ("pocl", "intel", ...), from its platform name."""
    name = platform_name.strip().lower()
    for prefix, pid in _PLATFORM_IDS:
        if name.startswith(prefix):
            return pid
    return "-".join("".join(c if c.isalnum() else " " for c in name).split()[:2]) or "opencl"


def device_ids(include_simulators: bool = False) -> dict[str, str]:
    """Short id -> device label of every OpenCL device found ("pocl", "intel"; "<id>-<type>" and then
    a number where one implementation lists several), simulators left out unless asked for."""
    out: dict[str, str] = {}
    for p, d in _all_devices():
        if _is_simulator(p) and not include_simulators:
            continue
        base = platform_id(p.name)
        pid = base
        if pid in out:
            kind = next((k for k in _TYPE_NAMES if _type_matches(d, k)), "device")
            pid = f"{base}-{kind}"
        n = 2
        while pid in out:
            pid, n = f"{base}-{n}", n + 1
        out[pid] = _label(p, d)
    return out


def _select_device(want: str | None) -> tuple[Any, Any]:
    """``want`` is a device label as listed ("Platform: Device"), a device name, an implementation's
    short id ("pocl", "intel"), a case-insensitive substring of platform name/vendor/device name, or a
    device type -- tried in that order, so one CPU under two implementations can be told apart.

    Without one: the first GPU, else a CPU (PoCL first, see _DEFAULT_CPU_PLATFORMS), else the first
    device (simulators excepted).
    """
    found = _all_devices()
    real = [(p, d) for p, d in found if not _is_simulator(p)]

    def first_of(type_name: str) -> tuple[Any, Any] | None:
        typed = [(p, d) for p, d in real if _type_matches(d, type_name)]
        if type_name == "cpu":  # stable sort: PoCL first, then the loader's order
            typed.sort(key=lambda pd: platform_id(pd[0].name) not in _DEFAULT_CPU_PLATFORMS)
        return typed[0] if typed else None

    key = "" if want is None else want.strip().lower()
    if want is None:
        chosen = first_of("gpu") or first_of("cpu") or (real[0] if real else None)
        if chosen:
            return chosen
    elif key in _TYPE_NAMES and first_of(key):
        return first_of(key)
    elif key:
        ids = {pid.lower(): label for pid, label in device_ids(include_simulators=True).items()}
        rules = (
            lambda p, d: _label(p, d).lower() == key,
            lambda p, d: d.name.strip().lower() == key,
            lambda p, d: ids.get(key) == _label(p, d),
            lambda p, d: key in f"{p.name} {p.vendor} {d.name}".lower(),
        )
        for rule in rules:
            for p, d in found:
                if rule(p, d):
                    return p, d
    listed = "; ".join(_label(p, d) for p, d in found) or "none"
    raise ValueError(
        f"device: no OpenCL device matches {want!r}; devices found: {listed}. Pass a device as listed, "
        f"an implementation ({', '.join(device_ids(include_simulators=True)) or 'none found'}), a substring "
        f"of a platform or device name, or a type ({', '.join(_TYPE_NAMES)})"
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
        #: Widest vector in bytes the device's compiler handles (None: no known limit);
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
        fp32 = self.device.single_fp_config
        # OpenCL allows 2.5 ulp float division by default; the reference divides exactly.
        self._fp32_options: tuple[str, ...] = (
            ("-cl-fp32-correctly-rounded-divide-sqrt",)
            if fp32 & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
            else ()
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

    def _fallback(self) -> dict[str, dict[str, Any]]:
        """The knobs' values without a tuned entry (documented at _FALLBACK_CPU_VW), per kernel family."""
        cpu = self.device_kind() == "cpu"
        vw = _FALLBACK_CPU_VW if cpu else 1
        wg = 1 << int(math.log2(min(256, self.device.max_work_group_size)))
        fams: dict[str, dict[str, Any]] = {
            "step": {"env_vector_width": vw, "local_size": None},
            "rollout": {"env_vector_width": vw, "local_size": None},
            "fused": {"env_vector_width": vw, "local_size": None},
            "normalize": {"reduce_wg": wg, "local_size": None},
        }
        for op in ("gae", "discounted_returns", "gather"):
            fams[op] = {"local_size": None}
        return fams

    def _fits(self, knob: str, value: Any) -> bool:
        """Whether a tuned value (measured on another device of the family) can run on this one."""
        limit = self.device.max_work_group_size
        if knob == "env_vector_width":
            return value in _VECTOR_WIDTHS
        if knob == "local_size":
            return value is None or (isinstance(value, int) and 1 <= value <= limit)
        if knob == "reduce_wg":
            return isinstance(value, int) and 1 <= value <= limit and not value & (value - 1)
        return True

    @property
    def reduce_wg(self) -> int:
        """Work-group size of the normalize and validation reductions (PK_WG, a power of two).

        One kernel family uses it, so it reads as the value in force: the tuned default until set
        (set tuning.TUNED to go back to it).
        """
        value = self._reduce_wg
        if isinstance(value, str) and value == tuning.TUNED:
            return self.tuned_defaults.resolve("reduce_wg", "normalize", "normalize").value
        return value

    @reduce_wg.setter
    def reduce_wg(self, value: int | str) -> None:
        self._reduce_wg = value

    def knob_setting(self, knob: str) -> Any:
        return self._reduce_wg if knob == "reduce_wg" else getattr(self, knob)

    def _tuned(self, knob: str, family: str, kernel: str | None = None) -> Any:
        """The knob's value for a launch: the attribute, or at TUNED the kernel's tuned default."""
        value = getattr(self, knob)
        if isinstance(value, str) and value == tuning.TUNED:
            return self.tuned_defaults.resolve(knob, family, kernel).value
        return value

    def knob_in_force(self, knob: str, kernel: str) -> tuning.Resolved:
        """The knob's value in the launches of benchmark kernel ``kernel``, and its source: the
        attribute when set, else the tuned entry those launches read (see _knob_entry)."""
        value = self.knob_setting(knob)
        if not (isinstance(value, str) and value == tuning.TUNED):
            return tuning.Resolved(value, "attribute", "")
        entry, family = self._knob_entry(knob, kernel)
        try:
            got = self.tuned_defaults.resolve(knob, family, entry)
            if knob.endswith("vector_width") and isinstance(got.value, int) and self.max_vector_bytes:
                # what the float32 launches run (_width), the precision the suite times
                narrowed = min(got.value, self.max_vector_bytes // 4)
                if narrowed != got.value:
                    got = tuning.Resolved(narrowed, f"{got.source}, narrowed to {self.max_vector_bytes * 8}-bit vectors",
                                          got.entry)
            return got
        except KeyError:
            if knob not in _GPU_SHAPE:
                raise
            return tuning.Resolved(_GPU_SHAPE[knob], "fallback", "")  # _buffer_knob's GPU shape

    def _knob_entry(self, knob: str, kernel: str) -> tuple[str | None, str]:
        """(kernel, family) of the tuned entry that the launches of benchmark kernel ``kernel`` read
        for ``knob``, as env_step, env_rollout, _ranges and _buffer_knob ask tuned_defaults.

        A host-path rollout launches the env's step kernel every step (``step:<env>``); device and
        fused rollouts launch the fused kernel with their own entries (``rollout:<env>:device[:mlp]``,
        one step per launch, and ``rollout:<env>:fused[:mlp]``; family "fused"), whose local size is the
        family's (_launch_key); a buffer op reads its own name.
        """
        parts = kernel.split(":")
        if parts[0] not in ("step", "rollout"):
            return kernel, kernel
        if len(parts) < (3 if parts[0] == "rollout" else 2) or parts[1] not in ENVS:
            raise ValueError(f"kernel: expected step:<env>, rollout:<env>:<path>[:mlp] or a buffer op, got {kernel!r}")
        spec = ENVS[parts[1]]
        if parts[0] == "rollout" and parts[2] != "host":
            if knob == "local_size":
                return self._launch_key(f"pk_{spec.kernel}_rollout")
            return ":".join(("rollout", spec.id, "device" if parts[2] == "device" else "fused", *parts[3:])), "fused"
        return f"step:{spec.id}", "step"

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

    def _env_options(self, dtype: Any, kernel: str | None, family: str) -> tuple[tuple[str, ...], int]:
        """Build options of the env, rollout and MLP kernels, and their envs per work-item.

        ``kernel`` / ``family`` (a benchmark kernel name, its knob family) pick the tuned default.
        The tuned widths were measured in float32 and serve float64 too (a build option, same results).
        """
        vw = self._tuned("env_vector_width", family, kernel)
        if vw is None:  # asked for explicitly: the driver's preferred width, for comparisons
            d = self.device
            f64 = np.dtype(dtype) == np.float64
            pref = d.preferred_vector_width_double if f64 else d.preferred_vector_width_float
            vw = 1 << int(math.log2(max(1, min(16, pref)))) if d.type & cl.device_type.CPU else 1
        if vw not in _VECTOR_WIDTHS or isinstance(vw, bool):
            raise ValueError(f"env_vector_width: expected {tuning.TUNED!r}, None, 1, 2, 4, 8 or 16, got {vw!r}")
        vw = self._width("env_vector_width", vw, dtype)
        return (*self._real_options(dtype), f"-DPK_VW={vw}"), vw

    def _width(self, knob: str, vw: int, dtype: Any) -> int:
        """A vector width the device's compiler can build (max_vector_bytes): a tuned or advertised
        width above it is narrowed to it; a width set by hand above it is refused, naming the reason."""
        cap = self.max_vector_bytes
        if cap is None or vw * np.dtype(dtype).itemsize <= cap:
            return vw
        most = max(1, cap // np.dtype(dtype).itemsize)
        setting = self.knob_setting(knob)
        if isinstance(setting, int) and not isinstance(setting, bool):
            raise ValueError(
                f"{knob}: {vw} lanes of {np.dtype(dtype)} exceed the {cap * 8}-bit vectors that "
                f"{self.device_name} builds correctly (PoCL's compiler targets a CPU without AVX-512 "
                f"while its kernel library uses it); use at most {most}"
            )
        return most

    def _compile(self, filename: str, source: str, options: tuple[str, ...]) -> Any:
        """Build from source. The compiler's output is kept in ``build_logs`` instead of pyopencl's
        CompilerWarning: Intel's CPU compiler writes a log for every build (its vectoriser's remarks),
        which is information, not a warning; a failed build raises with the log in the message."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                prg = cl.Program(self.context, source).build(options=list(options))
        except cl.Error as exc:
            raise KernelBuildError(
                f"OpenCL build of kernels/opencl/{filename} failed on {self.device_name} "
                f"(options: {' '.join(options)}):\n{exc}"
            ) from None
        self._keep_log(filename, options, prg)
        return prg

    def _keep_log(self, filename: str, options: tuple[str, ...], prg: Any) -> None:
        try:
            log = prg.get_build_info(self.device, cl.program_build_info.LOG) or ""
        except cl.Error:
            return
        if log.strip():
            if len(self.build_logs) >= 64:  # bounded, like the program caches
                self.build_logs.pop(next(iter(self.build_logs)))
            self.build_logs[f"{filename} {' '.join(options)}"] = log.strip()

    def _build(self, filename: str, source: str, options: tuple[str, ...]) -> Any:
        """The program for (source, options) on this backend's device and context, built once.

        The base class's program cache is shared by every instance on the device, but an OpenCL
        program belongs to the context it was built in: another instance (its own context) makes
        its program from the cached one's device binary instead of compiling the source again.
        """
        options = ("-cl-std=CL1.2", *options, *self._fp32_options)
        # The cached entry holds the context the program was built in: Intel's CPU runtime destroys a
        # context when its creator lets go of it, programs or not ("INVALID_CONTEXT" afterwards).
        shared, context = self._program(
            source, options, lambda: (self._compile(filename, source, options), self.context)
        )  # fmt: skip
        if context == self.context:
            return shared

        def from_binary() -> Any:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", cl.CompilerWarning)
                    prg = cl.Program(self.context, [self.device], shared.binaries).build(options=list(options))
                self._keep_log(filename, options, prg)
                return prg
            except cl.Error:  # a driver that cannot reload its own binaries: compile the source
                return self._compile(filename, source, options)

        return self._cache("program", source_hash(source, options), from_binary)

    def _kernel(self, filename: str, kernel: str, options: tuple[str, ...]) -> Any:
        """The kernel object, fetched once per (file, kernel, options) and reused by every launch."""
        return self._cache(
            "kernel", (filename, kernel, options),
            lambda: cl.Kernel(self._build(filename, load_source("opencl", filename), options), kernel),
        )  # fmt: skip

    def _launch_key(self, function_name: str) -> tuple[str | None, str]:
        """(benchmark kernel name, knob family) of a kernel function, for its tuned local size."""
        name = function_name.removeprefix("pk_")
        for spec in sorted(ENVS.values(), key=lambda s: -len(s.kernel)):  # mountain_car_continuous first
            if name.startswith(spec.kernel + "_"):
                what = name[len(spec.kernel) + 1 :]
                return (None, "fused") if what == "rollout" else (f"step:{spec.id}", "step")
        for op in ("gae", "discounted_returns", "normalize", "gather"):
            if name.startswith(op):
                return op, op
        return None, "rollout" if name.startswith("mlp") else "step"

    def _ranges(self, n: int, kernel: Any = None) -> tuple[tuple[int], tuple[int] | None]:
        """Global and local size for ``n`` work-items with the ``local_size`` knob (tuned per kernel)."""
        ls = self.local_size
        if isinstance(ls, str) and ls == tuning.TUNED:
            keys = self.__dict__.setdefault("_launch_keys", {})  # per kernel object: a dict hit per launch
            if kernel not in keys:
                if len(keys) >= 256:  # kernels evicted from the kernel cache must not pile up here
                    keys.clear()
                keys[kernel] = self._launch_key(getattr(kernel, "function_name", ""))
            bench_name, family = keys[kernel]
            ls = self._tuned("local_size", family, bench_name)
        if ls is not None and (not isinstance(ls, int) or isinstance(ls, bool) or ls < 1):
            raise ValueError(f"local_size: expected {tuning.TUNED!r}, None or a positive int, got {ls!r}")
        if ls is None:
            return (n,), None
        return (-(-n // ls) * ls,), (ls,)  # the kernels bounds-check: round up to whole work-groups

    def _launch(self, kernel: Any, n: int, *args: Any) -> None:
        if n <= 0:
            return
        gs, ls = self._ranges(n, kernel)
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
        opts, vw = self._env_options(params.dtype, f"step:{spec.id}", "step")
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
        opts, vw = self._env_options(params.dtype, f"step:{spec.id}", "step")
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
        # One step per launch is the device data path: its own tuned entry (the family's, "fused", without one).
        path = "device" if steps_per_launch == 1 else "fused"
        bench_name = f"rollout:{spec.id}:{path}" + (":mlp" if policy.kind == 1 else "")
        opts, vw = self._env_options(dt, bench_name, "fused")
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
        gs, ls = self._ranges(-(-n // vw), k)
        for t0 in range(0, steps, steps_per_launch):
            k.set_arg(i_t0, np.int32(t0))
            k.set_arg(i_t0 + 1, np.int32(min(steps_per_launch, steps - t0)))
            cl.enqueue_nd_range_kernel(self.queue, k, gs, ls)

    def mlp_forward(self, policy_params, obs, hidden, out_dim):
        n, d = self._check_mlp(policy_params, obs, hidden, out_dim)
        out = self._empty((n, out_dim), np.float32)
        opts, vw = self._env_options(obs.dtype, None, "rollout")  # the per-step paths' MLP
        k = self._kernel("mlp.cl", "pk_mlp_forward", opts)
        self._launch(
            k, -(-n // vw), policy_params.data, np.int32(hidden), np.int32(d), np.int32(out_dim),
            obs.data, out.data, np.int32(n),
        )  # fmt: skip
        return out

    # ---- rollout buffer ops ------------------------------------------------------------------
    #: Rows of at most this many elements are gathered by a program built for their length.
    _GATHER_CONST_ROW = 64
    def _buffer_knob(self, op: str, name: str) -> int:
        """Layout knob ``name`` for buffer op ``op``: the attribute, or at tuning.TUNED the op's tuned
        default (per-machine cache, shipped table), else the GPU shape; checked here."""
        v = getattr(self, name)
        if isinstance(v, str) and v == tuning.TUNED:
            try:
                v = self.tuned_defaults.resolve(name, op, op).value
            except KeyError:  # no tuned entry: the GPU shape
                v = _GPU_SHAPE[name]
        if name.endswith("vector_width"):
            if isinstance(v, bool) or v not in _VECTOR_WIDTHS:
                raise ValueError(f"{name}: expected {tuning.TUNED!r}, 1, 2, 4, 8 or 16, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "scan_vectors_per_item" else 0):
            least = "a positive int" if name == "scan_vectors_per_item" else "0 (the GPU shape) or a positive int"
            raise ValueError(f"{name}: expected {tuning.TUNED!r} or {least}, got {v!r}")
        return v

    #: Bytes of private carry one work-group of a buffer scan may hold (PK_NV vectors of PK_VW values per
    #: work-item, live across the whole loop over t). PoCL's CPU driver runs a work-group on one thread's
    #: stack: 256 work-items x 32 KiB of carry (8 MiB) crashed it with a segmentation fault, 4 MiB ran, and
    #: nothing it advertises says so (CL_KERNEL_PRIVATE_MEM_SIZE 1 KiB, work-group size 4096). A larger
    #: work-group is never launched (_launch_scan); the bound is half the largest size seen to run.
    _MAX_GROUP_CARRY = 2 << 20

    def _launch_scan(self, op: str, kernel: Any, items: int, envs: int, dtype: Any, *args: Any) -> None:
        """Launch a buffer scan with a work-group whose private carry fits (_MAX_GROUP_CARRY): a tuned default
        that does not (measured in float32, run in float64) is halved until it does; a local_size set by hand
        that does not is refused with the largest that fits, before anything runs."""
        gs, ls = self._ranges(items, kernel)
        carry = envs * np.dtype(dtype).itemsize
        if ls is not None and ls[0] * carry > self._MAX_GROUP_CARRY:
            most = max(1, self._MAX_GROUP_CARRY // carry)
            setting = self.knob_setting("local_size")
            if not (isinstance(setting, str) and setting == tuning.TUNED):
                raise ValueError(
                    f"local_size: {ls[0]} work-items of {op} with {envs} envs each ({carry // 1024} KiB of private "
                    f"carry per work-item) exceed {self._MAX_GROUP_CARRY >> 20} MiB per work-group; use a "
                    f"local_size of at most {most}, or fewer scan_vectors_per_item"
                )
            size = 1 << int(math.log2(most))
            gs, ls = (-(-items // size) * size,), (size,)
        if items > 0:
            kernel(self.queue, gs, ls, *args)

    def _scan_options(self, op: str, dtype: Any) -> tuple[tuple[str, ...], int]:
        """Build options of gae / discounted_returns and the envs each work-item owns."""
        vw = self._width("scan_vector_width", self._buffer_knob(op, "scan_vector_width"), dtype)
        nv = self._buffer_knob(op, "scan_vectors_per_item")
        if vw * nv > 8192:  # the recursion's carry lives in private memory, PK_NV vectors of it
            raise ValueError(
                f"scan_vectors_per_item: at most {8192 // vw} with scan_vector_width {vw} "
                f"(8192 envs per work-item), got {nv}"
            )
        return (*self._real_options(dtype), f"-DPK_VW={vw}", f"-DPK_NV={nv}"), vw * nv

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
        opts, envs = self._scan_options("gae", dt)
        k = self._kernel("gae.cl", "pk_gae", opts)
        # gamma * lam is rounded in the env dtype on the host exactly as the reference does.
        self._launch_scan(
            "gae", k, -(-n // envs), envs, dt, rewards.data, values.data, next_values.data, terminated.data, truncated.data,
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
        opts, envs = self._scan_options("discounted_returns", dt)
        k = self._kernel("discounted_returns.cl", "pk_discounted_returns", opts)
        self._launch_scan(
            "discounted_returns", k, -(-n // envs), envs, dt, rewards.data, terminated.data, truncated.data, bootstrap.data, out.data,
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
        chunk = self._buffer_knob("normalize", "reduce_chunk")
        vw = self._buffer_knob("normalize", "reduce_vector_width")  # checked even where unused
        vw = self._width("reduce_vector_width", vw, dt) if chunk else 1
        per_item = max(1, chunk // vw)  # vectors per work-item of the apply pass
        opts = (*self._real_options(dt), f"-DPK_WG={wg}", f"-DPK_VW={vw}", f"-DPK_CHUNK={max(chunk, 1)}",
                f"-DPK_NV={per_item}")  # fmt: skip
        # The GPU shape: a fixed number of groups, each a tree over its grid-strided slices; the
        # chunk shape: one partial per chunk of `chunk` elements.
        groups = -(-n // chunk) if chunk else max(1, min(-(-n // wg), self.reduce_groups))
        # partials and stats: allocated once per (dtype, group count), reused by every call
        pcount = self._scratch(("normalize", "count"), (groups,), np.uint32)
        pmean = self._scratch(("normalize", "mean"), (groups,), dt)
        pm2 = self._scratch(("normalize", "m2"), (groups,), dt)
        stats = self._scratch(("normalize", "stats"), (2,), dt)
        finalize = self._kernel("normalize.cl", "pk_normalize_finalize", opts)
        apply = self._kernel("normalize.cl", "pk_normalize_apply", opts)
        if chunk:
            chunks = self._kernel("normalize.cl", "pk_normalize_chunks", opts)
            self._launch(chunks, groups, x.data, pcount.data, pmean.data, pm2.data, np.int32(n))
        else:
            partial = self._kernel("normalize.cl", "pk_normalize_partial", opts)
            partial(self.queue, (groups * wg,), (wg,), x.data, pcount.data, pmean.data, pm2.data,
                    np.int32(n))
        finalize(self.queue, (wg,), (wg,), pcount.data, pmean.data, pm2.data, stats.data,
                 np.int32(groups))
        self._launch(apply, -(-n // (vw * per_item)), x.data, out.data, stats.data, dt.type(eps), np.int32(n))

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
        rows = self._buffer_knob("gather", "gather_rows_per_item")
        vw = self._buffer_knob("gather", "gather_vector_width")  # checked even where unused
        opts: tuple[str, ...] = (f"-DREAL={_BITS_TYPE[x.dtype.itemsize]}",)
        if rows == 0 or row_len == 0:  # the GPU shape: one element per work-item
            k = self._kernel("gather.cl", kernel, opts)
            self._launch(k, b * row_len, x.data, indices.data, out.data, np.int32(row_len), np.int32(b))
            return
        vw = self._width("gather_vector_width", vw, x.dtype)
        opts = (*opts, f"-DPK_ROWS={rows}", f"-DPK_GVW={vw}")
        if row_len <= self._GATHER_CONST_ROW:  # short rows: the row length compiled in (gather.cl)
            opts = (*opts, f"-DPK_ROW_LEN={row_len}")
        k = self._kernel("gather.cl", kernel.replace("pk_gather", "pk_gather_rows"), opts)
        self._launch(k, -(-b // rows), x.data, indices.data, out.data, np.int32(row_len), np.int32(b))

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
