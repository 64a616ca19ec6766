"""Backend registry: name -> class, one cached instance per (name, device), and availability records."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .base import Backend, BackendUnavailable, Probe

#: Every backend portkern knows, in display order, with the pip extra that installs it.
KNOWN: dict[str, str | None] = {"numpy": None, "opencl": "opencl", "cupy": "cuda", "numba": "cuda"}

_CLASSES: dict[str, type[Backend]] = {}
_INSTANCES: dict[tuple[str, str | None], Backend] = {}
_PROBES: dict[str, Probe] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend available by its ``name``."""
    if cls.name not in KNOWN:
        raise ValueError(f"backend {cls.name!r} is not listed in registry.KNOWN")
    _CLASSES[cls.name] = cls
    return cls


def _load(name: str) -> type[Backend] | None:
    if name not in _CLASSES:
        # Backend modules guard their optional imports, so importing one never fails for a
        # missing library; it only registers the class.
        module = f"portkern.backends.{name}"
        try:
            __import__(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            return None
    return _CLASSES.get(name)


def _check_name(name: Any) -> str:
    if name not in KNOWN:
        raise ValueError(f"backend: unknown backend {name!r}; valid names: {', '.join(KNOWN)}")
    return name


def probe(name: str, refresh: bool = False) -> Probe:
    """Availability of one backend here (cached; ``refresh`` probes again)."""
    _check_name(name)
    if refresh or name not in _PROBES:
        cls = _load(name)
        if cls is None:
            _PROBES[name] = Probe(False, f"portkern has no {name} backend module")
        else:
            try:
                _PROBES[name] = cls.probe()
            except Exception as exc:  # a probe must never take the caller down
                _PROBES[name] = Probe(False, f"probe failed: {type(exc).__name__}: {exc}".splitlines()[0])
    return _PROBES[name]


@dataclass(frozen=True)
class BackendRecord:
    """One row of :func:`portkern.backends`."""

    name: str
    available: bool
    reason: str
    devices: tuple[str, ...]
    simulator: bool
    extra: str | None

    def __str__(self) -> str:
        state = "available" if self.available else f"unavailable: {self.reason}"
        return f"{self.name}: {state}"


def backends(refresh: bool = False) -> list[BackendRecord]:
    """One record per known backend: name, availability here, and why not (with the fix)."""
    out = []
    for name, extra in KNOWN.items():
        p = probe(name, refresh)
        out.append(BackendRecord(name, p.available, p.reason, p.devices, p.simulator, extra))
    return out


def get_backend(name: str = "numpy", device: str | None = None) -> Backend:
    """The backend instance for ``name`` on ``device``, created once and reused."""
    _check_name(name)
    if device is not None and not isinstance(device, str):
        raise TypeError(f"device: expected a string or None, got {type(device).__name__}")
    p = probe(name)
    cls = _CLASSES.get(name)
    if device is None:
        # PORTKERN_<NAME>_DEVICE for any backend; the plain PORTKERN_DEVICE only for backends
        # whose device names it is written for (a "pocl" default must not break cupy).
        names = (f"PORTKERN_{name.upper()}_DEVICE", *(cls.default_device_env if cls else ()))
        device = next((os.environ[v] for v in names if os.environ.get(v)), None)
    key = (name, device)
    if key in _INSTANCES:
        return _INSTANCES[key]
    if not p.available or cls is None:
        raise BackendUnavailable(f"backend {name!r} is unavailable here: {p.reason}")
    inst = cls(device)
    _INSTANCES[key] = inst
    return inst


def backend_of(x: Any) -> Backend:
    """The backend whose native array type ``x`` is (for buffer ops called without ``backend=``)."""
    import numpy as np

    if isinstance(x, np.ndarray):
        return get_backend("numpy")
    for name in KNOWN:
        cls = _CLASSES.get(name)
        if cls is not None and cls.owns(x):
            return cls.for_array(x)
    raise TypeError(
        f"cannot tell the backend of a {type(x).__module__}.{type(x).__name__}; pass backend= "
        f"or use a NumPy array or an array returned by a portkern env"
    )
