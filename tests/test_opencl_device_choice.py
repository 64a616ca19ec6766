"""device= strings: an implementation's id names that platform only, an ambiguous substring is an error."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from portkern.backends import probe

_PROBE = probe("opencl")
pytestmark = pytest.mark.skipif(not _PROBE.available, reason=f"opencl: {_PROBE.reason}")

if _PROBE.available:
    import pyopencl as cl

    from portkern.backends import _opencl_devices as devices

POCL = SimpleNamespace(name="Portable Computing Language", vendor="The pocl project")
INTEL = SimpleNamespace(name="Intel(R) OpenCL", vendor="Intel(R) Corporation")


def _cpu(name: str):
    return SimpleNamespace(name=name, type=cl.device_type.CPU)


@pytest.fixture
def pocl_only(monkeypatch):
    """What a process sees when Intel's runtime was not registered: PoCL, on an Intel CPU."""
    monkeypatch.setattr(devices, "_all_devices", lambda: [(POCL, _cpu("pthread-Intel(R) Xeon(R) Processor"))])


@pytest.fixture
def both(monkeypatch):
    monkeypatch.setattr(devices, "_all_devices", lambda: [
        (POCL, _cpu("pthread-Intel(R) Xeon(R) Processor")), (INTEL, _cpu("Intel(R) Xeon(R) Processor"))])


def test_intel_never_picks_pocl_whose_device_name_says_intel(pocl_only):
    with pytest.raises(ValueError, match=r"device: 'intel' names the intel OpenCL implementation, and none of its "
                                         r"devices is listed here .*pip install 'portkern\[opencl-intel\]'"):
        devices._select_device("intel")


def test_an_implementation_id_picks_its_platform(both):
    assert devices._select_device("intel")[0] is INTEL
    assert devices._select_device("pocl")[0] is POCL
    assert devices._select_device("INTEL")[0] is INTEL  # case-insensitive, as every device= string


def test_an_ambiguous_substring_lists_the_candidates(both):
    with pytest.raises(ValueError, match=r"'xeon' matches 2 OpenCL devices: Portable Computing Language: pthread-"
                                         r"Intel\(R\) Xeon\(R\) Processor; Intel\(R\) OpenCL: Intel\(R\) Xeon"):
        devices._select_device("xeon")


def test_a_unique_substring_and_an_exact_label_still_choose(both):
    assert devices._select_device("pthread")[0] is POCL
    assert devices._select_device("Intel(R) OpenCL: Intel(R) Xeon(R) Processor")[0] is INTEL


def test_bench_device_filter_takes_an_implementation_id_as_device_does():
    from portkern.identity import device_matches

    pocl = "Portable Computing Language: pthread-Intel(R) Xeon(R) Processor"
    intel = "Intel(R) OpenCL: Intel(R) Xeon(R) Processor"
    assert device_matches("opencl", pocl, "pocl") and not device_matches("opencl", intel, "pocl")
    assert device_matches("opencl", intel, "intel") and not device_matches("opencl", pocl, "intel")
    assert device_matches("opencl", pocl, "pthread")  # a substring, as before
    assert device_matches("cupy", "NVIDIA H200", "nvidia")  # other backends: a substring


def test_portkern_bench_accepts_pocl_as_its_device():
    from portkern.portability.options import select_backends

    got = select_backends(["opencl"], "pocl")
    assert [r.name for r in got] == ["opencl"]
    with pytest.raises(ValueError, match=r"--device 'amd': no device of opencl matches"):
        select_backends(["opencl"], "amd")
