"""Cost per converged policy in the cross-device section: price x H from the training files."""

from __future__ import annotations

from pathlib import Path

import pytest

from portkern.portability import report, training
from portkern.portability.report.crossdevice import policy_costs

from . import train_docs as td

DATA = Path(__file__).parent / "data"
BENCH_RUN = DATA / "run-ci-vm-paths-tiny.json"


def test_price_times_h_for_each_trained_stack_on_a_priced_device(tmp_path: Path) -> None:
    tr = training.summarise([(str(p), training.load_train(p)) for p in [td.write(tmp_path / "train.json")]])
    rows = policy_costs({"prices": {td.CPU: 3.0}}, tr)
    assert rows and all(r["device"] == td.CPU for r in rows)
    # CartPole on the CPU: numpy's H is 5,400 device-s [3,600-7,200] (tests/test_training_report.py)
    numpy = next(r for r in rows if (r["task"], r["stack"]) == ("CartPole-v1", "numpy"))
    assert numpy["cost_per_policy"] == pytest.approx(3.0 * 5400 / 3600)
    assert numpy["cost_per_policy_range"] == pytest.approx([3.0 * 3600 / 3600, 3.0 * 7200 / 3600])
    # a device with no price (PoCL here) is left out, not costed at 0
    assert not policy_costs({"prices": {"elsewhere/gpu": 1.0}}, tr)


def test_the_report_prints_the_table_when_prices_and_training_files_are_given(tmp_path: Path) -> None:
    train = td.write(tmp_path / "train.json")
    rep = report.write([str(BENCH_RUN), str(train)], tmp_path / "out", prices={td.CPU: 3.0})
    assert rep["cross_device"]["policy_costs"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "**Cost per converged policy**" in md and "| numpy |" in md.split("**Cost per converged policy**")[1]
