"""Where portkern keeps files between processes: ``$XDG_CACHE_HOME/portkern`` (``~/.cache/portkern``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """portkern's cache folder (not made here): tuned defaults, OpenCL vendor files, built libraries, JAX programs."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "portkern"
