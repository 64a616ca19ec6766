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
