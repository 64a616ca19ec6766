"""Shared fixtures: one ``backend`` fixture over the registry, skipping only what this machine cannot run."""

from __future__ import annotations

import os
import shutil

# No NVIDIA GPU here: run Numba-CUDA kernels in Numba's CUDA simulator. Must be set before
# numba is first imported, hence at the top of conftest.
if (
    "NUMBA_ENABLE_CUDASIM" not in os.environ
    and shutil.which("nvidia-smi") is None
    and not os.path.exists("/dev/nvidia0")
):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np
import pytest

from portkern.backends import get_backend, names, probe

#: Backends a CPU-only machine with the test extra installed can always run: CI fails, never
#: skips, when one is missing. PORTKERN_REQUIRE overrides (e.g. "numpy,opencl,numba,cupy" on a GPU).
REQUIRED = tuple(
    n for n in os.environ.get("PORTKERN_REQUIRE", "numpy,opencl,numba").split(",") if n.strip()
)


def _backend_params(include_numpy: bool = True):
    params = []
    for name in names():
        if name == "numpy" and not include_numpy:
            continue
        p = probe(name)
        marks = [] if p.available else [pytest.mark.skip(reason=f"{name}: {p.reason}")]
        params.append(pytest.param(name, id=name, marks=marks))
    return params


@pytest.fixture(params=_backend_params())
def backend(request):
    """Every available backend, the NumPy reference included."""
    return get_backend(request.param)


@pytest.fixture(params=_backend_params(include_numpy=False))
def kernel_backend(request):
    """Every available non-reference backend (compared against NumPy)."""
    return get_backend(request.param)


@pytest.fixture
def reference():
    return get_backend("numpy")


def small_n(b) -> int:
    """Env count for parity tests: small under a simulator, not a multiple of any work-group size."""
    return 37 if probe(b.name).simulator else 1000 + 37


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def pytest_report_header(config):
    lines = []
    for name in names():
        p = probe(name)
        state = "available" if p.available else f"unavailable ({p.reason})"
        if p.simulator:
            state += " [simulator]"
        lines.append(f"portkern backend {name}: {state}; devices: {', '.join(p.devices) or '-'}")
    lines.append(f"portkern required backends: {', '.join(REQUIRED)}")
    return lines
