"""The portkern command: devices, demo and cost; bad arguments exit 2 with a message, before any output."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


def test_cost_reproduces_the_readme_hand_calculation(capsys):
    import json

    args = ["cost", "--ratio", "0.8", "--gpu-hours", "1000", "--locked-rate", "3", "--portable-rate", "2",
            "--policies", "10", "--retune-hours", "200", "--hourly-rate", "150"]  # fmt: skip
    assert cli.main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["locked_cost"], out["portable_cost"], out["switching_cost"]) == (30000.0, 25000.0, 30000.0)
    assert out["premium"] == -25000.0 and out["break_even_policies"] == 60.0
    assert out["sensitivity"]["0.5"]["break_even_policies"] is None  # never: strict JSON, no Infinity
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    assert "= 3 x 1000 x 10 - 2 x (1000 / 0.8) x 10 - 200 x 150" in text


def test_devices_prints_pip_extras_verbatim(capsys, monkeypatch):
    from portkern.backends import registry
    from portkern.backends.base import Probe

    # rich would read "[cuda]" as markup and drop it: the reason must be escaped.
    monkeypatch.setenv("COLUMNS", "250")  # no wrapping inside the reason
    monkeypatch.setattr(registry, "probe", lambda name, refresh=False: Probe(
        name == "numpy", "" if name == "numpy" else "cupy is not installed: pip install 'portkern[cuda]'"))
    assert cli.main(["devices"]) == 0
    assert "portkern[cuda]" in capsys.readouterr().out


@pytest.mark.parametrize("seconds", ["-1", "0", "nan"])
def test_demo_rejects_a_non_positive_duration_before_stepping(seconds, capsys):
    assert cli.main(["demo", "--backend", "numpy", "--seconds", seconds]) == 2
    out, err = capsys.readouterr()
    assert "--seconds: expected a number of seconds > 0" in err and out == ""


def test_demo_rejects_a_non_positive_env_count(capsys):
    assert cli.main(["demo", "--backend", "numpy", "--num-envs", "0"]) == 2
    assert "--num-envs: expected an int in [1, " in capsys.readouterr().err


def test_demo_names_the_devices_found_for_an_unknown_device(capsys):
    assert cli.main(["demo", "--device", "tpu-v9", "--seconds", "0.01"]) == 2
    out, err = capsys.readouterr()
    assert "--device 'tpu-v9': no device of" in err and "devices found: numpy: " in err and out == ""


def test_bench_help_gives_the_suites_own_defaults(capsys):
    from portkern.portability import suite

    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert f"(default {suite.ROLLOUT_T}; {suite.QUICK_ROLLOUT_T} with --quick)" in text
    assert f"(default {suite.ROUNDS}; {suite.QUICK_ROUNDS} with --quick)" in text
