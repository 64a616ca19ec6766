"""Report building from committed runs: a real tiny run on this CPU and a synthetic other-machine (H200) run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from portkern.portability import cost, report
from portkern.runs import RunFileError, load_run, merge

from .mixes import HAND_MIXES

DATA = Path(__file__).parent / "data"
REAL = DATA / "run-ci-vm-tune-tiny.json"  # portkern tune --quick --sizes 256,2048 --machine ci-vm
SYNTHETIC = DATA / "synthetic-h200-run.json"  # made by data/make_synthetic_run.py; not a measurement
CPU, GPU = "ci-vm/cpu", "synthetic-h200/nvidia-h200/nvidia-cuda"  # OpenCL on the H200, CuPy beside it


@pytest.fixture(scope="module")
def merged() -> dict:
    return report.build(merge([load_run(REAL), load_run(SYNTHETIC)]), HAND_MIXES)


def _row(rep: dict, kernel: str, backend: str, device: str) -> dict:
    return next(r for r in rep["efficiency"] if (r["kernel"], r["backend"], r["device"]) == (kernel, backend, device))


def test_merge_keeps_both_machines_devices(merged: dict) -> None:
    assert set(merged["devices"]) == {CPU, GPU}


def test_efficiency_rows_only_compare_backends_of_the_same_device(merged: dict) -> None:
    assert {r["backend"] for r in merged["efficiency"] if r["device"] == GPU} == {"cupy", "opencl"}


def test_every_efficiency_is_within_0_and_1(merged: dict) -> None:
    values = [r[f] for r in merged["efficiency"] for f in ("app_eff", "arch_eff") if r[f] is not None]
    assert values and all(0.0 <= v <= 1.0 for v in values)


def test_a_kernel_failing_parity_is_functional_zero_not_dropped(merged: dict) -> None:
    col = merged["functional"][f"opencl@{GPU}"]
    assert (col["kernels"]["normalize"]["status"], col["share"]) == ("fail", pytest.approx(8 / 9))


def test_a_failing_kernel_has_zero_efficiency_and_ratio(merged: dict) -> None:
    row = _row(merged, "normalize", "opencl", GPU)
    assert (row["app_eff"], row["ratio"]) == (0.0, 0.0)


def test_native_backend_is_the_baseline_on_nvidia(merged: dict) -> None:
    assert _row(merged, "gae", "opencl", GPU)["baseline"] == "cupy"


def test_ratio_against_native_hand_computed(merged: dict) -> None:
    # synthetic: OpenCL's best local_size reaches 0.97 of CuPy's best block size (1 % jitter per round)
    recs = {r.backend: r for r in load_run(SYNTHETIC).records if r.kernel == "gae" and r.config in
            ({"local_size": 64}, {"block_size": 256})}  # fmt: skip
    paired = recs["opencl"].round_rates / recs["cupy"].round_rates  # round r with round r
    row = _row(merged, "gae", "opencl", GPU)
    assert row["ratio"] == pytest.approx(float(np.median(paired))) and row["ratio"] == pytest.approx(0.97, abs=0.015)
    assert row["ratio_interval"] == pytest.approx(list(np.quantile(paired, [0.1, 0.9])))


def test_device_without_native_backend_says_its_baseline(merged: dict) -> None:
    assert merged["devices"][CPU]["baseline"].startswith("best available")


def test_pp_is_zero_for_a_backend_missing_on_one_device(merged: dict) -> None:
    assert merged["pp"]["cupy"]["gae"] == 0.0 and merged["pp"]["numpy"]["gae"] == 0.0


def test_pp_of_opencl_is_the_harmonic_mean_over_both_devices(merged: dict) -> None:
    e = [_row(merged, "gae", "opencl", d)["app_eff"] for d in (CPU, GPU)]
    assert merged["pp"]["opencl"]["gae"] == pytest.approx(2 / (1 / e[0] + 1 / e[1]))


def test_workload_with_a_failing_phase_has_full_penalty(merged: dict) -> None:
    assert merged["workloads"]["update-heavy"]["devices"][GPU]["opencl"]["penalty"] == 1.0


def test_simulator_devices_are_functional_only(merged: dict) -> None:
    assert list(merged["simulators"]) == ["ci-vm/oclgrind-simulator"] and not any(
        r["device"] == "ci-vm/oclgrind-simulator" for r in merged["efficiency"]
    )


def test_retune_penalty_matches_the_run_data(merged: dict) -> None:
    row = next(r for r in merged["retune"] if (r["kernel"], r["source"], r["target"]) == ("gae", GPU, CPU))
    recs = [r for r in load_run(REAL).records
            if (r.kernel, r.backend, r.device_key, r.status) == ("gae", "opencl", CPU, "pass")]  # fmt: skip
    best = max(r.items_per_s for r in recs)
    moved = next(r.items_per_s for r in recs if r.config == {"local_size": 64})  # the synthetic GPU's best
    assert row["penalty"] == pytest.approx(1 - moved / best)


def test_retune_penalty_is_one_for_a_config_illegal_on_the_target(merged: dict) -> None:
    rows = [r for r in merged["retune"] if r["kernel"] == "gather" and r["target"] == GPU
            and r["config"] == {"local_size": 256}]  # fmt: skip
    assert all(r["penalty"] == 1.0 and "does not run" in r["note"] for r in rows)


def test_custom_mix_is_parsed_from_the_command_line() -> None:
    assert report.parse_mix("mine=gae:3,gather:1") == {"mine": {"gae": 3.0, "gather": 1.0}}


def test_mix_with_an_unknown_kernel_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown kernels"):
        report.parse_mix("mine=gea:1")


def test_write_produces_markdown_json_and_plots(tmp_path: Path) -> None:
    report.write([str(REAL), str(SYNTHETIC)], tmp_path / "out", HAND_MIXES)
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"report.md", "report.json", "ratios.png", "cascade-physics-heavy.png"} <= names


def test_cost_reads_the_workload_ratio_from_a_report(tmp_path: Path) -> None:
    rep = report.write([str(REAL), str(SYNTHETIC)], tmp_path, HAND_MIXES)
    ratio, interval, source = cost.ratio_from_report(tmp_path, "opencl", "ci-vm", "physics-heavy", None)
    assert ratio == rep["workloads"]["physics-heavy"]["devices"][CPU]["opencl"]["ratio"] and "physics-heavy" in source
    assert interval is None  # an old-format run: no per-round data


# ---- rejected inputs --------------------------------------------------------------------------
def _bad(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name,text,message", [
    ("truncated.json", REAL.read_text()[:5000], "not valid JSON"),
    ("list.json", "[1, 2]", "not a pytest-benchmark JSON file"),
    ("foreign.json", json.dumps({"benchmarks": [], "machine_info": {"node": "x"}}), "not a portkern run"),
    ("old-schema.json", REAL.read_text().replace("portkern-bench/1", "portkern-bench/0"), "unsupported portkern"),
    ("bad-case.json", REAL.read_text().replace('"status": "pass"', '"status": "great"'), "malformed"),
], ids=["truncated", "not-an-object", "foreign-pytest-benchmark", "other-schema", "bad-case"])  # fmt: skip
def test_bad_run_file_is_rejected_naming_the_file(tmp_path: Path, name: str, text: str, message: str) -> None:
    bad = _bad(tmp_path, name, text)
    with pytest.raises(RunFileError, match=message) as exc:
        load_run(bad)
    assert str(bad) in str(exc.value)


def test_rejected_report_leaves_the_output_folder_untouched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("previous report")
    with pytest.raises(RunFileError):
        report.write([str(REAL), str(_bad(tmp_path, "cut.json", "{\"benchmarks\": ["))], out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".portkern")] == []
    assert [p.name for p in out.iterdir()] == ["report.md"] and (out / "report.md").read_text() == "previous report"
