"""What a run records about itself: the run-file schema, portkern's version and a fingerprint of the code it
measured."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ... import __version__
from ..._kernels import kernel_dir
from ...runs import SCHEMA


def code_fingerprint() -> dict[str, str]:
    """Short hashes of the code a run measured: every backend module, the kernel sources, the rest of
    the package. Two runs compared with different fingerprints measured different code (a backend
    edited in between), and the comparison says so."""
    pkg = Path(__file__).resolve().parents[2]

    def digest(paths: list[Path]) -> str:
        h = hashlib.sha256()
        for f in sorted(paths):
            h.update(str(f.relative_to(f.parents[1])).encode())
            h.update(f.read_bytes())
        return h.hexdigest()[:12]

    out = {f"backend:{f.stem}": digest([f]) for f in sorted((pkg / "backends").glob("*.py"))
           if not f.stem.startswith("_") and f.stem not in ("base", "registry")}  # fmt: skip
    kernels = []
    for api in ("opencl", "cuda"):
        try:
            kernels += [f for f in kernel_dir(api).glob("*") if f.is_file()]
        except FileNotFoundError:  # a wheel without one API's sources: nothing of it to fingerprint
            pass
    out["kernels"] = digest(kernels)
    out["backends (shared)"] = digest([f for f in (pkg / "backends").rglob("*.py")
                                       if f.stem.startswith("_") or f.stem in ("base", "registry")])  # fmt: skip
    # Reporting code (everything in portability/ but the suite and the kernel names) changes no measurement.
    out["portkern (rest)"] = digest([f for f in pkg.rglob("*.py") if "backends" not in f.parts
                                     and ("portability" not in f.parts or "suite" in f.parts
                                          or f.name == "names.py")])  # fmt: skip
    conftest = pkg.parent / "bench" / "conftest.py"
    if conftest.is_file():
        out["bench suite"] = digest([conftest])
    return out


_CODE_AT_START: dict[str, str] = {}


def run_info() -> dict[str, Any]:
    """Schema, version, and the code fingerprint taken the first time this is asked (the start of a run)."""
    if not _CODE_AT_START:
        _CODE_AT_START.update(code_fingerprint())
    return {"schema": SCHEMA, "portkern": __version__, "code": dict(_CODE_AT_START)}
