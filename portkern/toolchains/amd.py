"""AMD GPUs without one: OpenCL C and CUDA C (as HIP) through clang with ROCm's device libraries.

clang builds both languages for ``amdgcn-amd-amdhsa`` and reports each kernel's resources with
``-Rpass-analysis=kernel-resource-usage`` (SGPRs, VGPRs, AGPRs, scratch per lane, spills, LDS).
The device libraries (ocml/ockl/oclc bitcode) are needed for real figures: without them
(``-nogpulib``) sin/exp/tanh stay unresolved calls and the registers are wrong.

Debian 12's ``rocm-device-libs`` (5.2.3) has ``oclc_isa_version_<N>.bc`` only up to gfx940 and
gfx1036. That file holds one constant (``__oclc_ISA_version``, read by a few ockl routines); for a
newer target it is made here from the nearest older one with the constant changed, in a folder of
links under the cache, and the substitution is recorded (:attr:`Tool.notes`) wherever figures are
shown. Everything else in the libraries is target-independent bitcode.

HIP builds share a precompiled header: parsing ``hip/hip_runtime.h`` (with the CUDA wrapper headers clang
adds) is about 0.75 CPU-second of every HIP build, most of a small one's. From the second HIP build of a
target on, the headers come from a precompiled header made once per (target, options the headers can
see) in this process (:func:`hip_pch`); the code clang generates is the same (tests/test_port_check.py).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

from .._paths import cache_root
from .targets import CUDA_BLOCK
from .base import APT_INSTALL, BuildFailed, first_error, KernelResult, run, staged, Tool, version_line, which

CLANG = ("clang-19", "clang")
#: Where distributions put ROCm's device-library bitcode (Debian/Ubuntu, ROCm's own packages).
DEVICE_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/usr/lib/amdgcn/bitcode", "/opt/rocm/amdgcn/bitcode",
                   "/opt/rocm/lib/llvm/lib/clang/amdgcn/bitcode")  # fmt: skip
#: ``wavefront size`` of each target in the builds here (RDNA builds default to wave32).
WAVE = {"gfx90a": 64, "gfx942": 64, "gfx1100": 32}
#: OpenCL C as the AMD runtime builds it (its default work-group limit of 256 applies, as at run time).
OCL_FLAGS = ("-x", "cl", "-cl-std=CL1.2", "-O3")
#: CUDA C as HIP, device side only. HIP assumes 1024-thread blocks unless told, which caps a kernel at 128
#: VGPRs (gfx9) and spills the rest; the CUDA backends launch 256 (targets.CUDA_BLOCK), so a HIP port is
#: built for that, as ``__launch_bounds__(256)`` would. Contraction off, as the backends' nvcc builds.
HIP_FLAGS = ("-x", "hip", "--cuda-device-only", "-std=c++17", "-include", "hip/hip_runtime.h", "-ffp-contract=off",
             f"--gpu-max-threads-per-block={CUDA_BLOCK}", "-O3")  # fmt: skip
_GFX = re.compile(r"^gfx(\d+)([0-9a-f])([0-9a-f])$")


def isa_number(target: str) -> int:
    """``__oclc_ISA_version`` of a gfx target: major * 1000 + minor * 100 + stepping (gfx942 -> 9402)."""
    m = _GFX.match(target)
    if not m:
        raise ValueError(f"target: expected gfxNNN, got {target!r}")
    return int(m.group(1)) * 1000 + int(m.group(2), 16) * 100 + int(m.group(3), 16)


def _isa_files(folder: Path) -> dict[int, Path]:
    out = {}
    for f in folder.glob("oclc_isa_version_*.bc"):
        try:
            out[isa_number("gfx" + f.stem.rsplit("_", 1)[1])] = f
        except ValueError:
            continue
    return out


def system_device_libs() -> Path | None:
    env = os.environ.get("PORTKERN_ROCM_DEVICE_LIBS")
    for d in ((env,) if env else ()) + DEVICE_LIB_DIRS:
        if d and (Path(d) / "ocml.bc").is_file():
            return Path(d)
    return None


@lru_cache(maxsize=None)
def device_libs(clang: str, targets: tuple[str, ...]) -> tuple[Path, tuple[str, ...]]:
    """A device-library folder that has every target's ISA-version file, and what was substituted.

    The system folder when it has them all; else a folder under the cache of links to it plus each
    missing ``oclc_isa_version_<target>.bc`` made from the nearest older file of the same major
    version (else the newest older one), its constant changed to the target's.
    """
    src = system_device_libs()
    if src is None:
        raise BuildFailed(f"ROCm device libraries not found in {', '.join(DEVICE_LIB_DIRS)}: {APT_INSTALL}")
    have = _isa_files(src)
    missing = [t for t in targets if isa_number(t) not in have]
    if not missing:
        return src, ()
    key = hashlib.sha256(repr((str(src), sorted(have))).encode()).hexdigest()[:12]
    folder = cache_root() / "port-check" / "amd-device-libs" / key
    folder.mkdir(parents=True, exist_ok=True)
    for f in src.glob("*.bc"):
        link = folder / f.name
        if not link.exists():
            try:
                link.symlink_to(f)
            except FileExistsError:  # a parallel check made it first
                pass
    notes = []
    for t in missing:
        want = isa_number(t)
        older = sorted(n for n in have if n < want)
        same_major = [n for n in older if n // 1000 == want // 1000]
        base = (same_major or older)[-1]
        notes.append(f"{t}: oclc_isa_version_{t[3:]}.bc made from {have[base].name} ({src}) with "
                     f"__oclc_ISA_version {base} -> {want}: rocm-device-libs has no {t} file")  # fmt: skip
        out = folder / f"oclc_isa_version_{t[3:]}.bc"
        if out.is_file():
            continue
        text = run([clang, "-target", "amdgcn-amd-amdhsa", "-nogpulib", "-S", "-emit-llvm", "-x", "ir",
                    str(have[base]), "-o", "-"]).stdout  # fmt: skip
        text, n = re.subn(rf"(@__oclc_ISA_version = .*constant i32 ){base}\b", rf"\g<1>{want}", text)
        if n != 1:
            raise BuildFailed(f"could not make the {t} ISA-version library from {have[base]}")
        with tempfile.TemporaryDirectory() as tmp:
            ll = Path(tmp) / "isa.ll"
            ll.write_text(text)
            res = run([clang, "-target", "amdgcn-amd-amdhsa", "-nogpulib", "-c", "-emit-llvm", "-x", "ir",
                       str(ll), "-o", str(Path(tmp) / "isa.bc")])  # fmt: skip
            if res.returncode:
                raise BuildFailed(first_error(res.stderr))
            os.replace(Path(tmp) / "isa.bc", out)
    return folder, tuple(notes)


@lru_cache(maxsize=None)
def find(targets: tuple[str, ...] = tuple(WAVE)) -> Tool:
    path = which(*CLANG)
    if path is None:
        return Tool("clang (AMD)", None, install=APT_INSTALL)
    version = version_line(path, "--version")
    try:
        _, notes = device_libs(path, targets)
    except BuildFailed as exc:
        return Tool("clang (AMD)", None, version, install=exc.line)
    return Tool("clang (AMD)", path, version, APT_INSTALL, notes)


_REMARK = re.compile(r"remark:\s+(.+?):\s*(.+?)\s*\[-Rpass-analysis=kernel-resource-usage\]")


def parse_remarks(text: str, wave: int) -> list[KernelResult]:
    """Kernels from clang's kernel-resource-usage remarks, in the order clang printed them."""
    out: list[KernelResult] = []
    for key, value in _REMARK.findall(text):
        if key == "Function Name":
            out.append(KernelResult(value, True, simd=wave))
            continue
        if not out:
            continue
        k = out[-1]
        num = int(value) if value.isdigit() else None
        if key in ("SGPRs", "VGPRs", "AGPRs") and num is not None:
            k.registers[key[:-1]] = num
        elif key.startswith("ScratchSize"):
            k.scratch_bytes = num
        elif key in ("SGPRs Spill", "VGPRs Spill") and num is not None:
            # SGPRs spill into VGPR lanes (v_writelane), VGPRs into scratch memory: only the latter is a
            # memory spill, the one ptxas and ocloc report; the SGPR count stays in ``extra``.
            if key == "VGPRs Spill":
                k.spills = num
            k.extra[key.replace(" ", "_").lower()] = num
        elif key.startswith("LDS Size"):
            k.lds_bytes = num
        elif key.startswith("Occupancy"):
            k.extra["compiler_occupancy"] = num
        elif key == "Dynamic Stack":
            k.extra["dynamic_stack"] = value == "True"
    return out


# ---- HIP's precompiled header -------------------------------------------------------------------------------
_MACRO = re.compile(r"^-[DU]([A-Za-z_]\w*)(?:=.*)?$", re.DOTALL)
_IDENT = re.compile(r"[A-Za-z_]\w*")
_DEP_SPLIT = re.compile(r"(?<!\\)\s+")


def split_macros(options: tuple[str, ...], words: frozenset[str] | set[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(pinned, free) of a build's options: ``free`` are the ``-DNAME[=V]`` / ``-UNAME`` of names no header file
    spells, which cannot change how the headers parse, so a precompiled header made without them serves every
    build that adds them (clang applies them after it); everything else (``-I``, a name the headers use) is
    ``pinned``: part of the precompiled header's build and its key."""
    pinned, free = [], []
    for o in options:
        m = _MACRO.match(o)
        (free if m and m.group(1) not in words else pinned).append(o)
    return tuple(pinned), tuple(free)


def _hip_cmd(clang: str, target: str, libs: Path, prefix: tuple[str, ...]) -> list[str]:
    """clang's HIP device-side command up to the build's own options; ``prefix`` replaces ``-include
    hip/hip_runtime.h`` (with ``-include-pch FILE``) or, empty, keeps it."""
    flags = list(HIP_FLAGS)
    if prefix:
        i = flags.index("-include")
        flags[i: i + 2] = prefix
    return [clang, *flags, f"--offload-arch={target}", f"--rocm-device-lib-path={libs}"]


@lru_cache(maxsize=None)
def _header_words(clang: str, target: str, libs: Path, pinned: tuple[str, ...]) -> tuple[frozenset[str], str]:
    """Every identifier spelled in the files the HIP prefix includes with ``pinned`` (clang -M), and a digest of
    those files' paths, sizes and times (a changed header makes a new precompiled header)."""
    with tempfile.TemporaryDirectory(prefix="portkern-hip-deps-") as tmp:
        empty = Path(tmp) / "empty.hip"
        empty.write_text("")
        res = run([*_hip_cmd(clang, target, libs, ()), *pinned, "-M", str(empty)], cwd=tmp, timeout=120)
    if res.returncode or ": " not in res.stdout:
        raise BuildFailed(first_error(res.stderr or res.stdout))
    deps = res.stdout.split(": ", 1)[1].replace("\\\n", " ")  # make's line continuations
    files = [f.replace("\\ ", " ") for f in _DEP_SPLIT.split(deps) if f]
    words: set[str] = set()
    digest = hashlib.sha256()
    for f in files[1:]:  # the first is the empty input
        path = Path(f)
        st = path.stat()
        digest.update(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        words.update(_IDENT.findall(path.read_text(errors="replace")))
    return frozenset(words), digest.hexdigest()


class _PchStore:
    """This process's HIP precompiled headers, in a temporary folder removed at exit."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.asked: dict[tuple, int] = {}  # (clang, target, libs, non-macro options) -> HIP builds that asked
        self.made: dict[str, Path | None] = {}  # key -> the header (None: could not be made, or clang refused it)
        self.making: dict[str, threading.Lock] = {}
        self.folder: Path | None = None

    def root(self) -> Path:
        with self.lock:
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix="portkern-hip-pch-"))
                atexit.register(shutil.rmtree, self.folder, True)
            return self.folder


_PCH = _PchStore()


def hip_pch(clang: str, target: str, libs: Path, options: tuple[str, ...],
            force: bool = False) -> tuple[Path, str] | None:  # fmt: skip
    """The precompiled HIP prefix for a build of ``options`` for ``target`` and its key, or None: build as usual.

    None for the first HIP build of a (target, non-macro options) unless ``force`` (a single build gains
    nothing: the header costs a build's parsing to make), and wherever the header cannot be made. The header
    is made with the build's own flags and its ``pinned`` options (:func:`split_macros`); the build passes all
    its options, so clang checks the header against them as it does any precompiled header."""
    plain = tuple(o for o in options if not _MACRO.match(o))
    with _PCH.lock:
        n = _PCH.asked[(clang, target, libs, plain)] = _PCH.asked.get((clang, target, libs, plain), 0) + 1
    if n == 1 and not force:
        return None
    try:
        words, digest = _header_words(clang, target, libs, plain)
        pinned, _ = split_macros(options, words)
        if pinned != plain:  # a macro the headers use may include others: read those too
            words, digest = _header_words(clang, target, libs, pinned)
            pinned, _ = split_macros(options, words)
    except (BuildFailed, OSError, subprocess.SubprocessError):
        return None
    key = hashlib.sha256(repr((clang, target, str(libs), HIP_FLAGS, pinned, digest)).encode()).hexdigest()[:16]
    with _PCH.lock:
        if key in _PCH.made:
            return (_PCH.made[key], key) if _PCH.made[key] else None
        making = _PCH.making.setdefault(key, threading.Lock())
    with making:  # one thread makes it; a build that asks meanwhile waits for it
        with _PCH.lock:
            if key in _PCH.made:
                return (_PCH.made[key], key) if _PCH.made[key] else None
        folder = _PCH.root()
        empty, out = folder / f"{key}.hip", folder / f"{key}.pch"
        empty.write_text("")  # the header's main file: kept, as clang checks it when the header is used
        try:
            res = run([*_hip_cmd(clang, target, libs, ()), "-S", *pinned, "-Xclang", "-emit-pch", "-o", str(out),
                       str(empty)], cwd=str(folder))  # fmt: skip
            made = out if res.returncode == 0 and out.is_file() else None
        except (OSError, subprocess.SubprocessError):
            made = None
        with _PCH.lock:
            _PCH.made[key] = made
    return (made, key) if made else None


def _discard_pch(key: str) -> None:
    with _PCH.lock:
        _PCH.made[key] = None


def build(source: str, filename: str, target: str, options: tuple[str, ...], api: str,
          targets: tuple[str, ...] = tuple(WAVE), pch: bool | None = None) -> list[KernelResult]:  # fmt: skip
    """Build ``source`` (OpenCL C, or CUDA C as HIP) for ``target``; the kernels' resource figures.

    ``pch`` (HIP only): None uses the shared precompiled header from a target's second build on
    (:func:`hip_pch`), True always, False never."""
    tool = find(targets)
    libs, _ = device_libs(tool.path, targets)
    with staged(tool, source, filename) as src:
        tmp = str(src.parent)
        tail = [*options, "-Rpass-analysis=kernel-resource-usage", "-o", str(Path(tmp) / "out"), str(src)]
        if api == "opencl":
            res = run([tool.path, *OCL_FLAGS, "-target", "amdgcn-amd-amdhsa", f"-mcpu={target}", "-c",
                       f"--rocm-device-lib-path={libs}", *tail], cwd=tmp)  # fmt: skip
        else:  # assembly: -c would want clang-offload-bundler, and the remarks come from code generation anyway
            pre = hip_pch(tool.path, target, libs, options, force=bool(pch)) if pch is not False else None
            if pre is None:
                res = run([*_hip_cmd(tool.path, target, libs, ()), "-S", *tail], cwd=tmp)
            else:
                res = run([*_hip_cmd(tool.path, target, libs, ("-include-pch", str(pre[0]))), "-S", *tail], cwd=tmp)
                if res.returncode:  # the failure, if it is the source's, exactly as a build without the header
                    res = run([*_hip_cmd(tool.path, target, libs, ()), "-S", *tail], cwd=tmp)
                    if res.returncode == 0:  # the header was the trouble (a header changed since): not again
                        _discard_pch(pre[1])
    if res.returncode:
        raise BuildFailed(first_error(res.stderr))
    return parse_remarks(res.stderr, WAVE.get(target, 64))
