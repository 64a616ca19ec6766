"""The portkern command: devices and demo."""

from __future__ import annotations

import subprocess
import sys

from portkern import cli


def test_devices_lists_every_backend_with_reasons(capsys):
    assert cli.main(["devices"]) == 0
    out = capsys.readouterr().out
    for name in ("numpy", "opencl", "cupy", "numba"):
        assert name in out
    assert "available" in out


def test_demo_steps_every_env(capsys):
    assert cli.main(["demo", "--backend", "numpy", "--num-envs", "64", "--seconds", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "CartPole-v1" in out and "Acrobot-v1" in out


def test_bad_arguments_exit_nonzero_with_a_message(capsys):
    assert cli.main(["demo", "--backend", "vulkan", "--seconds", "0.01"]) == 2
    assert "valid names" in capsys.readouterr().err


def test_console_script_entry_point_runs():
    res = subprocess.run([sys.executable, "-m", "portkern.cli", "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and "portkern" in res.stdout
