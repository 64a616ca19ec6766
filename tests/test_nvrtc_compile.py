"""Every CUDA kernel builds through the CuPy backend's own NVRTC call, with its exact options, no GPU needed.

NVRTC comes from NVIDIA's PyPI wheel (``cuda-toolkit[nvrtc]`` in the test extra): this catches what
nvcc accepts and NVRTC, which the backend really uses at run time, does not.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from portkern._kernels import kernel_dir, load_source
from portkern.backends import _cuda_tools
from portkern.backends import cupy as cupy_backend
from portkern.backends._cuda_tools import compile_nvrtc, nvrtc_build, nvrtc_library, supported_archs
from portkern.envs import ENVS

pytestmark = pytest.mark.slow  # every CUDA kernel through NVRTC

SOURCES = sorted(p.name for p in kernel_dir("cuda").glob("*.cu"))
#: Device arches to build for: sm_90 gets a cubin; a device newer than any arch this NVRTC knows
#: gets PTX for the newest one it does know (the driver JIT-compiles that).
TARGETS = {"sm90": 90, "ptx": 1000}
#: The kernels an image holds: a cubin's per-function .text sections, PTX's .entry lines.
_CUBIN_KERNEL, _PTX_KERNEL = re.compile(rb"\.text\.(\w+)\0"), re.compile(rb"\.entry\s+(\w+)")


def _builds(src: str) -> dict[str, tuple[str, ...]]:
    """The options (past BASE_OPTIONS) the CuPy backend builds ``src`` with, by a readable name."""
    if src == "gather.cu":  # copies bits: one build per copy unit, REAL a type of that size
        dtypes = cupy_backend._COPY_UNITS.values()
    else:
        dtypes = cupy_backend._DTYPE_OPTIONS.keys()
    # normalize's reductions are built for the block size they launch with
    extra = (f"-DPK_WG={cupy_backend.CupyBackend.reduce_block_size}",) if src == "normalize.cu" else ()
    builds = {}
    for dt in dtypes:
        opts = cupy_backend._COPY_OPTIONS[np.dtype(dt)] + extra
        builds[opts[0].removeprefix("-DREAL=")] = opts
    return builds


CASES = [
    pytest.param(src, arch, opts, id=f"{Path(src).stem}-{target}-{real}")
    for src in SOURCES
    for target, arch in TARGETS.items()
    for real, opts in _builds(src).items()
]


@pytest.fixture(scope="module", autouse=True)
def nvrtc() -> None:
    lib = nvrtc_library()
    if not lib:
        pytest.fail(f"NVRTC is needed to test the CuPy backend's builds: {lib.how}")


def test_cupy_backend_builds_through_this_function() -> None:
    assert cupy_backend.compile_nvrtc is compile_nvrtc


def test_nvrtc_comes_from_the_wheel() -> None:
    lib = nvrtc_library()
    # "already loaded": something else in this process (CuPy, Numba) loaded a libnvrtc first
    assert lib.how.startswith("PyPI wheel nvidia-cuda-nvrtc") or lib.how.startswith("already loaded"), lib


@pytest.mark.parametrize(("src", "arch", "opts"), CASES)
def test_builds_with_backend_options(src: str, arch: int, opts: tuple[str, ...]) -> None:
    source = load_source("cuda", src)  # includes inlined, exactly as the backend builds it
    build = nvrtc_build(source, cupy_backend.BASE_OPTIONS + opts, arch, src)
    if arch in supported_archs():
        assert build.target == f"sm_{arch}" and build.image[:4] == b"\x7fELF"
    else:
        assert build.target == f"compute_{max(supported_archs())}"
        assert f".target sm_{max(supported_archs())}".encode() in build.image
    kernels = {k.decode() for k in (_CUBIN_KERNEL if build.is_cubin else _PTX_KERNEL).findall(build.image)}
    assert kernels and all(k.startswith("pk_") for k in kernels), kernels
    # an env's file holds the three kernels the backend launches for it
    launched = {f"pk_{s.kernel}_{op}" for s in ENVS.values() if f"{s.kernel}.cu" == src
                for op in ("reset", "step", "rollout")}  # fmt: skip
    assert launched <= kernels, f"{sorted(launched - kernels)} missing from the {build.target} image"
    assert build.log == "", build.log  # no warnings either


def test_build_error_carries_the_nvrtc_log() -> None:
    with pytest.raises(RuntimeError, match=r"NVRTC could not build bad\.cu with --std=c\+\+17: .*expected"):
        compile_nvrtc('extern "C" __global__ void f() { int x = ; }', ("--std=c++17",), 90, "bad.cu")


def test_warnings_land_in_the_log() -> None:
    build = nvrtc_build('#warning "pk"\nextern "C" __global__ void f() {}', (), 90, "warn.cu")
    assert build.image[:4] == b"\x7fELF" and "warning" in build.log


def test_empty_log_leaves_python_bytes_intact() -> None:
    # NVRTC writes even an empty log (one NUL) into the buffer given; b" " * 1 is CPython's shared b" ".
    build = nvrtc_build('extern "C" __global__ void f() {}', (), 90, "clean.cu")
    assert build.log == "" and bytes([0x20])[0] == 0x20  # a call: the compiler cannot fold it


def test_too_old_an_arch_says_which_is_the_oldest() -> None:
    with pytest.raises(RuntimeError, match=rf"its oldest is sm_{min(supported_archs())}"):
        compile_nvrtc('extern "C" __global__ void f() {}', (), 30, "old.cu")


def test_missing_bindings_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cuda_tools, "nvrtc", None)
    lib = nvrtc_library()
    assert not lib and "pip install" in lib.how
