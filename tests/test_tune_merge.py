"""`portkern tune --merge ROW RUN.json [...]`: tune runs' winners written into one row of a copy of the shipped table.

The runs are the committed tiny tune run (PoCL on CI's Xeon, one size class) and synthetic tune runs made here
the way tests/data/make_synthetic_run.py makes its runs (schema portkern-bench/2, interleaved rounds whose
median is the nominal rate): one machine with PoCL, Intel's CPU runtime and NumPy, step kernels searched at
4096 (small) and 65536 envs (medium), gather at 524288 rows (large), rollouts at 4096 envs. Expected entries
are computed with portkern.tuning.class_entries, and the synthetic rates also name each winner by hand.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import zlib
from pathlib import Path

import pytest

from portkern import cli, tuning
from portkern.portability import tune_merge
from portkern.runs import load_run

DATA = Path(__file__).parent / "data"
TINY_TUNE = DATA / "run-ci-vm-tune-tiny.json"  # portkern tune --quick --sizes 256,2048 (PoCL, small class only)
NOT_TUNE = DATA / "run-ci-vm-paths-tiny.json"  # a portkern bench run
SHIPPED = tune_merge.SHIPPED_TABLE

_spec = importlib.util.spec_from_file_location("make_synthetic_run", DATA / "make_synthetic_run.py")
synth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synth)

SMALL, MEDIUM, LARGE = 4096, 65536, 524288
STEP = ("step:CartPole-v1", "step:Acrobot-v1", "step:Chain-v0")  # Chain-v0: no entry of its own in the table
ROLLOUT = ("rollout:CartPole-v1:fused", "rollout:CartPole-v1:device")
STEP_CONFIGS = [{"local_size": ls, "env_vector_width": vw} for ls in (None, 32, 128) for vw in (8, 16)]
GATHER_CONFIGS = [{"local_size": ls, "gather_rows_per_item": rows} for ls in (None, 256) for rows in (1, 16, 64)]
ROLLOUT_CONFIGS = [{"steps_per_launch": spl, "env_vector_width": vw} for spl in (8, 32) for vw in (8, 16)]
#: (platform, kernel, size) -> the configuration the synthetic rates make fastest (the others: 50-90 % of it).
BEST = {
    ("pocl", "step:CartPole-v1", SMALL): {"local_size": 32, "env_vector_width": 16},
    ("pocl", "step:CartPole-v1", MEDIUM): {"local_size": 128, "env_vector_width": 8},
    ("pocl", "step:Acrobot-v1", SMALL): {"local_size": None, "env_vector_width": 8},
    ("pocl", "step:Acrobot-v1", MEDIUM): {"local_size": 128, "env_vector_width": 16},
    ("pocl", "step:Chain-v0", SMALL): {"local_size": 32, "env_vector_width": 16},
    ("pocl", "step:Chain-v0", MEDIUM): {"local_size": 32, "env_vector_width": 16},
    ("pocl", "gather", LARGE): {"local_size": 256, "gather_rows_per_item": 16},
    ("pocl", "rollout:CartPole-v1:fused", SMALL): {"steps_per_launch": 8, "env_vector_width": 16},
    ("pocl", "rollout:CartPole-v1:device", SMALL): {"steps_per_launch": 32, "env_vector_width": 8},
}
for (_plat, _k, _n), _c in list(BEST.items()):  # Intel's runtime: another winner everywhere
    _other = {**_c, "env_vector_width": 16 if _c.get("env_vector_width") == 8 else 8} if "env_vector_width" in _c \
        else {**_c, "gather_rows_per_item": 64}  # fmt: skip
    BEST[("intel", _k, _n)] = _other


def _rate(plat: str, kernel: str, size: int, config: dict) -> float:
    if config == BEST[(plat, kernel, size)]:
        return 1.0e8
    key = json.dumps([plat, kernel, size, config], sort_keys=True).encode()
    return 1.0e8 * (0.5 + 0.4 * zlib.crc32(key) / 2**32)


def make_tune_run(path: Path, machine: str = "synthetic-xeon", platforms: tuple[str, ...] = ("pocl", "intel"),
                  tune: bool = True, fail: tuple[str, ...] = ()) -> Path:  # fmt: skip
    """A synthetic tune run at ``path`` (kernels in ``fail`` fail parity on every device)."""
    run = synth.Run(machine)
    hw = f"{machine}/cpu"
    devs = {"numpy": run.device("numpy", "host CPU (x86_64)", hw, hw, "Xeon", "cpu", "Intel", stack="framework eager")}
    if "pocl" in platforms:
        devs["pocl"] = run.device("opencl", "Portable Computing Language: pthread-Xeon", f"{hw}/portable-computing-language",
                                  hw, "Xeon (PoCL)", "cpu", "Intel", platform="Portable Computing Language")  # fmt: skip
    if "intel" in platforms:
        devs["intel"] = run.device("opencl", "Intel(R) OpenCL: Xeon", f"{hw}/intel-opencl", hw, "Xeon (Intel)", "cpu",
                                   "Intel", platform="Intel(R) OpenCL")  # fmt: skip
    cases = [(k, n, STEP_CONFIGS) for k in STEP for n in (SMALL, MEDIUM)] + [("gather", LARGE, GATHER_CONFIGS)]
    cases += [(k, SMALL, ROLLOUT_CONFIGS) for k in ROLLOUT]
    for kernel, size, configs in cases:
        run.add(devs["numpy"], kernel, {}, "pass", 2.0e7, size, 40, stack="framework eager")
        for plat in platforms:
            for config in configs:
                if kernel in fail:
                    run.add(devs[plat], kernel, config, "fail", None, size, 40, max_error=1.0, reason="parity")
                else:
                    run.add(devs[plat], kernel, config, "pass", _rate(plat, kernel, size, config), size, 40)
    run.add(devs["numpy"], "copy", {}, "pass", 2.0e10, 1 << 25, 8)
    # a kernel timed at one configuration per class (its default only): not searched, never merged
    for plat in platforms:
        run.add(devs[plat], "gae", {"local_size": None}, "pass", 5.0e7, 128 * SMALL, 22)
    old_here = synth.HERE
    synth.HERE = path.parent
    try:
        run.write(path.name, [{"name": b, "available": True, "reason": "", "devices": []} for b in ("numpy", "opencl")])
    finally:
        synth.HERE = old_here
    if not tune:
        data = json.loads(path.read_text())
        data["portkern"]["tune"] = False
        path.write_text(json.dumps(data))
    return path


def _device_records(path: Path, platform_prefix: str) -> list:
    """The run's records of the OpenCL device whose label starts with ``platform_prefix``, copy left out."""
    raw = json.loads(path.read_text())["machine_info"]["portkern"]["devices"]
    keys = {d["device_key"] for d in raw if d["backend"] == "opencl" and d["kind"] != "simulator"
            and d["device"].startswith(platform_prefix)}  # fmt: skip
    return [r for r in load_run(path).records if r.backend == "opencl" and r.device_key in keys and r.kernel != "copy"]


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "tuned_defaults.json"
    path.write_bytes(SHIPPED.read_bytes())
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_tune_run(tmp_path / "results.json")


def portkern(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["tune", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _row(path: Path, name: str) -> dict:
    return json.loads(path.read_text())["rows"][name]


def test_merged_entries_are_class_entries_winners(table: Path, run: Path, capsys) -> None:
    before = _row(table, "pocl-cpu")
    code, out, err = portkern(capsys, "--merge", "pocl-cpu", str(run), "--table", str(table))
    assert code == 0, err
    row = _row(table, "pocl-cpu")
    expected = tuning.class_entries(_device_records(run, "Portable Computing Language"))
    assert set(expected) == {"small", "medium", "large"}
    for cls, entries in expected.items():
        part = row["classes"][cls]
        assert {k: part["kernels"][k] for k in entries["kernels"]} == {
            k: tuning.strip_config(c) for k, c in entries["kernels"].items()}
        assert {f: part["families"][f] for f in entries["families"]} == entries["families"]
        assert set(entries["sizes"]) <= set(part["sizes"])
    # the winners the synthetic rates were made with (PoCL's, not Intel's: the row matches PoCL only)
    for (plat, kernel, size), config in BEST.items():
        if plat == "pocl":
            assert row["classes"][tuning.case_class(kernel, size)]["kernels"][kernel] == config
    assert "gae" not in expected["small"]["kernels"]  # timed at one configuration: not searched
    assert row["classes"]["small"]["kernels"]["gae"] == before["classes"]["small"]["kernels"]["gae"]
    assert list(row["classes"]) == ["small", "medium", "large"]  # large was new: classes stay in their order
    assert row["classes"]["large"]["families"]["gather"]["_worst_share"] == 1.0  # a family keeps its worst share
    # what changed, old -> new per class and kernel
    old = before["classes"]["small"]["kernels"]["step:CartPole-v1"]
    assert (f"pocl-cpu small kernel step:CartPole-v1: {json.dumps(old)} -> "
            f"{json.dumps(BEST[('pocl', 'step:CartPole-v1', SMALL)])}") in out.splitlines()  # fmt: skip
    assert "pocl-cpu large kernel gather: none -> " in out
    assert f"wrote row pocl-cpu of {table}" in out
    tuning.check_table(json.loads(table.read_text()), str(table))


def test_other_rows_and_classes_byte_identical(table: Path, run: Path, capsys) -> None:
    text = table.read_text()
    before = json.loads(text)
    code, _, err = portkern(capsys, "--merge", "intel-cpu", str(run), "--kernels", "step", "--table", str(table))
    assert code == 0, err
    after = json.loads(table.read_text())
    assert after["rows"]["pocl-cpu"] == before["rows"]["pocl-cpu"]
    touched = {"small", "medium"}
    assert after["rows"]["intel-cpu"]["classes"]["large"] == before["rows"]["intel-cpu"]["classes"]["large"]
    assert after["rows"]["intel-cpu"]["classes"]["small"] != before["rows"]["intel-cpu"]["classes"]["small"]
    # Put the touched classes back: the file is then the original, byte for byte (order and format included).
    for cls in touched:
        after["rows"]["intel-cpu"]["classes"][cls] = before["rows"]["intel-cpu"]["classes"][cls]
    assert json.dumps(after, indent=1) + "\n" == text
    # and the text around the row's classes is literally the same (class-free entries, the other row)
    row_start = text.index('"intel-cpu"')
    new_text = table.read_text()
    assert new_text[:row_start] == text[:row_start]


def test_kernels_limits_the_merge(table: Path, run: Path, capsys) -> None:
    before = _row(table, "pocl-cpu")
    code, out, err = portkern(capsys, "--merge", "pocl-cpu", str(run), "--kernels", "step:CartPole-v1",
                              "--table", str(table))  # fmt: skip
    assert code == 0, err
    row = _row(table, "pocl-cpu")
    records = _device_records(run, "Portable Computing Language")
    for cls, size in (("small", SMALL), ("medium", MEDIUM)):
        assert row["classes"][cls]["kernels"]["step:CartPole-v1"] == BEST[("pocl", "step:CartPole-v1", size)]
        # the other kernels the run searched keep their entries
        for k in ("step:Acrobot-v1", "rollout:CartPole-v1:fused", "rollout:CartPole-v1:device"):
            assert row["classes"][cls]["kernels"][k] == before["classes"][cls]["kernels"][k]
        assert "step:Chain-v0" not in row["classes"][cls]["kernels"]
        # the family entry serves every step kernel the run timed (Chain-v0 included), not the selected one only
        family = tuning.class_entries([r for r in records if r.kernel.startswith("step:")])[cls]["families"]["step"]
        assert row["classes"][cls]["families"]["step"] == family
        assert family != tuning.class_entries([r for r in records if r.kernel == "step:CartPole-v1"]
                                              )[cls]["families"]["step"]  # fmt: skip
        assert row["classes"][cls]["families"]["fused"] == before["classes"][cls]["families"]["fused"]
    assert "large" not in row["classes"]
    assert "step:Acrobot-v1" not in out and "gather" not in out


def test_class_family_not_written_over_class_free_kernel_entries(table: Path, run: Path, capsys) -> None:
    # A medium step family entry would be read before step:Pendulum-v1's class-free entry, once that kernel
    # has no medium entry of its own (the run does not time it): the family is left as it was, and said so.
    data = json.loads(table.read_text())
    del data["rows"]["pocl-cpu"]["classes"]["medium"]["kernels"]["step:Pendulum-v1"]
    table.write_text(json.dumps(data, indent=1) + "\n")
    code, out, err = portkern(capsys, "--merge", "pocl-cpu", str(run), "--table", str(table))
    assert code == 0, err
    row = _row(table, "pocl-cpu")
    assert row["classes"]["medium"]["families"]["step"] == data["rows"]["pocl-cpu"]["classes"]["medium"]["families"]["step"]
    assert "note: pocl-cpu medium: family step not written" in out and "step:Pendulum-v1" in out
    assert row["classes"]["medium"]["kernels"]["step:CartPole-v1"] == BEST[("pocl", "step:CartPole-v1", MEDIUM)]
    # the small class has every step kernel's own entry: its family is written
    expected = tuning.class_entries(_device_records(run, "Portable Computing Language"))
    assert row["classes"]["small"]["families"]["step"] == expected["small"]["families"]["step"]


def _old_step_rollout_script(data: dict, row_name: str, records: list) -> dict:
    """What the ad-hoc merge_classes.py of the dev-vm-2core-xeon step/rollout class searches (which wrote the rows'
    small and medium step and rollout entries; replaced by --merge) did to the table, from tuning.class_entries:
    kernel entries for the kernels the row has class-free entries for, families from every kernel timed, a
    family written where every class-free kernel reading it has a class entry, the classes' sizes extended."""
    data = copy.deepcopy(data)
    row = data["rows"][row_name]
    new = tuning.class_entries([r for r in records if r.kernel in row["kernels"]])
    every = tuning.class_entries(records)
    for cls in ("small", "medium"):
        if cls not in new:
            continue
        part = row.setdefault("classes", {}).setdefault(cls, {"kernels": {}, "families": {}, "sizes": []})
        for k, c in new[cls]["kernels"].items():
            part["kernels"][k] = {n: v for n, v in c.items() if not n.startswith("_")}
        for fam, c in every.get(cls, {}).get("families", {}).items():
            members = [k for k in row["kernels"] if tuning.family(k) == fam
                       or (fam == "fused" and k.startswith("rollout:") and k.split(":")[2] == "device")]  # fmt: skip
            if all(k in part["kernels"] for k in members):
                part["families"][fam] = dict(c)
        part["kernels"] = dict(sorted(part["kernels"].items()))
        part["families"] = dict(sorted(part["families"].items()))
        part["sizes"] = sorted(set(part["sizes"]) | set(new[cls]["sizes"]))
    return data


def test_reproduces_the_step_rollout_merge_script(table: Path, tmp_path: Path, capsys) -> None:
    # That script took one file per kernel group; here a step run and a rollout run of the same device.
    both = make_tune_run(tmp_path / "both.json", platforms=("intel",))
    raw = json.loads(both.read_text())
    paths = []
    for name, keep in (("step.json", lambda k: k.startswith("step:")), ("rollout.json", lambda k: k.startswith("rollout:"))):
        part = copy.deepcopy(raw)
        part["portkern"]["cases"] = [c for c in part["portkern"]["cases"] if keep(c["kernel"])]
        ids = {c["case_id"] for c in part["portkern"]["cases"]}
        part["benchmarks"] = [b for b in part["benchmarks"] if b["extra_info"]["case_id"] in ids]
        (tmp_path / name).write_text(json.dumps(part))
        paths.append(tmp_path / name)
    records = [r for p in paths for r in _device_records(p, "Intel(R) OpenCL")]
    before = json.loads(table.read_text())
    expected = _old_step_rollout_script(before, "intel-cpu", records)
    # The script's kernels: those the row has class-free entries for (Chain-v0 left out), named with --kernels.
    kernels = sorted({r.kernel for r in records if r.kernel in before["rows"]["intel-cpu"]["kernels"]})
    assert "step:Chain-v0" not in kernels and len(kernels) == 4
    code, _, err = portkern(capsys, "--merge", "intel-cpu", *map(str, paths), "--kernels", ",".join(kernels),
                            "--table", str(table))  # fmt: skip
    assert code == 0, err
    assert json.loads(table.read_text()) == expected
    assert expected != before  # the synthetic winners are not the shipped entries: the merge did something


def test_tiny_tune_run_platform_from_device_name(table: Path, capsys) -> None:
    # An older run: devices without a platform field; NumPy shares the CPU's device key; an Oclgrind simulator.
    code, out, err = portkern(capsys, "--merge", "pocl-cpu", str(TINY_TUNE), "--table", str(table))
    assert code == 0, err
    raw = json.loads(TINY_TUNE.read_text())["machine_info"]["portkern"]["devices"]
    key = next(d["device_key"] for d in raw if d["device"].startswith("Portable Computing Language"))
    records = [r for r in load_run(TINY_TUNE).records if r.backend == "opencl" and r.device_key == key
               and r.kernel != "copy"]  # fmt: skip
    expected = tuning.class_entries(records)
    assert list(expected) == ["small"]
    part = _row(table, "pocl-cpu")["classes"]["small"]
    assert part["kernels"] == {**part["kernels"], **{k: tuning.strip_config(c)
                                                     for k, c in expected["small"]["kernels"].items()}}  # fmt: skip
    assert 2048 in part["sizes"] and "pocl-cpu small kernel " in out


def test_merging_again_changes_nothing(table: Path, run: Path, capsys) -> None:
    assert portkern(capsys, "--merge", "pocl-cpu", str(run), "--table", str(table))[0] == 0
    text, stamp = table.read_bytes(), table.stat().st_mtime_ns
    code, out, _ = portkern(capsys, "--merge", "pocl-cpu", str(run), "--table", str(table))
    assert code == 0
    assert "unchanged" in out and " -> " not in out
    assert table.read_bytes() == text and table.stat().st_mtime_ns == stamp


def test_write_is_atomic_and_keeps_the_mode(table: Path, run: Path, capsys, monkeypatch) -> None:
    os.chmod(table, 0o640)
    text = table.read_bytes()

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tune_merge.os, "replace", broken)
    code, _, err = portkern(capsys, "--merge", "pocl-cpu", str(run), "--table", str(table))
    assert code == 2 and "No space left on device" in err
    assert table.read_bytes() == text
    assert sorted(p.name for p in table.parent.iterdir()) == ["results.json", "tuned_defaults.json"]  # no tmp left
    monkeypatch.undo()
    assert portkern(capsys, "--merge", "pocl-cpu", str(run), "--table", str(table))[0] == 0
    assert table.read_bytes() != text and table.stat().st_mode & 0o777 == 0o640


def _truncated(tmp_path: Path) -> Path:
    path = tmp_path / "truncated.json"
    text = TINY_TUNE.read_text()
    path.write_text(text[: len(text) // 2])
    return path


BAD = {  # name -> (argv after the table's --table, the text the one-line error holds)
    "unknown row": (lambda tmp, run: ["--merge", "amd-gpu", str(run)],
                    "--merge ROW 'amd-gpu': no such row in {table}; the rows are pocl-cpu, intel-cpu"),
    "not a tune run": (lambda tmp, run: ["--merge", "pocl-cpu", str(NOT_TUNE)],
                       f"--merge RUN.json {NOT_TUNE}: not a tune run"),
    "synthetic bench run": (lambda tmp, run: ["--merge", "pocl-cpu", str(make_tune_run(tmp / "b.json", tune=False))],
                            "b.json: not a tune run"),
    "no passing record of the kernels": (
        lambda tmp, run: ["--merge", "pocl-cpu", str(TINY_TUNE), "--kernels", "rollout"],
        f"--merge RUN.json {TINY_TUNE}: no passing record of the kernels rollout on a device of row pocl-cpu"),
    "every record failed": (
        lambda tmp, run: ["--merge", "pocl-cpu", str(make_tune_run(tmp / "f.json", fail=("gather",))),
                          "--kernels", "gather"],
        "f.json: no passing record of the kernels gather on a device of row pocl-cpu"),
    "no device of the row": (lambda tmp, run: ["--merge", "intel-cpu", str(TINY_TUNE)],
                             "no passing record on a device of row intel-cpu (backend=opencl, platform=Intel(R) OpenCL"),
    "a kernel of none of the runs": (
        lambda tmp, run: ["--merge", "pocl-cpu", str(run), "--kernels", "gather,step:Pendulum-v1"],
        "--kernels step:Pendulum-v1: no passing record of it in the runs; they have gae, gather"),
    "nothing searched": (lambda tmp, run: ["--merge", "pocl-cpu", str(run), "--kernels", "gae"],
                         "--merge RUN.json: no kernel was searched in any size class (each of gae timed at one "
                         "configuration per class): nothing to merge"),
    "missing run file": (lambda tmp, run: ["--merge", "pocl-cpu", str(run), str(tmp / "nope.json")],
                         "--merge RUN.json {tmp}/nope.json: cannot read it"),
    "truncated run file": (lambda tmp, run: ["--merge", "pocl-cpu", str(_truncated(tmp))],
                           "truncated.json: not valid JSON ("),
    "no run file": (lambda tmp, run: ["--merge", "pocl-cpu"], "--merge: expected ROW RUN.json [RUN.json ...]"),
    "two devices of the row": (
        lambda tmp, run: ["--merge", "pocl-cpu", str(run), str(make_tune_run(tmp / "o.json", machine="other"))],
        "the runs hold 2 devices that row pocl-cpu matches"),
    "a run option": (lambda tmp, run: ["--merge", "pocl-cpu", str(run), "--sizes", "4096"],
                     "--merge: merges finished runs and runs nothing; drop --sizes"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_one_line_exit_2_table_unchanged(case: str, table: Path, run: Path, tmp_path: Path, capsys) -> None:
    argv, message = BAD[case]
    text, stamp = table.read_bytes(), table.stat().st_mtime_ns
    code, out, err = portkern(capsys, *argv(tmp_path, run), "--table", str(table))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("portkern tune: error: "), err
    assert message.format(table=table, tmp=tmp_path) in err
    assert out == ""
    assert table.read_bytes() == text and table.stat().st_mtime_ns == stamp


@pytest.mark.parametrize("problem", ["missing", "truncated", "another schema"])
def test_bad_table_names_it(problem: str, table: Path, run: Path, capsys) -> None:
    if problem == "missing":
        table.unlink()
        text = None
    else:
        full = table.read_text()
        text = full[: len(full) // 2] if problem == "truncated" else full.replace(tuning.TABLE_SCHEMA, "other/1")
        table.write_text(text)
    code, out, err = portkern(capsys, "--merge", "pocl-cpu", str(run), "--table", str(table))
    assert code == 2 and err.count("\n") == 1
    assert f"--table {table}: " + {"missing": "cannot read it", "truncated": "not valid JSON",
                                   "another schema": "schema 'other/1'"}[problem] in err  # fmt: skip
    assert (table.read_text() if table.exists() else None) == text


def test_table_alone_is_refused(table: Path, capsys) -> None:
    code, _, err = portkern(capsys, "--table", str(table))
    assert code == 2 and "--table: goes with --merge" in err


def test_default_table_is_the_checkouts(monkeypatch, tmp_path: Path, run: Path, capsys) -> None:
    # Without --table the shipped table of this checkout is rewritten (here a copy stands in for it).
    copy_ = tmp_path / "shipped.json"
    copy_.write_bytes(SHIPPED.read_bytes())
    monkeypatch.setattr(tune_merge, "SHIPPED_TABLE", copy_)
    code, out, _ = portkern(capsys, "--merge", "pocl-cpu", str(run), "--kernels", "gather")
    assert code == 0 and f"wrote row pocl-cpu of {copy_}" in out
    assert _row(copy_, "pocl-cpu")["classes"]["large"]["kernels"]["gather"] == BEST[("pocl", "gather", LARGE)]
    assert SHIPPED.read_bytes() != copy_.read_bytes()


def test_strip_config_is_public() -> None:
    assert tuning.strip_config({"local_size": 64, "_worst_share": 0.9}) == {"local_size": 64}
    assert not hasattr(tuning, "_strip")
