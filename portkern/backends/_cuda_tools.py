"""The CUDA compilers without a CUDA toolkit or a GPU: NVRTC and nvcc, NVIDIA's PyPI wheels first.

NVIDIA publishes both as wheels that install and run on any x86-64 Linux machine, with or
without a GPU or driver (``pip install 'cuda-toolkit[nvrtc]==13.*'`` and
``'cuda-toolkit[nvcc,crt,cudart,nvvm]==13.*'``; they land under ``site-packages/nvidia/cu13``).

NVRTC is called through ``cuda.bindings.nvrtc``, NVIDIA's own Python bindings (cuda-python),
rather than ctypes or CuPy's private ``cupy_backends`` binding: it is kept in step with each
CUDA release, needs no CuPy, and numba-cuda (in the ``cuda`` and ``test`` extras) already
depends on it. It loads libnvrtc through ``cuda.pathfinder``: one already loaded in this
process, else the wheel's, then conda's, the system loader's and ``CUDA_PATH``/``CUDA_HOME``'s.
Because nothing here imports CuPy, the tests build every kernel through exactly the function
the CuPy backend calls at run time.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
from dataclasses import dataclass
from functools import cache

try:
    from cuda import pathfinder
    from cuda.bindings import nvrtc
except ImportError:  # optional: the error comes when NVRTC is asked for
    nvrtc = None
    pathfinder = None

#: Where the CUDA 13 compilers come from on a machine with no CUDA toolkit (both in ``portkern[test]``).
NVRTC_HINT = "pip install 'cuda-bindings==13.*' 'cuda-toolkit[nvrtc]==13.*'"
NVCC_HINT = "pip install 'cuda-toolkit[nvcc,crt,cudart,nvvm]==13.*' (or put a CUDA toolkit's nvcc on PATH)"
#: The distributions whose ``bin/nvcc`` is looked for: CUDA 13's, whose sibling wheels share its prefix.
_NVCC_WHEELS = ("nvidia-cuda-nvcc",)
#: ``cuda.pathfinder``'s ``found_via`` -> the words for it.
_FOUND_VIA = {"site-packages": "PyPI wheel", "conda": "conda environment", "system": "system loader",
              "CUDA_HOME": "CUDA_PATH/CUDA_HOME"}  # fmt: skip


class NvrtcUnavailable(RuntimeError):
    """NVRTC cannot be used here: cuda-bindings is missing or no libnvrtc could be loaded."""


@dataclass(frozen=True)
class Found:
    """A located CUDA tool: its ``path`` and ``how`` it was found, or ``path=None`` and why not in ``how``."""

    path: str | None
    how: str

    def __bool__(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class NvrtcBuild:
    """One NVRTC build: the image for ``cupy.cuda.function.Module.load``, its target and NVRTC's log."""

    image: bytes  # an ELF cubin, or PTX text
    target: str  # the -arch option it was built with: sm_XY (cubin) or compute_XY (PTX)
    log: str  # empty for a clean build; warnings otherwise

    @property
    def is_cubin(self) -> bool:
        return self.target.startswith("sm_")


# ---- nvcc ---------------------------------------------------------------------------------------
def find_nvcc() -> Found:
    """nvcc from NVIDIA's PyPI wheel (``nvidia-cuda-nvcc``) if installed, else the first on PATH.

    nvcc still needs a host C++ compiler (``g++``) even for ``-cubin`` and ``--ptx``: it runs the
    host preprocessor over every ``.cu``. The wheel's ``nvcc.profile`` points nvcc at the headers
    and ``cicc`` of its sibling wheels (nvidia-cuda-crt, nvidia-cuda-runtime, nvidia-nvvm).
    """
    for dist_name in _NVCC_WHEELS:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.parts[-2:] == ("bin", "nvcc"):
                path = str(dist.locate_file(f))
                if os.access(path, os.X_OK):
                    return Found(path, f"PyPI wheel {dist.metadata['Name']} {dist.version}")
    path = shutil.which("nvcc")
    if path is not None:
        return Found(path, "PATH")
    return Found(None, f"no nvcc: neither the nvidia-cuda-nvcc wheel nor nvcc on PATH; {NVCC_HINT}")


# ---- NVRTC --------------------------------------------------------------------------------------
def nvrtc_library() -> Found:
    """The libnvrtc that :func:`compile_nvrtc` uses (loading it if need be), and where it came from."""
    if nvrtc is None:
        return Found(None, f"cuda-bindings is not installed: {NVRTC_HINT}")
    try:
        lib = pathfinder.load_nvidia_dynamic_lib("nvrtc")  # cached: the very handle cuda.bindings uses
    except Exception as exc:
        return Found(None, f"no libnvrtc could be loaded ({' '.join(str(exc).split())}): {NVRTC_HINT}")
    how = _FOUND_VIA.get(lib.found_via, lib.found_via)
    if lib.found_via == "site-packages":
        try:
            how += f" nvidia-cuda-nvrtc {importlib.metadata.version('nvidia-cuda-nvrtc')}"
        except importlib.metadata.PackageNotFoundError:
            pass
    elif lib.was_already_loaded_from_elsewhere:
        how = "already loaded in this process"
    return Found(lib.abs_path, how)


def _ok(result: tuple, what: str) -> tuple:
    """Unwrap cuda.bindings' ``(nvrtcResult, *values)``, raising on anything but success."""
    err, *values = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
    return tuple(values)


@cache
def _nvrtc_ready() -> None:
    lib = nvrtc_library()
    if not lib:
        raise NvrtcUnavailable(f"NVRTC unavailable: {lib.how}")


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC that :func:`compile_nvrtc` uses."""
    _nvrtc_ready()
    return _ok(nvrtc.nvrtcVersion(), "nvrtcVersion")


@cache
def supported_archs() -> tuple[int, ...]:
    """The ``sm_XY`` this NVRTC can build cubins for, as ``XY``."""
    _nvrtc_ready()
    return tuple(_ok(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")[0])


def _fetch(prog, get_size, get) -> bytes:
    """One of the program's outputs (log, cubin, PTX), NUL terminator included."""
    (size,) = _ok(get_size(prog), get_size.__name__)
    # A fresh writable buffer: NVRTC writes into it, and ``b" " * size`` can be an interned bytes object.
    buf = bytearray(size)
    _ok(get(prog, buf), get.__name__)
    return bytes(buf)


def _log(prog) -> str:
    log = _fetch(prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
    return log.rstrip(b"\0").decode(errors="replace").strip()


def nvrtc_build(source: str, options: tuple[str, ...], arch: int, name: str = "kernel.cu") -> NvrtcBuild:
    """NVRTC build: a cubin for ``sm_<arch>``, or PTX for the newest older arch this NVRTC knows.

    Not ``cupy.RawModule(code=...)``: CuPy appends ``-ftz=true`` to every NVRTC build, which
    flushes float32 subnormals the reference keeps; the options here are exactly ours.
    """
    archs = supported_archs()
    older = [a for a in archs if a <= arch]
    if arch in archs:
        target = f"sm_{arch}"
    elif older:
        target = f"compute_{max(older)}"  # the driver JIT-compiles it for the newer device
    else:
        version = ".".join(map(str, nvrtc_version()))
        raise RuntimeError(f"NVRTC {version} cannot build for sm_{arch}: its oldest is sm_{min(archs)}")
    (prog,) = _ok(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in (*options, f"-arch={target}")]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _log(prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = " ".join(log.split())
            raise RuntimeError(f"NVRTC could not build {name} with {' '.join(options)}: {log}")
        if target.startswith("sm_"):
            image = _fetch(prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        else:  # without its NUL, as CuPy's own getPTX: Python bytes stay NUL-terminated underneath
            image = _fetch(prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX).rstrip(b"\0")
        return NvrtcBuild(image, target, log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_nvrtc(source: str, options: tuple[str, ...], arch: int, name: str = "kernel.cu") -> bytes:
    """The CuPy backend's build: :func:`nvrtc_build`'s image, for ``cupy.cuda.function.Module.load``."""
    return nvrtc_build(source, options, arch, name).image
