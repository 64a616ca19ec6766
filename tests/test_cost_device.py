"""portkern cost --device takes an OpenCL implementation's id (pocl, intel), as device= and bench do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portkern.portability import cost

REPORT = Path(__file__).resolve().parents[1] / "bench" / "results" / "quick-a" / "report.json"


def _rep() -> dict:
    return json.loads(REPORT.read_text())


@pytest.mark.parametrize("alias, platform", [("pocl", "Portable Computing Language"), ("intel", "Intel(R) OpenCL")])
def test_an_implementation_id_picks_that_platforms_device(alias, platform):
    rep = _rep()
    _, _, source = cost._find(rep, "opencl", alias, None, None)
    chosen = next(k for k in rep["devices"] if f" on {k} vs " in source)
    assert rep["devices"][chosen]["platform"] == platform


def test_an_implementation_not_in_the_report_is_refused_naming_the_devices():
    with pytest.raises(ValueError, match=r"--device 'nvidia': expected one of .*OpenCL implementation"):
        cost._find(_rep(), "opencl", "nvidia", None, None)
