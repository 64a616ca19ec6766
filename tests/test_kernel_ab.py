"""bench/cpu/kernel_ab.py: the working tree's OpenCL kernels timed against a git revision's in one process. A tiny
run makes a row per driver with both versions' rates and their paired ratio, and a bad revision is one line naming
--base (the figures themselves are the benchmark's, bench/results/kernel-ab-mlp-epyc)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "cpu" / "kernel_ab.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=SCRIPT.parent, capture_output=True, text=True,
                          timeout=900)  # fmt: skip


def test_a_tiny_run_times_both_versions_on_every_driver(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    res = _run("--base", "HEAD", "--envs", "CartPole-v1", "--sizes", "64", "--steps", "2", "--repeats", "2",
               "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert len(doc["base_commit"]) == 40 and doc["rows"]
    for row in doc["rows"]:
        assert set(row["seconds"]) == {"tree", "base"} and all(len(v) == 2 for v in row["seconds"].values())
        assert row["tree_over_base"]["result"] in ("faster", "slower", "within noise")
    assert len({row["device"] for row in doc["rows"]}) == len(doc["rows"])  # one row per driver


def test_a_bad_revision_is_one_line_naming_base(tmp_path: Path) -> None:
    res = _run("--base", "no-such-rev-x", "--out", str(tmp_path / "x.json"))
    assert res.returncode == 2 and "--base no-such-rev-x" in res.stderr and "Traceback" not in res.stderr
