"""The journal of a ``portkern bench`` / ``portkern tune`` run: what finished is kept, a killed run resumes.

The bench's unit of completion is a *visit* of an interleaved group (bench/conftest.py): one share of the
group's rounds, every member timed together. Each visit is journaled as it finishes, with the rounds it
timed per member case and each member's parity outcome / record as it stands after that visit; each
functional-only case (a simulator, a correctness harness) is journaled when its check is done. A resumed
run goes through the same pytest session: a visit the journal holds is replayed from it (its rounds, its
members' records), everything else runs, and pytest-benchmark writes the same results.json as an
uninterrupted run would. A visit in flight when the run died is simply run again.

Besides the records, two notes make a resumed grid the same grid: the size ladder measured from each
device's copy bandwidth (``--sizes full``: a second measurement could pick other sizes) and the plan (the
test ids collected). A plan that differs on resume (a driver installed or gone meanwhile) is refused.

The records reach the journal through an ``append`` callable: a :class:`portkern.journal.Journal` on this
machine, or, on a Ray worker, a queue the driver drains into the node's journal (bench_ray.py).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..journal import Journal, JournalError

#: An append: (key, data, status) -> None, durable (or handed to the driver) before it returns.
Append = Callable[[list, dict, str], None]


def identity(options: Sequence[str], machine: str) -> dict[str, Any]:
    """What a resume must find unchanged: the options that shape the grid (every ``--pk-*`` option the run
    passes its suite: sizes, backends, device, tune, rounds, slot, group budget, visits, rollout steps,
    kernels), the code measured (the run file's own fingerprint) and the machine."""
    from . import suite

    # A mapping, not a list, so that a refused resume names the option that differs and both values.
    opts = {o.partition("=")[0]: (o.partition("=")[2] if "=" in o else True) for o in options if o.startswith("--pk-")}
    return {"options": opts, "code": suite.code_fingerprint(),
            "machine": {"name": machine, "cpu": suite.cpu_model(), "cores": os.cpu_count()}}  # fmt: skip


def _plain(value: Any) -> Any:
    """JSON's view of a record (tuples become lists, NumPy scalars numbers), as a replay will see it."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    item = getattr(value, "item", None)  # a NumPy scalar
    if item is not None and not isinstance(value, (str, bytes)):
        return item()
    return value


class BenchJournal:
    """The bench's view of its journal; also a pytest plugin (registered by the caller) that notes Ctrl-C.

    ``records``: the journal's records so far ({"key", "status", "data"}); ``append`` stores one more.
    """

    def __init__(self, records: Iterable[Mapping[str, Any]], append: Append, journal: Journal | None = None) -> None:
        self.done: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.notes: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in records:
            self._index(tuple(r["key"]), r["data"], r["status"])
        self._append = append
        self.journal = journal
        self.replayed = {"visits": 0, "cases": 0}
        self.interrupted = False
        self.error: str | None = None

    def _index(self, key: tuple[Any, ...], data: dict[str, Any], status: str) -> None:
        if status == "done":
            self.done[key] = data
        elif status == "note":
            self.notes[key] = data

    @classmethod
    def open(cls, path: str | os.PathLike[str], kind: str, ident: Mapping[str, Any], resume: bool,
             extra: Mapping[str, Any] | None = None) -> BenchJournal:  # fmt: skip
        """The journal at ``path`` (see :meth:`portkern.journal.Journal.open`: refused when it is another
        grid's, or unfinished and not resumed)."""
        j = Journal.open(path, kind, ident, resume, extra)
        records = [{"key": list(k), "status": "done", "data": d} for k, d in j.done.items()]
        records += [{"key": list(k), "status": "note", "data": d} for k, d in j.notes.items()]
        return cls(records, lambda key, data, status: j.append(key, data, status), j)

    def records(self) -> list[dict[str, Any]]:
        """Every record held, in the journal's line format (what a Ray worker is handed to resume from)."""
        return [{"key": list(k), "status": "done", "data": d} for k, d in self.done.items()] + \
            [{"key": list(k), "status": "note", "data": d} for k, d in self.notes.items()]  # fmt: skip

    def store(self, key: list[Any], data: Mapping[str, Any], status: str = "done") -> None:
        """Append one record (a visit, a case, a note) and hold it; the bench's own methods come through here,
        and a Ray driver stores what its worker sent."""
        data = _plain(data)
        self._append(list(key), data, status)
        self._index(tuple(key), data, status)

    _put = store

    # ---- what the bench asks ---------------------------------------------------------------------------
    def visit(self, gid: str, v: int) -> dict[str, Any] | None:
        """The journaled visit ``v`` of group ``gid``: {nodeid: {"rec", "timeable", "round_s", "round_reps"}}."""
        return self.done.get(("visit", gid, v))

    def record_visit(self, gid: str, v: int, members: Mapping[str, Mapping[str, Any]]) -> None:
        self._put(["visit", gid, v], members)

    def case(self, nodeid: str) -> dict[str, Any] | None:
        """A functional-only case's journaled outcome: {"rec", "timeable"}."""
        return self.done.get(("case", nodeid))

    def record_case(self, nodeid: str, outcome: Mapping[str, Any]) -> None:
        self._put(["case", nodeid], outcome)

    def sizes(self, hardware_key: str) -> dict[str, tuple[int, ...]] | None:
        """The size ladder an earlier invocation measured for this hardware (``--sizes full``)."""
        got = self.notes.get(("sizes", hardware_key))
        return None if got is None else {k: tuple(v) for k, v in got["sizes"].items()}

    def record_sizes(self, hardware_key: str, sizes: Mapping[str, Sequence[int]]) -> None:
        self._put(["sizes", hardware_key], {"sizes": sizes}, "note")

    def check_plan(self, nodeids: Sequence[str]) -> bool:
        """Note the collected cases, or, resuming, check they are the journal's; False (``error`` set) if not."""
        held = self.notes.get(("plan",))
        if held is None:
            self._put(["plan"], {"cases": list(nodeids)}, "note")
            return True
        if held["cases"] == list(nodeids):
            return True
        gone = [n for n in held["cases"] if n not in set(nodeids)]
        new = [n for n in nodeids if n not in set(held["cases"])]
        what = "; ".join(f"{label}: {', '.join(ids[:5])}" + (f" (+{len(ids) - 5} more)" if len(ids) > 5 else "")
                         for label, ids in (("in the journal only", gone), ("in this run only", new)) if ids) \
            or "the same cases in another order"  # fmt: skip
        self.error = (f"--resume: the cases collected now are not the journal's ({what}); a backend or driver "
                      "came or went since the interrupted run. Refusing to mix results: rerun without --resume "
                      "after deleting the journal" + (f" {self.journal.path}" if self.journal else ""))  # fmt: skip
        return False

    def resumed(self) -> dict[str, int]:
        """How much of this run came from an earlier invocation (0 and 0 for a run that was never cut short)."""
        return dict(self.replayed)

    def finished(self) -> int:
        """Records of finished work held (visits and functional-only cases)."""
        return len(self.done)

    # ---- pytest hook -------------------------------------------------------------------------------------
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.interrupted = True  # told apart from a collection error, which pytest reports with the same exit code

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()

    def finish(self) -> None:
        """The results file holds everything: the journal goes."""
        if self.journal is not None:
            self.journal.finish()


__all__ = ["BenchJournal", "JournalError", "identity"]
