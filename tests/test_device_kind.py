"""Device kind per backend: what reports group devices by (identity.device_info's ``kind``).

The first GPU run (an H200) labelled CuPy's device as the host CPU ("cupy@lent-h200/cpu"): the
CUDA backends and torch kept Backend's default "cpu". Each backend now answers from its own API.
"""

from __future__ import annotations

import pytest

from portkern.backends import get_backend, probe
from portkern.backends.cupy import CupyBackend
from portkern.backends.numba import NumbaBackend
from portkern.identity import Target, device_info


def test_cupy_devices_are_gpus():
    # No CUDA device here: the method reads nothing from the device, so a bare instance answers.
    assert CupyBackend.device_kind(object.__new__(CupyBackend)) == "gpu"


def test_numba_kind_follows_the_simulator():
    be = object.__new__(NumbaBackend)
    be.simulator = False
    assert be.device_kind() == "gpu"
    be.simulator = True
    assert be.device_kind() == "cpu"


@pytest.mark.parametrize(("torch_device", "kind"), [("cpu", "cpu"), ("cuda", "gpu"), ("cuda:1", "gpu"),
                                                    ("xpu", "gpu"), ("mps", "gpu"), ("hpu", "accelerator")])  # fmt: skip
def test_torch_kind_comes_from_the_tensor_device_type(torch_device, kind):
    torch = pytest.importorskip(
        "torch", reason="the torch backend needs PyTorch: pip install 'portkern[torch]'"
    )
    from portkern.backends.torch import TorchBackend

    be = object.__new__(TorchBackend)
    be.device = torch.device(torch_device)  # a device object needs no such hardware
    assert be.device_kind() == kind


def test_a_gpu_backend_is_not_keyed_as_the_host_cpu(monkeypatch):
    """device_info keys a "gpu" backend by its device name, not ``<machine>/cpu`` (the H200 run's label)."""
    pytest.importorskip("torch", reason="the torch backend needs PyTorch: pip install 'portkern[torch]'")
    be = get_backend("torch")
    assert be.device_kind() == "cpu"
    cpu = device_info(be, Target("torch", "cpu"), "m")
    assert cpu["kind"] == "cpu" and cpu["hardware_key"] == "m/cpu"
    monkeypatch.setattr(type(be), "device_kind", lambda self: "gpu")
    monkeypatch.setattr(be, "device_name", "NVIDIA H200")
    gpu = device_info(be, Target("torch", "cpu"), "m")
    assert gpu["kind"] == "gpu" and gpu["hardware_key"] != "m/cpu" and gpu["device_label"] == "NVIDIA H200"
    assert not probe("torch").simulator
