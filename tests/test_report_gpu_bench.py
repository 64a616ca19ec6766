"""bench/gpu/gpu_bench.py's JSON in `portkern report`: alone, and beside a bench run.

The first GPU run's one complete section was gpu_bench.json; the report read only bench runs and
training files, so its figures reached the README by hand. Every figure checked here is read from the
committed file, not typed in.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from portkern.portability import commands, report
from portkern.portability.report import gpu_bench
from portkern.portability.report.format import _fmt

#: bench/results/gpu-h200-2026-12-04/gpu_bench.json, the first GPU run's file, as committed.
GPU = Path(__file__).parent / "data" / "gpu-bench-h200-2026-12-04.json"
DATA = Path(__file__).parent / "data"


def test_gpu_bench_files_are_told_apart(tmp_path):
    assert gpu_bench.is_gpu_bench_file(GPU)  # written before the schema: known by its sections
    assert not gpu_bench.is_gpu_bench_file(DATA / "synthetic-h200-run.json")
    train = tmp_path / "train.json"
    train.write_text(json.dumps({"schema": "portkern-train/1", "runs": [], "machine": {}, "started": "t"}))
    assert not gpu_bench.is_gpu_bench_file(train)


def test_a_file_with_the_schema_is_one(tmp_path):
    f = tmp_path / "g.json"
    f.write_text(json.dumps({"schema": gpu_bench.SCHEMA, "machine": {}, "started": "t"}))
    assert gpu_bench.is_gpu_bench_file(f)
    assert gpu_bench.summarise_file(f)["steps"] == []


def test_a_report_of_the_gpu_file_alone_has_its_figures(tmp_path):
    data = json.loads(GPU.read_text())
    rep = report.write([str(GPU)], tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## GPU measurements" in md and "no interval" in md
    for backend in ("cupy", "numba", "opencl", "torch"):
        s = data[f"cartpole_step_{backend}"]
        assert (
            f"| {backend} | {s['num_envs']:,} | {_fmt(s['steps_per_s'])} | {_fmt(s['bytes_per_s'])} |" in md
        )
        g = data[f"gae_{backend}"]
        assert f"| {_fmt(g['bytes_per_s'])} | {100 * g['fraction_of_copy_bandwidth']:.0f}% |" in md
    # the failure and the skipped sections are said, not dropped
    assert f"| torch_compile | failed: {data['cartpole_step_torch_compile']['error']} |" in md
    skipped = [k for k, v in data.items() if isinstance(v, dict) and "skipped" in v]
    assert f"{len(skipped)} section(s)" in md
    titles = report.headline(rep)
    assert any(t.startswith("GPU measurements: CartPole-v1 step on NVIDIA H200") for t in titles)
    assert (
        json.loads((tmp_path / "report.json").read_text())["gpu_bench"]["files"][0]["device"] == "NVIDIA H200"
    )


def test_beside_a_bench_run_the_report_has_both(tmp_path):
    run = DATA / "synthetic-h200-run.json"
    report.write([str(run), str(GPU)], tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Summary" in md and "## GPU measurements" in md
    assert md.index("## GPU measurements") < md.index("## Definitions")


def test_compare_rejects_a_gpu_file_naming_it(tmp_path):
    args = argparse.Namespace(runs=[str(DATA / "synthetic-h200-run.json"), str(GPU)], compare=True,
                              out=str(tmp_path / "c.md"), mix=None, mixes=None, price=None)  # fmt: skip
    with pytest.raises(ValueError, match="is a GPU measurement file .* without --compare"):
        commands.cmd_report(args)
