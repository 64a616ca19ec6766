"""Quiet commands: no third-party warning spam in normal use (Acrobot's wrap loop under torch.compile), demo
says where each row ran, devices marks simulators and says an unrelated ICD line once."""

from __future__ import annotations

import numpy as np
import pytest

from portkern.envs import acrobot


def test_acrobots_wrap_check_compiles_without_the_item_warning(caplog: pytest.LogCaptureFixture) -> None:
    torch = pytest.importorskip("torch")
    item = "Graph break from `Tensor.item()`"
    # backend="eager": dynamo's tracing is what warns; inductor's code generation would only cost time here.
    from portkern.backends import _torch_ops  # the torch backends' form of Acrobot's wrap check

    ours = torch.compile(lambda x: x * 2 if _torch_ops._any(x > 0) else x - 1, backend="eager")
    with caplog.at_level("WARNING", logger="torch._dynamo"):
        assert ours(torch.ones(3)).tolist() == [2.0] * 3 and ours(-torch.ones(3)).tolist() == [-2.0] * 3
    quiet = [r.getMessage() for r in caplog.records]
    caplog.clear()
    # The control: the plain bool() the wrap loop used to call does warn, so the capture above would see it.
    plain = torch.compile(lambda x: x * 2 if bool((x > 0).any()) else x - 1, backend="eager")
    with caplog.at_level("WARNING", logger="torch._dynamo"):
        assert plain(torch.ones(3)).tolist() == [2.0] * 3
    loud = [r.getMessage() for r in caplog.records]
    assert any(item in m for m in loud) and not any(item in m for m in quiet)


def test_the_wrap_is_gymnasiums_one_span_at_a_time() -> None:
    x = np.array([0.5, 3.5, 10.0, -20.0, 50.0], dtype=np.float64)
    want = x.copy()
    for i, v in enumerate(want):  # Gymnasium's wrap(), element by element
        while v > np.pi:
            v = v - 2 * np.pi
        while v < -np.pi:
            v = v + 2 * np.pi
        want[i] = v
    assert np.array_equal(acrobot._wrap(x, -np.pi, np.pi, 2 * np.pi), want)


# ---- demo and devices say where things run ----------------------------------------------------------
def test_demo_names_the_device_of_every_row(capsys: pytest.CaptureFixture) -> None:
    from portkern import cli
    from portkern.backends import get_backend

    assert cli.main(["demo", "--backend", "numpy", "--num-envs", "64", "--seconds", "0.01"]) == 0
    head, *rows = capsys.readouterr().out.splitlines()
    assert head.rstrip().endswith("device") and rows
    assert all(r.endswith(get_backend("numpy").device_name) for r in rows)


def _fake_opencl(monkeypatch: pytest.MonkeyPatch) -> list:
    from types import SimpleNamespace

    from portkern import cli
    from portkern.backends import _opencl_devices

    real, sim = "Portable Computing Language: pthread-CPU", "Oclgrind: Oclgrind Simulator"
    monkeypatch.setattr(_opencl_devices, "device_ids", lambda include_simulators=False: {
        "pocl": real, **({"oclgrind": sim} if include_simulators else {})})  # fmt: skip
    icd = "vendors/intel-fpga_emu.icd: names a library that is not there: left out"

    class Dev:
        def __init__(self, name: str, device: str | None) -> None:
            self.device = device

        def describe_verbose(self) -> dict:
            return {"backend": "opencl", "device": self.device, "platform": (self.device or "").split(":")[0],
                    "icd": icd}  # fmt: skip

    monkeypatch.setattr(cli, "get_backend", Dev)
    return [SimpleNamespace(name="opencl", available=True, simulator=False, devices=(sim, real), reason="")]


def test_devices_verbose_marks_the_simulator_and_says_the_icd_line_once(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture) -> None:  # fmt: skip
    from portkern import cli

    records = _fake_opencl(monkeypatch)
    cli._print_details(records, cli._simulated_devices(records))
    out = capsys.readouterr().out
    assert out.count("intel-fpga_emu.icd") == 1
    sim_part, real_part = out.split("opencl: Portable Computing Language")
    assert cli.SIMULATED in sim_part and cli.SIMULATED not in real_part


def test_the_devices_table_marks_simulators(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from portkern import cli

    records = _fake_opencl(monkeypatch)
    monkeypatch.setattr(cli, "backends", lambda refresh=False: records)
    monkeypatch.setenv("COLUMNS", "250")  # one device per line, unwrapped
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    assert f"Oclgrind Simulator ({cli.SIMULATED})" in out and f"pthread-CPU ({cli.SIMULATED})" not in out


def test_the_torch_backends_wrap_equals_the_references() -> None:
    torch = pytest.importorskip("torch")
    from portkern.backends import _torch_ops

    x = np.array([0.5, 3.5, 10.0, -20.0, 50.0, -np.pi, np.pi], dtype=np.float64)
    got = _torch_ops._wrap(torch.from_numpy(x.copy()), -np.pi, np.pi, 2 * np.pi).numpy()
    assert np.array_equal(got, acrobot._wrap(x, -np.pi, np.pi, 2 * np.pi))
