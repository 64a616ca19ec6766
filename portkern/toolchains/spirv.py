"""SPIR-V: OpenCL C through clang-15 (``-target spir64``, LLVM bitcode) and ``llvm-spirv-15``, checked by
``spirv-val``; the result loads on any OpenCL 2.1+ runtime through ``clCreateProgramWithIL``.

The optimisation level is the highest of -O2, -O1, -O0 whose SPIR-V the translator writes and the
validator accepts: llvm-spirv-15 aborts on clang-15's -O2 bitcode of the env kernels, and its -O1
output of them fails spirv-val (a block that is the merge block of two headers), so the env kernels
come out at -O0 and the buffer ops higher; each build records the level it used and why the higher
ones were rejected. No registers: SPIR-V is not machine code.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from pathlib import Path

from .base import APT_INSTALL, BuildFailed, first_error, KernelResult, run, staged, Tool, version_line, which

LEVELS = ("-O2", "-O1", "-O0")


@lru_cache(maxsize=None)
def find() -> Tool:
    clang, translator, val = which("clang-15"), which("llvm-spirv-15", "llvm-spirv"), which("spirv-val")
    if clang is None or translator is None:
        return Tool("clang-15 + llvm-spirv-15", None, install=APT_INSTALL)
    version = f"{version_line(clang, '--version')}; llvm-spirv {version_line(translator, '--version')}"
    if val:
        version += f"; {version_line(val, '--version')}"
    return Tool("clang-15 + llvm-spirv-15", clang, version, APT_INSTALL)


def entry_points(spv: bytes) -> list[str]:
    """Names of the module's OpEntryPoint instructions (the kernels)."""
    words = struct.unpack(f"<{len(spv) // 4}I", spv[: len(spv) // 4 * 4])
    if not words or words[0] != 0x07230203:
        raise BuildFailed("not a SPIR-V module (bad magic number)")
    names, i = [], 5
    while i < len(words):
        count, opcode = words[i] >> 16, words[i] & 0xFFFF
        if count == 0:
            break
        if opcode == 15:  # OpEntryPoint: model, id, name (a nul-terminated string in words)
            raw = struct.pack(f"<{count - 3}I", *words[i + 3: i + count])
            names.append(raw.split(b"\0", 1)[0].decode())
        i += count
    return names


def compile_spirv(source: str, filename: str, options: tuple[str, ...]) -> tuple[bytes, str, list[str]]:
    """(SPIR-V module, the -O level used, why each higher level was rejected) for an OpenCL C source."""
    tool = find()
    translator, val = which("llvm-spirv-15", "llvm-spirv"), which("spirv-val")
    rejected: list[str] = []
    with staged(tool, source, filename) as src:
        tmp = str(src.parent)
        for level in LEVELS:
            bc, spv = Path(tmp) / f"k{level}.bc", Path(tmp) / f"k{level}.spv"
            res = run([tool.path, "-x", "cl", "-cl-std=CL1.2", "-target", "spir64", level, "-c", "-emit-llvm",
                       *options, "-o", str(bc), str(src)])  # fmt: skip
            if res.returncode:  # a source error: no lower level will help
                raise BuildFailed(first_error(res.stderr))
            res = run([translator, str(bc), "-o", str(spv)])
            if res.returncode or not spv.is_file():
                rejected.append(f"{level}: llvm-spirv failed ({first_error(res.stderr) if res.stderr else 'crashed'})")
                continue
            if val:
                res = run([val, str(spv)])
                if res.returncode:
                    rejected.append(f"{level}: spirv-val: {first_error(res.stderr + res.stdout)}")
                    continue
            return spv.read_bytes(), level, rejected
    raise BuildFailed("; ".join(rejected))


def build(source: str, filename: str, target: str, options: tuple[str, ...]) -> list[KernelResult]:
    spv, level, rejected = compile_spirv(source, filename, options)
    extra = {"opt_level": level, "bytes": len(spv), "spirv_val": "passes" if which("spirv-val") else "not run"}
    if rejected:
        extra["rejected"] = rejected
    return [KernelResult(name, True, extra=dict(extra)) for name in entry_points(spv)]
