"""Every Python snippet of the README and the docs runs as written (each in a fresh interpreter).

A snippet that cannot run here says so right above it, with the reason and what tests it instead:
``<!-- snippet: skip REASON -->``. Bash blocks are not run here: CI runs the README's two commands
verbatim in fresh clones (.ci/run).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- snippet: skip (?P<skip>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.S)


def _snippets() -> list:
    cases = []
    for page in PAGES:
        for i, m in enumerate(_BLOCK.finditer(page.read_text())):
            line = page.read_text()[: m.start("code")].count("\n") + 1
            marks = [pytest.mark.skip(reason=m.group("skip"))] if m.group("skip") else []
            cases.append(pytest.param(page, m.group("code"), id=f"{page.relative_to(ROOT)}:{line}", marks=marks))
    return cases


def test_the_pages_have_snippets_and_every_skip_gives_a_reason() -> None:
    cases = _snippets()
    assert len(cases) >= 4
    for page in PAGES:
        for reason in re.findall(r"<!-- snippet: skip ([^>]*?) -->", page.read_text()):
            assert len(reason.split()) >= 3, f"{page.name}: a skip needs its reason: {reason!r}"


@pytest.mark.parametrize("page, code", _snippets())
def test_snippet_runs(page: Path, code: str, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "SDL_VIDEODRIVER": "dummy"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, f"{page.name} snippet failed:\n{code}\n{done.stderr[-3000:]}"
