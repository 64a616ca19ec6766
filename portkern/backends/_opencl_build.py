"""The OpenCL backend's programs and launches: build options, compiling with the build log kept,
the program cache shared across contexts, kernel objects and launch ranges."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .. import tuning
from .._kernels import intel_gpu_options, load_source, source_hash
from ..envs import ENVS

try:  # optional dependency (the backend's probe() reports it missing); opencl.py registers drivers first
    import pyopencl as cl
except ImportError:  # pragma: no cover - exercised only where pyopencl is absent
    cl = None


class KernelBuildError(RuntimeError):
    """An OpenCL kernel file failed to build; the message names the file and carries the build log."""


def _data(a: Any) -> Any:
    """What a pyopencl launch takes for an array argument: its buffer (the ABI's pointer)."""
    return a.data


class OpenCLPrograms:
    """Programs and launches of :class:`~portkern.backends.opencl.OpenCLBackend` (a mixin)."""

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

    def _intel_options(self, options: tuple[str, ...], filename: str) -> tuple[str, ...]:
        """The register-file option of an Intel GPU (intel_gpu_options; Xe-HPC told apart by its float64, as
        kernels/opencl/pk_policy.h does); none on other devices."""

        d = self.device
        if not d.type & cl.device_type.GPU or "intel" not in d.vendor.lower():
            return ()
        return intel_gpu_options(bool(self.supports_float64), options, filename)

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
        options = ("-cl-std=CL1.2", *options, *self._fp32_options, *self._device_options,
                   *self._intel_options(options, filename))  # fmt: skip
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

    def _entry_of(self, kernel: Any, key: tuple[str | None, str] | None = None) -> tuple[str | None, str]:
        """(benchmark kernel name, family) whose tuned local size ``kernel`` reads: ``key`` where the function
        name does not say it all (an env built for a chain's K reads that K's entry, tuning.env_label), else
        derived from the function name. Kept per kernel object, which is one per build options."""
        keys = self.__dict__.setdefault("_launch_keys", {})  # per kernel object: a dict hit per launch
        if kernel not in keys:
            if len(keys) >= 256:  # kernels evicted from the kernel cache must not pile up here
                keys.clear()
            keys[kernel] = key or self._launch_key(getattr(kernel, "function_name", ""))
        return keys[kernel]

    def _ranges(self, n: int, kernel: Any = None) -> tuple[tuple[int], tuple[int] | None]:
        """Global and local size for ``n`` work-items with the ``local_size`` knob (tuned per kernel)."""
        ls = self.local_size
        if isinstance(ls, str) and ls == tuning.TUNED:
            bench_name, family = self._entry_of(kernel)
            ls = self._tuned("local_size", family, bench_name)
        if ls is not None and (not isinstance(ls, int) or isinstance(ls, bool) or ls < 1):
            raise ValueError(f"local_size: expected {tuning.TUNED!r}, None or a positive int, got {ls!r}")
        if ls is None:
            return (n,), None
        return (-(-n // ls) * ls,), (ls,)  # the kernels bounds-check: round up to whole work-groups

    def _launch(self, kernel: Any, n: int, *args: Any, key: tuple[str | None, str] | None = None) -> None:
        """``key``: the tuned local size's entry, where the function name does not give it (:meth:`_entry_of`)."""
        if n <= 0:
            return
        if key is not None:
            self._entry_of(kernel, key)
        gs, ls = self._ranges(n, kernel)
        self._enqueue(kernel, gs, ls, args)

    def _enqueue(self, kernel: Any, gs: tuple[int, ...], ls: tuple[int, ...] | None, args: tuple[Any, ...]) -> None:
        """Enqueue ``kernel`` over ``gs`` / ``ls`` with ``args`` (every launch of the backend comes here or sets
        its arguments itself). A kernel object's first launch declares its scalar arguments' dtypes to pyopencl
        (``Kernel.set_scalar_arg_dtypes``, from the NumPy scalars ``_abi.pack`` makes; buffers: None): without
        them pyopencl converts each scalar generically on every call, 60-75 us of a nine-argument launch on PoCL
        and Intel's CPU runtime, against 9-13 us with them (the enqueue alone: 6-11 us; dev VM's Xeon)."""
        typed = self.__dict__.setdefault("_typed_kernels", set())  # per kernel object, as _launch_keys
        if kernel not in typed:
            if len(typed) >= 256:  # evicted kernels must not pile up here; re-declaring is harmless
                typed.clear()
            kernel.set_scalar_arg_dtypes([a.dtype if isinstance(a, np.generic) else None for a in args])
            typed.add(kernel)
        kernel(self.queue, gs, ls, *args)
