"""`portkern bench/report/cost` end to end, in subprocesses, on the backends this machine runs (tiny sizes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from portkern.backends import probe
from portkern.portability.suite import ROLLOUT_KERNELS

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
    cases = json.loads((tmp_path / "results.json").read_text())["portkern"]["cases"]
    assert {(c["backend"], c["status"]) for c in cases if c["kernel"] != "copy"} == {(backend, "pass")}
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["functional"][f"{backend}@test-machine/cpu"]["share"] == 1.0
    # the three data paths of every env ran (T = 32 with --quick), with their rate and device-hours
    assert {c["kernel"] for c in cases if c["kernel"].startswith("rollout:")} == set(ROLLOUT_KERNELS)
    extra = next(b["extra_info"] for b in json.loads((tmp_path / "results.json").read_text())["benchmarks"]
                 if b["extra_info"]["kernel"] == "rollout:Acrobot-v1:fused")  # fmt: skip
    assert (extra["path"], extra["policy"], extra["T"], extra["N"], extra["steps_per_launch"]) == ("fused", "random", 32,
                                                                                                   256, 32)
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
    assert "= 2 x 100 x 10 - 1.5 x (100 / 0.97) x 10 - 40 x 100" in done.stdout


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
