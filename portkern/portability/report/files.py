"""A report from files: bench runs and training files in, report.md, report.json and plots out."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...runs import load_run, merge
from .. import training
from . import gpu_bench, port_readiness
from .crossdevice import policy_costs
from .format import _json_default
from .model import REPORT_SCHEMA, build
from .plots import plot_all
from .render import markdown


def build_all(paths: list[str], mixes: Mapping[str, Mapping[str, float]] | None = None,
              prices: Sequence[str] | Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """The report of any mix of bench run files and training files (told apart by the training file's
    ``schema``); training files add the ``training`` section, and alone make a report of it only."""
    gpu = [str(p) for p in paths if gpu_bench.is_gpu_bench_file(p)]
    pcheck = [str(p) for p in paths if port_readiness.is_port_check_file(p)]  # compiled, not run
    rest = [p for p in paths if str(p) not in gpu and str(p) not in pcheck]
    kinds = [training.is_train_file(p) for p in rest]
    runs = [load_run(p) for p, t in zip(rest, kinds) if not t]
    trains = [(str(p), training.load_train(p)) for p, t in zip(rest, kinds) if t]
    tr = training.summarise(trains) if trains else None
    rep = _build(paths, runs, trains, tr, mixes, prices)
    if gpu:
        rep["gpu_bench"] = gpu_bench.summarise(gpu)
        rep["sources"] = [str(p) for p in paths]
    if pcheck:
        rep["port_readiness"] = port_readiness.summarise(pcheck)
        rep["sources"] = [str(p) for p in paths]
    return rep


def _build(paths: Sequence[str | Path], runs: list[Any], trains: list[tuple[str, dict[str, Any]]],
           tr: dict[str, Any] | None, mixes: Mapping[str, Mapping[str, float]] | None,
           prices: Sequence[str] | Mapping[str, float] | None) -> dict[str, Any]:  # fmt: skip
    """The report of the bench runs and training files (build_all adds the GPU measurements)."""
    if runs:
        rep = build(merge(runs), mixes, prices)
        if tr is not None:
            rep["training"] = tr
            if rep.get("cross_device", {}).get("prices"):
                rep["cross_device"]["policy_costs"] = policy_costs(rep["cross_device"], tr)
            rep["sources"] = [str(p) for p in paths]
            rep["definitions"] = {**rep["definitions"], **training.DEFINITIONS}
            found = training.finding(tr)
            if found:  # the biggest input of the cost model comes first; still three findings
                rep["summary"] = [found, *rep["summary"]][:3]
        return rep
    machines = sorted({str(d["host"].get("machine", "?")) for _, d in trains})
    return {"schema": REPORT_SCHEMA, "sources": [str(p) for p in paths], "machines": ", ".join(machines),
            "quick": [], "runs": {}, "definitions": dict(training.DEFINITIONS) if trains else {},
            "training": tr}  # fmt: skip


def write(run_paths: list[str], out_dir: str | Path, mixes: Mapping[str, Mapping[str, float]] | None = None,
          extra_files: Mapping[str, str] | None = None, source_names: list[str] | None = None,
          prices: Sequence[str] | Mapping[str, float] | None = None) -> dict[str, Any]:
    """Load and check every run first, then write report.md/json and plots into a temp dir in ``out_dir``
    and move them into place.

    ``source_names`` replaces the run paths in the report (a run copied into ``out_dir`` is
    named where it ends up, not where it was written first).
    """
    rep = build_all(run_paths, mixes, prices)  # raises before anything is written
    if source_names is not None:
        rep["sources"] = list(source_names)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Inside out: the one folder the caller checked is writable, and the same filesystem for replace().
    tmp = Path(tempfile.mkdtemp(prefix=".portkern-report-", dir=out))
    try:
        (tmp / "report.json").write_text(json.dumps(rep, indent=1, default=_json_default))
        (tmp / "report.md").write_text(markdown(rep))
        plot_all(rep, tmp)
        for name, src in (extra_files or {}).items():
            shutil.copyfile(src, tmp / name)
        for f in tmp.iterdir():  # same filesystem: each file lands whole or not at all
            f.replace(out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep
