"""OpenCL backend specifics: device choice, build errors, float64 refusal, program cache, buffer reuse,
device memory limits."""

from __future__ import annotations

import re

import numpy as np
import pytest

from portkern import envs, step, tuning
from portkern.backends import backend_of, get_backend, probe
from portkern.backends.base import EnvBuffers

_PROBE = probe("opencl")
pytestmark = pytest.mark.skipif(not _PROBE.available, reason=f"opencl: {_PROBE.reason}")

if _PROBE.available:
    from portkern.backends import opencl as ocl_mod
    from portkern.backends.opencl import KernelBuildError, OpenCLBackend

BROKEN = "__kernel void pk_broken(__global int *x) { x[0] = undeclared_name; }\n"


def _pocl() -> bool:
    return any("portable computing language" in d.lower() for d in _PROBE.devices)


def _bufs(be, spec, n: int, dtype) -> EnvBuffers:
    return EnvBuffers(
        state=be.zeros((spec.state_dim, n), dtype),
        steps=be.zeros((n,), np.int32), episodes=be.zeros((n,), np.uint32),
        needs_reset=be.zeros((n,), np.bool_), obs=be.zeros((n, spec.obs_dim), dtype),
        final_obs=be.zeros((n, spec.obs_dim), dtype), reward=be.zeros((n,), dtype),
        terminated=be.zeros((n,), np.bool_), truncated=be.zeros((n,), np.bool_),
    )  # fmt: skip


def _param_cache(be) -> dict:
    """The params buffers the base class uploaded (Backend._device_params), by params key."""
    return be._pk_caches["params"]


def _implementations() -> list:
    """One param per real OpenCL device found (PoCL, Intel's CPU runtime), by implementation id."""
    if not _PROBE.available:
        return [pytest.param(None, id="none")]
    return [pytest.param(label, id=pid) for pid, label in sorted(ocl_mod.device_ids().items())]


@pytest.fixture(scope="module", params=_implementations())
def be(request) -> OpenCLBackend:
    """Each implementation on its own instance (not the registry's: tests here change its knobs)."""
    return OpenCLBackend(request.param)


@pytest.mark.skipif(not _PROBE.available or not _pocl(), reason="needs PoCL")
@pytest.mark.parametrize("want", ["pocl", "POCL", "Portable Computing"])
def test_device_selected_by_case_insensitive_substring(want):
    assert "Portable Computing Language" in OpenCLBackend(want).device_name


@pytest.mark.skipif(not _PROBE.available or not _pocl(), reason="needs PoCL (a CPU device)")
def test_device_selected_by_type():
    be = OpenCLBackend("cpu")
    assert be.device.type & ocl_mod.cl.device_type.CPU


def test_default_device_is_not_a_simulator(be):
    assert "oclgrind" not in be.device_name.lower()


def test_unknown_device_lists_the_devices_found():
    with pytest.raises(ValueError, match=r"no OpenCL device matches 'no-such-device'.*devices found: .+"):
        OpenCLBackend("no-such-device")


def test_probe_without_pyopencl_gives_install_hint(monkeypatch):
    monkeypatch.setattr(ocl_mod, "cl", None)
    p = OpenCLBackend.probe()
    assert not p.available and "pip install 'portkern[opencl]'" in p.reason


def test_probe_without_devices_says_pocl_fixes_it(monkeypatch):
    monkeypatch.setattr(ocl_mod, "_all_devices", lambda: [])
    p = OpenCLBackend.probe()
    assert not p.available and "no OpenCL platform/device found" in p.reason and "PoCL" in p.reason


def test_build_error_names_the_file_and_carries_the_log(be):
    with pytest.raises(KernelBuildError, match=r"(?s)kernels/opencl/broken\.cl.*undeclared_name"):
        be._build("broken.cl", BROKEN, ("-DREAL=float",))


def test_float64_refused_on_a_device_without_fp64(monkeypatch):
    be = OpenCLBackend()
    monkeypatch.setattr(be, "supports_float64", False)
    spec = envs.get("CartPole-v1")
    params = spec.param_vector(spec.resolve_params(None), np.dtype(np.float64))
    with pytest.raises(TypeError, match="cl_khr_fp64"):
        be.env_reset(spec, _bufs(be, spec, 4, np.float64), params, 0, True)


def test_program_cache_returns_the_same_program(be):
    source = "__kernel void pk_cache_probe(__global int *x) { x[0] = 1; }\n"
    first = be._build("probe.cl", source, ("-DREAL=float",))
    assert be._build("probe.cl", source, ("-DREAL=float",)) is first


def test_programs_stay_per_context_and_compile_once_per_device(be, monkeypatch):
    # A program belongs to its context; a second instance on the same device reuses the cached
    # program's device binary instead of compiling the source again.
    source = "__kernel void pk_context_probe(__global int *x) { x[0] = 7; }\n"
    first = be._build("probe.cl", source, ("-DREAL=float",))
    other = OpenCLBackend(be.device_name)  # the same device, its own context
    assert other._device_key() == be._device_key()

    def compile_again(*args):
        raise AssertionError("compiled the source again for a device it was already built for")

    monkeypatch.setattr(other, "_compile", compile_again)
    prg = other._build("probe.cl", source, ("-DREAL=float",))
    assert first.context == be.context and prg.context == other.context
    x = other.from_host(np.zeros(1, np.int32))
    ocl_mod.cl.Kernel(prg, "pk_context_probe")(other.queue, (1,), None, x.data)
    assert other.to_host(x)[0] == 7


def test_device_key_names_platform_device_and_driver(be):
    assert be._device_key() == (be.platform.name.strip(), be.device.name.strip(),
                                be.device.driver_version.strip())  # fmt: skip


def test_kernel_objects_are_fetched_once(be):
    opts = be._real_options(np.float32)
    assert be._kernel("cartpole.cl", "pk_cartpole_step", opts) is be._kernel(
        "cartpole.cl", "pk_cartpole_step", opts
    )


def test_steps_reuse_every_buffer(be):
    spec = envs.get("Pendulum-v1")
    n = 33
    bufs = _bufs(be, spec, n, np.float32)
    params = spec.param_vector(spec.resolve_params(None), np.dtype(np.float32))
    actions = be.from_host(np.linspace(-2, 2, n, dtype=np.float32))
    be.env_reset(spec, bufs, params, 1, True)
    be.env_step(spec, bufs, actions, params, 1, 5, "same_step")
    arrays = [bufs.state, bufs.steps, bufs.episodes, bufs.needs_reset, bufs.obs, bufs.final_obs,
              bufs.reward, bufs.terminated, bufs.truncated]  # fmt: skip
    pointers = [a.data.int_ptr for a in arrays]
    param_bufs = dict(_param_cache(be))
    for _ in range(12):  # crosses truncation at max_steps=5
        be.env_step(spec, bufs, actions, params, 1, 5, "same_step")
    assert [a.data.int_ptr for a in arrays] == pointers
    assert _param_cache(be).keys() == param_bufs.keys()
    assert all(_param_cache(be)[k] is v for k, v in param_bufs.items())


def test_local_size_knob_gives_the_same_results(be):
    spec = envs.get("Acrobot-v1")
    n = 45  # not a multiple of the work-group size: the kernels bounds-check
    params = spec.param_vector(spec.resolve_params(None), np.dtype(np.float32))
    actions = be.from_host(np.arange(n, dtype=np.int32) % 3)
    results = []
    for local in (None, 16):
        be.local_size = local
        try:
            bufs = _bufs(be, spec, n, np.float32)
            be.env_reset(spec, bufs, params, 9, True)
            for _ in range(3):
                be.env_step(spec, bufs, actions, params, 9, 2, "next_step")
        finally:
            be.local_size = tuning.TUNED
        results.append(be.to_host(bufs.obs))
    np.testing.assert_array_equal(results[0], results[1])


def test_for_array_finds_the_registry_instance():
    inst = get_backend("opencl")
    assert backend_of(inst.from_host(np.zeros(3, np.float32))) is inst


def test_for_array_rejects_a_foreign_context():
    stray = OpenCLBackend()  # not in the registry: its context belongs to no registered instance
    with pytest.raises(ValueError, match="context"):
        OpenCLBackend.for_array(stray.from_host(np.zeros(3, np.float32)))


def test_describe_reports_device_driver_and_versions(be):
    info = be.describe()
    assert {"device", "vendor", "driver", "opencl", "pyopencl"} <= info.keys()
    assert info["opencl"].startswith("OpenCL")


@pytest.mark.skipif(not _PROBE.available or not _pocl(), reason="needs PoCL (a CPU device)")
def test_device_kind_comes_from_the_device_type():
    assert OpenCLBackend("cpu").device_kind() == "cpu"


def test_memory_limits_are_the_devices(be):
    assert be.memory_limits() == (be.device.max_mem_alloc_size, be.device.global_mem_size)


def test_num_envs_over_the_device_limit_is_rejected_before_allocating(monkeypatch):
    inst = get_backend("opencl")
    max_alloc, _ = inst.memory_limits()

    def allocate(*args):
        raise AssertionError("allocated before checking the device's limits")

    monkeypatch.setattr(inst, "zeros", allocate)
    with pytest.raises(ValueError, match=r"num_envs: .*largest allocation.*" + re.escape(f"({max_alloc:,} bytes)")):
        step.make("CartPole-v1", 2**31 - 1, backend="opencl")


def test_an_allocation_over_the_device_limit_says_so(be):
    max_alloc, _ = be.memory_limits()
    # One element past the largest allocation: the driver refuses the buffer without allocating.
    with pytest.raises(MemoryError, match=re.escape(f"largest allocation is {max_alloc:,} bytes")):
        be.zeros((max_alloc // 4 + 1,), np.float32)


# ---- several implementations of one device ---------------------------------------------------------
def test_every_implementation_is_a_device_of_its_own_type(be):
    # The kind comes from CL_DEVICE_TYPE: Intel's CPU runtime names no "CPU" in its device name
    # (a name-based guess called it a GPU).
    if be.device.type & ocl_mod.cl.device_type.CPU:
        assert be.device_kind() == "cpu"
    assert be.describe()["kind"] == be.device_kind() and be.describe()["platform"] == be.platform.name.strip()


def test_one_cpu_under_two_implementations_is_two_devices():
    ids = ocl_mod.device_ids()
    if len(ids) < 2:
        pytest.skip(f"one OpenCL implementation here ({', '.join(ids)})")
    opened = [OpenCLBackend(label) for label in ids.values()]
    assert [b.device_name for b in opened] == list(ids.values())  # each label opens its own device
    assert len({b._device_key() for b in opened}) == len(opened)  # program cache and tuned defaults


@pytest.mark.parametrize("how", ["label", "device name", "implementation id"])
def test_a_device_is_found_by_label_name_or_implementation(be, how):
    pid = next(i for i, label in ocl_mod.device_ids().items() if label == be.device_name)
    want = {"label": be.device_name, "device name": be.device.name.strip(), "implementation id": pid}[how]
    if how == "device name" and sum(d.name.strip() == want for _, d in ocl_mod._all_devices()) > 1:
        pytest.skip("two implementations give this device the same name")
    assert OpenCLBackend(want).device_name == be.device_name


def test_installing_another_cpu_driver_does_not_move_the_default():
    ids = ocl_mod.device_ids()
    gpus = [p for p, d in ocl_mod._all_devices() if d.type & ocl_mod.cl.device_type.GPU and not ocl_mod._is_simulator(p)]
    if "pocl" not in ids or gpus:
        pytest.skip("needs PoCL and no GPU")
    assert OpenCLBackend().device_name == ids["pocl"] == OpenCLBackend("cpu").device_name


def test_compiler_output_is_kept_not_warned(be):
    import uuid
    import warnings

    source = f"/* {uuid.uuid4()} */ __kernel void pk_log_probe(__global float *x) {{ x[get_global_id(0)] *= 2.0f; }}\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CompilerWarning here would fail every test that builds
        be._build("probe.cl", source, ("-DREAL=float",))
    if "intel" in be.platform.name.lower():  # Intel's compiler always talks; PoCL is quiet
        assert any(k.startswith("probe.cl ") and "Done" in v for k, v in be.build_logs.items())
