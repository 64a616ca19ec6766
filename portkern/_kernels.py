"""Kernel sources by explicit file name, from an installed wheel or an editable checkout alike."""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

_APIS = ("opencl", "cuda")
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_.]+)"\s*$', re.MULTILINE)


def kernel_dir(api: str) -> Path:
    """Directory of one API's kernel sources: ``portkern/kernels/<api>`` in a wheel, ``kernels/<api>`` in a checkout."""
    if api not in _APIS:
        raise ValueError(f"api: expected one of {', '.join(_APIS)}, got {api!r}")
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels" / api, here.parent / "kernels" / api):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"portkern kernel sources for {api!r} not found next to the package ({here / 'kernels'}) "
        f"or in the checkout ({here.parent / 'kernels'}); reinstall portkern"
    )


@lru_cache(maxsize=None)
def load_source(api: str, filename: str) -> str:
    """The source of ``kernels/<api>/<filename>`` with its local ``#include "x.h"`` lines inlined once.

    Inlining (rather than ``-I``) keeps builds independent of the include-path handling of each
    driver, and makes the source hash cover the headers too.
    """
    directory = kernel_dir(api)
    path = directory / filename
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {path} does not exist")
    seen: set[str] = set()

    def expand(text: str) -> str:
        def repl(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in seen:
                return ""
            seen.add(name)
            return expand((directory / name).read_text())

        return _INCLUDE.sub(repl, text)

    return expand(path.read_text())


def source_hash(source: str, options: tuple[str, ...] = ()) -> str:
    """Cache key for compiled programs: source text plus build options."""
    h = hashlib.sha256(source.encode())
    for opt in options:
        h.update(b"\0" + opt.encode())
    return h.hexdigest()[:16]
