"""portkern train never loses a finished run: the journal, kill -9 and --resume, Ctrl-C, another grid refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")

from portkern.cli import main  # noqa: E402
from portkern.journal import journal_path  # noqa: E402
from portkern.train import runner  # noqa: E402

from .conftest import finished, kill_9_when, one_finished  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: The smoke grid: the numpy stack, 3 PPO updates per run (seconds each), several seeds.
GRID = ["train", "--task", "CartPole-v1", "--stack", "numpy+eager-update", "--updates", "3", "--no-progress"]


def _runs(path: Path) -> list[dict]:
    return finished(path, "run")


def _shape(doc: dict) -> dict:
    """What must not depend on whether a grid was interrupted: the runs, in order, and every key of the schema."""
    return {"top": sorted(doc), "runs": [(r["task"], r["stack"], r["seed"]) for r in doc["runs"]],
            "run_keys": [sorted(r) for r in doc["runs"]], "devices": sorted(doc["devices"]),
            "prime_s": {k: sorted(v) for k, v in doc["prime_s"].items()}, "config": doc["config"],
            "failed": doc["failed"]}  # fmt: skip


@pytest.mark.slow  # three training subprocesses
def test_kill_9_mid_grid_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    out = tmp_path / "killed.json"
    journal = journal_path(out)
    argv = [*GRID, "--seeds", "1,2,3,4", "--out", str(out)]
    script = "import sys; from portkern.cli import main; sys.exit(main())"
    kill_9_when([sys.executable, "-c", script, *argv], lambda: one_finished(journal, "run"), 240,
                cwd=ROOT)
    kept = _runs(journal)
    assert 1 <= len(kept) < 4 and not out.exists(), (len(kept), out.exists())
    killed_worker = kept[0]["data"]["run"]["schedule"]["worker"]

    assert main([*argv, "--resume"]) == 0
    resumed = json.loads(out.read_text())
    assert not journal.exists()  # the final JSON holds everything the journal did
    # The runs that finished before the kill were kept, not rerun: their worker is the killed process.
    workers = [r["schedule"]["worker"] for r in resumed["runs"]]
    assert workers[: len(kept)] == [killed_worker] * len(kept) and killed_worker not in workers[len(kept):]

    fresh_out = tmp_path / "fresh.json"
    assert main([*GRID, "--seeds", "1,2,3,4", "--out", str(fresh_out)]) == 0
    fresh = json.loads(fresh_out.read_text())
    assert _shape(resumed) == _shape(fresh)
    assert [r["curve"][0][4] for r in resumed["runs"]] == [r["curve"][0][4] for r in fresh["runs"]]  # same seeds


def test_resume_ignores_a_torn_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    out = tmp_path / "torn.json"
    _interrupt_after_first_run(monkeypatch, [*GRID, "--seeds", "1,2", "--out", str(out)])
    journal = journal_path(out)
    with open(journal, "ab") as fh:
        fh.write(b'{"key": ["run", "CartPole-v1", "numpy", 2], "status": "done", "data": {"run": {"ta')
    with pytest.warns(UserWarning, match="last line is torn"):
        assert main([*GRID, "--seeds", "1,2", "--out", str(out), "--resume"]) == 0
    doc = json.loads(out.read_text())
    assert [r["seed"] for r in doc["runs"]] == [1, 2] and doc["failed"] == []


def stop_on_second_run(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Make the runner's second ``train_one`` call raise KeyboardInterrupt (a Ctrl-C after the first run
    finished); the returned dict counts the calls (``"n"``)."""
    real = runner.train_one
    calls = {"n": 0}

    def stop_on_second(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(runner, "train_one", stop_on_second)
    return calls


def _interrupt_after_first_run(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    real = runner.train_one
    stop_on_second_run(monkeypatch)
    assert main(argv) == 130
    monkeypatch.setattr(runner, "train_one", real)


def test_ctrl_c_keeps_the_finished_runs_and_says_how_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys) -> None:  # fmt: skip
    out = tmp_path / "c.json"
    monkeypatch.setattr(sys, "argv", ["portkern", *GRID, "--seeds", "1,2", "--out", str(out)])
    _interrupt_after_first_run(monkeypatch, [*GRID, "--seeds", "1,2", "--out", str(out)])
    err = capsys.readouterr().err
    assert f"interrupted after 1 of 2 runs: nothing written to {out} yet" in err
    assert f"kept in {journal_path(out)}" in err and "--resume`" in err and "portkern train --task CartPole-v1" in err
    assert [r["key"] for r in _runs(journal_path(out))] == [["run", "CartPole-v1", "numpy", 1]]


@pytest.mark.parametrize("change, differs", [
    (["--seeds", "1,3"], "seeds: journal has [1, 2], this run has [1, 3]"),
    (["--seeds", "1,2", "--max-seconds", "77"], "config.tasks.CartPole-v1.max_seconds"),
])  # fmt: skip
def test_a_journal_of_another_grid_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,
                                              change: list[str], differs: str) -> None:  # fmt: skip
    out = tmp_path / "o.json"
    _interrupt_after_first_run(monkeypatch, [*GRID, "--seeds", "1,2", "--out", str(out)])
    before = journal_path(out).read_bytes()
    capsys.readouterr()
    assert main([*GRID, *change, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "was written by a different grid; refusing to mix results" in err and differs in err, err
    assert journal_path(out).read_bytes() == before and not out.exists()


def test_an_unfinished_journal_needs_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    out = tmp_path / "u.json"
    _interrupt_after_first_run(monkeypatch, [*GRID, "--seeds", "1,2", "--out", str(out)])
    capsys.readouterr()
    assert main([*GRID, "--seeds", "1,2", "--out", str(out)]) == 2
    assert "holds 1 finished record(s): add --resume to finish it" in capsys.readouterr().err


def test_an_existing_final_out_without_resume_is_replaced_as_before(tmp_path: Path, capsys) -> None:
    out = tmp_path / "done.json"
    out.write_text('{"an": "older result"}')
    assert main([*GRID, "--updates", "1", "--seeds", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == runner.TRAIN_SCHEMA and [r["seed"] for r in doc["runs"]] == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.json"]  # no journal left behind
    capsys.readouterr()
    assert main([*GRID, "--updates", "1", "--seeds", "1", "--out", str(out), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_cores_per_run_needs_ray(tmp_path: Path, capsys) -> None:
    assert main([*GRID, "--seeds", "1", "--cores-per-run", "2", "--out", str(tmp_path / "x.json")]) == 2
    assert "--cores-per-run: only with --ray" in capsys.readouterr().err


def test_a_grid_that_fails_before_any_run_finishes_leaves_no_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys) -> None:  # fmt: skip
    def broken(*a, **k):
        raise RuntimeError("kernel build failed")

    monkeypatch.setattr(runner, "prime", broken)
    assert main([*GRID, "--seeds", "1", "--out", str(tmp_path / "b.json")]) == 2
    assert "kernel build failed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # the next plain run starts afresh, no --resume asked for
