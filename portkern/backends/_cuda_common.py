"""What the two CUDA backends (cupy, numba) share and no API changes: device names, errors, versions."""

from __future__ import annotations


#: normalize's per-block partials in the CUDA backends (cupy, cuda_host, numba): the scratch is
#: allocated once at this size and the partial pass never launches more blocks.
MAX_PARTIALS = 1024


def one_line(exc: BaseException) -> str:
    """An exception as one line, for probe reasons."""
    return " ".join(f"{type(exc).__name__}: {exc}".split()).rstrip(" :")


def version_text(v: int) -> str:
    """CUDA's integer version (13020) as text ("13.2")."""
    return f"{v // 1000}.{v % 1000 // 10}"


def resolve_device(device: str | None, names: list[str], current: int = 0) -> int:
    """``None`` -> ``current``; ``"cuda:1"`` or ``"1"`` -> that index; else a case-insensitive name substring."""
    if device is None:
        return current
    key = device.strip().lower().removeprefix("cuda:")
    listing = ", ".join(f"{i}: {n}" for i, n in enumerate(names)) or "none"
    if key.isdigit():
        if int(key) < len(names):
            return int(key)
        raise ValueError(f"device: no CUDA device {device!r}; devices here: {listing}")
    for i, n in enumerate(names):
        if key and key in n.lower():
            return i
    raise ValueError(f"device: no CUDA device matches {device!r}; devices here: {listing}")
