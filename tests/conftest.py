"""Shared fixtures: one ``backend`` fixture over the registry, skipping only what this machine cannot run."""

from __future__ import annotations

import os
import platform
import shutil

# No NVIDIA GPU here: run Numba-CUDA kernels in Numba's CUDA simulator. Must be set before
# numba is first imported, hence at the top of conftest.
if (
    "NUMBA_ENABLE_CUDASIM" not in os.environ
    and shutil.which("nvidia-smi") is None
    and not os.path.exists("/dev/nvidia0")
):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

# XLA:CPU contracts a * b + c into an FMA where the CPU has one, which moves the jax backend's
# reset draws an ulp off the reference's; capped at AVX (no FMA) its arithmetic is the reference's,
# bit for bit. Read when JAX creates its CPU client, so set before any test touches JAX.
if platform.machine().lower() in ("x86_64", "amd64") and "xla_cpu_max_isa" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX").strip()

# XLA's compiles are most of the jax tests' time (the training stack's whole-update programs take 5-20 s
# each on 2 cores): keep them in JAX's persistent compilation cache, as PoCL and Intel's runtime keep
# their kernel builds, so a second run of the suite on a machine reuses them. The cache is keyed by the
# program, the XLA flags above and the jax version, so a hit is the same executable; the first run on a
# fresh machine (CI) compiles everything, as before. Workers and the subprocesses tests start inherit it.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                              ".pytest_cache", "jax-compilation-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")

import numpy as np
import pytest

from tests import _hypothesis_profiles  # noqa: F401  (the fuzz suites' profiles, before --hypothesis-profile is read)

from portkern.backends import get_backend, names, probe

#: Backends a CPU-only machine with the test extra installed can always run: CI fails, never
#: skips, when one is missing. PORTKERN_REQUIRE overrides (e.g. "numpy,opencl,numba,cupy" on a GPU).
REQUIRED = tuple(
    n for n in os.environ.get("PORTKERN_REQUIRE", "numpy,opencl,numba,cuda_host,torch,torch_compile").split(",") if n.strip()
)

#: Backends the shared fixtures leave to their own test module, and why (said in the skip reason): a
#: test setting, so it lives with the tests, not in the backend contract.
SHARED_SUITE_EXCLUSIONS = {
    "torch_compile": "every op, env and shape compiles first (up to a minute each on 2 cores): its parity against "
                     "the reference runs in tests/test_torch_backend.py, one env per action space and every buffer op",
}


#: (backend, env) pairs the shared fixtures leave to an env's own test module, and why (said in the skip reason).
SHARED_SUITE_ENV_EXCLUSIONS = {
    ("jax", "Chain-v0"): "XLA compiles Chain-v0's unrolled articulated-body passes for ~20 s per program on 2 cores: "
                         "its steps and its fused rollout against the reference run in tests/test_chain_env.py",
}


def _devices(name: str) -> list[tuple[str, str | None]]:
    """(test id, device) per device a backend's tests run on. OpenCL: every real device found, by
    implementation (opencl-pocl, opencl-intel: two compilers for one CPU; Oclgrind has its own
    test). Other backends: their default device."""
    if name == "opencl" and probe(name).available:
        from portkern.backends.opencl import device_ids

        found = sorted(device_ids().items())
        return [(f"opencl-{pid}", label) for pid, label in found] or [(name, None)]
    return [(name, None)]


def _backend_params(include_numpy: bool = True):
    params = []
    for name in names():
        if name == "numpy" and not include_numpy:
            continue
        p = probe(name)
        marks = [] if p.available else [pytest.mark.skip(reason=f"{name}: {p.reason}")]
        excluded = SHARED_SUITE_EXCLUSIONS.get(name, "")
        if p.available and excluded:  # covered by its own test module, said here in the skip reason
            marks = [pytest.mark.skip(reason=f"{name}: {excluded}")]
        params += [pytest.param((name, device), id=tid, marks=marks) for tid, device in _devices(name)]
    return params


def _open(request, monkeypatch):
    name, device = request.param
    if device is not None:  # tests that look the backend up by name (backend=b.name) get this device too
        monkeypatch.setenv(f"PORTKERN_{name.upper()}_DEVICE", device)
    return get_backend(name, device)


@pytest.fixture(params=_backend_params())
def backend(request, monkeypatch):
    """Every available backend on each of its test devices, the NumPy reference included."""
    return _open(request, monkeypatch)


@pytest.fixture(params=_backend_params(include_numpy=False))
def kernel_backend(request, monkeypatch):
    """Every available non-reference backend on each of its test devices (compared against NumPy)."""
    return _open(request, monkeypatch)


def _skip_missing_env_kernel():
    """A case that makes an env on a kernel backend without that env's kernel source (make raises
    EnvKernelMissing: "Chain-v0 has no OpenCL kernel yet (kernels/opencl/chain.cl)") skips with that
    reason, so an env that exists on the reference first keeps the suite green and says why."""
    from portkern._kernels import KernelSourceMissing  # make's EnvKernelMissing, and a source read by name

    try:
        return (yield)
    except KernelSourceMissing as exc:
        pytest.skip(str(exc))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _skip_missing_env_kernel())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _skip_missing_env_kernel())


@pytest.fixture
def reference():
    return get_backend("numpy")


def small_n(b) -> int:
    """Env count for parity tests: small under a simulator, not a multiple of any work-group size."""
    return 37 if probe(b.name).simulator else 1000 + 37


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


#: pytest-xdist's variables in a worker's environment. Subprocesses that tests start run sessions of their own (the
#: benchmark suite, a second test session) and must not inherit them: pytest-benchmark turns itself off in what it
#: takes for an xdist worker.
XDIST_VARS = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


#: Most test workers ``-n auto`` starts (pyproject's addopts): each imports torch, jax and the OpenCL drivers.
MAX_WORKERS = 4


def pytest_configure(config):
    for var in XDIST_VARS:
        os.environ.pop(var, None)


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core this process may run on, at most MAX_WORKERS (pytest-xdist's own count
    takes physical cores, one on a 2-vCPU VM; PYTEST_XDIST_AUTO_NUM_WORKERS still overrides)."""
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if env:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


#: Test modules that take longest (a bench or training run, Ray, compiles), longest first: with one worker per core
#: and each module on one worker (``--dist loadfile``), starting these first keeps a long one from being the last
#: to start while the other workers sit idle (longest-first packing). Measured on the 2-core development VM.
LONGEST_FIRST = ("test_port_check", "test_train_parallel", "test_bench_journal", "test_portability_cli", "test_chain_env", "test_train",
                 "test_ray_grid", "test_portability_intervals", "test_opencl_tuning", "test_add_env", "test_jax_backend",
                 "test_train_jax_chain", "test_train_resume", "test_torch_backend", "test_train_compiled_collect")


def pytest_collection_modifyitems(config, items):
    """Longest modules first (LONGEST_FIRST; a stable sort, so each module's tests keep their order and stay
    together), and the shared fixtures' (backend, env) exclusions, applied where both params are known."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rpartition(".")[2], len(rank)))
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        chosen = params.get("backend", params.get("kernel_backend"))
        if isinstance(chosen, tuple) and "env_id" in params:
            why = SHARED_SUITE_ENV_EXCLUSIONS.get((chosen[0], params["env_id"]))
            if why:
                item.add_marker(pytest.mark.skip(reason=f"{chosen[0]} x {params['env_id']}: {why}"))


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


def finished(path, kind: str) -> list[dict]:
    """The journal's finished records of ``kind`` ("visit" for a bench or tune run, "run" for a training grid)."""
    from portkern.journal import read

    return [r for r in read(path)[1] if r["key"][0] == kind and r["status"] == "done"]


def one_finished(path, kind: str) -> bool:
    """For polling a running command: False until its journal exists with a whole header and one finished record
    of ``kind`` (between its creation and its first flush the file is empty or holds part of the header line)."""
    from portkern.journal import JournalError

    try:
        return path.exists() and bool(finished(path, kind))
    except JournalError:
        return False


def kill_9_when(cmd: list[str], ready, timeout: float, **popen) -> None:
    """Start ``cmd``, poll ``ready()`` while it runs, then kill -9 it (no handler runs, nothing is flushed on
    the way out). Fails with the process's stderr if it ended first or ``timeout`` passed."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **popen)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.01)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()

