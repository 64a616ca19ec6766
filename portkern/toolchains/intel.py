"""Intel GPUs without one: ``ocloc`` (Intel's offline compiler, Debian's ``intel-opencl-icd``) for
Xe-HPC (pvc) and Xe-HPG (dg2).

ocloc prints a warning only for kernels that spill ("compiled SIMD32 allocated 128 regs and spilled
around 291"); the other figures come from the device binary itself. The 22.x ocloc writes an ELF
whose "Intel(R) OpenCL Device Binary" section holds patch tokens (the layout of IGC's
``patch_list.h``/``patch_shared.h``): the execution-environment token gives the SIMD width and the
GRF count, the VFE-state token the scratch space per thread, the local-surface token the SLM, the
stateless-private-memory token the private memory per lane (counted in the scratch figure: it is memory all the same).
"""

from __future__ import annotations

import re
import struct
import tempfile
from functools import lru_cache
from pathlib import Path

from .._kernels import intel_gpu_options
from .base import APT_INSTALL, BuildFailed, first_error, KernelResult, run, staged, Tool, which

#: ocloc's build options besides the build's own, as the OpenCL backend builds: OpenCL C 1.2; then the register
#: file option of portkern._kernels.intel_gpu_options (Xe-HPC's large GRF mode).
FLAGS = ("-cl-std=CL1.2",)
#: Patch tokens read here (IGC's PATCH_TOKEN enum).
ALLOCATE_LOCAL_SURFACE, MEDIA_VFE_STATE, EXECUTION_ENVIRONMENT, STATELESS_PRIVATE_MEMORY = 15, 18, 23, 38


@lru_cache(maxsize=None)
def find() -> Tool:
    path = which("ocloc")
    if path is None:
        return Tool("ocloc", None, install=APT_INSTALL)
    with tempfile.TemporaryDirectory(prefix="portkern-ocloc-") as tmp:
        run([path, "query", "OCL_DRIVER_VERSION"], cwd=tmp, timeout=60)
        f = Path(tmp) / "OCL_DRIVER_VERSION"
        version = f.read_text().strip().strip("\0").strip() if f.is_file() else "unknown"
    return Tool("ocloc", path, f"ocloc (Intel compute runtime {version})", APT_INSTALL)


def _sections(elf: bytes) -> dict[str, bytes]:
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = elf[heads[shstrndx][4]: heads[shstrndx][4] + heads[shstrndx][5]]
    out = {}
    for name_off, _type, _flags, _addr, off, size in heads:
        name = names[name_off: names.index(b"\0", name_off)].decode(errors="replace")
        out[name] = elf[off: off + size]
    return out


def parse_binary(elf: bytes) -> dict[str, KernelResult]:
    """Per kernel: SIMD width, GRF count, scratch per thread, SLM, from the patch-token device binary."""
    blob = next((v for k, v in _sections(elf).items() if "Device Binary" in k), None)
    if blob is None:
        raise BuildFailed("ocloc's binary has no patch-token section (a zebin: not read by this ocloc parser)")
    _magic, _ver, _dev, _ptr, nkernels, _step, prog_patch = struct.unpack_from("<7I", blob, 0)
    pos = 28 + prog_patch
    out: dict[str, KernelResult] = {}
    for _ in range(nkernels):
        _ck, _hash, name_size, patch_size, heap, gsh, dsh, ssh, _unpadded = struct.unpack_from("<IQ7I", blob, pos)
        pos += 40
        name = blob[pos: pos + name_size].split(b"\0", 1)[0].decode()
        pos += name_size + heap + gsh + dsh + ssh
        k = KernelResult(name, True, scratch_bytes=0, lds_bytes=0, spills=0)
        end = pos + patch_size
        while pos < end:
            token, size = struct.unpack_from("<II", blob, pos)
            body = blob[pos + 8: pos + size]
            if token == EXECUTION_ENVIRONMENT and len(body) >= 84:
                words = struct.unpack_from("<21I", body, 0)
                k.simd = words[3]
                k.registers["GRF"] = words[20]
            elif token == MEDIA_VFE_STATE and len(body) >= 8:
                k.scratch_bytes = max(k.scratch_bytes or 0, struct.unpack_from("<2I", body)[1])
            elif token == ALLOCATE_LOCAL_SURFACE and len(body) >= 8:
                k.lds_bytes = struct.unpack_from("<2I", body)[1]
            elif token == STATELESS_PRIVATE_MEMORY and len(body) >= 16:
                k.extra["private_bytes"] = struct.unpack_from("<4I", body)[3]
            pos += max(size, 8)
        pos = end
        # Private memory (arrays IGC could not keep in registers; per lane) is memory traffic as scratch is:
        # counted in scratch_bytes per thread, as the lanes of a thread need it.
        if k.extra.get("private_bytes") and k.simd:
            k.scratch_bytes = max(k.scratch_bytes or 0, k.extra["private_bytes"] * k.simd)
        out[name] = k
    return out


_SPILL = re.compile(r"kernel (\S+)\s+compiled SIMD(\d+) allocated (\d+) regs and spilled around (\d+)")


def build(source: str, filename: str, target: str, options: tuple[str, ...]) -> list[KernelResult]:
    tool = find()
    with staged(tool, source, filename) as src:
        tmp = str(src.parent)
        flags = (*FLAGS, *options, *intel_gpu_options(target == "pvc", options, filename))
        res = run([tool.path, "compile", "-file", str(src), "-device", target, "-options",
                   " ".join(flags), "-output", "k", "-out_dir", tmp], cwd=tmp)  # fmt: skip
        text = res.stdout + res.stderr
        bins = sorted(Path(tmp).glob("k*.bin"))
        if res.returncode or not bins:
            raise BuildFailed(first_error(text))
        kernels = parse_binary(bins[0].read_bytes())
    for name, simd, regs, spilled in _SPILL.findall(text):
        if name in kernels:
            kernels[name].spills = int(spilled)
            kernels[name].extra["spill_warning"] = f"SIMD{simd}, {regs} regs, spilled around {spilled}"
    return list(kernels.values())
