"""`portkern bench` runs the packaged suite with its own pytest configuration, whatever surrounds it.

The README puts the venv inside the checkout, so the installed suite (``site-packages/portkern/_bench``) lies
below the checkout's ``pyproject.toml``, whose pytest ``addopts`` need pytest-xdist; a user's project can hold
any ini file, conftest.py or PYTEST_ADDOPTS. None of them may reach the suite's pytest session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from portkern.portability.bench_run import bench_dir

ROOT = Path(__file__).resolve().parent.parent

#: What a project around the installed suite might configure: options the suite's session cannot parse
#: (pytest-xdist's, as in portkern's own pyproject.toml, plus one no plugin defines) and a warning turned error.
CONFLICTING = '-n auto --dist loadfile --no-such-option-of-the-users -W error'


def _installed_layout(prefix: Path) -> Path:
    """portkern laid out as a wheel installs it (the package with ``kernels/`` and ``_bench/`` inside) under
    ``prefix``: the folder to put on PYTHONPATH."""
    site = prefix / ".venv" / "lib" / "site-packages"
    skip = shutil.ignore_patterns("__pycache__", "results", "*.pyc")
    shutil.copytree(ROOT / "portkern", site / "portkern", ignore=skip)
    shutil.copytree(ROOT / "kernels", site / "portkern" / "kernels", ignore=skip)
    shutil.copytree(bench_dir(), site / "portkern" / "_bench", ignore=skip)
    return site


def test_bench_ignores_the_pytest_configuration_around_the_installed_suite(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    # The checkout (or a user's project) the venv lives in, and the folder the user runs from: both configure
    # pytest in ways the suite's session must not see.
    (project / "pyproject.toml").write_text(f'[tool.pytest.ini_options]\naddopts = "{CONFLICTING}"\n')
    (project / "pytest.ini").write_text(f"[pytest]\naddopts = {CONFLICTING}\n")
    (project / "conftest.py").write_text("raise RuntimeError('a conftest.py of the user was imported')\n")
    site = _installed_layout(project)
    out = project / "out" / "bench"
    env = {**os.environ, "PYTHONPATH": str(site), "PYTEST_ADDOPTS": "--no-such-option-from-the-environment",
           "PORTKERN_MACHINE": "test-machine"}  # fmt: skip
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "portkern.cli", "bench", "--quick", "--backend", "numpy", "--sizes", "64",
         "--kernels", "step:CartPole-v1", "--rounds", "2", "--out", str(out)],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    cases = json.loads((out / "results.json").read_text())["portkern"]["cases"]
    assert {(c["kernel"], c["status"]) for c in cases if c["kernel"] != "copy"} == {("step:CartPole-v1", "pass")}
    assert (out / "report.md").read_text().startswith("#")
