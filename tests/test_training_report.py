"""Training files (portkern train, schema portkern-train/1) in the report: loading, the training section, its
plots, training-only reports, and the workload mixes derived from measured phases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portkern import cli
from portkern.portability import report, training
from portkern.portability.training import TrainFileError, load_train, mixes_from_train

from . import train_docs as td

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
BENCH_RUN = DATA / "run-ci-vm-paths-tiny.json"
SHIPPED = ROOT / "portkern" / "data" / "workload_mixes.json"


@pytest.fixture
def train_file(tmp_path: Path) -> Path:
    return td.write(tmp_path / "train.json")


@pytest.fixture(scope="module")
def section() -> dict:
    return training.summarise([("train.json", td.doc())])


def _group(tr: dict, task: str, hw: str) -> dict:
    return next(g for g in tr["groups"] if (g["task"], g["hardware_key"]) == (task, hw))


def _stack(tr: dict, task: str, hw: str, stack: str) -> dict:
    return next(s for s in _group(tr, task, hw)["stacks"] if s["stack"] == stack)


# ---- load_train: clear errors naming the file --------------------------------------------------------
def _broken(data: dict, change) -> dict:
    data = json.loads(json.dumps(data))
    change(data)
    return data


BAD = {
    "not-json": ('{"schema": "portkern-train/1", "runs": [', "not valid JSON"),
    "not-an-object": ("[1, 2]", "expected a JSON object of schema 'portkern-train/1'"),
    "other-schema": (_broken(td.doc(), lambda d: d.update(schema="portkern-train/0")),
                     "not a portkern training file of schema 'portkern-train/1'"),
    "bench-run": (BENCH_RUN.read_text(), "its schema is None"),
    "missing-keys": (_broken(td.doc(), lambda d: [d.pop("devices"), d.pop("device_hour")]),
                     "missing top-level keys ['device_hour', 'devices']"),
    "no-runs": (_broken(td.doc(), lambda d: d.update(runs=[])), "'runs' is empty"),
    "run-lacks-a-key": (_broken(td.doc(), lambda d: d["runs"][2].pop("wall_s")), "runs[2] lacks ['wall_s']"),
    "run-wrong-type": (_broken(td.doc(), lambda d: d["runs"][0].update(converged="yes")),
                       "runs[0].converged must be true/false"),
    "unknown-device": (_broken(td.doc(), lambda d: d["runs"][0].update(device_key="box/tpu")),
                       "device_key 'box/tpu' is not in 'devices'"),
    "converged-without-steps": (_broken(td.doc(), lambda d: d["runs"][0].update(steps_to_converge=None)),
                                "converged, so steps_to_converge must be an integer > 0"),
    "phase-missing": (_broken(td.doc(), lambda d: d["runs"][1]["phases"].pop("env")), "phases lacks ['env']"),
    "zero-wall": (_broken(td.doc(), lambda d: d["runs"][0].update(wall_s=0.0)), "wall_s must be a number > 0"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_training_file_is_rejected_naming_the_file_and_the_problem(tmp_path: Path, case: str) -> None:
    content, message = BAD[case]
    path = tmp_path / f"{case}.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(TrainFileError) as exc:
        load_train(path)
    assert str(exc.value).startswith(f"{path}: ") and message in str(exc.value)


def test_an_unreadable_training_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TrainFileError, match="cannot read it") as exc:
        load_train(tmp_path / "absent.json")
    assert str(tmp_path / "absent.json") in str(exc.value)


def test_a_constructed_file_loads_whole(train_file: Path) -> None:
    assert load_train(train_file)["runs"] == td.runs()


# ---- the training section: hand-computed figures ---------------------------------------------------
def test_h_is_the_median_over_converged_seeds_with_its_range(section: dict) -> None:
    s = _stack(section, "CartPole-v1", td.CPU, "numpy")
    assert (s["converged"], s["runs"]) == (3, 3)
    assert s["H_s"] == 5400.0 and s["H_s_range"] == [3600.0, 7200.0]  # median of 3600, 7200, 5400 s
    assert s["H_h"] == 1.5 and s["H_h_range"] == [1.0, 2.0]
    assert s["steps_to_converge"] == 4_320_000 and s["steps_to_converge_range"] == [3_600_000, 8_640_000]
    assert s["steps_per_s"] == 1000.0 and s["steps_per_s_range"] == [800.0, 1200.0]


def test_an_unconverged_seed_is_out_of_h_but_in_the_steps_per_second(section: dict) -> None:
    s = _stack(section, "CartPole-v1", td.CPU, "opencl")
    assert (s["converged"], s["runs"], s["converged_seeds"]) == (2, 3, [1, 2])
    assert s["H_s"] == 2500.0 and s["H_s_range"] == [2000.0, 3000.0]  # seeds 1, 2 only
    assert s["steps_per_s"] == 1600.0 and s["steps_per_s_range"] == [1500.0, 1800.0]  # all three seeds
    assert s["stop_reasons"] == {"converged": 2, "time budget": 1} and s["basis"] == "converged seeds"


def test_phase_shares_are_medians_over_seeds_of_seconds_over_wall(section: dict) -> None:
    shares = _stack(section, "CartPole-v1", td.CPU, "numpy")["phase_shares"]
    # act 0.20, 0.13, 0.27; env 0.30, 0.40, 0.20; adv 0.05, 0.02, 0.08; the rest fixed per seed
    expected = {"act": 0.20, "env": 0.30, "adv": 0.05, "update": 0.34, "move": 0.05, "other": 0.02, "setup": 0.01,
                "untimed": 0.03}  # fmt: skip
    assert shares == pytest.approx(expected)
    parts = _stack(section, "CartPole-v1", td.CPU, "numpy")["update_part_shares"]
    assert parts == pytest.approx({"gather": 0.04, "normalize": 0.02})  # medians of (.04,.02,.06), (.01,.03,.02)


def test_a_stack_that_never_converged_says_why_and_how_close_it_got(section: dict) -> None:
    s = _stack(section, "CartPole-v1", td.CPU, "torch")
    assert s["converged"] == 0 and s["H_s"] is None and s["basis"] == "all seeds (none converged)"
    assert training.not_converged_text(s) == "not converged (time budget x3, best return 300.5)"


def test_factor_is_slowest_over_fastest_median_h_with_extreme_seed_range(section: dict) -> None:
    f = _group(section, "CartPole-v1", td.CPU)["factor"]
    assert (f["slowest"], f["fastest"]) == ("numpy", "opencl")
    assert f["value"] == pytest.approx(5400 / 2500)
    assert f["range"] == pytest.approx([3600 / 3000, 7200 / 2000])  # min slowest / max fastest .. max / min


def test_throughput_factor_is_fastest_over_slowest_env_steps_per_second_over_every_seed(section: dict) -> None:
    tf = _group(section, "CartPole-v1", td.CPU)["throughput_factor"]
    # opencl 1500/1800/1600 steps/s (its unconverged seed counts: same rollout volume), torch 300 x3
    assert (tf["fastest"], tf["slowest"]) == ("opencl", "torch")
    assert tf["value"] == pytest.approx(1600 / 300) and tf["range"] == pytest.approx([1500 / 300, 1800 / 300])


def test_a_factor_whose_seed_range_reaches_one_says_so() -> None:
    cp = "CartPole-v1"
    rs = [td.run(cp, "numpy", td.CPU, 1, 100.0, 100_000), td.run(cp, "numpy", td.CPU, 2, 300.0, 300_000),
          td.run(cp, "opencl", td.POCL, 1, 150.0, 300_000), td.run(cp, "opencl", td.POCL, 2, 230.0, 500_000)]
    sec = training.summarise([("t.json", td.doc(rs))])
    f = _group(sec, cp, td.CPU)["factor"]
    assert (f["slowest"], f["fastest"]) == ("numpy", "opencl")  # medians 200 s and 190 s
    assert f["value"] == pytest.approx(200 / 190) and f["range"] == pytest.approx([100 / 230, 300 / 150])
    text = "\n".join(training.markdown(sec))
    assert "The range reaches 1x" in text and "no stack converges faster beyond it" in text


def test_groups_are_per_task_and_hardware_and_list_each_stacks_driver(section: dict) -> None:
    assert [(g["task"], g["hardware_key"]) for g in section["groups"]] == [
        ("CartPole-v1", td.CPU), ("CartPole-v1", td.GPU), ("Acrobot-v1", td.CPU)]
    assert [s["stack"] for s in _group(section, "CartPole-v1", td.CPU)["stacks"]] == [
        "numpy", "opencl", "opencl@intel", "torch"]
    assert _stack(section, "CartPole-v1", td.CPU, "opencl")["devices"] == [
        {"device_key": td.POCL, "device_label": "Test CPU (PoCL)", "driver": "Portable Computing Language 3.0"}]
    assert _group(section, "CartPole-v1", td.GPU)["factor"] is None  # one stack on the GPU


def test_untimed_gaps_above_the_files_tolerance_are_listed(section: dict) -> None:
    over = _group(section, "CartPole-v1", td.GPU)["untimed_over_tolerance"]
    assert [(u["stack"], u["seed"]) for u in over] == [("torch@cuda", 3)]
    assert over[0]["untimed_share"] == pytest.approx(0.13)
    assert _group(section, "CartPole-v1", td.CPU)["untimed_over_tolerance"] == []


def test_two_files_with_different_pinned_settings_are_not_pooled(tmp_path: Path) -> None:
    other = td.doc()
    other["config"]["tasks"]["CartPole-v1"]["target"] = 500.0
    with pytest.raises(ValueError, match="task CartPole-v1's pinned settings"):
        training.summarise([("a.json", td.doc()), ("b.json", other)])


def test_markdown_states_the_definition_the_fused_note_and_the_figures(section: dict) -> None:
    md = "\n".join(training.markdown(section))
    assert md.startswith(f"## {training.TITLE}") and td.DEVICE_HOUR in md
    assert "their \"env\" phase includes in-kernel acting" in md
    assert "| numpy | box/cpu | 3 of 3 | 5,400 [3,600–7,200] | 1.5 [1–2] | 4,320,000 [3,600,000–8,640,000] |" in md
    assert "| 2 of 3 (1 time budget) | 2,500 [2,000–3,000] |" in md
    assert "not converged (time budget x3, best return 300.5)" in md
    assert "**2.16x** [1.2–3.6x] (numpy slowest, opencl fastest" in md
    assert "One-off build, compile and warm-up" in md and "opencl 1.5 s" in md


# ---- reports: training only, bench only, both -----------------------------------------------------------
def test_a_report_of_training_files_only_has_the_header_and_the_training_section(train_file: Path,
                                                                                  tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "out"
    rep = report.write([str(train_file)], out)
    names = {p.name for p in out.iterdir()}
    assert names == {"report.md", "report.json", "train-phases-CartPole-v1.png", "train-phases-Acrobot-v1.png"}
    assert (out / "train-phases-CartPole-v1.png").stat().st_size > 10_000
    md = (out / "report.md").read_text()
    assert md.startswith("# portkern portability report") and f"## {training.TITLE}" in md
    assert "## Functional portability" not in md and "## Workload" not in md
    saved = json.loads((out / "report.json").read_text())
    assert saved["training"]["groups"][0]["stacks"][0]["H_s"] == 5400.0 and rep["sources"] == [str(train_file)]
    assert "functional" not in saved


def test_bench_and_training_files_together_add_the_section_to_the_full_report(train_file: Path,
                                                                              tmp_path: Path) -> None:  # fmt: skip
    rep = report.write([str(BENCH_RUN), str(train_file)], tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert md.index("## Functional portability") < md.index(f"## {training.TITLE}") < md.index("## Definitions")
    assert rep["sources"] == [str(BENCH_RUN), str(train_file)] and rep["training"]["groups"]
    assert "**device-hours per converged policy (H)**" in md
    assert (tmp_path / "train-phases-CartPole-v1.png").exists() and (tmp_path / "ratios.png").exists()


def test_the_summary_leads_with_the_training_factor_and_keeps_three_findings(train_file: Path,
                                                                             tmp_path: Path) -> None:  # fmt: skip
    rep = report.write([str(BENCH_RUN), str(train_file)], tmp_path)
    first = rep["summary"][0]
    assert first["title"].startswith("Training") and len(rep["summary"]) <= 3
    # CartPole on the CPU: opencl 2500 s [2000-3000] fastest, numpy 5400 s [3600-7200] slowest (tests above)
    assert "CartPole-v1 on box/cpu: opencl 2,500 device-s [2,000–3,000]" in first["text"]
    assert "numpy 5,400 [3,600–7,200]: 2.16x [1.2–3.6x]" in first["text"]
    md = (tmp_path / "report.md").read_text()
    assert md.index("## Summary") < md.index("1. **Training") < md.index("## Functional portability")


def test_a_bench_only_report_has_no_training_section(tmp_path: Path) -> None:
    rep = report.write([str(BENCH_RUN)], tmp_path)
    assert "training" not in rep and not list(tmp_path.glob("train-phases-*.png"))
    assert training.TITLE not in (tmp_path / "report.md").read_text()
    assert rep["definitions"] == report.DEFINITIONS


def test_cli_report_takes_a_training_file(train_file: Path, tmp_path: Path, capsys) -> None:
    assert cli.main(["report", str(train_file), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"{training.TITLE}: CartPole-v1 on {td.CPU}" in printed and "wrote report.md" in printed


def test_cli_report_names_a_broken_training_file_and_writes_nothing(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "train.json"
    bad.write_text(json.dumps(_broken(td.doc(), lambda d: d.pop("runs"))))
    out = tmp_path / "out"
    assert cli.main(["report", str(BENCH_RUN), str(bad), "--out", str(out)]) == 2
    assert f"{bad}: missing top-level keys ['runs']" in capsys.readouterr().err and not out.exists()


def test_cli_report_compare_refuses_a_training_file(train_file: Path, tmp_path: Path, capsys) -> None:
    assert cli.main(["report", str(BENCH_RUN), str(train_file), "--compare", "--out", str(tmp_path / "c.md")]) == 2
    assert f"--compare: compares two bench runs; {train_file} is a training file" in capsys.readouterr().err


# ---- workload mixes from measured phases -------------------------------------------------------------
def test_mixes_are_the_renormalised_medians_of_the_kernel_phases() -> None:
    doc = mixes_from_train(td.doc(), "numpy", source="train.json")
    # CartPole-v1, numpy seeds 1-3 (all converged): env 0.30/0.40/0.20 -> 0.30; adv 0.05/0.02/0.08 -> 0.05;
    # normalize 0.01/0.03/0.02 -> 0.02; gather 0.04/0.02/0.06 -> 0.04; covered 0.41
    cp = doc["mixes"]["train:CartPole-v1"]
    assert cp == pytest.approx({"step:CartPole-v1": 0.30 / 0.41, "gae": 0.05 / 0.41, "normalize": 0.02 / 0.41,
                                "gather": 0.04 / 0.41})  # fmt: skip
    assert doc["source"]["tasks"]["CartPole-v1"]["covered"] == pytest.approx(0.41)
    # Acrobot-v1, one seed: 0.5, 0.1, 0.05, 0.05 -> covered 0.7
    assert doc["mixes"]["train:Acrobot-v1"] == pytest.approx({"step:Acrobot-v1": 0.5 / 0.7, "gae": 0.1 / 0.7,
                                                              "normalize": 0.05 / 0.7, "gather": 0.05 / 0.7})
    assert doc["source"]["tasks"]["CartPole-v1"]["seeds"] == [1, 2, 3]
    assert (doc["schema"], doc["source"]["file"], doc["source"]["stack"]) == ("portkern-mixes/1", "train.json", "numpy")


def test_mixes_use_converged_seeds_only_and_all_seeds_when_none_converged() -> None:
    opencl = mixes_from_train(td.doc(), "opencl", source="t")["source"]["tasks"]["CartPole-v1"]
    assert (opencl["seeds"], opencl["basis"]) == ([1, 2], "converged seeds")
    torch = mixes_from_train(td.doc(), "torch", source="t")["source"]["tasks"]["CartPole-v1"]
    assert (torch["seeds"], torch["basis"]) == ([1, 2, 3], "all seeds (none converged)")


def test_mixes_of_an_unknown_stack_list_the_stacks() -> None:
    with pytest.raises(ValueError, match="--stack 'cupy': no runs of that stack in t; stacks: numpy, opencl"):
        mixes_from_train(td.doc(), "cupy", source="t")


def test_derive_mixes_writes_a_file_the_report_reads(train_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "mixes.json"
    assert training.main(["derive-mixes", str(train_file), "--stack", "numpy", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    # outside the repository the source is named by its file name only: no path of this machine is kept
    assert written["source"]["file"] == "train.json" and written["source"]["in_repo"] is False
    assert str(tmp_path) not in out.read_text()
    assert report.parse_mix(str(out)) == written["mixes"]
    assert training.main(["derive-mixes", str(train_file), "--stack", "cupy"]) == 2
    assert "--stack 'cupy'" in capsys.readouterr().err


def test_a_source_inside_the_repository_is_named_relative_to_its_root() -> None:
    assert training.source_name(ROOT / "bench" / "results" / "x" / "train.json") == ("bench/results/x/train.json", True)


#: Every shipped mixes file (one per training run they were measured in).
SHIPPED_ALL = [ROOT / "portkern" / name for name in report.MIXES_FILES]


def test_the_shipped_mixes_are_the_defaults_and_well_formed() -> None:
    docs = [json.loads(p.read_text()) for p in SHIPPED_ALL]
    assert SHIPPED_ALL[0] == SHIPPED and report.DEFAULT_MIXES == {k: v for d in docs for k, v in d["mixes"].items()}
    assert sum(len(d["mixes"]) for d in docs) == len(report.DEFAULT_MIXES)  # no mix in two files
    for path, shipped in zip(SHIPPED_ALL, docs):
        assert shipped["schema"] == "portkern-mixes/1"
        assert all(name.startswith("train:") for name in shipped["mixes"])
        for name, shares in shipped["mixes"].items():
            assert sum(shares.values()) == pytest.approx(1.0) and set(shares) <= set(report.KERNEL_ORDER)
            assert report.DEFAULT_MIXES_SOURCES[name] == shipped["source"]
        for info in shipped["source"]["tasks"].values():
            assert 0 < info["covered"] <= 1 and shipped["mixes"][info["mix"]] == pytest.approx(
                {k: v / info["covered"] for k, v in info["unnormalised"].items()})
        assert not Path(shipped["source"]["file"]).is_absolute() and "/tmp/" not in path.read_text()


@pytest.mark.parametrize("path", SHIPPED_ALL, ids=lambda p: p.name)
def test_re_deriving_the_shipped_mixes_from_their_source_reproduces_them(path: Path) -> None:
    """tests/data/mixes-source-<file>.json is a byte copy of the training run the shipped file names as its source
    (a bench/results folder marked "feeds shipped data" in its manifest): deriving the mixes again from it gives
    the shipped mixes and source record."""
    shipped = json.loads(path.read_text())
    src = shipped["source"]
    assert src.get("in_repo") and src["file"].startswith("bench/results/")
    copy = Path(__file__).parent / "data" / f"mixes-source-{path.stem}.json"
    again = mixes_from_train(copy, src["stack"], source=src["file"])
    assert again["mixes"] == shipped["mixes"]
    assert again["source"] == {k: v for k, v in src.items() if k != "in_repo"}  # in_repo: said of the committed path


def test_the_report_says_where_each_default_mix_was_measured_and_what_it_leaves_out(tmp_path: Path) -> None:
    rep = report.write([str(BENCH_RUN)], tmp_path)
    name = next(iter(report.DEFAULT_MIXES))
    origin = rep["workloads"][name]["origin"]
    info = report.DEFAULT_MIXES_SOURCE["tasks"][origin["task"]]
    assert origin["kind"] == "measured" and origin["covered"] == info["covered"]
    # a mix of the second shipped file names its own training run, not the first file's
    chain = rep["workloads"]["train:Chain-v0"]["origin"]
    chain_src = report.DEFAULT_MIXES_SOURCES["train:Chain-v0"]
    assert (chain["kind"], chain["file"], chain["task"]) == ("measured", chain_src["file"], "Chain-v0")
    assert chain["file"] != origin["file"] and chain["covered"] == chain_src["tasks"]["Chain-v0"]["covered"]
    md = (tmp_path / "report.md").read_text()
    assert f"covering {100 * info['covered']:.1f}% of its wall time" in md and "not portkern kernels" in md
    assert "not portkern kernels" in report.DEFINITIONS["workload"]
    given = report.build(report.merge([report.load_run(BENCH_RUN)]), {"mine": {"gae": 1.0}})
    assert given["workloads"]["mine"]["origin"]["kind"] == "given"


def test_a_mix_file_of_the_shipped_schema_is_a_valid_mix_option(tmp_path: Path) -> None:
    assert report.parse_mix(str(SHIPPED)) == {k: v for k, v in report.DEFAULT_MIXES.items() if k != "train:Chain-v0"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "portkern-mixes/1", "source": {}, "mixes": {"m": {"gea": 1}}}))
    with pytest.raises(ValueError, match="unknown kernels"):
        report.parse_mix(str(bad))
