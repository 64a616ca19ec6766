"""`portkern bench/report/cost` end to end, in subprocesses, on the backends this machine runs (tiny sizes)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from portkern import cli
from portkern.backends import backends, probe
from portkern.portability import commands, report
from portkern.portability import suite
from portkern.portability.suite import ROLLOUT_KERNELS

from .test_env_sources import PENDING_KERNELS

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


def _portkern(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PORTKERN_MACHINE": "test-machine"}
    return subprocess.run([sys.executable, "-m", "portkern.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def _require(backend: str) -> None:
    # CI must not skip a backend this machine can run: a missing one fails with the install hint.
    p = probe(backend)
    assert p.available, f"{backend} backend unavailable ({p.reason}); install portkern[test]"


@pytest.mark.parametrize("backend,device", [("numpy", "cpu"), ("opencl", "pthread")], ids=["numpy", "opencl-pocl"])
def test_bench_writes_results_and_report(tmp_path: Path, backend: str, device: str) -> None:
    _require(backend)
    args = ["bench", "--quick", "--sizes", "256", "--backend", backend, "--out", str(tmp_path)]
    if backend != "numpy":
        args += ["--device", device]
    done = _portkern(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    # Every path the log names is where the file stays (no temporary results.json that is deleted after).
    log = done.stdout + done.stderr
    assert "portkern-bench-" not in log
    assert f"Wrote benchmark data in: {tmp_path / 'results.json'}" in log
    cases = json.loads((tmp_path / "results.json").read_text())["portkern"]["cases"]
    # Every case passes, but those of an env whose kernels for this API are pending (tests/test_env_sources.py).
    api = {"numpy": None, "opencl": "opencl"}[backend]
    pending = {env for env, apis in PENDING_KERNELS.items() if api in apis}
    assert {c["status"] for c in cases if any(f":{e}" in c["kernel"] for e in pending)} <= {"unsupported"}
    assert {(c["backend"], c["status"]) for c in cases if c["kernel"] != "copy"
            and not any(f":{e}" in c["kernel"] for e in pending)} == {(backend, "pass")}  # fmt: skip
    rep = json.loads((tmp_path / "report.json").read_text())
    # numpy runs on the bare host CPU; OpenCL's device is the CPU under its platform (PoCL)
    key = "test-machine/cpu" + ("" if backend == "numpy" else "/portable-computing-language")
    # Functional portability counts a pending env's kernels as not run (OpenCL: Chain-v0's step and rollout).
    fn = rep["functional"][f"{backend}@{key}"]
    not_run = {k for k, v in fn["kernels"].items() if v["status"] != "pass"}
    assert not_run == {k for k in fn["kernels"] if any(k.endswith(f":{e}") for e in pending)}
    assert fn["share"] == pytest.approx(1 - len(not_run) / len(fn["kernels"])) and key in rep["devices"]
    assert fn["share"] == 1.0 or pending
    # every timed case carries its interleaved rounds
    timed = [c for c in cases if c["kernel"] != "copy" and not c["simulator"] and c["status"] != "unsupported"]
    assert timed and all(c["rounds"] == len(c["round_s"]) >= 2 and c["round_group"] for c in timed)
    # the three data paths of every env ran (T = QUICK_ROLLOUT_T with --quick), with their rate and device-hours
    assert {c["kernel"] for c in cases if c["kernel"].startswith("rollout:")} == set(ROLLOUT_KERNELS)
    extra = next(b["extra_info"] for b in json.loads((tmp_path / "results.json").read_text())["benchmarks"]
                 if b["extra_info"]["kernel"] == "rollout:Acrobot-v1:fused")  # fmt: skip
    t = suite.QUICK_ROLLOUT_T
    assert (extra["path"], extra["policy"], extra["T"], extra["N"], extra["steps_per_launch"]) == ("fused", "random", t,
                                                                                                   256, t)
    assert extra["device_hours_per_1e9_steps"] == pytest.approx(1e9 / extra["env_steps_per_s"] / 3600)
    assert len(rep["data_paths"]["rows"]) == len(ROLLOUT_KERNELS) // 3 and (tmp_path / "data-paths.png").exists()


def test_report_merges_two_machines_and_cost_reads_it(tmp_path: Path) -> None:
    done = _portkern("report", str(DATA / "run-ci-vm-tune-tiny.json"), str(DATA / "synthetic-h200-run.json"),
                     "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = _portkern("cost", "--report", str(tmp_path), "--backend", "opencl", "--device", "h200", "--kernel", "gae",
                     "--gpu-hours", "100", "--locked-rate", "2", "--portable-rate", "1.5", "--policies", "10",
                     "--retune-hours", "40", "--hourly-rate", "100")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rep = json.loads((tmp_path / "report.json").read_text())
    row = next(r for r in rep["efficiency"] if (r["kernel"], r["backend"]) == ("gae", "opencl") and "h200" in r["device"])
    assert row["ratio"] == pytest.approx(0.97, abs=0.015)  # synthetic: OpenCL at 0.97 of CuPy, 1 % jitter per round
    assert f"= 2 x 100 x 10 - 1.5 x (100 / {row['ratio']:.4g}) x 10 - 40 x 100" in done.stdout
    assert "break-even" in done.stdout and "); range " in done.stdout  # the interval carried through


def test_report_of_a_run_with_rollouts_prints_the_data_paths(tmp_path: Path) -> None:
    done = _portkern("report", str(DATA / "run-ci-vm-paths-tiny.json"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "Data paths: host round-trip, device per-step, fused" in done.stdout and (tmp_path / "data-paths.png").exists()


def test_report_rejects_a_truncated_file_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "cut.json"
    bad.write_text((DATA / "synthetic-h200-run.json").read_text()[:300])
    done = _portkern("report", str(bad), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and f"{bad}: not valid JSON" in done.stderr and not (tmp_path / "out").exists()


def test_cost_needs_a_ratio_source(tmp_path: Path) -> None:
    done = _portkern("cost", "--gpu-hours", "1", "--locked-rate", "1", "--portable-rate", "1", "--policies", "1")
    assert done.returncode == 2 and "--ratio" in done.stderr


# ---- fail fast: every option checked before any benchmark runs, exit code 2 --------------------------
@pytest.fixture
def no_suite(monkeypatch):
    """Fails the test if the benchmark suite is started."""

    def run_suite(*args, **kwargs):
        raise AssertionError("the benchmark suite ran although an option was invalid")

    monkeypatch.setattr(commands, "run_suite", run_suite)


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A folder this process cannot write into (root ignores permission bits; sysfs refuses it too)."""
    if os.geteuid() != 0:
        d = tmp_path / "read-only"
        d.mkdir()
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
    elif Path("/sys").is_dir():
        yield Path("/sys")
    else:
        pytest.skip("running as root without /sys: no folder is read-only to root here")


BAD_RUN_OPTIONS = {
    "mix": (["--mix", "nope"], ["--mix nope: no such file", ", ".join(report.DEFAULT_MIXES)]),
    "sizes-zero": (["--sizes", "0"], ["--sizes 0: expected quick, full or N[,N...]", "got 0"]),
    "sizes-word": (["--sizes", "tiny"], ["--sizes tiny: expected quick, full or N[,N...]"]),
    "backend": (["--backend", "cuda"], ["--backend cuda: unknown backend; valid names: numpy, opencl, cupy, numba"]),
    "device": (["--device", "tpu-v9"], ["--device 'tpu-v9': no device of", "devices found: numpy: "]),
    "rollout-steps": (["--rollout-steps", "0"], ["--rollout-steps: expected an int in [1, ", "got 0"]),
}


@pytest.mark.parametrize("command", ["bench", "tune"])
@pytest.mark.parametrize("case", list(BAD_RUN_OPTIONS))
def test_bad_run_option_fails_before_any_benchmark(command, case, tmp_path, capsys, no_suite) -> None:
    args, messages = BAD_RUN_OPTIONS[case]
    out = tmp_path / "out"
    assert cli.main([command, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    for m in messages:
        assert m in err
    assert not out.exists()  # nothing made either


def test_bench_names_an_unavailable_backend_with_the_available_ones(tmp_path, capsys, no_suite) -> None:
    missing = [r for r in backends() if not r.available]
    if not missing:
        pytest.skip("every backend is available on this machine")
    assert cli.main(["bench", "--backend", missing[0].name, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"--backend {missing[0].name}: unavailable here" in err and "available: numpy" in err


@pytest.mark.parametrize("command", ["bench", "report"])
def test_an_existing_file_as_out_is_a_clear_error(command, tmp_path, capsys, no_suite) -> None:
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    args = [command] + ([str(DATA / "run-ci-vm-paths-tiny.json")] if command == "report" else [])
    assert cli.main([*args, "--out", str(target)]) == 2
    assert f"--out {target}: an existing file; expected a folder" in capsys.readouterr().err
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("command", ["bench", "report"])
def test_a_read_only_out_fails_before_anything_runs(command, read_only_dir, capsys, no_suite) -> None:
    out = read_only_dir / "portkern-out"
    args = [command] + ([str(DATA / "run-ci-vm-paths-tiny.json")] if command == "report" else [])
    assert cli.main([*args, "--out", str(out)]) == 2
    assert f"--out {out}: cannot write there" in capsys.readouterr().err
    assert not out.exists()


# ---- never lose a run ------------------------------------------------------------------------------
def fake_suite(monkeypatch, write: bool = True) -> list[Path]:
    """A suite that 'measures' by writing a recorded run where it was told to; returns the paths it got."""
    calls: list[Path] = []

    def run_suite(json_path: Path, args, tune: bool):
        calls.append(json_path)
        if write:
            shutil.copyfile(DATA / "run-ci-vm-paths-tiny.json", json_path)
        return 0, [], "captured pytest output"

    monkeypatch.setattr(commands, "run_suite", run_suite)
    return calls


def test_results_are_in_the_output_folder_before_the_report_is_built(tmp_path, capsys, monkeypatch) -> None:
    calls = fake_suite(monkeypatch)

    def broken_report(*args, **kwargs):
        raise ValueError("plotting exploded")

    monkeypatch.setattr(report, "write", broken_report)
    out = tmp_path / "out"
    assert cli.main(["bench", "--backend", "numpy", "--out", str(out)]) == 2
    assert calls == [out / "results.json"]  # the suite wrote straight into the output folder
    assert (out / "results.json").read_bytes() == (DATA / "run-ci-vm-paths-tiny.json").read_bytes()
    err = capsys.readouterr().err
    assert "plotting exploded" in err and f"the measurements are kept in {out / 'results.json'}" in err
    assert f"portkern report {out / 'results.json'} --out {out}" in err


def test_bench_writes_the_report_next_to_the_results(tmp_path, capsys, monkeypatch) -> None:
    fake_suite(monkeypatch)
    out = tmp_path / "out"
    assert cli.main(["bench", "--backend", "numpy", "--out", str(out)]) == 0
    assert {"results.json", "report.json", "report.md"} <= {p.name for p in out.iterdir()}
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp folders or write checks left
    assert json.loads((out / "report.json").read_text())["sources"] == [str(out / "results.json")]


def test_a_suite_that_wrote_nothing_is_an_error_and_an_older_run_is_kept(tmp_path, capsys, monkeypatch) -> None:
    fake_suite(monkeypatch, write=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text("an earlier run")
    assert cli.main(["bench", "--backend", "numpy", "--out", str(out)]) == 2
    assert "the benchmark suite did not complete" in capsys.readouterr().err
    assert (out / "results.json").read_text() == "an earlier run"


def test_a_suite_that_timed_nothing_says_why_and_what_to_add(tmp_path, capsys, monkeypatch) -> None:
    # pytest exits 0 and pytest-benchmark writes no file when every selected case was functional only
    # (`--backend cuda_host`): the error says so instead of pointing at an output that shows no failure.
    fake_suite(monkeypatch, write=False)
    assert cli.main(["bench", "--backend", "numpy", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "it timed no case" in err and "functional only" in err and "--backend numpy" in err


# ---- report input ----------------------------------------------------------------------------------
def _emptied_run(tmp_path: Path, keep=lambda case: True) -> Path:
    data = json.loads((DATA / "run-ci-vm-paths-tiny.json").read_text())
    data["benchmarks"] = []
    data["portkern"]["cases"] = [c for c in data["portkern"]["cases"] if keep(c)]
    path = tmp_path / "emptied.json"
    path.write_text(json.dumps(data))
    return path


def test_report_rejects_a_run_with_no_benchmarks_with_the_reason(tmp_path, capsys) -> None:
    run = _emptied_run(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["report", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{run}: no benchmarks:" in err and "passed parity on a timed device" in err
    assert not out.exists()


def test_report_rejects_a_run_with_no_benchmarks_and_no_cases(tmp_path, capsys) -> None:
    run = _emptied_run(tmp_path, keep=lambda c: False)
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    assert "no benchmarks and no cases: the run measured nothing" in capsys.readouterr().err


def test_report_accepts_a_simulator_only_run_untimed_by_design(tmp_path, capsys) -> None:
    # Simulator devices are parity-only: no timings, yet a functional-portability record.
    run = _emptied_run(tmp_path, keep=lambda c: c.get("simulator") or c.get("device_key") is None)
    assert cli.main(["report", str(run), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.md").exists()
