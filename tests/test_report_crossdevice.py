"""The cross-device section (every device side by side, paired or unpaired ratios to the fastest), prices per
device-hour, and the summary built on it: the device winner first, at most five findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from portkern.portability import report
from portkern.portability.report.crossdevice import cost_per_million, parse_prices, timed_devices
from portkern.portability.report.summary import MAX_FINDINGS
from portkern.runs import load_run, merge

from .mixes import HAND_MIXES

DATA = Path(__file__).parent / "data"
XEON = DATA / "synthetic-xeon-two-drivers-run.json"  # one CPU, PoCL + Intel OpenCL, NumPy + torch on the host
H200 = DATA / "synthetic-h200-run.json"  # another machine
POCL, INTEL, HOST = ("synthetic-xeon/cpu/portable-computing-language", "synthetic-xeon/cpu/intel-opencl",
                     "synthetic-xeon/cpu")  # fmt: skip
GPU = "synthetic-h200/nvidia-h200"


@pytest.fixture(scope="module")
def xeon() -> dict:
    return report.build(load_run(XEON), HAND_MIXES)


@pytest.fixture(scope="module")
def two_machines() -> dict:
    return report.build(merge([load_run(XEON), load_run(H200)]), prices=["intel=1.5", "pocl=1.5", "host=1.5",
                                                                          "h200=4"])  # fmt: skip


def _kernel(rep: dict, kernel: str) -> dict:
    return next(k for k in rep["cross_device"]["kernels"] if k["kernel"] == kernel)


def _dev(rows: list[dict], device: str) -> dict:
    return next(r for r in rows if r["device"] == device)


def test_the_host_frameworks_are_one_device_listed_once(xeon: dict) -> None:
    cd = xeon["cross_device"]
    assert list(cd["devices"]) == [HOST, POCL, INTEL]
    assert cd["devices"][HOST]["name"] == "Intel Xeon Gold 6338 (host: torch, numpy)"
    assert cd["devices"][INTEL]["name"] == "Intel Xeon Gold 6338 (Intel(R) OpenCL)"
    rows = _kernel(xeon, "step:CartPole-v1")["devices"]
    assert [r["device"] for r in rows] == [HOST, POCL, INTEL]
    assert set(_dev(rows, HOST)["backends"]) <= {"numpy", "torch"} and set(_dev(rows, INTEL)["backends"]) == {"opencl"}


def test_every_kernel_has_a_fastest_device_and_paired_ratios_on_one_machine(xeon: dict) -> None:
    kernels = {k["kernel"] for k in xeon["cross_device"]["kernels"]}
    assert kernels == {k for k in xeon["kernels"]}  # every timed kernel, none left out
    for k in xeon["cross_device"]["kernels"]:
        top = [r for r in k["devices"] if r["verdict"] == "fastest"]
        assert len(top) == 1 and top[0]["device"] == k["fastest"] and top[0]["vs_fastest"] == 1.0
        for r in k["devices"]:
            assert r["paired"]  # one machine: every device ran in the same interleaved rounds
            lo, hi = r["vs_fastest_interval"]
            assert lo <= r["vs_fastest"] <= hi
            assert r["verdict"] in ("fastest", "slower", "within noise", "faster")
            assert r["items_per_s"] == max(e["items_per_s"] for e in r["backends"].values())


def test_the_paired_ratio_is_the_one_the_per_round_machinery_gives(xeon: dict) -> None:
    # Intel's runtime against PoCL on one CPU: the same per-round arithmetic as every other ratio (rounds.py).
    run = load_run(XEON)
    k = _kernel(xeon, "step:CartPole-v1")
    size = k["size"]
    pick = {d: max((r for r in run.records if r.kernel == k["kernel"] and r.device_key == d and r.size == size
                    and r.status == "pass"), key=lambda r: r.items_per_s) for d in (POCL, INTEL)}  # fmt: skip
    assert k["fastest"] == INTEL  # the synthetic run's Intel runtime steps CartPole faster than PoCL
    want = report._compare(pick[POCL], pick[INTEL])
    ours = _dev(k["devices"], POCL)
    assert ours["vs_fastest"] == pytest.approx(want["ratio"])
    assert ours["vs_fastest_interval"] == pytest.approx(want["interval"])


def test_two_machines_get_an_unpaired_wider_interval(two_machines: dict) -> None:
    cd = two_machines["cross_device"]
    assert cd["machines"] == 2 and cd["devices"][GPU]["name"].startswith("synthetic-h200: NVIDIA H200")
    w = cd["workloads"]["train:CartPole-v1"]
    assert w["fastest"] == GPU
    row = _dev(w["devices"], INTEL)
    assert not row["paired"] and row["verdict"] == "slower"
    lo, hi = row["vs_fastest_interval"]
    assert lo < row["vs_fastest"] < hi
    # Unpaired: the ends of the two throughput intervals, so at least as wide as their own relative spreads.
    top = _dev(w["devices"], GPU)
    assert hi / lo == pytest.approx((row["W_interval"][1] / row["W_interval"][0])
                                    * (top["W_interval"][1] / top["W_interval"][0]))  # fmt: skip
    # The drivers of one CPU are still compared with each other, paired.
    (pair,) = w["drivers"]
    assert (pair["faster"], pair["slower"], pair["paired"]) == (INTEL, POCL, True) and pair["ratio"] > 1


def test_a_driver_pair_reads_the_same_as_its_ratio_to_the_fastest(xeon: dict) -> None:
    w = xeon["cross_device"]["workloads"]["physics-heavy"]
    (pair,) = w["drivers"]
    assert w["fastest"] == pair["faster"] == INTEL
    slow = _dev(w["devices"], pair["slower"])
    assert pair["ratio"] == pytest.approx(1 / slow["vs_fastest"])
    # The same rounds inverted; the 10th/90th percentiles interpolate between rounds, so 1/x moves them a hair.
    assert pair["interval"] == pytest.approx([1 / slow["vs_fastest_interval"][1], 1 / slow["vs_fastest_interval"][0]],
                                             rel=1e-4)  # fmt: skip


def test_prices_give_the_cost_per_million_env_steps(two_machines: dict) -> None:
    w = two_machines["cross_device"]["workloads"]["train:CartPole-v1"]
    for row in w["devices"]:
        rate = 4.0 if row["device"].startswith("synthetic-h200") else 1.5
        assert row["cost_per_1e6_steps"] == pytest.approx(rate * 1e6 / (row["steps_per_s"] * 3600))
        lo, hi = row["cost_per_1e6_steps_interval"]
        assert lo <= row["cost_per_1e6_steps"] <= hi  # the slow end of the steps/s interval is the dear end
    assert cost_per_million(3.6, 1e6) == pytest.approx(1e-3)
    md = report.markdown(two_machines)
    assert "cost / 1e6 env steps [interval]" in md and "Prices per device-hour" in md


def test_a_price_names_a_device_or_says_which(tmp_path: Path) -> None:
    devices = timed_devices(load_run(XEON))
    assert parse_prices(["pocl=2", "host=0.5"], devices) == {POCL: 2.0, HOST: 0.5}
    assert parse_prices(["synthetic-xeon=1"], devices) == {HOST: 1.0, POCL: 1.0, INTEL: 1.0}  # one CPU, all drivers
    f = tmp_path / "prices.json"
    f.write_text('{"intel": 3}')
    assert parse_prices([str(f)], devices) == {INTEL: 3.0}
    with pytest.raises(ValueError, match="--price nvidia: no such device"):
        parse_prices(["nvidia=1"], devices)
    with pytest.raises(ValueError, match="RATE must be a number"):
        parse_prices(["pocl=cheap"], devices)
    with pytest.raises(ValueError, match="RATE must be a finite number >= 0"):
        parse_prices(["pocl=-1"], devices)
    with pytest.raises(ValueError, match="expected DEVICE=RATE"):
        parse_prices(["pocl"], devices)


def test_the_section_comes_first_after_the_summary(xeon: dict) -> None:
    md = report.markdown(xeon)
    assert md.index("## Summary") < md.index("## Cross-device") < md.index("## Devices")
    section = md[md.index("## Cross-device"):md.index("## Devices")]
    assert "**Workload physics-heavy**" in section and "| step:CartPole-v1 |" in section and "paired" in section


# ---- the summary ---------------------------------------------------------------------------------
def test_the_summary_names_the_winning_device_first_with_an_interval(xeon: dict) -> None:
    first = xeon["summary"][0]
    w = xeon["cross_device"]["workloads"]["physics-heavy"]
    winner = xeon["cross_device"]["devices"][w["fastest"]]["name"]
    assert first["title"].startswith("Workload 'physics-heavy'") and first["text"].startswith(winner)
    assert "faster than" in first["text"] and "[" in first["text"]


def test_the_summary_has_at_most_five_short_findings_in_order(two_machines: dict) -> None:
    titles = [f["title"].split(" ")[0] for f in two_machines["summary"]]
    assert titles == ["Workload", "Kernels", "Data", "Price"] and len(titles) <= MAX_FINDINGS
    assert all("[" in f["text"] and "–" in f["text"] for f in two_machines["summary"])


def test_a_fused_finding_is_never_numpys_reference_loop(xeon: dict) -> None:
    data = next(f for f in xeon["summary"] if f["title"] == "Data paths")
    assert "numpy" not in data["text"]
    assert any(r["backend"] == "numpy" and r["fused_vs_host"] for r in xeon["data_paths"]["rows"])


def test_the_host_rows_of_the_data_paths_table_show_once(xeon: dict) -> None:
    _, rows = report.data_paths_table(xeon)
    numpy_rows = [r for r in rows if r[1] == "numpy"]
    assert numpy_rows and all(r[0] == HOST for r in numpy_rows)
    assert len({tuple(r[2:4]) for r in numpy_rows}) == len(numpy_rows)
