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
    suite = bench_dir()
    argv = [str(suite), *hermetic_options(suite), "-q", "--import-mode=importlib", f"--benchmark-json={json_path}",
            *options]  # fmt: skip
    captured = io.StringIO()
    # The suite is one session in one process, never distributed nor one worker of a distributed test run:
    # timing needs the whole machine, and pytest-benchmark turns itself off when it sees pytest-xdist's worker
    # variables (inherited from a test run that started this bench). The user's pytest environment variables
    # (PYTEST_ADDOPTS, PYTEST_PLUGINS) stay out too; the plugins' auto-loading is off (hermetic_options).
    saved = {k: os.environ.pop(k, None) for k in (*_XDIST_VARS, *_USER_VARS, "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        code, plugin = _run(argv, captured, progress, journal)
    finally:
        os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
        os.environ.update({k: v for k, v in saved.items() if v is not None})
    return code, plugin.failed, captured.getvalue()


#: What pytest-xdist sets in a worker's environment (pytest-benchmark reads PYTEST_XDIST_WORKER).
_XDIST_VARS = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
#: A user's own pytest settings from the environment: options and plugins of their test runs, not the suite's.
_USER_VARS = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")


def hermetic_options(suite: Path) -> list[str]:
    """pytest options that make the suite run with its own configuration and nothing else: its ``pytest.ini``
    (-c; the rootdir and the conftest cut-off are then the suite's folder, so no ini file or conftest.py above
    the installed package or in the working directory is read), and only the plugins it needs, named (the
    caller turns auto-loading off, so a plugin installed for the user's own tests cannot change a timing run,
    nor a missing one, such as pytest-xdist for a checkout's ``-n auto``, stop it)."""
    return ["-c", str(suite / "pytest.ini"), "--rootdir", str(suite), "-p", "pytest_benchmark.plugin",
            "-p", "no:cacheprovider"]  # fmt: skip


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
