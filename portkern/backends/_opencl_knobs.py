"""The OpenCL backend's tuning knobs: where each knob's value comes from (the attribute, the tuned
defaults, the fallback) and the build options they turn into."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import tuning
from ..envs import ENVS

try:  # optional dependency (the backend's probe() reports it missing); opencl.py registers drivers first
    import pyopencl as cl
except ImportError:  # pragma: no cover - exercised only where pyopencl is absent
    cl = None

_VECTOR_WIDTHS = (1, 2, 4, 8, 16)
#: Knob values used when neither the per-machine cache nor the shipped table has the device
#: (portkern.tuning): safe rather than fast, and never the width the driver advertises. GPUs: one
#: env per work-item (the SIMT hardware vectorises across work-items) and the driver's work-group
#: size. CPUs: 16 envs per work-item, the width with the best worst case over the CPU drivers
#: measured (bench/results/dev-vm-2core-epyc-tune-pocl and -intel: at least 0.78 of each step kernel's best and
#: 0.64 of each rollout's on PoCL and Intel, against 0.73 and 0.55 for 8, 0.42 and 0.37 for 4); CPU
#: drivers do not vectorise sin/cos or the autoreset branches across work-items by themselves.
#: reduce_wg: the largest power of two up to 256 the device runs.
_FALLBACK_CPU_VW = 16
#: Layout knobs of the buffer ops without a tuned entry: the GPU shape, i.e. the original kernels (one
#: element or env per work-item). Never chosen by device type: a CPU gets its layout from tuning.
_GPU_SHAPE = {"scan_vector_width": 1, "scan_vectors_per_item": 1, "reduce_chunk": 0, "reduce_vector_width": 1,
              "gather_rows_per_item": 0, "gather_vector_width": 1, "gather_prefetch": 0,
              "gather_row_vector": 0}  # fmt: skip


class OpenCLKnobs:
    """Knob resolution of :class:`~portkern.backends.opencl.OpenCLBackend` (a mixin: the backend holds the state).

    Tuned defaults are per size class (portkern.tuning): each launching method names its size first
    (:meth:`_sized`: its parallel width: env count, a scan's columns, normalize's elements or gathered
    rows), and the knobs it then resolves (build options, work-group size) are its class's.
    """

    #: The size class of the launch being prepared (_sized); before any, the class of an unsized lookup.
    _launch_class: str = tuning.UNSIZED_CLASS

    def _sized(self, items: int) -> None:
        """Name the size of the launch about to be prepared: its knobs resolve in that size class. It is
        instance state, set by every launch method first: two threads launching on one instance at once
        could read each other's class, which costs speed only (each value a launch reads is checked, and
        every layout computes the same results)."""
        self._launch_class = tuning.size_class(items)

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
        (set tuning.TUNED to go back to it), of the size class of the last launch prepared (normalize
        names its size before reading it; knob_in_force("reduce_wg", "normalize", size) for another).
        """
        value = self._reduce_wg
        if isinstance(value, str) and value == tuning.TUNED:
            return self.tuned_defaults.resolve("reduce_wg", "normalize", "normalize", self._launch_class).value
        return value

    @reduce_wg.setter
    def reduce_wg(self, value: int | str) -> None:
        self._reduce_wg = value

    def knob_setting(self, knob: str) -> Any:
        return self._reduce_wg if knob == "reduce_wg" else getattr(self, knob)

    def _tuned(self, knob: str, family: str, kernel: str | None = None) -> Any:
        """The knob's value for a launch: the attribute, or at TUNED the kernel's tuned default in the
        launch's size class (_sized)."""
        value = getattr(self, knob)
        if isinstance(value, str) and value == tuning.TUNED:
            return self.tuned_defaults.resolve(knob, family, kernel, self._launch_class).value
        return value

    def knob_in_force(self, knob: str, kernel: str, size: int | None = None) -> tuning.Resolved:
        """The knob's value in the launches of benchmark kernel ``kernel`` at ``size`` (the suite's size:
        N envs, T*N elements, rows; its class by tuning.case_class), and its source: the attribute when set, else the tuned entry those
        launches read (see _knob_entry) in the size's class (``size_class`` says which class's entry
        gave it); without a size, the class of an unsized lookup (tuning.UNSIZED_CLASS)."""
        value = self.knob_setting(knob)
        if not (isinstance(value, str) and value == tuning.TUNED):
            return tuning.Resolved(value, "attribute", "")
        entry, family = self._knob_entry(knob, kernel)
        cls = tuning.UNSIZED_CLASS if size is None else tuning.case_class(kernel, size)  # a scan's: its columns
        try:
            got = self.tuned_defaults.resolve(knob, family, entry, cls)
            if knob.endswith("vector_width") and isinstance(got.value, int):
                narrowed = self._width(knob, got.value, np.float32)  # what float32 launches run, as the suite times
                if narrowed != got.value:
                    got = tuning.Resolved(narrowed, f"{got.source}, narrowed to {self.max_vector_bytes * 8}-bit vectors",
                                          got.entry, got.size_class)
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
        # The env part may carry structural values (step:Chain-v0/links=10, tuning.env_label): kept in the entry.
        if len(parts) < (3 if parts[0] == "rollout" else 2) or parts[1].split("/")[0] not in ENVS:
            raise ValueError(f"kernel: expected step:<env>, rollout:<env>:<path>[:mlp] or a buffer op, got {kernel!r}")
        spec = ENVS[parts[1].split("/")[0]]
        if parts[0] == "rollout" and parts[2] != "host":
            if knob == "local_size":
                return self._launch_key(f"pk_{spec.kernel}_rollout")
            return ":".join(("rollout", parts[1], "device" if parts[2] == "device" else "fused", *parts[3:])), "fused"
        return f"step:{parts[1]}", "step"

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

    def _buffer_knob(self, op: str, name: str) -> int:
        """Layout knob ``name`` for buffer op ``op``: the attribute, or at tuning.TUNED the op's tuned
        default in the launch's size class (per-machine cache, shipped table), else the GPU shape; checked here."""
        v = getattr(self, name)
        if isinstance(v, str) and v == tuning.TUNED:
            try:
                v = self.tuned_defaults.resolve(name, op, op, self._launch_class).value
            except KeyError:  # no tuned entry: the GPU shape
                v = _GPU_SHAPE[name]
        if name.endswith("vector_width"):
            if isinstance(v, bool) or v not in _VECTOR_WIDTHS:
                raise ValueError(f"{name}: expected {tuning.TUNED!r}, 1, 2, 4, 8 or 16, got {v!r}")
        elif name == "gather_row_vector":
            if isinstance(v, bool) or v not in (0, 1):
                raise ValueError(f"{name}: expected {tuning.TUNED!r}, 0 (element copies) or 1 (a row as one vector), got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "scan_vectors_per_item" else 0):
            least = "a positive int" if name == "scan_vectors_per_item" else "0 (the GPU shape) or a positive int"
            raise ValueError(f"{name}: expected {tuning.TUNED!r} or {least}, got {v!r}")
        return v
