"""Warnings instead of meaningless output: a cost whose ratio compares a backend with itself says so, the
sensitivity row of the headline ratio is the headline, and numpy refuses a batch the host cannot hold the way
the device backends do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from portkern import step
from portkern.backends import get_backend
from portkern.portability import cost, report

from .mixes import HAND_MIXES

DATA = Path(__file__).parent / "data"
XEON = DATA / "synthetic-xeon-two-drivers-run.json"
INTEL = "synthetic-xeon/cpu/intel-opencl"
INPUTS = dict(gpu_hours=1000, locked_rate=3, portable_rate=2, policies=10, retune_hours=200, hourly_rate=150)


@pytest.fixture(scope="module")
def report_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rep") / "report.json"
    import json

    from portkern.portability.report.format import _json_default
    from portkern.runs import load_run

    out.write_text(json.dumps(report.build(load_run(XEON), HAND_MIXES), default=_json_default))
    return out


def test_a_ratio_of_the_baseline_with_itself_is_a_warning(report_json: Path) -> None:
    ratio, interval, source = cost.ratio_from_report(report_json, "opencl", "intel", "physics-heavy", None)
    assert ratio == 1.0 and cost.warning(source) is not None
    text = cost.render(cost.CostInputs(**INPUTS, ratio=ratio), source, interval)
    first = text.splitlines()[0]
    assert first.startswith(f"warning: opencl is the baseline on {INTEL}") and "with itself" in first
    assert "--backend numpy" in first  # what to give instead: a backend measured there
    assert cost.as_json(cost.CostInputs(**INPUTS, ratio=ratio), source, interval)["warning"] == cost.warning(source)


def test_a_kernel_ratio_of_the_baseline_with_itself_is_a_warning_too(report_json: Path) -> None:
    _, _, source = cost.ratio_from_report(report_json, "opencl", "intel", None, "step:CartPole-v1")
    assert "with itself" in (cost.warning(source) or "")


def test_a_real_comparison_has_no_warning(report_json: Path) -> None:
    ratio, interval, source = cost.ratio_from_report(report_json, "numpy", "intel", "physics-heavy", None)
    assert ratio < 1 and cost.warning(source) is None
    text = cost.render(cost.CostInputs(**INPUTS, ratio=ratio), source, interval)
    assert text.startswith("ratio = ") and f"workload 'physics-heavy' with numpy on {INTEL} vs opencl" in text
    assert "warning" not in cost.as_json(cost.CostInputs(**INPUTS, ratio=ratio), source, interval)


def test_the_sensitivity_row_of_the_headline_ratio_is_the_headline() -> None:
    # A ratio that rounds (1.5639...): the row used to be computed from round(ratio, 4) and moved the break-even.
    c = cost.CostInputs(gpu_hours=0.00451404, locked_rate=3, portable_rate=2, policies=100, retune_hours=200,
                        hourly_rate=150, ratio=17789.3 / 11372.4)  # fmt: skip
    text = cost.render(c, "test")
    head = re.search(r"break-even\s+([\d,.]+) policies", text).group(1)
    row = next(line for line in text.splitlines() if line.endswith("<- this ratio"))
    assert row.split()[3] == head
    grid = cost.render(cost.CostInputs(**INPUTS, ratio=0.8), "test")
    assert sum(1 for line in grid.splitlines() if line.strip().startswith("0.8 ")) == 1  # not listed twice


def test_numpy_refuses_a_batch_the_host_cannot_hold_like_the_device_backends() -> None:
    be = get_backend("numpy")
    limits = be.memory_limits()
    if limits is None:
        pytest.skip("this OS does not report its physical memory")
    _, total = limits
    with pytest.raises(ValueError, match=re.escape(f"over the {total:,} bytes of {be.device_name}; use at most")):
        step.make("CartPole-v1", 2**31 - 1, backend="numpy")
    with pytest.raises(MemoryError, match=re.escape(f"does not fit on {be.device_name}: it has {total:,} bytes")):
        be.zeros((2**62 // 4,), "float32")
