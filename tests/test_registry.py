"""The backend registry: records, unknown names, unavailable backends, required backends present."""

from __future__ import annotations

import pytest

import portkern
from portkern.backends import BackendUnavailable, KNOWN, get_backend, names, registry
from portkern.backends.base import Probe

from .conftest import REQUIRED


def test_backends_lists_every_backend_module_found():
    # Backends come from the modules under portkern/backends, not from a list kept by hand.
    import importlib
    import pkgutil

    pkg = importlib.import_module("portkern.backends")  # the package (portkern.backends is also a function)

    modules = {m.name for m in pkgutil.iter_modules(pkg.__path__)
               if not m.name.startswith("_") and m.name not in ("base", "registry")}  # fmt: skip
    records = portkern.backends()
    assert {r.name for r in records} == modules
    assert [r.name for r in records] == list(names())
    assert records[0].name == "numpy"  # the reference first
    assert {"numpy", "opencl", "cupy", "numba"} <= modules


def test_unavailable_backends_say_why():
    for r in portkern.backends():
        assert r.available or r.reason, f"{r.name} is unavailable without a reason"


def test_numpy_is_always_available():
    (rec,) = [r for r in portkern.backends() if r.name == "numpy"]
    assert rec.available and rec.devices


@pytest.mark.parametrize("name", REQUIRED)
def test_required_backend_is_available(name):
    # CI must fail, not skip, when a backend this machine can run is missing.
    p = registry.probe(name, refresh=True)
    assert p.available, f"required backend {name!r} is unavailable: {p.reason}"


def test_unknown_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid names: " + ", ".join(names())):
        get_backend("vulkan")


def test_unavailable_backend_error_says_why(monkeypatch):
    monkeypatch.setitem(registry._PROBES, "cupy", Probe(False, "cupy is not installed: pip install 'portkern[cuda]'"))
    monkeypatch.delitem(registry._INSTANCES, ("cupy", None), raising=False)
    with pytest.raises(BackendUnavailable, match=r"portkern\[cuda\]"):
        get_backend("cupy")


def test_same_backend_instance_is_reused():
    assert get_backend("numpy") is get_backend("numpy")


def test_known_extras():
    # Each backend's pip extra comes from its class; the ones portkern ships are pinned here.
    assert {k: KNOWN[k] for k in ("numpy", "opencl", "cupy", "numba")} == {
        "numpy": None, "opencl": "opencl", "cupy": "cuda", "numba": "cuda"}  # fmt: skip
    assert set(KNOWN) == set(names())


def test_portkern_device_is_the_opencl_default_only(monkeypatch):
    from portkern.backends.opencl import OpenCLBackend
    from portkern.backends.numpy import NumpyBackend

    assert OpenCLBackend.default_device_env == ("PORTKERN_DEVICE",)
    assert NumpyBackend.default_device_env == ()
    monkeypatch.setenv("PORTKERN_DEVICE", "pocl")
    assert get_backend("numpy").device_name  # numpy ignores an OpenCL device name


def test_per_backend_device_variable_is_used(monkeypatch):
    monkeypatch.setenv("PORTKERN_NUMPY_DEVICE", "gpu")
    with pytest.raises(ValueError, match="device: the numpy backend runs on the host only"):
        get_backend("numpy")
