"""NVIDIA GPUs without one: nvcc (NVIDIA's PyPI wheel first, see portkern/backends/_cuda_tools.py)
building cubins with ptxas's verbose report (``-Xptxas -v``: registers, stack frame, spill stores,
shared memory per kernel)."""

from __future__ import annotations

import re
import shutil
from functools import lru_cache
from pathlib import Path

from ..backends._cuda_tools import NVCC_HINT, find_nvcc
from .base import BuildFailed, first_error, KernelResult, run, staged, Tool

#: The flags the backends build with (contraction off, subnormals kept; tests/test_cuda_compile.py).
FLAGS = ("--fmad=false", "-ftz=false", "--std=c++17")


@lru_cache(maxsize=None)
def find() -> Tool:
    found = find_nvcc()
    if not found:
        return Tool("nvcc", None, install=NVCC_HINT)
    if shutil.which("g++") is None:  # nvcc runs the host preprocessor even for -cubin
        return Tool("nvcc", None, install="apt-get install g++ (nvcc's host compiler)")
    out = run([found.path, "--version"], timeout=60).stdout.strip().splitlines()
    version = next((ln for ln in out if "release" in ln), out[-1] if out else "unknown")
    return Tool("nvcc", found.path, f"{version.strip()} ({found.how})", NVCC_HINT)


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text: str) -> list[KernelResult]:
    out: list[KernelResult] = []
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            out.append(KernelResult(m.group(1), True, simd=32))
            continue
        if not out:
            continue
        k = out[-1]
        if m := _FRAME.search(line):
            k.scratch_bytes, k.spills = int(m.group(1)), int(m.group(2))
            k.extra["spill_loads"] = int(m.group(3))
        if m := _USED.search(line):
            k.registers["regs"] = int(m.group(1))
            k.lds_bytes = int(s.group(1)) if (s := _SMEM.search(line)) else 0
    return out


def build(source: str, filename: str, target: str, options: tuple[str, ...]) -> list[KernelResult]:
    tool = find()
    with staged(tool, source, filename) as src:
        tmp = str(src.parent)
        res = run([tool.path, f"-arch={target}", "-cubin", "-Xptxas", "-v", *FLAGS, *options,
                   "-o", str(Path(tmp) / "out.cubin"), str(src)], cwd=tmp)  # fmt: skip
    if res.returncode:
        raise BuildFailed(first_error(res.stderr + res.stdout))
    return parse_ptxas(res.stderr + res.stdout)
