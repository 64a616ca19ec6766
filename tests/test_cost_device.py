"""portkern cost --device takes an OpenCL implementation's id (pocl, intel), as device= and bench do."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from portkern.portability import cost, report
from portkern.runs import load_run

#: A run of one CPU under PoCL and Intel's runtime (tests/data/make_synthetic_run.py).
RUN = Path(__file__).parent / "data" / "synthetic-xeon-two-drivers-run.json"


@functools.lru_cache(maxsize=1)
def _report_json() -> str:
    return json.dumps(report.build(load_run(RUN)))


def _rep() -> dict:
    return json.loads(_report_json())


@pytest.mark.parametrize("alias, platform", [("pocl", "Portable Computing Language"), ("intel", "Intel(R) OpenCL")])
def test_an_implementation_id_picks_that_platforms_device(alias, platform):
    rep = _rep()
    _, _, source = cost._find(rep, "opencl", alias, None, None)
    chosen = next(k for k in rep["devices"] if f" on {k} vs " in source)
    assert rep["devices"][chosen]["platform"] == platform


def test_an_implementation_not_in_the_report_is_refused_naming_the_devices():
    with pytest.raises(ValueError, match=r"--device 'nvidia': expected one of .*OpenCL implementation"):
        cost._find(_rep(), "opencl", "nvidia", None, None)
