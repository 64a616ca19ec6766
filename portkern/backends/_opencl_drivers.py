"""OpenCL drivers installed from PyPI, made visible to the ICD loader without hiding the system's.

Intel's CPU runtime (``intel-opencl-rt``) installs ``<prefix>/lib/libintelocl.so`` and
``<prefix>/etc/OpenCL/vendors/intel-cpu.icd``, but the ``.icd`` names a build-time placeholder
path, and the ICD loader bundled with pyopencl does not look in ``<prefix>/etc`` anyway (it reads
``/etc/OpenCL/vendors``, PoCL's ``.icd`` next to itself, and ``OCL_ICD_VENDORS``, which *replaces*
the system's folder; ``OCL_ICD_FILENAMES`` it ignores). So, before pyopencl first lists platforms,
portkern writes a vendor folder of its own holding a copy of every ``.icd`` the loader would have
read (the folder ``OCL_ICD_VENDORS`` named, else ``/etc/OpenCL/vendors``) plus one ``.icd`` per
PyPI driver pointing at the library that is really there, and points ``OCL_ICD_VENDORS`` at it.
Nothing is hidden: every system driver stays listed. ``PORTKERN_NO_PIP_OPENCL=1`` turns this off.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from .._paths import cache_root

SYSTEM_VENDORS = Path("/etc/OpenCL/vendors")

#: What register() did, for ``portkern devices --verbose`` and error messages.
REPORT: list[str] = []


def _prefixes() -> list[Path]:
    seen: list[Path] = []
    for p in (sys.prefix, sys.base_prefix, os.environ.get("CONDA_PREFIX")):
        if p and Path(p) not in seen:
            seen.append(Path(p))
    return seen


def pip_drivers() -> list[tuple[str, Path]]:
    """(icd file name, real library path) of every OpenCL driver installed into this Python's prefix."""
    found = []
    for prefix in _prefixes():
        vendors = prefix / "etc" / "OpenCL" / "vendors"
        if not vendors.is_dir():
            continue
        for icd in sorted(vendors.glob("*.icd")):
            named = Path(icd.read_text().strip())
            lib = named if named.is_file() else prefix / "lib" / named.name
            if lib.is_file():
                found.append((icd.name, lib.resolve()))
            else:
                REPORT.append(f"{icd}: names {named}, and {lib} is not there either: left out")
    return found


def _cache_dir() -> Path:
    return cache_root() / "opencl-vendors"


def register() -> Path | None:
    """Point the ICD loader at a vendor folder with the system's drivers plus the PyPI ones.

    Returns the folder, or None when there was nothing to add (the environment is left alone).
    Must run before pyopencl lists platforms for the first time.
    """
    global _REGISTERED
    if _REGISTERED is not None:  # once per process: `import portkern` does it, the opencl backend again
        return _REGISTERED or None
    _REGISTERED = _register()
    return _REGISTERED or None


_REGISTERED: Path | bool | None = None


def _register() -> Path | bool:
    if os.environ.get("PORTKERN_NO_PIP_OPENCL") == "1":
        REPORT.append("PORTKERN_NO_PIP_OPENCL=1: PyPI OpenCL drivers not registered")
        return False
    drivers = pip_drivers()
    if not drivers:
        return False
    current = os.environ.get("OCL_ICD_VENDORS")
    entries: dict[str, str] = {}
    if current and Path(current).is_file():
        entries[Path(current).name] = Path(current).read_text()
    else:
        src = Path(current) if current else SYSTEM_VENDORS
        if src.is_dir():
            for icd in sorted(src.glob("*.icd")):
                entries[icd.name] = icd.read_text()
    kept = len(entries)
    for name, lib in drivers:
        if any(text.strip() == str(lib) for text in entries.values()):
            continue  # already registered with its real path (a system install, or a repeat)
        entries[f"portkern-pip-{name}"] = f"{lib}\n"
    digest = hashlib.sha256(repr(sorted(entries.items())).encode()).hexdigest()[:12]
    folder = _cache_dir() / digest
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in entries.items():
            path = folder / name
            if not path.is_file() or path.read_text() != text:
                path.write_text(text)
    except OSError as exc:
        REPORT.append(f"could not write {folder} ({exc}); PyPI OpenCL drivers not registered")
        return False
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    REPORT.append(
        f"OCL_ICD_VENDORS={folder}: {kept} driver(s) from "
        f"{current or SYSTEM_VENDORS} kept, PyPI: {', '.join(str(lib) for _, lib in drivers)}"
    )
    return folder


def load_errors() -> list[str]:
    """Why a PyPI driver the loader was pointed at does not load (a missing dependency such as
    ``intel-cmplr-lib-rt``'s libimf.so); the ICD loader itself skips such a driver without a word."""
    import ctypes

    errors = []
    for _, lib in pip_drivers():
        try:
            ctypes.CDLL(str(lib))
        except OSError as exc:
            errors.append(f"{lib} does not load: {exc}")
    return errors


# ---- LLVM clashes ----------------------------------------------------------------------------------
# An OpenCL driver that links LLVM statically *and exports it* (Oclgrind's liboclgrind: LLVM 14, every
# symbol unversioned and visible) resolves its own LLVM calls through the process's global symbol scope,
# like any shared library. When another LLVM already sits in that scope -- Debian's libLLVM-15.so.1,
# which Mesa's DRI driver (swrast_dri.so) needs and Mesa opens with RTLD_GLOBAL as soon as SDL/pygame,
# EGL or GLX initialise a display -- the driver's static constructors register their command-line
# options through the *other* LLVM's cl::Option::addArgument into the other LLVM's registry, which
# already holds options of the same names: "CommandLine Error: Option 'print-summary-global-ids'
# registered more than once!", "LLVM ERROR: inconsistency in registered CommandLine options", abort().
# Drivers that hide their LLVM (PyPI PoCL, Intel's CPU runtime) or version its symbols (Debian's
# libpocl2 -> libLLVM-14's @LLVM_14) do not clash. The reverse order works: a driver loaded first
# keeps its own registry.
#
# So, before the ICD loader is first asked for its platforms (it dlopens every driver it finds then,
# once per process), llvm_clash_guard() looks for LLVM's option registry in the global scope and, if one
# is there, reads the dynamic symbol table of every driver the loader would open (and of the libraries
# each needs); a driver whose LLVM would bind to the one in the process is left out of that first
# listing (a warning says which and why; left_out() keeps the reason for a later request by name).

#: The function every LLVM command-line option calls to register itself (llvm::cl::Option::addArgument).
_CL_REGISTER = "_ZN4llvm2cl6Option11addArgumentEv"
#: Where the dynamic linker looks when a name has no slash and no RUNPATH holds it (x86-64 Debian/Fedora).
_STD_LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
                 "/usr/local/lib")  # fmt: skip
#: Short names of drivers, from their library file names (for messages and device= requests).
_DRIVER_NAMES = (("oclgrind", "oclgrind"), ("pocl", "pocl"), ("intelocl_emu", "intel-fpga-emu"),
                 ("intelocl", "intel"), ("igdrcl", "intel-gpu"), ("nvidia", "nvidia"), ("amdocl", "amd"),
                 ("rusticl", "rusticl"), ("mesaopencl", "clover"))  # fmt: skip

#: Drivers left out of this process's platform list: short name -> why (llvm_clash_guard).
_LEFT_OUT: dict[str, str] = {}
_GUARDED = False


def left_out() -> dict[str, str]:
    """OpenCL drivers portkern kept from the ICD loader in this process (short name -> why)."""
    return dict(_LEFT_OUT)


def driver_name(icd: Path, lib: Path | None) -> str:
    """A driver's short name ("oclgrind", "pocl", "intel", ...) from its library's or .icd file's name."""
    for text in ((lib.name if lib else ""), icd.name):
        low = text.lower()
        for needle, name in _DRIVER_NAMES:
            if needle in low:
                return name
    return icd.stem.lower()


def global_llvm() -> str | None:
    """The file of the LLVM whose option registry is in this process's global symbol scope (where a
    driver's unversioned LLVM references would bind), or None. Found with dlsym on the main program's
    handle, which searches exactly that scope; an LLVM loaded with RTLD_LOCAL is not there and clashes
    with nothing."""
    import ctypes

    try:
        scope = ctypes.CDLL(None)
        fn = getattr(scope, _CL_REGISTER)
    except (OSError, AttributeError):
        return None
    addr = ctypes.cast(fn, ctypes.c_void_p).value

    class _DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                    ("saddr", ctypes.c_void_p)]  # fmt: skip

    info = _DlInfo()
    try:
        if scope.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)) and info.fname:
            return os.fsdecode(info.fname)
    except AttributeError:  # a libc without dladdr in the main scope: name the first LLVM mapped instead
        pass
    return next(iter(mapped_llvm()), "an LLVM library")


def mapped_llvm() -> list[str]:
    """Files named like LLVM (libLLVM-15.so.1, libLLVM.so.19.1, ...) mapped into this process."""
    found: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if "libLLVM" in Path(path).name and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _elf_dynamic(path: Path) -> tuple[bool, list[str], list[str]] | None:
    """(whether ``path``'s dynamic symbol table names LLVM's option registration *unversioned*, defined or
    not; its DT_NEEDED names; its RUNPATH/RPATH entries), or None for a file that is not 64-bit
    little-endian ELF. Reads the section headers, .dynamic, .dynstr and .dynsym only."""
    import struct

    import numpy as np

    try:
        with open(path, "rb") as f:
            hdr = f.read(64)
            if len(hdr) < 64 or hdr[:4] != b"\x7fELF" or hdr[4] != 2 or hdr[5] != 1:
                return None
            shoff = struct.unpack_from("<Q", hdr, 0x28)[0]
            shentsize, shnum = struct.unpack_from("<HH", hdr, 0x3A)
            if not shoff or shentsize < 64 or not shnum:
                return None
            f.seek(shoff)
            raw = f.read(shentsize * shnum)
            # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize
            secs = [struct.unpack_from("<IIQQQQIIQQ", raw, i * shentsize) for i in range(len(raw) // shentsize)]

            def read(i: int) -> bytes:
                f.seek(secs[i][4])
                return f.read(secs[i][5])

            def first(kind: int) -> int | None:
                return next((i for i, s in enumerate(secs) if s[1] == kind), None)

            needed: list[str] = []
            paths: list[str] = []
            dyn = first(6)  # SHT_DYNAMIC
            if dyn is not None:
                strtab = read(secs[dyn][6])
                entries = np.frombuffer(read(dyn), dtype=np.dtype([("tag", "<i8"), ("val", "<u8")]))
                for tag, val in entries.tolist():
                    if tag in (1, 15, 29):  # DT_NEEDED, DT_RPATH, DT_RUNPATH
                        text = strtab[val:strtab.index(b"\0", val)].decode(errors="replace")
                        (needed if tag == 1 else paths).append(text)
            found = False
            sym = first(11)  # SHT_DYNSYM
            if sym is not None:
                strtab = read(secs[sym][6])
                name = _CL_REGISTER.encode() + b"\0"
                offsets, at = [], strtab.find(name)
                while at >= 0:
                    offsets.append(at)
                    at = strtab.find(name, at + 1)
                if offsets:
                    syms = np.frombuffer(read(sym), dtype=np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"),
                                                                     ("shndx", "<u2"), ("value", "<u8"), ("size", "<u8")]))
                    hits = np.nonzero(np.isin(syms["name"], offsets))[0]
                    ver = first(0x6FFFFFFF)  # SHT_GNU_versym: 0 local, 1 global (unversioned), 2+ a version
                    versions = np.frombuffer(read(ver), dtype="<u2") if ver is not None else None
                    found = any(versions is None or (int(versions[i]) & 0x7FFF) <= 1 for i in hits)
            return found, needed, paths
    except (OSError, ValueError, struct.error):
        return None


def _resolve(name: str, origin: Path, search: list[str]) -> Path | None:
    if "/" in name:
        p = Path(name)
        return p if p.is_file() else None
    for d in search:
        p = Path(d.replace("$ORIGIN", str(origin)).replace("${ORIGIN}", str(origin))) / name
        if p.is_file():
            return p
    return None


def clashing_library(lib: Path, _seen: set[Path] | None = None, _depth: int = 0) -> Path | None:
    """The library (``lib`` or one it needs, transitively) whose LLVM references are unversioned and
    dynamic, so that they would bind to an LLVM already in the global scope; None if there is none."""
    seen = set() if _seen is None else _seen
    real = lib.resolve()
    if real in seen or _depth > 4:
        return None
    seen.add(real)
    info = _elf_dynamic(real)
    if info is None:
        return None
    found, needed, paths = info
    if found:
        return real
    env_dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    search = [*(p for entry in paths for p in entry.split(":") if p), *env_dirs, str(lib.parent), *_STD_LIB_DIRS]
    for name in needed:
        dep = _resolve(name, lib.parent, search)
        if dep is not None:
            hit = clashing_library(dep, seen, _depth + 1)
            if hit is not None:
                return hit
    return None


def loader_drivers() -> list[tuple[Path, str, Path | None]]:
    """(.icd file, its text, the library it names as found) for every driver the ICD loader bundled with
    pyopencl would open now: ``OCL_ICD_VENDORS`` (a folder or one file; else ``OPENCL_VENDOR_PATH`` or
    /etc/OpenCL/vendors) and ``$PYOPENCL_HOME/.libs`` (pyopencl's own PoCL and Oclgrind)."""
    vendors = os.environ.get("OCL_ICD_VENDORS") or os.environ.get("OPENCL_VENDOR_PATH") or str(SYSTEM_VENDORS)
    icds: list[Path] = []
    v = Path(vendors)
    if v.is_file():
        icds.append(v)
    elif v.is_dir():
        icds.extend(sorted(v.glob("*.icd")))
    home = os.environ.get("PYOPENCL_HOME")
    if home and (Path(home) / ".libs").is_dir():
        icds.extend(sorted((Path(home) / ".libs").glob("*.icd")))
    env_dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    out = []
    for icd in icds:
        try:
            text = icd.read_text().strip()
        except OSError:
            continue
        out.append((icd, text, _resolve(text, icd.parent, [*env_dirs, str(icd.parent), *_STD_LIB_DIRS])))
    return out


def _write_kept(kept: list[tuple[Path, str, Path | None]], home_kept: list[tuple[Path, str, Path | None]]) -> tuple[Path, Path]:
    """A vendor folder and a PYOPENCL_HOME holding only the kept drivers (library paths made absolute)."""
    entries = {f"v-{icd.name}": f"{lib or text}\n" for icd, text, lib in kept}
    home_entries = {icd.name: f"{lib or text}\n" for icd, text, lib in home_kept}
    digest = hashlib.sha256(repr((sorted(entries.items()), sorted(home_entries.items()))).encode()).hexdigest()[:12]
    root = cache_root() / "opencl-vendors-kept" / digest
    vendors, home = root / "vendors", root / "home"
    (home / ".libs").mkdir(parents=True, exist_ok=True)
    vendors.mkdir(parents=True, exist_ok=True)
    for folder, items in ((vendors, entries), (home / ".libs", home_entries)):
        for name, text in items.items():
            path = folder / name
            if not path.is_file() or path.read_text() != text:
                path.write_text(text)
    return vendors, home


def _caller_level() -> int:
    """warnings.warn's stacklevel that names the first frame outside portkern (the user's call)."""
    package = str(Path(__file__).resolve().parent.parent)
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


class llvm_clash_guard:  # noqa: N801  (a context manager used as `with llvm_clash_guard():`)
    """Around the first platform listing of the process: leave out every driver whose LLVM would clash with
    one already in the global scope (see above), restoring the environment afterwards. Later uses do
    nothing (the loader has opened its drivers by then)."""

    def __enter__(self) -> llvm_clash_guard:
        global _GUARDED
        self._restore: dict[str, str | None] | None = None
        if _GUARDED:
            return self
        _GUARDED = True
        owner = global_llvm()
        if owner is None:
            return self
        home = os.environ.get("PYOPENCL_HOME")
        home_libs = (Path(home) / ".libs").resolve() if home else None
        drivers = loader_drivers()
        clashes: dict[Path, Path] = {}
        for icd, _, lib in drivers:
            hit = clashing_library(lib) if lib is not None else None
            if hit is not None:
                clashes[icd] = hit
        if not clashes:
            return self
        import warnings

        for icd, hit in clashes.items():
            lib = next(lib for i, _, lib in drivers if i == icd)
            name = driver_name(icd, lib)
            _LEFT_OUT[name] = (
                f"{hit} links its own LLVM with unversioned, exported symbols, and {owner} (another LLVM) was "
                f"already loaded into this process with global symbols (Mesa's OpenGL/EGL driver needs it: SDL and "
                f"pygame open it when a window or display is created, e.g. by a Gymnasium env rendering in "
                f"'human' mode). Loading the driver now would register LLVM's command-line options twice, and "
                f"LLVM aborts the process ('Option ... registered more than once'). Create OpenCL envs (or call "
                f"portkern.get_backend('opencl')) before opening a window, in a fresh process, to have the {name} "
                f"driver listed"
            )
            warnings.warn(
                f"portkern: the {name} OpenCL driver is left out of this process: {_LEFT_OUT[name]}; the other "
                f"OpenCL drivers are listed as usual", RuntimeWarning, stacklevel=_caller_level(),
            )  # fmt: skip
            REPORT.append(f"left out {name} ({icd}): its LLVM ({hit}) would clash with {owner}")
        in_home = [d for d in drivers if home_libs is not None and d[0].parent.resolve() == home_libs]
        vendor_kept = [d for d in drivers if d not in in_home and d[0] not in clashes]
        home_kept = [d for d in in_home if d[0] not in clashes]
        try:
            vendors, new_home = _write_kept(vendor_kept, home_kept)
        except OSError as exc:
            raise RuntimeError(
                f"OpenCL: {', '.join(_LEFT_OUT)} would abort this process ({owner} is loaded) and portkern "
                f"could not write the vendor folder that leaves it out ({exc})"
            ) from None
        self._restore = {k: os.environ.get(k) for k in ("OCL_ICD_VENDORS", "PYOPENCL_HOME")}
        os.environ["OCL_ICD_VENDORS"] = str(vendors)
        os.environ["PYOPENCL_HOME"] = str(new_home)
        return self

    def __exit__(self, *exc: object) -> None:
        # The loader read its folders during the listing: put the environment back, so that a child
        # process (which has no clashing LLVM of its own yet) sees every driver.
        for key, value in (self._restore or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
