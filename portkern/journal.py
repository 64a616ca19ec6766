"""A run journal: every finished piece of a long grid (a training run, a bench case) appended as one JSON
line next to the result file, so a crash, a kill or a lost session loses at most the piece in flight.

The file is JSON lines: a header line ``{"journal": JOURNAL_SCHEMA, "kind": ..., "identity": {...}}`` naming
what the grid is (its config, the code revision, the machine: whatever must match for a resume to be
honest), then one line per record ``{"key": [...], "status": "done" | "failed" | "note", "data": {...}}`` (a note is
not a result: a one-off cost, say, kept for the final file). Each append
is flushed and fsynced before the caller moves on. A torn last line (the process died inside a write) is
ignored on read, with a warning, and cut off before the next append; a bad line anywhere else is damage,
and reading refuses it.

Any grid adopts it in a few lines::

    journal = Journal.open(journal_path(out), kind="bench", identity={...}, resume=args.resume)
    for key, case in plan:                        # key: a tuple of JSON scalars naming the case
        if key in journal.done: continue          # finished by an earlier, interrupted invocation
        journal.append(key, run(case))            # durable before the next case starts
    write_json_atomically(out, build(journal.done))
    journal.finish()                              # the final file holds everything: drop the journal

On KeyboardInterrupt, ``journal.close()`` and tell the user to rerun with ``--resume``.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping

JOURNAL_SCHEMA = "portkern-journal/1"
STATUSES = ("done", "failed", "note")


class JournalError(ValueError):
    """A journal that cannot be used as asked: another grid's, damaged, or absent when resuming."""


def journal_path(out: str | os.PathLike[str]) -> Path:
    """Where the journal of the result file ``out`` lives: next to it, ``<out>.journal``."""
    out = Path(out)
    return out.with_name(out.name + ".journal")


def _key(key: Iterable[Any]) -> tuple[Any, ...]:
    """A record's key as a dict key: its lists as tuples (a JSON object in it is no key: TypeError)."""
    return tuple(_key(k) if isinstance(k, list) else k for k in key)


def write_json_atomically(path: str | os.PathLike[str], doc: Any) -> None:
    """Write ``doc`` to ``path`` through a temporary file and a rename: a reader sees the old file or the whole
    new one, never half of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    try:
        with open(tmp, "w") as fh:
            fh.write(json.dumps(doc, indent=1))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """(header, records, byte length of the intact part). A torn last line is left out with a warning."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise JournalError(f"journal {path}: cannot read it ({exc.strerror})") from None
    lines = raw.split(b"\n")
    # A file whose last write completed ends in a newline, so the last element is b"".
    intact, entries = 0, []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if last and not line:
            break
        try:
            if last:  # no newline after it: the write was torn even if the bytes happen to parse
                raise ValueError("no newline")
            entry = json.loads(line)
            if not isinstance(entry, dict):
                raise ValueError("not an object")
        except ValueError:
            if last:
                warnings.warn(f"journal {path}: its last line is torn (the writer died mid-write); ignoring it "
                              f"({len(line)} bytes)", stacklevel=2)  # fmt: skip
                break
            raise JournalError(f"journal {path}: line {i + 1} is not a JSON object; the file is damaged "
                               "(only its last line can be torn by a kill)") from None  # fmt: skip
        entries.append(entry)
        intact += len(line) + 1
    if not entries or entries[0].get("journal") != JOURNAL_SCHEMA:
        raise JournalError(f"journal {path}: not a portkern journal (its first line must be a header of schema "
                           f"{JOURNAL_SCHEMA!r})")  # fmt: skip
    header, records = entries[0], entries[1:]
    if not isinstance(header.get("identity", {}), dict):
        raise JournalError(f"journal {path}: its header's 'identity' is not an object; the file is damaged")
    for n, r in enumerate(records, start=2):
        if not isinstance(r.get("key"), list) or r.get("status") not in STATUSES:
            raise JournalError(f"journal {path}: line {n} lacks a 'key' list and a 'status' of {'/'.join(STATUSES)}")
        if not isinstance(r.get("data"), dict):
            raise JournalError(f"journal {path}: line {n} lacks a 'data' object; the file is damaged")
        try:
            hash(_key(r["key"]))
        except TypeError:
            raise JournalError(f"journal {path}: line {n}'s 'key' holds a JSON object; the file is damaged") from None
    return header, records, intact


def differences(want: Mapping[str, Any], have: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the fields that differ between two identities (nested objects compared field by field)."""
    out = []
    for k in sorted(set(want) | set(have)):
        a, b = want.get(k), have.get(k)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += differences(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}: journal has {_short(b)}, this run has {_short(a)}")
    return out


def _short(v: Any, n: int = 80) -> str:
    s = json.dumps(v, sort_keys=True)
    return s if len(s) <= n else s[: n - 3] + "..."


class Journal:
    """An open journal: ``done`` maps key -> data of every finished record, ``failed`` key -> data of the
    failures (a resume runs those again), ``notes`` key -> data of the notes (the latest per key)."""

    def __init__(self, path: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
        self.path = path
        self.header = header
        self.done: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.failed: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.notes: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in records:
            self._index(r)
        self._fh = open(path, "ab")

    def _index(self, r: Mapping[str, Any]) -> None:
        key = _key(r["key"])
        if r["status"] == "done":
            self.done[key] = r["data"]
            self.failed.pop(key, None)
        elif r["status"] == "note":
            self.notes[key] = r["data"]
        else:
            self.failed[key] = r["data"]

    @classmethod
    def open(cls, path: str | os.PathLike[str], kind: str, identity: Mapping[str, Any], resume: bool,
             extra: Mapping[str, Any] | None = None) -> Journal:  # fmt: skip
        """Start a journal at ``path`` (refusing to overwrite an unfinished one unless resuming), or, with
        ``resume``, reopen it after checking that its kind and identity match this grid's exactly.

        ``identity`` is what must not change between the interrupted invocation and the resume (config,
        code revision, machine); ``extra`` is kept in the header for the final result (start time, host)."""
        path = Path(path)
        if resume:
            if not path.exists():
                raise JournalError(f"--resume: no journal at {path}: nothing to resume (run without --resume to "
                                   "start the grid)")  # fmt: skip
            header, records, intact = read(path)
            if header.get("kind") != kind:
                raise JournalError(f"--resume: {path} is a {header.get('kind')!r} journal, not a {kind!r} one")
            diff = differences(json.loads(json.dumps(identity)), header.get("identity", {}))
            if diff:
                raise JournalError(f"--resume: {path} was written by a different grid; refusing to mix results. "
                                   "Differences: " + "; ".join(diff) +
                                   ". Rerun the original command, or delete the journal to start over.")  # fmt: skip
            if intact < path.stat().st_size:
                with open(path, "r+b") as fh:  # cut the torn line so the next append starts on a fresh line
                    fh.truncate(intact)
                    fh.flush()
                    os.fsync(fh.fileno())
            return cls(path, header, records)
        if path.exists():
            try:
                _, records, _ = read(path)
                held = f"holds {sum(r['status'] == 'done' for r in records)} finished record(s)"
            except JournalError as exc:
                held = f"is unreadable ({exc})"
            raise JournalError(f"an unfinished grid's journal {path} {held}: add --resume to finish it, or delete "
                               "the journal to start over")  # fmt: skip
        header = {"journal": JOURNAL_SCHEMA, "kind": kind, "identity": dict(identity), **(extra or {})}
        with open(path, "xb") as fh:
            fh.write((json.dumps(header) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(path.parent)
        return cls(path, header, [])

    def append(self, key: Iterable[Hashable], data: Mapping[str, Any], status: str = "done") -> None:
        """Record one finished (or failed) piece durably: written, flushed and fsynced before returning."""
        if status not in STATUSES:
            raise ValueError(f"status: expected one of {', '.join(STATUSES)}, got {status!r}")
        entry = {"key": list(key), "status": status, "data": dict(data)}
        line = (json.dumps(entry) + "\n").encode()
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._index(json.loads(line))

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def finish(self) -> None:
        """The final result holds everything the journal did: close and delete it."""
        self.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _fsync_dir(folder: Path) -> None:
    """Make the new file's directory entry durable too (a crash right after creating it keeps it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
