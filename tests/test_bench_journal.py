"""portkern bench/tune never lose a finished visit: the journal, kill -9 and --resume, Ctrl-C, another grid
refused, a torn line; and portkern bench --ray gives the serial bench's cases."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portkern import cli
from portkern.journal import journal_path
from portkern.portability import commands
from portkern.portability.bench_journal import BenchJournal

from .conftest import finished, kill_9_when, one_finished

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
#: The tiniest real bench: NumPy only, 256 items, 2 rounds; a buffer kernel then the five env steps, so a
#: kill after the first journaled visit still finds work left.
TINY = ["--quick", "--sizes", "256", "--backend", "numpy", "--rounds", "2", "--kernels", "gae,step"]
GID = "gae@test-machine/cpu-n256"  # a group id as the suite names it (only the fake suites below use it)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PORTKERN_MACHINE": "test-machine"}


def _portkern(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "portkern.cli", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def _visits(path: Path) -> list[dict]:
    return finished(path, "visit")


def _shape(doc: dict) -> dict:
    """What must not depend on whether a run was interrupted: the cases, their keys, the schema's keys."""
    cases = sorted(doc["portkern"]["cases"], key=lambda c: c["case_id"])
    return {"top": sorted(doc), "portkern": sorted(doc["portkern"]), "cases": [c["case_id"] for c in cases],
            "case_keys": [sorted(c) for c in cases], "status": [c["status"] for c in cases],
            "benchmarks": sorted(b["fullname"] for b in doc["benchmarks"]),
            "bench_keys": sorted({k for b in doc["benchmarks"] for k in b})}  # fmt: skip


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted serial bench of TINY (shared by the tests that compare with one)."""
    out = tmp_path_factory.mktemp("serial")
    done = _portkern("bench", *TINY, "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow  # two bench subprocesses (plus the shared uninterrupted one)
def test_kill_9_mid_run_then_resume_equals_an_uninterrupted_run(tmp_path: Path, serial_run: Path) -> None:
    out = tmp_path / "killed"
    results = out / "results.json"
    journal = journal_path(results)
    argv = ["bench", *TINY, "--out", str(out)]
    kill_9_when([sys.executable, "-m", "portkern.cli", *argv], lambda: one_finished(journal, "visit"),
                300, cwd=ROOT, env=_env())  # fmt: skip
    kept = _visits(journal)
    assert kept and not results.exists()

    done = _portkern(*argv, "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not journal.exists()  # results.json holds everything the journal did
    resumed = json.loads(results.read_text())
    # The visits that finished before the kill were replayed, not timed again: their rounds are the journal's.
    assert resumed["portkern"]["resumed"] == {"visits": len(kept), "cases": 0}
    cases = {c["case_id"]: c for c in resumed["portkern"]["cases"]}
    for visit in kept:
        for nodeid, member in visit["data"].items():
            assert cases[nodeid]["round_s"] == member["round_s"] and member["round_s"]

    fresh = json.loads((serial_run / "results.json").read_text())
    assert fresh["portkern"]["resumed"] == {"visits": 0, "cases": 0}
    assert _shape(resumed) == _shape(fresh)
    assert {c["kernel"] for c in fresh["portkern"]["cases"]} == {"gae"} | {c["kernel"] for c in fresh["portkern"]
                                                                          ["cases"] if c["kernel"].startswith("step:")}
    assert json.loads((out / "report.json").read_text())["functional"] == \
        json.loads((serial_run / "report.json").read_text())["functional"]  # fmt: skip


def _descendants(pid: int) -> list[int]:
    kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return kids + [d for k in kids for d in _descendants(k)]


def _kill_node_bench(driver: int) -> int | None:
    """kill -9 the Ray worker running the node's bench (a descendant of the driver: Ray started here)."""
    for pid in _descendants(driver):
        try:
            if b"_node_bench" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
                return pid
        except OSError:  # a process that ended meanwhile
            continue
    return None


@pytest.mark.slow  # a local Ray cluster and a bench on it, started twice: about a minute and a half
def test_bench_on_ray_gives_the_serial_bench_cases_after_a_worker_died(tmp_path: Path, serial_run: Path) -> None:
    pytest.importorskip("ray", reason="portkern bench --ray needs Ray: pip install 'portkern[ray]'")
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        pytest.skip("finding the Ray worker to kill needs Linux's /proc")
    results = tmp_path / "results-test-machine.json"
    proc = subprocess.Popen([sys.executable, "-m", "portkern.cli", "bench", *TINY, "--ray", "--out", str(tmp_path)],
                            cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    killed = None
    try:
        deadline = time.monotonic() + 300
        while killed is None and time.monotonic() < deadline and proc.poll() is None:
            if one_finished(journal_path(results), "visit"):  # mid-run: a visit is journaled
                killed = _kill_node_bench(proc.pid)
            time.sleep(0.01)
        err = proc.communicate(timeout=400)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed and proc.returncode == 0, err[-3000:]
    assert "the worker died; starting it again, resuming from" in err
    nodes = json.loads((tmp_path / "ray.json").read_text())["nodes"]
    assert [(n["label"], n["status"], n["results"]) for n in nodes] == [("test-machine", "done", results.name)]
    assert len(nodes[0]["attempts"]) == 1 and nodes[0]["attempts"][0]["reason"].startswith("the worker died")
    assert not journal_path(results).exists()
    on_ray = json.loads(results.read_text())
    assert on_ray["portkern"]["resumed"]["visits"] >= 1  # the dead worker's visits were kept, not timed again
    serial = json.loads((serial_run / "results.json").read_text())
    assert _shape(on_ray) == _shape(serial)
    rep_ray, rep_serial = (json.loads((d / "report.json").read_text()) for d in (tmp_path, serial_run))
    assert sorted(rep_ray) == sorted(rep_serial) and rep_ray["functional"] == rep_serial["functional"]
    assert sorted(rep_ray["devices"]) == sorted(rep_serial["devices"])


# ---- the journal through the CLI, with a stand-in suite (no benchmark runs: cheap) --------------------
def _suite(monkeypatch: pytest.MonkeyPatch, *, interrupt: bool, seen: list | None = None) -> None:
    """A suite that journals one visit, then is interrupted (Ctrl-C) or finishes by writing a recorded run."""

    def run_suite(json_path: Path, args, tune: bool):
        journal: BenchJournal = args.bench_journal
        if seen is not None:
            seen.append(journal.visit(GID, 0))
        if interrupt:
            journal.record_visit(GID, 0, {"case": {"rec": {"status": "pass"}, "timeable": True, "round_s": [1.0, 2.0],
                                                   "round_reps": [3, 3]}})  # fmt: skip
            journal.pytest_keyboard_interrupt(None)
            return 2, [], "KeyboardInterrupt"
        shutil.copyfile(DATA / "run-ci-vm-paths-tiny.json", json_path)
        return 0, [], "captured pytest output"

    monkeypatch.setattr(commands, "run_suite", run_suite)


def _interrupted(monkeypatch, capsys, command: str, out: Path, *extra: str) -> Path:
    _suite(monkeypatch, interrupt=True)
    assert cli.main([command, "--backend", "numpy", *extra, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    journal = journal_path(out / "results.json")
    assert "interrupted after 1 finished visit(s)" in err and str(journal) in err and "--resume" in err
    assert not (out / "results.json").exists() and len(_visits(journal)) == 1
    return journal


def test_ctrl_c_keeps_the_journal_and_a_torn_last_line_is_ignored_on_resume(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PORTKERN_MACHINE", "test-machine")
    out = tmp_path / "out"
    journal = _interrupted(monkeypatch, capsys, "bench", out, "--sizes", "256")
    intact = journal.stat().st_size
    with open(journal, "ab") as fh:
        fh.write(b'{"key": ["visit", "gae@test-machine/cpu-n256", 1], "status": "do')  # the writer died mid-line

    seen: list = []
    _suite(monkeypatch, interrupt=False, seen=seen)
    with pytest.warns(UserWarning, match="its last line is torn"):  # not without --resume
        assert cli.main(["bench", "--backend", "numpy", "--sizes", "256", "--out", str(out)]) == 2
    assert "add --resume to finish it" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="its last line is torn"):
        assert cli.main(["bench", "--backend", "numpy", "--sizes", "256", "--out", str(out), "--resume"]) == 0
    # The suite ran once (the plain rerun was refused first), with the visit the interrupted run journaled.
    assert seen == [{"case": {"rec": {"status": "pass"}, "timeable": True, "round_s": [1.0, 2.0],
                              "round_reps": [3, 3]}}]  # fmt: skip
    assert (out / "results.json").exists() and not journal.exists() and intact > 0


def test_a_journal_of_another_config_is_refused(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PORTKERN_MACHINE", "test-machine")
    out = tmp_path / "out"
    journal = _interrupted(monkeypatch, capsys, "bench", out, "--rounds", "2")
    before = journal.read_bytes()

    def no_suite(*args, **kwargs):
        raise AssertionError("the suite ran although the journal is another grid's")

    monkeypatch.setattr(commands, "run_suite", no_suite)
    assert cli.main(["bench", "--backend", "numpy", "--rounds", "3", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "written by a different grid" in err and 'options.--pk-rounds: journal has "2", this run has "3"' in err
    assert cli.main(["bench", "--backend", "numpy", "--rounds", "2", "--machine", "other", "--out", str(out),
                     "--resume"]) == 2  # fmt: skip
    assert "machine.name: journal has \"test-machine\", this run has \"other\"" in capsys.readouterr().err
    assert journal.read_bytes() == before  # a refused resume leaves the journal as it was


def test_tune_resume_refuses_a_mismatched_journal_and_completes(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PORTKERN_MACHINE", "test-machine")
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(tmp_path / "cache.json"))
    bench_out, out = tmp_path / "bench", tmp_path / "tune"
    _interrupted(monkeypatch, capsys, "bench", bench_out)
    shutil.copytree(bench_out, out)
    assert cli.main(["tune", "--backend", "numpy", "--out", str(out), "--resume"]) == 2  # a bench's journal
    assert "is a 'bench' journal, not a 'tune' one" in capsys.readouterr().err
    shutil.rmtree(out)

    journal = _interrupted(monkeypatch, capsys, "tune", out, "--sizes", "256")
    assert cli.main(["tune", "--backend", "numpy", "--sizes", "512", "--out", str(out), "--resume"]) == 2
    assert 'options.--pk-sizes: journal has "256", this run has "512"' in capsys.readouterr().err
    seen: list = []
    _suite(monkeypatch, interrupt=False, seen=seen)
    assert cli.main(["tune", "--backend", "numpy", "--sizes", "256", "--out", str(out), "--resume"]) == 0
    assert seen[0] is not None and not journal.exists()
    assert {"results.json", "tuned.json", "report.json"} <= {p.name for p in out.iterdir()}


def test_a_resume_that_collects_other_cases_is_refused(tmp_path) -> None:
    path = tmp_path / "results.json.journal"
    journal = BenchJournal.open(path, "bench", {"options": {}}, resume=False)
    assert journal.check_plan(["a", "b"])
    journal.close()
    resumed = BenchJournal.open(path, "bench", {"options": {}}, resume=True)
    assert resumed.check_plan(["a", "b"]) and resumed.error is None
    assert not resumed.check_plan(["a", "c"])
    assert "in the journal only: b; in this run only: c" in resumed.error and str(path) in resumed.error
    resumed.close()


def test_an_unknown_kernel_fails_before_anything_runs(tmp_path, monkeypatch, capsys) -> None:
    def no_suite(*args, **kwargs):
        raise AssertionError("the suite ran although --kernels named no kernel")

    monkeypatch.setattr(commands, "run_suite", no_suite)
    assert cli.main(["bench", "--kernels", "gae,warp", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "--kernels warp: no such kernel" in err and "rollout:CartPole-v1" in err and "step" in err
    assert not journal_path(tmp_path / "out" / "results.json").exists()
