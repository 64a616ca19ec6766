"""Compilers for GPUs this machine does not have, and the resources they report (``portkern port-check``).

One module per toolchain (find it, run it, parse its resource report): ``amd`` (clang with ROCm's
device libraries: OpenCL C, and CUDA C as HIP), ``intel`` (ocloc), ``nvidia`` (nvcc with ptxas -v),
``spirv`` (clang-15 + llvm-spirv-15 + spirv-val); ``targets`` holds the targets and the occupancy
arithmetic with each architecture's published limits. Compile-level only: nothing here runs a kernel.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from . import amd, intel, nvidia, spirv
from .base import APT_INSTALL, BuildFailed, KernelResult, Tool
from .targets import DEFAULT_TARGETS, TARGETS, parse_targets


#: Every AMD target: one device-library folder serves them all (amd.device_libs makes what is missing once).
_GFX = tuple(t for t in TARGETS if t.startswith("gfx"))


#: toolchain name -> build(job) -> the kernels' results (raises BuildFailed with the first error line).
TOOLCHAINS: dict[str, Callable[[Any], list[KernelResult]]] = {
    "nvcc": lambda j: nvidia.build(j.source, j.file, j.target, j.options),
    "amd-ocl": lambda j: amd.build(j.source, j.file, j.target, j.options, "opencl", _GFX),
    "amd-hip": lambda j: amd.build(j.source, j.file, j.target, j.options, "cuda", _GFX),
    "ocloc": lambda j: intel.build(j.source, j.file, j.target, j.options),
    "spirv": lambda j: spirv.build(j.source, j.file, j.target, j.options),
}


#: Each toolchain's fixed flags, part of every build's cache key (a change to them rebuilds).
FLAGS: dict[str, tuple[str, ...]] = {"nvcc": nvidia.FLAGS, "amd-ocl": amd.OCL_FLAGS, "amd-hip": amd.HIP_FLAGS,
                                     "ocloc": intel.FLAGS, "spirv": spirv.LEVELS}  # fmt: skip


def toolchain_tools(names: Sequence[str]) -> dict[str, Tool]:
    """The located compiler of each toolchain named (a Tool that is falsy says how to install it)."""
    find = {"nvcc": nvidia.find, "amd-ocl": lambda: amd.find(_GFX), "amd-hip": lambda: amd.find(_GFX),
            "ocloc": intel.find, "spirv": spirv.find}  # fmt: skip
    return {n: find[n]() for n in names}


__all__ = ["APT_INSTALL", "DEFAULT_TARGETS", "FLAGS", "TARGETS", "TOOLCHAINS", "BuildFailed", "KernelResult", "Tool",
           "parse_targets", "toolchain_tools"]  # fmt: skip
