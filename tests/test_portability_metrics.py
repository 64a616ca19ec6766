"""Portability metrics and the cost model against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from portkern.portability import cost, metrics


def test_pp_is_the_harmonic_mean_of_efficiencies() -> None:
    assert metrics.pennycook_pp({"a": 0.5, "b": 1.0}) == pytest.approx(2 / (1 / 0.5 + 1 / 1.0))


def test_pp_is_zero_when_any_device_is_unsupported() -> None:
    assert metrics.pennycook_pp({"a": 0.9, "b": None}) == 0.0


def test_pp_is_zero_when_a_kernel_fails_on_a_device() -> None:
    assert metrics.pennycook_pp({"a": 0.9, "b": 0.0}) == 0.0


def test_functional_share_counts_fail_and_unsupported_as_zero() -> None:
    assert metrics.functional_share(["pass", "fail", "unsupported", "pass"]) == 0.5


@pytest.mark.parametrize("t,best,expected", [(50.0, 200.0, 0.25), (200.0, 200.0, 1.0), (None, 200.0, 0.0)],
                         ids=["quarter", "best", "does-not-run"])  # fmt: skip
def test_application_efficiency_is_within_0_and_1(t: float | None, best: float, expected: float) -> None:
    assert metrics.application_efficiency(t, best) == expected


def test_application_efficiency_rejects_a_throughput_above_the_best() -> None:
    with pytest.raises(ValueError, match="exceeds the best"):
        metrics.application_efficiency(3.0, 2.0)


def test_architectural_efficiency_is_clipped_but_keeps_the_raw_ratio() -> None:
    assert metrics.architectural_efficiency(30.0, 20.0) == (1.0, 1.5)


def test_workload_ratio_weights_phases_by_baseline_time() -> None:
    # half the time in a phase running at full speed, half in one at half speed: 1 / (0.5/1 + 0.5/0.5)
    assert metrics.workload_ratio({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.5}) == pytest.approx(2 / 3)


def test_workload_ratio_is_zero_when_a_phase_does_not_run() -> None:
    assert metrics.workload_ratio({"a": 0.9, "b": 0.1}, {"a": 1.0, "b": 0.0}) == 0.0


def test_retune_penalty_hand_computed() -> None:
    assert metrics.retune_penalty(80.0, 100.0) == pytest.approx(0.2)


def test_retune_penalty_is_one_when_the_config_cannot_run_on_the_target() -> None:
    assert metrics.retune_penalty(None, 100.0) == 1.0


def _inputs(**kw: float) -> cost.CostInputs:
    base = dict(gpu_hours=100.0, locked_rate=2.0, portable_rate=1.0, policies=10.0, retune_hours=40.0,
                hourly_rate=100.0, ratio=0.8)  # fmt: skip
    return cost.CostInputs(**{**base, **kw})


def test_lockin_premium_hand_computed() -> None:
    r = cost.lockin(_inputs())
    # locked 2*100*10 = 2000; portable 1*(100/0.8)*10 = 1250; switching 40*100 = 4000
    assert (r["locked_cost"], r["portable_cost"], r["switching_cost"]) == pytest.approx((2000, 1250, 4000))
    assert r["premium"] == pytest.approx(2000 - 1250 - 4000)
    assert r["break_even_policies"] == pytest.approx(4000 / (200 - 125))


def test_lockin_never_breaks_even_when_porting_costs_more_per_policy() -> None:
    assert math.isinf(cost.lockin(_inputs(ratio=0.4))["break_even_policies"])


def test_cost_text_prints_the_formula_with_numbers_substituted() -> None:
    text = cost.render(_inputs(), "given by hand")
    assert "= 2 x 100 x 10 - 1 x (100 / 0.8) x 10 - 40 x 100" in text


def test_cost_rejects_a_zero_ratio() -> None:
    with pytest.raises(ValueError, match="ratio"):
        _inputs(ratio=0.0)
