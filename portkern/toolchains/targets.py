"""The GPU targets of ``portkern port-check`` and the occupancy each one's registers allow.

Occupancy here is arithmetic on the compiler's register (and shared-memory) figures with each
architecture's published limits; it is what the registers permit, not what a launch achieves.
Sources of the limits, per family:

* NVIDIA sm_80 / sm_90: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
  Specifications per Compute Capability" (64K 32-bit registers per SM, 64 resident warps, 32
  resident blocks, 255 registers per thread; shared memory per SM 164 KB on 8.0, 228 KB on 9.0), and
  the CUDA Occupancy Calculator's allocation rule (registers per warp rounded up to 256).
* AMD CDNA2 gfx90a / CDNA3 gfx942: LLVM's AMDGPUUsage and AMDGPUBaseInfo (``getVGPRAllocGranule``,
  ``getTotalNumVGPRs``): a unified 512-entry VGPR file per SIMD lane shared by ArchVGPRs and AGPRs
  (AGPRs start at the ArchVGPR count rounded up to 4), allocation granule 8, at most 8 waves per SIMD;
  "AMD Instinct MI200 / MI300 CDNA ISA" reference guides.
* AMD RDNA3 gfx1100: the same LLVM sources: 1536 VGPRs per SIMD in wave32, granule 24, at most 16
  waves per SIMD ("RDNA3 Instruction Set Architecture" reference guide).
* Intel Xe-HPC (pvc) / Xe-HPG (dg2): oneAPI GPU Optimization Guide, "Intel Xe GPU Architecture": 8
  hardware threads per vector engine with 128 GRF; with 256 GRF ("large GRF mode", Xe-HPC) 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, floor

#: The block size the CUDA C launches use (portkern/backends/_cuda_kernels.py: block_size), for occupancy.
CUDA_BLOCK = 256


@dataclass(frozen=True)
class Target:
    name: str
    vendor: str  # NVIDIA, AMD, Intel, Khronos
    family: str  # words for the architecture
    toolchains: tuple[str, ...]  # which compilers build for it: "nvcc", "amd-ocl", "amd-hip", "ocloc", "spirv"
    occupancy_table: str  # which published table the occupancy uses
    fp64: bool = True  # has float64 hardware (Xe-HPG has none: its OpenCL driver lacks cl_khr_fp64)


TARGETS: dict[str, Target] = {
    "sm_80": Target("sm_80", "NVIDIA", "Ampere (A100)", ("nvcc",), "CUDA Programming Guide, CC 8.0"),
    "sm_90": Target("sm_90", "NVIDIA", "Hopper (H100)", ("nvcc",), "CUDA Programming Guide, CC 9.0"),
    "gfx90a": Target("gfx90a", "AMD", "CDNA2 (MI200)", ("amd-ocl", "amd-hip"), "LLVM AMDGPUUsage, gfx90a"),
    "gfx942": Target("gfx942", "AMD", "CDNA3 (MI300)", ("amd-ocl", "amd-hip"), "LLVM AMDGPUUsage, gfx942"),
    "gfx1100": Target("gfx1100", "AMD", "RDNA3 (RX 7900)", ("amd-ocl", "amd-hip"), "LLVM AMDGPUUsage, gfx11"),
    "pvc": Target("pvc", "Intel", "Xe-HPC (Max 1550)", ("ocloc",), "oneAPI GPU Optimization Guide, Xe-HPC"),
    "dg2": Target("dg2", "Intel", "Xe-HPG (Arc A770)", ("ocloc",), "oneAPI GPU Optimization Guide, Xe-HPG",
                  fp64=False),
    "spirv": Target("spirv", "Khronos", "SPIR-V 1.x (OpenCL)", ("spirv",), "none: no hardware"),
}
#: Every target a plain ``portkern port-check`` builds for, in table order.
DEFAULT_TARGETS = tuple(TARGETS)
#: Each toolchain's source language.
TOOLCHAIN_API = {"nvcc": "cuda", "amd-hip": "cuda", "amd-ocl": "opencl", "ocloc": "opencl", "spirv": "opencl"}


def parse_targets(text: str | None) -> tuple[str, ...]:
    """``--targets sm_90,gfx942``: names checked against :data:`TARGETS` (a ValueError naming the bad one)."""
    if not text:
        return DEFAULT_TARGETS
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [t for t in names if t not in TARGETS]
    if bad or not names:
        raise ValueError(f"--targets: unknown target {', '.join(bad) or repr(text)}; expected some of "
                         f"{', '.join(TARGETS)}")  # fmt: skip
    return names


# ---- occupancy ----------------------------------------------------------------------------------
_NV_SMEM = {"sm_80": 164 * 1024, "sm_90": 228 * 1024}


def _nvidia(target: str, regs: int, shared: int) -> tuple[int, int]:
    warps_per_block = CUDA_BLOCK // 32
    per_warp = ceil(max(regs, 1) * 32 / 256) * 256
    blocks = min(32, floor(65536 / per_warp) // warps_per_block, 64 // warps_per_block)
    if shared:
        blocks = min(blocks, _NV_SMEM[target] // shared)
    return blocks * warps_per_block, 64


def _amd(target: str, vgpr: int, agpr: int) -> tuple[int, int]:
    if target == "gfx1100":
        total, granule, cap = 1536, 24, 16
        used = vgpr
    else:  # CDNA2/3: AGPRs follow the ArchVGPRs (rounded up to 4) in one 512-entry file
        total, granule, cap = 512, 8, 8
        used = (ceil(vgpr / 4) * 4 + agpr) if agpr else vgpr
    used = ceil(max(used, 1) / granule) * granule
    return min(cap, total // used), cap


def _intel(grf: int) -> tuple[int, int]:
    return (8 if grf <= 128 else 4), 8


def occupancy(target: str, registers: dict[str, int], lds_bytes: int | None) -> dict[str, object] | None:
    """Resident warps/waves/threads the registers allow, of the most possible, or None where not defined."""
    if target in _NV_SMEM and "regs" in registers:
        got, cap = _nvidia(target, registers["regs"], lds_bytes or 0)
        unit = "warps/SM"
    elif target.startswith("gfx") and "VGPR" in registers:
        got, cap = _amd(target, registers["VGPR"], registers.get("AGPR", 0))
        unit = "waves/SIMD"
    elif target in ("pvc", "dg2") and "GRF" in registers:
        got, cap = _intel(registers["GRF"])
        unit = "threads/EU"
    else:
        return None
    return {"resident": got, "max": cap, "unit": unit, "fraction": round(got / cap, 3),
            "table": TARGETS[target].occupancy_table}  # fmt: skip
