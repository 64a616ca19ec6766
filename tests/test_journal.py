"""The run journal: durable appends, a torn last line ignored, damage and another grid's journal refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portkern.journal import JOURNAL_SCHEMA, Journal, JournalError, journal_path, read, write_json_atomically

IDENTITY = {"config": {"tasks": {"CartPole-v1": {"total_timesteps": 6144}}}, "seeds": [1, 2], "machine": {"name": "m"}}


def _journal(tmp_path: Path) -> Path:
    path = journal_path(tmp_path / "out.json")
    with Journal.open(path, "train", IDENTITY, resume=False) as j:
        j.append(["run", "CartPole-v1", "numpy", 1], {"wall_s": 1.5})
        j.append(["run", "CartPole-v1", "numpy", 2], {"reason": "worker died"}, status="failed")
    return path


def test_journal_lives_next_to_the_result_and_round_trips(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    assert path == tmp_path / "out.json.journal"
    header, records, intact = read(path)
    assert header["journal"] == JOURNAL_SCHEMA and header["kind"] == "train" and header["identity"] == IDENTITY
    assert [r["status"] for r in records] == ["done", "failed"] and intact == path.stat().st_size
    with Journal.open(path, "train", IDENTITY, resume=True) as j:
        assert j.done == {("run", "CartPole-v1", "numpy", 1): {"wall_s": 1.5}}
        assert list(j.failed) == [("run", "CartPole-v1", "numpy", 2)]  # a resume runs it again
        j.append(["run", "CartPole-v1", "numpy", 2], {"wall_s": 1.7})
        assert not j.failed and len(j.done) == 2
    j.finish()
    assert not path.exists()


def test_torn_last_line_is_ignored_with_a_warning_and_cut_before_the_next_append(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    whole = path.stat().st_size
    with open(path, "ab") as fh:
        fh.write(b'{"key": ["run", "CartPole-v1", "numpy", 3], "status": "do')  # killed mid-write
    with pytest.warns(UserWarning, match="last line is torn"):
        _, records, intact = read(path)
    assert len(records) == 2 and intact == whole
    with pytest.warns(UserWarning, match="last line is torn"):
        j = Journal.open(path, "train", IDENTITY, resume=True)
    j.append(["run", "CartPole-v1", "numpy", 3], {"wall_s": 2.0})
    j.close()
    _, records, _ = read(path)  # no warning now: the torn bytes were cut, the new line starts fresh
    assert [r["key"][-1] for r in records] == [1, 2, 3]


def test_a_complete_looking_last_line_without_newline_is_torn(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    with open(path, "ab") as fh:
        fh.write(b'{"key": ["run", "x", "y", 4], "status": "done", "data": {}}')  # the newline never landed
    with pytest.warns(UserWarning, match="torn"):
        assert len(read(path)[1]) == 2


def test_damage_before_the_last_line_is_refused(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalError, match="line 2 is not a JSON object; the file is damaged"):
        read(path)


def test_another_grids_journal_is_refused_naming_what_differs(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    other = json.loads(json.dumps(IDENTITY))
    other["config"]["tasks"]["CartPole-v1"]["total_timesteps"] = 2048
    other["seeds"] = [1, 2, 3]
    with pytest.raises(JournalError) as exc:
        Journal.open(path, "train", other, resume=True)
    msg = str(exc.value)
    assert "different grid" in msg
    assert "config.tasks.CartPole-v1.total_timesteps: journal has 6144, this run has 2048" in msg
    assert "seeds: journal has [1, 2], this run has [1, 2, 3]" in msg
    with pytest.raises(JournalError, match="is a 'train' journal, not a 'bench' one"):
        Journal.open(path, "bench", IDENTITY, resume=True)


def test_an_unfinished_journal_is_not_overwritten_without_resume(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    before = path.read_bytes()
    with pytest.raises(JournalError, match=r"holds 1 finished record\(s\): add --resume to finish it, or delete"):
        Journal.open(path, "train", IDENTITY, resume=False)
    assert path.read_bytes() == before


def test_resume_without_a_journal_says_there_is_nothing_to_resume(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="no journal at .*nothing to resume"):
        Journal.open(tmp_path / "x.journal", "train", IDENTITY, resume=True)


def test_not_a_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.journal"
    path.write_text('{"schema": "portkern-train/1"}\n')
    with pytest.raises(JournalError, match="not a portkern journal"):
        read(path)


def test_bad_status_is_refused(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    j = Journal.open(path, "train", IDENTITY, resume=True)
    with pytest.raises(ValueError, match="status: expected one of done, failed, note, got 'maybe'"):
        j.append(["run", "x"], {}, status="maybe")
    j.close()


def test_atomic_write_leaves_no_partial_file(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("old")
    write_json_atomically(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["r.json"]
