"""Interleaved rounds, intervals and verdicts, device identity (hardware + driver), the summary, the spectrum,
cost ranges and the comparison of two runs."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from portkern.backends import probe
from portkern.portability import cost, metrics, report, suite
from portkern.runs import Record, load_run

from .mixes import HAND_MIXES

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
XEON = DATA / "synthetic-xeon-two-drivers-run.json"  # one CPU, PoCL + Intel OpenCL, NumPy + torch on the host
H200 = DATA / "synthetic-h200-run.json"
OLD = DATA / "run-ci-vm-tune-tiny.json"  # schema 1: no per-round data
POCL, INTEL, HOST = ("synthetic-xeon/cpu/portable-computing-language", "synthetic-xeon/cpu/intel-opencl",
                     "synthetic-xeon/cpu")  # fmt: skip


@pytest.fixture(scope="module")
def xeon() -> dict:
    return report.build(load_run(XEON), HAND_MIXES)


def _row(rep: dict, kernel: str, backend: str, device: str) -> dict:
    return next(r for r in rep["efficiency"] if (r["kernel"], r["backend"], r["device"]) == (kernel, backend, device))


# ---- interleaved timing -----------------------------------------------------------------------
def _fake_slots(n: int, calls: list[int], seconds=lambda j, reps: 1e-3 * reps):
    def slot(j: int):
        def run(reps: int) -> float:
            calls.append(j)
            return seconds(j, reps)

        return run

    return [slot(j) for j in range(n)]


def test_interleave_runs_every_case_in_every_round_in_a_shuffled_order() -> None:
    calls: list[int] = []
    m = suite.MIN_RUN  # a case of k * MIN_RUN launches (k <= CHUNKS) runs in k runs of MIN_RUN
    out = suite.interleave(_fake_slots(3, calls), [m, 2 * m, 3 * m], rounds=8)
    rounds = [calls[i:i + 6] for i in range(3, len(calls), 6)]  # 1 + 2 + 3 runs per round, after the untimed one
    assert [len(x) for x in out] == [8, 8, 8] and len(rounds) == 8
    assert all(sorted(r) == [0, 1, 1, 2, 2, 2] for r in rounds) and len({tuple(r) for r in rounds}) > 1
    assert out[2] == pytest.approx([1e-3] * 8)  # seconds per launch: the case's time in the round / its launches


def test_a_case_with_many_launches_is_spread_over_the_round() -> None:
    plan = suite._plan([64, 1], [0, 1])
    assert sum(n for j, n in plan if j == 0) == 64 and len([j for j, _ in plan if j == 0]) == suite.CHUNKS
    assert [j for j, _ in plan].index(1) == suite.CHUNKS // 2  # the single launch sits mid-round


def test_a_run_of_launches_is_never_shorter_than_min_run() -> None:
    # A run's first launch runs cold after another case's, so a case is split only into runs of MIN_RUN or more.
    for reps in (1, suite.MIN_RUN - 1, suite.MIN_RUN, 2 * suite.MIN_RUN - 1, 2 * suite.MIN_RUN, 5 * suite.MIN_RUN + 3,
                 suite.CHUNKS * suite.MIN_RUN * 4):  # fmt: skip
        runs = [n for _, n in suite._plan([reps], [0])]
        assert sum(runs) == reps
        assert len(runs) == max(1, min(reps // suite.MIN_RUN, suite.CHUNKS))
        assert len(runs) == 1 or min(runs) >= suite.MIN_RUN


def test_interleave_fits_its_budget_but_keeps_the_minimum_rounds() -> None:
    slow = [lambda reps: 0.5]  # one round takes 0.5 s
    assert len(suite.interleave(slow, [1], rounds=30, budget_s=2.0, min_rounds=3)[0]) == 4
    assert len(suite.interleave(slow, [1], rounds=30, budget_s=0.1, min_rounds=3)[0]) == 3


def test_calibrate_makes_a_slot_last_at_least_the_slot_time() -> None:
    assert suite.calibrate(lambda reps: 1e-4 * reps, 2e-3) == 20


def test_calibrate_times_a_run_about_one_slot_long_not_the_cold_single_launch() -> None:
    calls: list[int] = []

    def switching(reps: int) -> float:  # the first launch of a run costs 3x a launch (1e-4 s) in a run
        calls.append(reps)
        return 3e-4 + 1e-4 * (reps - 1)

    reps, launch_s = suite.calibrate_launch(switching, 2e-3)
    assert calls == [1, 1, 7]  # warm-up, one launch (3e-4 s), then a run of ceil(2e-3 / 3e-4) launches
    assert launch_s == pytest.approx(9e-4 / 7) and reps == 16  # the run's time per launch sets the slot
    assert switching(reps) == pytest.approx(2e-3, rel=0.15)  # so a slot, timed as a run, lasts about slot_s
    assert switching(7) < 0.5 * 2e-3  # where the single launch's 7 would have made it half as long


def test_a_cold_first_launch_of_a_fast_case_is_timed_again() -> None:
    calls: list[int] = []
    times = [14e-3, 1.5e-3]  # a 1.5 ms step whose first launch in its group took 14 ms

    def cold_first(reps: int) -> float:
        calls.append(reps)
        return (times.pop(0) if times else 1.5e-3) * reps

    reps, launch_s = suite.calibrate_launch(cold_first, 10e-3, warm=True)
    assert calls == [1, 1, 7] and launch_s == pytest.approx(1.5e-3) and reps == 7
    calls.clear()
    # A launch longer than COLD_RETRY slots is a slow case, not a cold one: timed once (a rollout's launch is costly).
    assert suite.calibrate_launch(lambda reps: calls.append(reps) or 0.5, 10e-3, warm=True) == (1, 0.5)
    assert calls == [1] and 0.5 >= suite.COLD_RETRY * 10e-3


def test_a_checked_case_skips_the_warm_launch_and_a_quick_group_the_untimed_round() -> None:
    calls: list[int] = []

    def slow(reps: int) -> float:  # a slow rollout case: 0.5 s a launch
        calls.append(reps)
        return 0.5 * reps

    assert suite.calibrate_launch(slow, 0.01) == (1, 0.5) and calls == [1, 1]  # warm-up, then the timed launch
    calls.clear()
    assert suite.calibrate_launch(slow, 0.01, warm=True) == (1, 0.5) and calls == [1]  # its check warmed it
    calls.clear()
    fast = [1e-3, 1e-4]  # a fast case: its single launch runs cold, a run of two gives the steady state
    assert suite.calibrate_launch(lambda reps: fast.pop(0) * reps, 2e-3, warm=True) == (20, 1e-4)
    # The round estimate from calibration replaces the untimed round: 3 rounds, 3 launches.
    assert len(suite.interleave([slow], [1], rounds=3, estimate_s=0.5)[0]) == 3 and calls == [1, 1, 1]
    calls.clear()
    assert len(suite.interleave([slow], [1], rounds=3)[0]) == 3 and calls == [1, 1, 1, 1]


def test_pairing_cancels_drift_that_hits_every_case_of_a_round_alike() -> None:
    # A shared machine whose load changes from round to round slows both slots of a round alike.
    calls: list[int] = []
    load = [1.0, 3.0, 1.5, 2.5, 1.0, 4.0, 1.2, 2.0, 1.0, 3.5, 2.2]  # per round; the first is the untimed one

    def slot(j: int):
        def run(reps: int) -> float:
            r = len(calls) // 2  # two slots per round
            calls.append(j)
            return (1e-3, 2e-3)[j] * reps * load[r]

        return run

    secs = suite.interleave([slot(0), slot(1)], [1, 1], rounds=10)
    a, b = (Record("k", name, "d", 1, "pass", items=1000, round_s=tuple(s), round_group="g")
            for name, s in zip("ab", secs))
    cmp = report._compare(a, b)
    assert cmp["ratio"] == pytest.approx(2.0) and cmp["interval"] == pytest.approx([2.0, 2.0])
    assert cmp["verdict"] == "faster" and cmp["paired"]
    lo, hi = metrics.spread(a.round_rates)
    assert hi / lo > 2  # each throughput on its own swings with the load


# ---- intervals and verdicts -------------------------------------------------------------------
def test_spread_is_the_10th_to_90th_percentile() -> None:
    assert metrics.spread(np.arange(11.0)) == pytest.approx((1.0, 9.0)) and metrics.spread(None) is None


def test_aligned_wraps_a_shorter_group_and_needs_every_case_to_have_rounds() -> None:
    m = metrics.aligned([np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 6.0])])
    assert m[:, 1].tolist() == [5.0, 6.0, 5.0, 6.0] and metrics.aligned([np.ones(3), None]) is None


@pytest.mark.parametrize("interval,expected", [((1.1, 1.3), "higher"), ((0.7, 0.95), "lower"),
                                               ((0.9, 1.2), "within noise"), (None, "no interval")],
                         ids=["above", "below", "straddles", "old-run"])  # fmt: skip
def test_verdict_names_a_winner_only_beyond_noise(interval, expected) -> None:
    assert metrics.verdict(interval) == expected


def test_a_tie_is_within_noise_and_names_no_winner(xeon: dict) -> None:
    # synthetic: torch and Intel's OpenCL both at 1.6e8 rows/s; whichever the rounds put first is the baseline
    rows = [_row(xeon, "gather", b, INTEL) for b in ("torch", "opencl")]
    other = next(r for r in rows if r["verdict"] != "baseline")
    assert other["verdict"] == "within noise" and other["within_noise_of_best"] is True
    assert other["ratio_interval"][0] <= 1.0 <= other["ratio_interval"][1]
    pair = next(p for p in xeon["pairs"] if (p["device"], p["kernel"], p["a"], p["b"]) == (INTEL, "gather", "opencl", "torch"))
    assert pair["verdict"] == "within noise"


def test_a_clear_gap_is_beyond_noise(xeon: dict) -> None:
    row = _row(xeon, "step:CartPole-v1", "numpy", POCL)  # synthetic: 2e7 vs PoCL's 6e7
    assert row["verdict"] == "slower" and row["ratio"] == pytest.approx(1 / 3, rel=0.03)
    assert row["ratio_interval"][1] < 1.0 and row["within_noise_of_best"] is False


def test_paired_ratio_intervals_are_narrower_than_the_throughputs(xeon: dict) -> None:
    row = _row(xeon, "step:Acrobot-v1", "numpy", POCL)
    (rlo, rhi), (tlo, thi) = row["ratio_interval"], row["items_per_s_interval"]
    assert (rhi - rlo) / row["ratio"] < 0.5 * (thi - tlo) / row["items_per_s"]


def test_a_ratio_lies_within_its_interval(xeon: dict) -> None:
    for r in xeon["efficiency"]:
        if r["ratio_interval"] and r["ratio"]:
            assert r["ratio_interval"][0] <= r["ratio"] <= r["ratio_interval"][1]


# ---- device identity: hardware + driver -------------------------------------------------------
class _FakeBackend:
    def __init__(self, name: str, kind: str = "cpu", platform: str | None = None, vendor: str = "Intel") -> None:
        self.device_name = f"{platform}: {name}" if platform else name
        self.kind, self.vendor = kind, vendor
        if platform:
            self.platform = SimpleNamespace(name=platform)

    def describe(self) -> dict:
        return {"backend": "opencl", "device": self.device_name, "vendor": self.vendor, "driver": "1.0"}

    def device_kind(self) -> str:
        return self.kind


def _info(b, backend: str = "opencl") -> dict:
    return suite.device_info(b, suite.Target(backend, b.device_name), "m")


def test_one_cpu_under_two_opencl_platforms_is_two_devices_on_one_hardware() -> None:
    pocl = _info(_FakeBackend("pthread-Xeon", platform="Portable Computing Language"))
    intel = _info(_FakeBackend("Intel(R) Xeon(R) Gold", platform="Intel(R) OpenCL"))
    host = _info(_FakeBackend("host CPU (x86_64)"), "numpy")
    assert (pocl["device_key"], intel["device_key"]) == ("m/cpu/portable-computing-language", "m/cpu/intel-opencl")
    assert pocl["hardware_key"] == intel["hardware_key"] == host["hardware_key"] == host["device_key"] == "m/cpu"


def test_the_kind_comes_from_the_backend_not_the_name() -> None:
    gpu = _info(_FakeBackend("cpu-looking name", kind="gpu", platform="NVIDIA CUDA", vendor="NVIDIA Corporation"))
    assert (gpu["kind"], gpu["vendor"], gpu["device_key"]) == ("gpu", "NVIDIA", "m/cpu-looking-name/nvidia-cuda")


def test_a_correctness_harness_is_functional_only() -> None:
    class Harness(_FakeBackend):
        pass

    b = Harness("CUDA C on the host CPU (x86_64): correctness harness, not timed")
    # The benchmark classes a backend by name (identity.BENCH_CLASSES), not by its class attributes.
    assert _info(b, "cuda_host")["kind"] == "simulator"
    assert _info(_FakeBackend("host CPU (x86_64)"), "numpy")["kind"] != "simulator"


def test_host_frameworks_are_compared_on_every_driver_device_of_their_cpu(xeon: dict) -> None:
    assert list(xeon["devices"]) == [POCL, INTEL]
    for d in (POCL, INTEL):
        assert xeon["devices"][d]["includes"] == [HOST]
        assert {"opencl", "numpy", "torch"} <= set(xeon["devices"][d]["backends"])
    # numpy's gae against each driver's OpenCL: two different efficiencies of one measurement
    assert _row(xeon, "gae", "numpy", POCL)["app_eff"] != _row(xeon, "gae", "numpy", INTEL)["app_eff"]
    assert f"numpy@{HOST}" in xeon["functional"] and f"numpy@{POCL}" not in xeon["functional"]


def test_an_old_run_keeps_one_device_and_has_no_intervals() -> None:
    rep = report.build(load_run(OLD))
    assert list(rep["devices"]) == ["ci-vm/cpu"]
    rows = [r for r in rep["efficiency"] if r["items_per_s"]]
    assert rows and all(r["ratio_interval"] is None and r["items_per_s_interval"] is None for r in rows)
    md = report.markdown(rep)
    assert "Older runs without per-round data" in md and "[n/a]" in md


# ---- workloads: one computation for the PP and penalty tables ---------------------------------
def test_workload_ratio_and_app_eff_agree_without_a_native_baseline(xeon: dict) -> None:
    for per in xeon["workloads"]["physics-heavy"]["devices"].values():
        for v in per.values():
            assert v["ratio"] == pytest.approx(v["app_eff"]) and v["penalty"] == pytest.approx(1 - v["ratio"])


def test_workload_pp_is_the_harmonic_mean_of_the_penalty_tables_app_eff(xeon: dict) -> None:
    w = xeon["workloads"]["update-heavy"]
    e = [w["devices"][d]["numpy"]["app_eff"] for d in (POCL, INTEL)]
    assert w["pp"]["numpy"] == pytest.approx(2 / (1 / e[0] + 1 / e[1]))


def test_workload_with_a_native_baseline_keeps_both_figures() -> None:
    rep = report.build(load_run(H200), {"steps": {"step:CartPole-v1": 0.5, "step:Acrobot-v1": 0.5}})
    v = rep["workloads"]["steps"]["devices"]["synthetic-h200/nvidia-h200/nvidia-cuda"]
    assert v["cupy"]["verdict"] == "baseline" and v["opencl"]["ratio"] == pytest.approx(0.97, abs=0.015)
    assert v["opencl"]["ratio_interval"][0] <= v["opencl"]["ratio"] <= v["opencl"]["ratio_interval"][1]


# ---- the spectrum, the summary, the markdown --------------------------------------------------
def test_spectrum_has_the_best_of_each_stack_class(xeon: dict) -> None:
    row = next(r for r in xeon["spectrum"]["rows"] if (r["device"], r["kernel"]) == (POCL, "rollout:CartPole-v1"))
    assert row["best"] == "fused custom" and row["classes"]["fused custom"]["verdict"] == "best"
    eager = row["classes"]["framework eager"]
    assert eager["backend"] == "numpy" and eager["vs_best"] == pytest.approx(3e6 / 8e7, rel=0.05)
    assert eager["vs_best_interval"][1] < 1 and eager["verdict"] == "slower"


def test_summary_has_three_findings_each_with_an_interval(xeon: dict) -> None:
    assert [f["title"].split(" ")[0] for f in xeon["summary"]] == ["Workload", "Kernels", "Data"]
    assert all("[" in f["text"] and "–" in f["text"] for f in xeon["summary"])


def test_markdown_puts_the_summary_first_and_says_within_noise(xeon: dict) -> None:
    md = report.markdown(xeon)
    assert md.index("## Summary") < md.index("## Devices") < md.index("## Functional portability") < md.index(
        "## Stack-class spectrum")
    assert "within noise" in md and "Indicative only" not in md and "**interval**" in md


def test_a_quick_run_is_marked_indicative_at_the_top(tmp_path: Path) -> None:
    data = json.loads(XEON.read_text())
    data["portkern"]["sizes"] = "quick"
    quick = tmp_path / "quick.json"
    quick.write_text(json.dumps(data))
    md = report.markdown(report.build(load_run(quick)))
    assert md.index("Indicative only") < md.index("## Summary")


def test_a_failing_data_path_renders_with_its_reason() -> None:
    # pytest bench --pk-sizes 0 used to reach the report as a failing path without a reason (KeyError)
    run = load_run(XEON)
    recs = [dataclasses.replace(r, status="fail", max_error=None, reason="ValueError: num_envs: expected an int",
                                round_s=None) if r.kernel == "rollout:CartPole-v1:fused" and r.backend == "numpy" else r
            for r in run.records]  # fmt: skip
    rep = report.build(dataclasses.replace(run, records=recs))
    _, rows = report.data_paths_table(rep)
    assert any("ValueError: num_envs" in c for row in rows for c in row)


def test_write_draws_the_spectrum(tmp_path: Path) -> None:
    report.write([str(XEON)], tmp_path)
    assert (tmp_path / "spectrum.png").stat().st_size > 10_000


# ---- cost: the interval carried through --------------------------------------------------------
def test_cost_reads_the_ratio_and_its_interval(tmp_path: Path) -> None:
    rep = report.write([str(XEON)], tmp_path, HAND_MIXES)
    ratio, interval, source = cost.ratio_from_report(tmp_path, "numpy", "intel", "update-heavy", None)
    v = rep["workloads"]["update-heavy"]["devices"][INTEL]["numpy"]
    assert (ratio, list(interval)) == (v["ratio"], v["ratio_interval"]) and "vs opencl" in source


def test_break_even_and_premium_are_ranges_over_the_interval() -> None:
    c = cost.CostInputs(gpu_hours=100, locked_rate=2, portable_rate=1, policies=10, retune_hours=40, hourly_rate=100,
                        ratio=0.8)  # fmt: skip
    rg = cost.ranges(c, (0.7, 0.9))
    lo, hi = (cost.lockin(cost.CostInputs(**{**c.__dict__, "ratio": q})) for q in (0.7, 0.9))
    assert rg["premium"] == pytest.approx((lo["premium"], hi["premium"]))
    assert rg["break_even_policies"] == pytest.approx((hi["break_even_policies"], lo["break_even_policies"]))
    text = cost.render(c, "test", (0.7, 0.9))
    assert "range" in text and "[interval 0.7 to 0.9" in text
    assert cost.as_json(c, "test", (0.4, 0.9))["ranges"]["break_even_policies"][1] is None  # never, at 0.4


# ---- two runs compared -------------------------------------------------------------------------
def test_a_run_never_contradicts_itself(xeon: dict) -> None:
    cmp = report.compare(xeon, xeon)
    assert cmp["contradictions"] == 0 and cmp["compared"] > 20
    assert set(cmp["counts"]) <= {"agree, beyond noise", "agree, within noise", "intervals overlap"}


def _swapped_run(tmp_path: Path) -> Path:
    """The xeon run with torch 4x faster on CartPole's step: torch now beats numpy beyond noise."""
    data = json.loads(XEON.read_text())
    for c in data["portkern"]["cases"]:
        if c["kernel"] == "step:CartPole-v1" and c["backend"] == "torch":
            c["round_s"] = [s / 8 for s in c["round_s"]]
    path = tmp_path / "swapped.json"
    path.write_text(json.dumps(data))
    return path


def test_a_contradiction_is_found_and_named(tmp_path: Path) -> None:
    cmp = report.compare(report.build(load_run(XEON)), report.build(load_run(_swapped_run(tmp_path))))
    bad = [r for r in cmp["rows"] if r["outcome"] == "contradiction"]
    assert cmp["contradictions"] == len(bad) > 0
    assert all(r["what"] == "step:CartPole-v1" or r["kind"] == "workload" for r in bad)
    assert "contradiction(s)" in report.compare_markdown(cmp)


def _portkern(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PORTKERN_MACHINE": "test-machine"}
    return subprocess.run([sys.executable, "-m", "portkern.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip


def test_report_compare_writes_the_comparison(tmp_path: Path) -> None:
    done = _portkern("report", str(XEON), str(XEON), "--compare", "--out", str(tmp_path / "same.md"))
    assert done.returncode == 0, done.stderr
    assert "0 contradiction(s)" in done.stdout and "**No contradiction**" in (tmp_path / "same.md").read_text()
    assert json.loads((tmp_path / "same.json").read_text())["contradictions"] == 0


def test_a_comparison_names_each_runs_wall_time_and_cpu_steal(tmp_path: Path) -> None:
    data = json.loads(XEON.read_text())
    data["portkern"].update(wall_s=321.4, cpu_steal=0.0312, retimed_visits=3)
    run = tmp_path / "with-machine-state.json"
    run.write_text(json.dumps(data))
    text = report.compare_markdown(report.compare(report.build(load_run(XEON)), report.build(load_run(run))))
    assert "suite 321 s, CPU steal 3.1 %, 3 visit(s) timed again for a burst of steal on one CPU" in text
    assert text.count("timed again") == 1
    assert text.count("CPU steal") == 1  # the synthetic run recorded neither: nothing is made up for it


def test_cost_prints_the_range_from_a_report(tmp_path: Path) -> None:
    report.write([str(XEON)], tmp_path)
    done = _portkern("cost", "--report", str(tmp_path), "--backend", "numpy", "--device", "intel", "--gpu-hours", "100",
                     "--locked-rate", "2", "--portable-rate", "0.5", "--policies", "10", "--retune-hours", "40",
                     "--hourly-rate", "100")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "range" in done.stdout and "policies" in done.stdout


# ---- the suite: interleaved groups in a real run ------------------------------------------------
def _pytest_bench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "bench"), "-q", "-n", "0", "-p", "no:cacheprovider",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)  # fmt: skip


def test_pk_sizes_zero_is_a_usage_error() -> None:
    done = _pytest_bench("--pk-sizes", "0", "--pk-backend", "numpy", "--collect-only")
    assert done.returncode == 4 and "--pk-sizes: expected quick, full or N[,N...] with each N >= 1" in done.stderr


def test_backends_of_one_case_are_timed_in_the_same_rounds(tmp_path: Path) -> None:
    assert probe("opencl").available, "opencl backend unavailable; install portkern[test]"
    out = tmp_path / "run.json"
    done = _pytest_bench("--pk-sizes", "256", "--pk-backend", "numpy,opencl", "--pk-no-simulators", "--pk-rounds", "4",
                         "--pk-visits", "2", "--pk-slot-ms", "1", "-k", "gae or (CartPole and rollout and not mlp)",
                         f"--benchmark-json={out}")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    data = json.loads(out.read_text())
    cases = [c for c in data["portkern"]["cases"] if c.get("round_s")]
    groups: dict[str, list[dict]] = {}
    for c in cases:
        groups.setdefault(c["round_group"], []).append(c)
    gae = next(g for k, g in groups.items() if k.startswith("gae@"))
    assert {c["backend"] for c in gae} == {"numpy", "opencl"}
    assert all(c["rounds"] == len(c["round_s"]) == 4 and c["visits"] == 2 for c in gae)  # two visits of two rounds
    paths = next(g for k, g in groups.items() if k.startswith("rollout:CartPole-v1@"))
    assert {(c["backend"], c["path"]) for c in paths} == {(b, p) for b in ("numpy", "opencl") for p in suite.PATHS}
    assert {c["backend"]: c["stack_class"] for c in gae} == {"numpy": "framework eager", "opencl": "custom kernels"}
    assert next(c for c in paths if (c["backend"], c["path"]) == ("opencl", "fused"))["stack_class"] == "fused custom"
    stats = {b["extra_info"]["case_id"]: b["stats"] for b in data["benchmarks"]}
    assert all(stats[c["case_id"]]["rounds"] == 4 for c in cases)  # pytest-benchmark's own record has the rounds
    assert data["portkern"]["timing"]["rounds"] == 4 and data["portkern"]["schema"] == "portkern-bench/2"
    # How the shared machine was: the suite's wall time, and the hypervisor's share of the CPU (Linux).
    assert 0 < data["portkern"]["wall_s"] < 900
    assert data["portkern"]["jax_compilation_cache"] is (probe("jax").available)
    steal = data["portkern"]["cpu_steal"]
    assert steal is None if suite.cpu_ticks() is None else 0.0 <= steal <= 1.0


def test_cpu_steal_is_the_steal_share_of_the_ticks_between_two_readings() -> None:
    start = [100, 0, 50, 800, 10, 0, 5, 35]  # user nice system idle iowait irq softirq steal
    end = [160, 0, 70, 880, 10, 0, 5, 75]  # +60 user, +20 system, +80 idle, +40 steal: 200 ticks
    assert suite.cpu_steal(start, end) == pytest.approx(0.2)
    assert suite.cpu_steal(start, start) is None and suite.cpu_steal(None, end) is None
    ticks = suite.cpu_ticks()
    assert ticks is None or (len(ticks) == 8 and all(t >= 0 for t in ticks))


def _tuned(device: str, config: dict, round_s: tuple[float, ...]) -> Record:
    return Record("gae", "opencl", device, 1024, "pass", config=config, items=1000, round_s=round_s,
                  round_group=f"gae/{device}")  # fmt: skip


def test_a_re_tune_penalty_has_the_interval_of_its_paired_rounds_and_a_verdict() -> None:
    """On the target, the source's config and the target's best ran in the same rounds: the penalty's interval is
    1 - their per-round ratio; it is within noise when it reaches 0."""
    devices = {d: {"kind": "cpu"} for d in ("A", "B")}
    a, b = {"local_size": 64}, {"local_size": 256}
    recs = [
        # on A (the source), config a wins by far
        _tuned("A", a, (1.0,) * 10), _tuned("A", b, (2.0,) * 10),
        # on B, config b is best: a takes 1.25x its time in every round but two (drift shared within a round)
        _tuned("B", a, (1.25, 2.5, 1.25, 1.25, 1.25, 1.25, 1.25, 1.25, 1.0, 1.0)),
        _tuned("B", b, (1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)),
    ]
    rows = report.retune(recs, devices)
    row = next(r for r in rows if (r["source"], r["target"]) == ("A", "B"))
    assert row["config"] == a and row["target_best_config"] == b
    assert row["penalty"] == pytest.approx(1 - 1 / 1.25)  # medians: 1/1.25 vs 1/1.0
    lo, hi = row["penalty_interval"]
    assert lo == pytest.approx(0.0) and hi == pytest.approx(0.2)  # 10th percentile of eight 0.2s and two 0s
    assert row["verdict"] == "within noise"  # two rounds in ten the two ran alike: the interval reaches 0
    back = next(r for r in rows if (r["source"], r["target"]) == ("B", "A"))
    assert back["penalty"] == pytest.approx(0.5) and back["penalty_interval"] == pytest.approx([0.5, 0.5])
    assert back["verdict"] == "beyond noise"


# ---- rounds timed again when the hypervisor took a CPU from them --------------------------------
def _ticks(steal0: int, steal1: int, busy: int = 100) -> list[list[int]]:
    """Two CPUs' /proc/stat fields (user .. steal) after ``busy`` ticks each, of which ``stealN`` stolen."""
    return [[busy - steal0, 0, 0, 0, 0, 0, 0, steal0], [busy - steal1, 0, 0, 0, 0, 0, 0, steal1]]


def test_worst_cpu_steal_is_the_worst_single_cpu_not_the_average() -> None:
    zero = [[0] * 8, [0] * 8]
    assert suite.worst_cpu_steal(zero, _ticks(0, 40)) == 0.4  # the machine's average would say 0.2
    assert suite.worst_cpu_steal(zero, _ticks(3, 2)) == 0.03
    assert suite.worst_cpu_steal(zero, _ticks(3, 2), min_ticks=5) == 0.0  # a few stolen ticks are the tick's noise
    assert suite.worst_cpu_steal(None, _ticks(0, 40)) is None and suite.worst_cpu_steal(zero, [[0] * 8]) is None


def test_cpu_ticks_each_reads_every_cpu_line() -> None:
    each = suite.cpu_ticks_each()
    if each is None:
        pytest.skip("no /proc/stat on this platform (cpu_ticks_each is None there, and nothing is retimed)")
    assert len(each) == (os.cpu_count() or len(each)) and all(len(c) == 8 for c in each)


def test_rounds_are_timed_again_once_when_a_cpu_was_stolen_from() -> None:
    # 60 of CPU 1's 100 ticks stolen during the first attempt, 1 of 100 during the second.
    readings = iter([_ticks(0, 0, 100), _ticks(0, 60, 200), _ticks(0, 60, 200), _ticks(0, 61, 300)])
    attempts: list[int] = []

    def run(attempt: int) -> list[list[float]]:
        attempts.append(attempt)
        return [[float(attempt)]]

    out, steals = suite.timed_undisturbed(run, lambda: next(readings))
    assert attempts == [0, 1] and out == [[1.0]] and steals == [0.6, 0.0]  # 1 tick: under STEAL_MIN_TICKS
    # Stolen from again: still only one retime (the run goes on), both shares recorded.
    readings = iter([_ticks(0, 0, 100), _ticks(0, 60, 200), _ticks(0, 60, 200), _ticks(0, 120, 300)])
    attempts.clear()
    out, steals = suite.timed_undisturbed(run, lambda: next(readings))
    assert attempts == [0, 1] and steals == [0.6, 0.6]
    # A machine stolen from all along (the run's own steal so far: 40 %): 60 % is no burst, timed once.
    readings = iter([_ticks(0, 0, 100), _ticks(0, 60, 200)])
    attempts.clear()
    assert suite.timed_undisturbed(run, lambda: next(readings), background=0.4)[1] == [0.6] and attempts == [0]
    readings = iter([_ticks(0, 0, 100), _ticks(0, 60, 200), _ticks(0, 60, 200), _ticks(0, 60, 300)])
    attempts.clear()
    assert suite.timed_undisturbed(run, lambda: next(readings), background=0.2)[1] == [0.6, 0.0]  # 3x: a burst
    # A quiet machine, or one that does not say: timed once.
    for quiet in ([_ticks(0, 0, 100), _ticks(2, 3, 200)], [None, None]):
        readings = iter(quiet)
        attempts.clear()
        assert suite.timed_undisturbed(run, lambda r=readings: next(r))[0] == [[0.0]] and attempts == [0]
