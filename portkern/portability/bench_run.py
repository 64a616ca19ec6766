"""Running the pytest-benchmark suite in this process: where it is, its progress bar, and the resume hint
(shared by ``portkern bench``/``tune`` here and each node's bench of ``portkern bench --ray``)."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
from pathlib import Path
from typing import Any


def bench_dir() -> Path:
    """The pytest-benchmark suite: ``bench/`` of a checkout, or ``portkern/_bench`` inside a wheel."""
    here = Path(__file__).resolve().parent.parent
    for d in (here / "_bench", here.parent / "bench"):
        if (d / "conftest.py").is_file():
            return d
    raise FileNotFoundError(f"the benchmark suite was not found ({here / '_bench'} or {here.parent / 'bench'})")


class _ProgressPlugin:
    """Advances a rich progress bar once per benchmark case; pytest's own output is captured."""

    def __init__(self, progress: Any) -> None:
        self.progress, self.task = progress, None
        self.failed: list[str] = []

    def pytest_collection_finish(self, session: Any) -> None:
        self.task = self.progress.add_task("bench", total=len(session.items))

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self.failed.append(f"{report.nodeid}: {str(report.longrepr).splitlines()[-1][:300]}")
        if report.when == "teardown" and self.task is not None:
            self.progress.update(self.task, advance=1, description=report.nodeid.split("::")[-1][:60])


def run_pytest(json_path: Path, options: list[str], journal: Any = None,
               progress: bool = True) -> tuple[int, list[str], str]:  # fmt: skip
    """The suite with ``options`` (its ``--pk-*`` options) writing ``json_path``: (pytest exit code, failures,
    captured output). ``journal`` (a BenchJournal) keeps each finished visit. ``progress``: a rich bar on
    stderr (a Ray worker has no terminal to show it)."""
    argv = [str(bench_dir()), "-q", "-p", "no:cacheprovider", "--import-mode=importlib",
            f"--benchmark-json={json_path}", *options]  # fmt: skip
    captured = io.StringIO()
    # The suite is one session in one process, never distributed nor one worker of a distributed test run:
    # timing needs the whole machine, and pytest-benchmark turns itself off when it sees pytest-xdist's worker
    # variables (inherited from a test run that started this bench). `-n 0` after any addopts of the checkout.
    argv += ["-n", "0"] if _has_xdist() else []
    hidden = {k: os.environ.pop(k) for k in _XDIST_VARS if k in os.environ}
    try:
        code, plugin = _run(argv, captured, progress, journal)
    finally:
        os.environ.update(hidden)
    return code, plugin.failed, captured.getvalue()


#: What pytest-xdist sets in a worker's environment (pytest-benchmark reads PYTEST_XDIST_WORKER).
_XDIST_VARS = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def _has_xdist() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def _run(argv: list[str], captured: io.StringIO, progress: bool, journal: Any) -> tuple[int, _ProgressPlugin]:
    """pytest.main on the suite under a progress bar: its exit code and the bar's plugin (with the failures)."""
    import pytest
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:60}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False, disable=not progress) as bar:  # fmt: skip
        plugin = _ProgressPlugin(bar)
        with contextlib.redirect_stdout(captured):
            return int(pytest.main(argv, plugins=[plugin, *([journal] if journal is not None else [])])), plugin


class Interrupted(RuntimeError):
    """Ctrl-C: no results file was written; the journal keeps every finished visit for --resume."""


def command_line(kind: str) -> str:
    """The command as typed (for the resume hint), or "" when called from Python."""
    return f"portkern {kind} " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == [kind] else ""


def resume_hint(command: str) -> str:
    """How to finish an interrupted run: its command with --resume."""
    if command and "--resume" not in command.split():
        return f"`{command} --resume`"
    return f"`{command}`" if command else "the same command with --resume"
