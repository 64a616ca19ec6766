"""Backend registry: name -> class, one cached instance per (name, device), and availability records."""

from __future__ import annotations

import importlib
import os
import pkgutil
from functools import lru_cache
from importlib.metadata import entry_points
from dataclasses import dataclass
from typing import Any

from .base import Backend, BackendUnavailable, Probe

_CLASSES: dict[str, type[Backend]] = {}
_INSTANCES: dict[tuple[str, str | None], Backend] = {}
_PROBES: dict[str, Probe] = {}
#: Modules that are not backends.
_NOT_BACKENDS = {"base", "registry"}
_ENTRY_POINT_GROUP = "portkern.backends"


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend available by its ``name`` (the name of the module that defines it)."""
    if not isinstance(getattr(cls, "name", None), str) or not cls.name.isidentifier():
        raise ValueError(f"backend class {cls.__name__} needs a name that is an identifier")
    _CLASSES[cls.name] = cls
    return cls


@lru_cache(maxsize=1)
def _modules() -> dict[str, str]:
    """Backend name -> module: every public module in this package, plus the ``portkern.backends``
    entry points of other distributions. Found by listing, not by a list kept by hand."""
    here = [os.path.dirname(os.path.abspath(__file__))]  # this package's folder, without importing the package

    found = {m.name: f"portkern.backends.{m.name}" for m in pkgutil.iter_modules(here)
             if not m.name.startswith("_") and m.name not in _NOT_BACKENDS}  # fmt: skip
    try:
        for ep in entry_points(group=_ENTRY_POINT_GROUP):
            found.setdefault(ep.name, ep.value.split(":")[0])
    except Exception:  # a broken third-party distribution must not hide portkern's own backends
        pass
    return found


def _load(name: str) -> type[Backend] | None:
    if name not in _CLASSES:
        # Backend modules guard their optional imports, so importing one never fails for a
        # missing library; it only registers the class.
        module = _modules()[name]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            return None
    return _CLASSES.get(name)


def names() -> tuple[str, ...]:
    """Every backend found, in display order (the reference first)."""
    mods = _modules()
    classes = {n: _load(n) for n in mods}
    return tuple(sorted(mods, key=lambda n: (getattr(classes[n], "order", 99), n)))


def extras() -> dict[str, str | None]:
    """Backend name -> the pip extra that installs its dependencies (None: nothing to install)."""
    return {n: getattr(_load(n), "extra", None) for n in names()}


def __getattr__(attr: str) -> Any:
    # KNOWN (name -> extra), derived from registration; kept as a name for existing imports.
    if attr == "KNOWN":
        return extras()
    raise AttributeError(attr)


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or name not in _modules():
        raise ValueError(f"backend: unknown backend {name!r}; valid names: {', '.join(names())}")
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
    for name, extra in extras().items():
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


#: backend_of's answers per array type: the backend class that owned an array of that type.
_OWNER_OF_TYPE: dict[type, Any] = {}


def backend_of(x: Any) -> Backend:
    """The backend whose native array type ``x`` is (for buffer ops called without ``backend=``)."""
    import numpy as np

    if isinstance(x, np.ndarray):
        return get_backend("numpy")
    known = _OWNER_OF_TYPE.get(type(x))  # names() loads and sorts the backends: not on every buffer op
    if known is not None and known.owns(x):
        return known.for_array(x)
    for name in names():
        cls = _CLASSES.get(name)
        if cls is not None and cls.owns(x):
            _OWNER_OF_TYPE[type(x)] = cls
            return cls.for_array(x)
    raise TypeError(
        f"cannot tell the backend of a {type(x).__module__}.{type(x).__name__}; pass backend= "
        f"or use a NumPy array or an array returned by a portkern env"
    )


# Backend.for_array finds instances through this registry; installed here so that base.py, which the
# registry imports, needs no import of the registry back.
Backend._get_backend = staticmethod(get_backend)
