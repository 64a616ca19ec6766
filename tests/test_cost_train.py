"""`portkern cost --train`: H and the throughput ratio from training runs, against a hand calculation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portkern import cli
from portkern.portability import cost, training

from . import train_docs as td

RATES = ["--locked-rate", "4", "--portable-rate", "2", "--policies", "100", "--retune-hours", "10",
         "--hourly-rate", "50"]  # fmt: skip

# The constructed CartPole-v1 runs (tests/train_docs.py), by hand:
#   locked numpy on box/cpu: wall 3600, 7200, 5400 s, all converged -> H = median 5400 s = 1.5 device-hours,
#                            range 1.0 to 2.0; env-steps/s 1000, 1200, 800 -> median 1000
#   portable opencl on PoCL: env-steps/s 1500, 1800, 1600 (all seeds, converged or not) -> median 1600
#   ratio = 1600 / 1000 = 1.6; interval [min portable / max locked, max portable / min locked] = [1500/1200, 1800/800]
H, H_RANGE = 1.5, (1.0, 2.0)
RATIO, RATIO_IV = 1.6, (1.25, 2.25)
# premium = locked_rate x H x P - portable_rate x (H / ratio) x P - retune_hours x hourly_rate
#         = 4 x 1.5 x 100 - 2 x (1.5 / 1.6) x 100 - 10 x 50 = 600 - 187.5 - 500 = -87.5
PREMIUM = -87.5
BREAK_EVEN = 500 / (4 * 1.5 - 2 * 1.5 / 1.6)  # switching / saving per policy = 500 / 4.125 = 121.21...
# Corners of H {1, 2} x ratio {1.25, 2.25}:
#   (1, 1.25): 400 - 160 - 500 = -260          break-even 500 / (4 - 1.6)       = 208.33
#   (1, 2.25): 400 - 88.89 - 500 = -188.89     break-even 500 / (4 - 0.8889)    = 160.71
#   (2, 1.25): 800 - 320 - 500 = -20           break-even 500 / (8 - 3.2)       = 104.17
#   (2, 2.25): 800 - 177.78 - 500 = 122.22     break-even 500 / (8 - 1.7778)    = 80.36
PREMIUM_RANGE = (-260.0, 800 - 2 * (2 / 2.25) * 100 - 500)
BREAK_EVEN_RANGE = (500 / (8 - 2 * 2 / 2.25), 500 / (4 - 2 * 1 / 1.25))


@pytest.fixture
def train_file(tmp_path: Path) -> Path:
    return td.write(tmp_path / "train.json")


def _cost(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["cost", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_h_and_ratio_come_from_the_runs_as_computed_by_hand(train_file: Path) -> None:
    t = training.cost_from_train([str(train_file)], "numpy", "opencl@portable", "CartPole-v1")
    assert t["gpu_hours"] == H and t["gpu_hours_range"] == H_RANGE
    assert t["ratio"] == pytest.approx(RATIO) and t["ratio_interval"] == pytest.approx(RATIO_IV)
    assert (t["locked"]["device_key"], t["portable"]["device_key"]) == (td.CPU, td.POCL)
    assert t["portable"]["converged_seeds"] == [1, 2] and t["portable"]["seeds"] == [1, 2, 3]


def test_cost_json_matches_the_hand_calculation(train_file: Path, capsys) -> None:
    code, out, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy@cpu", "--portable", "opencl@portable",
                           "--task", "CartPole-v1", *RATES, "--json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["inputs"]["gpu_hours"] == H and doc["inputs"]["ratio"] == pytest.approx(RATIO)
    assert doc["premium"] == pytest.approx(PREMIUM) and doc["break_even_policies"] == pytest.approx(BREAK_EVEN)
    assert doc["ranges"]["premium"] == pytest.approx(list(PREMIUM_RANGE))
    assert doc["ranges"]["break_even_policies"] == pytest.approx(list(BREAK_EVEN_RANGE))
    assert doc["ranges"]["gpu_hours"] == list(H_RANGE) and doc["ranges"]["ratio"] == pytest.approx(list(RATIO_IV))
    assert doc["train"]["task"] == "CartPole-v1" and doc["train"]["files"] == [str(train_file)]
    assert "numpy on box/cpu" in doc["gpu_hours_source"] and "opencl on " + td.POCL in doc["ratio_source"]


def test_cost_text_prints_the_formula_the_figures_and_where_they_came_from(train_file: Path, capsys) -> None:
    code, out, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy", "--portable", "opencl@portable",
                           "--task", "CartPole-v1", *RATES)  # fmt: skip
    assert code == 0, err
    assert "= 4 x 1.5 x 100 - 2 x (1.5 / 1.6) x 100 - 10 x 50" in out
    assert "= 600.00 - 187.50 - 500.00" in out and "= -87.50" in out
    assert "H = 1.5 device-hours per converged policy [range 1 to 2]" in out
    assert "ratio = 1.6 [interval 1.25 to 2.25: min portable / max locked" in out
    assert f"range -260.00 to {PREMIUM_RANGE[1]:,.2f} over the H range x the ratio's interval" in out
    assert f"break-even       {BREAK_EVEN:,.2f} policies" in out
    assert f"range {BREAK_EVEN_RANGE[0]:,.2f} to {BREAK_EVEN_RANGE[1]:,.2f} policies" in out
    # the sources: stack, device, task, seeds, file
    assert "locked numpy on box/cpu, CartPole-v1: median device-hours per converged policy over converged seeds " \
           "1,2,3 of 1,2,3" in out
    assert f"portable opencl on {td.POCL} (1,600, seeds 1,2,3; 2 of 3 converged)" in out and str(train_file) in out


def test_premium_and_break_even_ranges_are_the_extremes_over_the_corners() -> None:
    c = cost.CostInputs(gpu_hours=H, locked_rate=4, portable_rate=2, policies=100, retune_hours=10, hourly_rate=50,
                        ratio=RATIO)  # fmt: skip
    rg = cost.ranges(c, RATIO_IV, H_RANGE)
    assert rg["premium"] == pytest.approx(PREMIUM_RANGE) and rg["break_even_policies"] == pytest.approx(BREAK_EVEN_RANGE)
    assert rg["portable_cost"] == pytest.approx((2 * (1 / 2.25) * 100, 2 * (2 / 1.25) * 100))


@pytest.mark.parametrize("option,spec,message", [
    ("--locked", "cupy@cpu", "--locked 'cupy@cpu': no run of stack 'cupy' in the training files; valid: numpy@box/cpu, "
                             f"opencl@{td.POCL}, opencl@{td.INTEL}, torch@box/cpu, torch@box/gpu0"),
    ("--locked", "numpy@gpu", "--locked 'numpy@gpu': device 'gpu' matches 0 of its devices; valid: numpy@box/cpu"),
    ("--portable", "opencl", f"--portable 'opencl': stack 'opencl' ran on 2 devices: name one; valid: opencl@{td.POCL}, "
                             f"opencl@{td.INTEL}"),
    ("--portable", "opencl@cpu", "--portable 'opencl@cpu': device 'cpu' matches 2 of its devices"),
    ("--portable", "@pocl", "--portable '@pocl': expected STACK@DEVICE"),
], ids=["unknown-stack", "unknown-device", "device-needed", "ambiguous-device", "no-stack"])  # fmt: skip
def test_a_bad_stack_at_device_is_a_clear_error(train_file: Path, capsys, option: str, spec: str, message: str) -> None:
    specs = {"--locked": "numpy", "--portable": "opencl@intel", option: spec}
    code, _, err = _cost(capsys, "--train", str(train_file), "--locked", specs["--locked"], "--portable",
                         specs["--portable"], "--task", "CartPole-v1", *RATES)  # fmt: skip
    assert code == 2 and message in err


def test_a_locked_stack_that_never_converged_has_no_h(train_file: Path, capsys) -> None:
    code, _, err = _cost(capsys, "--train", str(train_file), "--locked", "torch@box/cpu", "--portable", "numpy", *RATES)
    assert code == 2 and "--locked 'torch@box/cpu': torch on box/cpu never converged on CartPole-v1 (not converged " \
                         "(time budget x3, best return 300.5)); H is undefined" in err


def test_a_stack_label_as_given_to_train_picks_its_runs(tmp_path: Path) -> None:
    runs = [{**r, "stack": "opencl@pocl"} if r["device_key"] == td.POCL else r for r in td.runs()]
    path = td.write(tmp_path / "labelled.json", td.doc(runs))
    # "pocl" is no substring of the device key: the whole label names the stack
    t = training.cost_from_train([str(path)], "numpy", "opencl@pocl", "CartPole-v1")
    assert t["portable"]["device_key"] == td.POCL and t["ratio"] == pytest.approx(RATIO)


def test_the_task_is_needed_when_both_stacks_ran_several(train_file: Path, capsys) -> None:
    code, _, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy", "--portable", "opencl@portable",
                         *RATES)  # fmt: skip
    assert code == 2 and "--task: expected one of CartPole-v1, Acrobot-v1 (both stacks ran these)" in err
    code, _, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy", "--portable", "opencl@intel",
                         "--task", "Acrobot-v1", *RATES)  # fmt: skip
    assert code == 2 and "--task 'Acrobot-v1': expected a task both stacks ran; both ran: CartPole-v1" in err


@pytest.mark.parametrize("extra,clash", [(["--gpu-hours", "3"], "--gpu-hours"), (["--ratio", "0.9"], "--ratio"),
                                         (["--report", "r.json"], "--report")])  # fmt: skip
def test_train_excludes_the_hand_and_report_sources(train_file: Path, capsys, extra: list[str], clash: str) -> None:
    code, _, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy", "--portable", "opencl@portable",
                         "--task", "CartPole-v1", *RATES, *extra)  # fmt: skip
    assert code == 2 and f"--train: takes H and the ratio from the training runs; drop {clash}" in err


def test_train_needs_both_stacks_and_they_need_train(train_file: Path, capsys) -> None:
    code, _, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy", *RATES)
    assert code == 2 and "--train needs --locked STACK@DEVICE and --portable STACK@DEVICE" in err
    code, _, err = _cost(capsys, "--locked", "numpy", "--ratio", "0.9", "--gpu-hours", "1", *RATES)
    assert code == 2 and "--locked, --portable and --task go with --train RUN.json" in err
    code, _, err = _cost(capsys, "--ratio", "0.9", *RATES)
    assert code == 2 and "--gpu-hours: expected H" in err


def test_a_bench_run_given_as_a_training_file_is_named(capsys) -> None:
    bench = Path(__file__).parent / "data" / "run-ci-vm-paths-tiny.json"
    code, _, err = _cost(capsys, "--train", str(bench), "--locked", "numpy", "--portable", "opencl", *RATES)
    assert code == 2 and f"{bench}: not a portkern training file of schema 'portkern-train/1'" in err


def test_a_stack_costed_against_itself_is_warned_about(train_file: Path, capsys) -> None:
    code, out, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy@cpu", "--portable", "numpy@cpu",
                           "--task", "CartPole-v1", *RATES)  # fmt: skip
    assert code == 0, err
    assert out.startswith("warning: ") and "compares it with itself" in out.splitlines()[0]
    code, out, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy@cpu", "--portable", "numpy@cpu",
                           "--task", "CartPole-v1", *RATES, "--json")  # fmt: skip
    assert "both numpy on box/cpu" in json.loads(out)["warning"]
    # two different stacks: no warning
    code, out, err = _cost(capsys, "--train", str(train_file), "--locked", "numpy@cpu", "--portable", "opencl@portable",
                           "--task", "CartPole-v1", *RATES)  # fmt: skip
    assert "warning" not in out
