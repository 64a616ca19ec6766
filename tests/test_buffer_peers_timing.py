"""bench/cpu/buffer_peers.py's timing: a sample is a run of back-to-back calls lasting the minimum round time,
and a ratio's interval is the 10th-90th percentile of its per-round ratios (the reports' interval), so one
disturbed round of twenty does not make a clear result "within noise", and three do."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import pytest

_DIR = str(Path(__file__).resolve().parents[1] / "bench" / "cpu")
sys.path.insert(0, _DIR)  # the script imports its sibling _common
try:
    import buffer_peers as peers  # rich and pyopencl come with the test extra: a failed import fails, never skips
finally:
    sys.path.remove(_DIR)


def test_rounds_time_runs_of_calls_per_sample() -> None:
    calls = {"a": 0, "b": 0}

    def case(name: str):
        def run() -> None:
            calls[name] += 1

        return run

    out = peers.rounds({"a": case("a"), "b": case("b")}, repeats=4, reps={"a": 3})
    assert calls == {"a": 12, "b": 4}
    assert all(len(out[n][basis]) == 4 for n in ("a", "b") for basis in ("wall", "cpu"))


def test_calls_per_round_fill_the_minimum_round() -> None:
    reps = peers.calls_per_round({"short": lambda: time.sleep(0.004), "long": lambda: time.sleep(0.03)}, 0.02)
    assert 2 <= reps["short"] <= 5  # 0.02 s over one ~4 ms call (sleep overshoots, never undershoots)
    assert reps["long"] == 1


def _row(ratios: list[float]) -> dict:
    """A row whose case "p" ran at ``ratios`` times the rate of case "q", round by round."""
    q = [0.01] * len(ratios)
    p = [t / r for t, r in zip(q, ratios)]
    secs = {"p": {"wall": p}, "q": {"wall": q}}
    rates = {n: peers.rates(100, s["wall"]) for n, s in secs.items()}
    return {"items_per_s_wall": rates, "seconds": secs}


def test_one_disturbed_round_does_not_hide_a_clear_ratio() -> None:
    r = peers.ratio(_row([1.5] * 19 + [0.5]), "p", "q", "wall")
    assert r["result"] == "above"
    assert r["per_round_ratio"]["min"] == pytest.approx(0.5)  # the min-max is kept beside the interval
    assert r["per_round_ratio"]["p10"] == pytest.approx(1.5)
    assert r["ratio_of_medians"] == pytest.approx(1.5)


def test_a_ratio_whose_interval_straddles_one_is_within_noise() -> None:
    assert peers.ratio(_row([1.5] * 17 + [0.5] * 3), "p", "q", "wall")["result"] == "within noise"
    assert peers.ratio(_row([0.6] * 20), "p", "q", "wall")["result"] == "below"


def test_rounds_shuffle_the_order_so_no_case_always_follows_the_same_neighbour() -> None:
    names = ["a", "b", "c", "d", "e"]
    orders = peers.round_orders(names, 20)
    assert all(sorted(o) == names for o in orders)  # every case once per round
    assert orders == peers.round_orders(names, 20)  # seeded: a rerun times the same orders
    before: dict[str, set[str]] = {n: set() for n in names}
    for o in orders:
        for prev, n in itertools.pairwise(o):
            before[n].add(prev)
    # A rotation leaves each case behind one neighbour (two at most, across the round's wrap); a shuffle
    # gives it several.
    assert all(len(v) >= 3 for v in before.values()), before
    seen: list[str] = []
    peers.rounds({n: (lambda n=n: seen.append(n)) for n in names}, repeats=3)
    assert seen == [n for o in orders[:3] for n in o]
