"""bench/results/ holds only what something depends on, each folder listed once in its manifest, within budget."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
STATUSES = {"current", "feeds shipped data", "superseded"}
#: The budget of committed evidence (bytes, folders).
MAX_BYTES, MAX_FOLDERS = 20_000_000, 25


def _rows() -> dict[str, list[str]]:
    rows = {}
    for line in (RESULTS / "README.md").read_text().splitlines():
        m = re.match(r"\| `([^`]+)` \|(.*)\|$", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} has two rows in the manifest"
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_every_folder_has_one_manifest_row_and_every_row_a_folder() -> None:
    folders = {p.name for p in RESULTS.iterdir() if p.is_dir()}
    assert set(_rows()) == folders
    assert not [p.name for p in RESULTS.iterdir() if p.is_file() and p.name != "README.md"], "loose files: use a folder"


def test_every_row_says_status_date_commit_machine_command_and_dependant() -> None:
    for folder, cells in _rows().items():
        status, date, commit, machine, command, depends = cells
        assert status in STATUSES, f"{folder}: status {status!r}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), f"{folder}: date {date!r}"
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit), f"{folder}: commit {commit!r}"
        assert machine and command and depends, folder


def test_results_stay_within_budget() -> None:
    files = [p for p in RESULTS.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= MAX_BYTES
    assert sum(1 for p in RESULTS.iterdir() if p.is_dir()) <= MAX_FOLDERS
    assert not [p for p in files if p.suffix in (".py", ".sh")], "scripts belong in bench/ or the package, tested"


def _cited() -> set[str]:
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "portkern").rglob("*.py"),
             *(ROOT / "portkern" / "data").glob("*.json")]  # fmt: skip
    found = set()
    for t in texts:
        found |= set(re.findall(r"bench/results/([A-Za-z0-9._-]+)", t.read_text()))
    return found


def test_every_results_folder_the_docs_code_and_shipped_data_cite_exists() -> None:
    missing = {c for c in _cited() if not (RESULTS / c).exists()}
    assert not missing, f"cited but not committed: {sorted(missing)}"


def test_the_shipped_data_cites_only_folders_marked_as_feeding_it() -> None:
    rows = _rows()
    for path in (ROOT / "portkern" / "data").glob("*.json"):
        for folder in set(re.findall(r"bench/results/([A-Za-z0-9._-]+)", path.read_text())):
            assert rows[folder][0] == "feeds shipped data", f"{path.name} cites {folder}, marked {rows[folder][0]}"


def test_the_install_commands_the_docs_give_are_what_ci_installs() -> None:
    """The apt packages the README and the port-check page tell a user to install are the ones the toolchains
    need (portkern.toolchains.base.APT_PACKAGES) and the ones CI installs (.ci/apt-packages.txt)."""
    from portkern.toolchains.base import APT_PACKAGES

    ci = set((ROOT / ".ci" / "apt-packages.txt").read_text().split())
    assert set(APT_PACKAGES) <= ci
    for page in (ROOT / "README.md", ROOT / "docs" / "port-check.md"):
        text = re.sub(r"\s*\\?\n\s*", " ", page.read_text())
        lines = re.findall(r"apt-get install --no-install-recommends ([a-z0-9 .+-]+)", text)
        assert lines, page.name
        assert {p for line in lines for p in line.split()} >= set(APT_PACKAGES), page.name
