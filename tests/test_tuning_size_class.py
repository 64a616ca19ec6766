"""Tuned defaults per size class: a launch reads the entry of its own size's class (small, medium, large),
files from before size classes apply to every class, and tune runs write one entry per class searched."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from portkern import tuning
from portkern.backends import probe
from portkern.portability import report, suite
from portkern.portability.tune import write_tuned
from portkern.runs import Record

DATA = Path(__file__).parent / "data"
SMALL_MAX, MEDIUM_MAX = (1 << 14) - 1, (1 << 19) - 1  # the last item counts of small and medium
IDENT = tuning.Identity("opencl", "Some OpenCL", "some CPU", "1.0", "cpu")


# ---- classes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("items, cls", [(0, "small"), (1, "small"), (SMALL_MAX, "small"), (SMALL_MAX + 1, "medium"),
                                        (MEDIUM_MAX, "medium"), (MEDIUM_MAX + 1, "large"), (1 << 30, "large"),
                                        (np.int64(SMALL_MAX + 1), "medium")])  # fmt: skip
def test_a_size_falls_in_one_class_at_the_boundaries(items, cls):
    assert tuning.size_class(items) == cls


@pytest.mark.parametrize("bad", [-1, 2.0, True, "64", None])
def test_a_size_that_is_not_a_count_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=r"items: expected an int >= 0"):
        tuning.size_class(bad)


def test_classes_are_named_with_their_bounds():
    assert tuning.classes_text() == "small < 16384 items, medium < 524288, large"
    assert tuning.CLASS_NAMES == ("small", "medium", "large")


def test_a_tune_search_times_the_largest_ladder_size_in_each_class():
    # The development VM's full ladders (suite.full_sizes): step and buffers reach all three classes,
    # rollouts two, the MLP rollouts one (both its sizes are small: the larger is searched).
    assert suite.tune_sizes((2048, 32768, 524288)) == (2048, 32768, 524288)
    assert suite.tune_sizes((8192, 131072, 2097152)) == (8192, 131072, 2097152)
    assert suite.tune_sizes((2048, 32768)) == (2048, 32768)
    assert suite.tune_sizes((256, 4096)) == (4096,)
    assert tuning.sizes_per_class([256, 4096, 1 << 20]) == {"large": 1 << 20, "small": 4096}


def test_a_scan_is_classed_by_its_columns_not_its_rows():
    # gae / discounted_returns run N columns in parallel and T rows in sequence: the benchmark's
    # 128 x 4096 (524288 elements, the medium bound) is small, 128 x 65536 medium; normalize counts elements.
    assert tuning.case_items("gae", 128 * 4096) == 4096
    assert tuning.case_class("gae", 128 * 4096) == "small"
    assert tuning.case_class("discounted_returns", 128 * 65536) == "medium"
    assert tuning.case_class("normalize", 128 * 4096) == "large"
    assert tuning.case_class("gather", SMALL_MAX + 1) == "medium"
    assert tuning.case_items("gae", 64) == 1  # fewer elements than T: the suite still builds one column
    assert tuning.case_items("gae", np.int64(128 << 14)) == 1 << 14
    # a tune run's sizes per class follow the same measure (the development VM's buffer ladder)
    assert tuning.sizes_per_class([8192, 131072, 2097152], "gae") == {"medium": 2097152, "small": 131072}
    assert tuning.sizes_per_class([8192, 131072, 2097152], "normalize") == {"large": 2097152, "medium": 131072,
                                                                           "small": 8192}  # fmt: skip
    # a scan's ladder on a larger machine: T*N elements all over the medium bound, N in all three classes
    assert suite.tune_sizes((128 << 12, 128 << 16, 128 << 20), "gae") == (128 << 12, 128 << 16, 128 << 20)
    assert suite.tune_sizes((128 << 12, 128 << 16, 128 << 20)) == (128 << 20,)  # counted as elements


@pytest.mark.parametrize("bad", [-1, 2.0, True, None])
def test_a_scan_size_that_is_not_a_count_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=r"items: expected an int >= 0"):
        tuning.case_class("gae", bad)


def test_the_scan_cases_rows_are_the_suites():
    from portkern.portability.suite.cases import BUFFER_T

    assert tuning.SCAN_CASE_T == BUFFER_T  # case_items divides the suite's sizes by it


# ---- resolution ----------------------------------------------------------------------------------
def _defaults(monkeypatch, tmp_path, rows: dict, cache: dict | None = None) -> tuning.Defaults:
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(tmp_path / "cache.json"))
    monkeypatch.delenv("PORTKERN_NO_TUNE_CACHE", raising=False)
    if cache is not None:
        (tmp_path / "cache.json").write_text(json.dumps({"schema": tuning.CACHE_SCHEMA, "devices": {IDENT.key: cache}}))
    monkeypatch.setattr(tuning, "table", lambda: {"schema": tuning.TABLE_SCHEMA, "rows": rows})
    return tuning.Defaults(IDENT, {"gae": {"local_size": None, "scan_vector_width": 1}})


def _row(**entry) -> dict:
    return {"match": {"backend": "opencl", "platform": "Some OpenCL", "kind": "cpu"}, "measured": "test", **entry}


def test_an_entry_from_before_size_classes_applies_to_every_class(monkeypatch, tmp_path):
    d = _defaults(monkeypatch, tmp_path, {"old": _row(kernels={}, families={"gae": {"scan_vector_width": 16}})})
    got = [d.resolve("scan_vector_width", "gae", "gae", cls) for cls in tuning.CLASS_NAMES]
    assert [(r.value, r.source, r.entry, r.size_class) for r in got] == [(16, "table old", "gae", "all")] * 3
    assert got[0].origin() == "table old (gae)"  # as a case recorded it before size classes
    assert "one entry for every class" in d.origin()


def test_each_class_reads_its_own_entry_and_a_class_not_measured_the_class_free_one(monkeypatch, tmp_path):
    row = _row(kernels={}, families={"gae": {"scan_vector_width": 8}},  # the run's largest size: a class it missed
               classes={"small": {"kernels": {"gae": {"scan_vector_width": 1}}, "families": {}},
                        "large": {"kernels": {}, "families": {"gae": {"scan_vector_width": 16}}}})  # fmt: skip
    d = _defaults(monkeypatch, tmp_path, {"mine": row})
    small, medium, large = (d.resolve("scan_vector_width", "gae", "gae", c) for c in tuning.CLASS_NAMES)
    assert (small.value, small.entry, small.size_class, small.origin()) == (1, "gae", "small", "table mine (gae, small)")
    assert (medium.value, medium.size_class, medium.origin()) == (8, "all", "table mine (gae)")
    assert (large.value, large.size_class) == (16, "large")
    assert d.resolve("scan_vector_width", "gae", "gae") == large  # a lookup without a size: the large class
    assert "large: local_size=auto [fallback], scan_vector_width=16 [table mine, large]" in d.summary()["gae"]
    assert "classes small, large" in d.origin() and tuning.classes_text() in d.origin()
    with pytest.raises(ValueError, match="size_class: expected one of small, medium, large, got 'huge'"):
        d.resolve("scan_vector_width", "gae", "gae", "huge")


def test_the_machines_own_run_comes_first_even_from_another_class(monkeypatch, tmp_path):
    # A cache from a run that searched small sizes only still beats the table at a large launch: the
    # device's own measurement, then another machine's (the table), per source.
    cache = {"kernels": {"gae": {"scan_vector_width": 2}}, "families": {},
             "classes": {"small": {"kernels": {"gae": {"scan_vector_width": 2}}, "families": {}}}}  # fmt: skip
    row = _row(kernels={}, families={}, classes={"large": {"kernels": {"gae": {"scan_vector_width": 16}}, "families": {}}})
    d = _defaults(monkeypatch, tmp_path, {"mine": row}, cache)
    r = d.resolve("scan_vector_width", "gae", "gae", "large")
    assert (r.value, r.source, r.size_class) == (2, "cache", "all")


def test_a_cache_with_a_malformed_class_is_refused_naming_it(monkeypatch, tmp_path):
    for classes, says in (({"huge": {}}, "size class 'huge'; the size classes are small, medium, large"),
                          ({"small": {"kernels": [1]}}, "size class 'small' that is not a mapping"),
                          ([1], "'classes' that is not a mapping")):  # fmt: skip
        with pytest.warns(RuntimeWarning, match="tuned defaults: .*" + says):
            d = _defaults(monkeypatch, tmp_path, {}, {"kernels": {}, "families": {}, "classes": classes})
        assert d.resolve("scan_vector_width", "gae", "gae", "small").source == "fallback"


def test_the_shipped_table_states_the_classes_it_measured():
    for name, row in tuning.table()["rows"].items():
        assert set(row.get("classes", {})) <= set(tuning.CLASS_NAMES), name
        for cls, part in row.get("classes", {}).items():
            # measured in its class: each benchmark size listed is in the class for a kernel entered there,
            # and each kernel's entry comes from a size in the class (a scan's class counts its columns)
            kernels = set(part["kernels"]) | set(part["families"])
            assert all(any(tuning.case_class(k, s) == cls for k in kernels) for s in part["sizes"]), (name, cls)
            for k in kernels:
                assert any(tuning.case_class(k, s) == cls for s in part["sizes"]), (name, cls, k)


# ---- a launch picks its class ----------------------------------------------------------------------
_PROBE = probe("opencl")
needs_opencl = pytest.mark.skipif(not _PROBE.available, reason=f"opencl: {_PROBE.reason}")


@needs_opencl
def test_a_launch_runs_its_own_classes_knobs_and_knob_in_force_says_so(monkeypatch, tmp_path):
    from portkern import buffer
    from portkern.backends import opencl as ocl_mod
    from portkern.backends.opencl import OpenCLBackend

    cpus = [label for _, label in sorted(ocl_mod.device_ids().items()) if OpenCLBackend(label).device_kind() == "cpu"]
    if not cpus:
        pytest.skip("needs an OpenCL CPU device")
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(tmp_path / "none.json"))
    be = OpenCLBackend(cpus[0])
    layout = {"small": {"scan_vector_width": 1, "scan_vectors_per_item": 2, "local_size": 16},
              "large": {"scan_vector_width": 4, "scan_vectors_per_item": 8, "local_size": 32}}
    row = {"match": {"backend": "opencl", "platform": be.platform.name.strip(), "kind": "cpu"}, "measured": "test",
           "kernels": {}, "families": {}, "classes": {c: {"kernels": {"gae": v}, "families": {}} for c, v in layout.items()}}
    monkeypatch.setattr(tuning, "table", lambda: {"schema": tuning.TABLE_SCHEMA, "rows": {"mine": row}})
    be = OpenCLBackend(be.device_name)  # defaults are read when the backend opens its device
    built: list[dict[str, str]] = []
    fetch = be._kernel

    def spy(filename, name, options):
        if name == "pk_gae":
            built.append(dict(o[2:].split("=", 1) for o in options if o.startswith("-DPK_")))
        return fetch(filename, name, options)

    ranges, real_ranges = [], be._ranges

    def spy_ranges(n, k=None):
        out = real_ranges(n, k)
        ranges.append(out[1])
        return out

    monkeypatch.setattr(be, "_kernel", spy)
    monkeypatch.setattr(be, "_ranges", spy_ranges)
    # 64 columns (small) and 524288 (large): a scan's class counts its columns N, its T rows run in sequence
    for t, n in ((128, 64), (2, 1 << 19)):
        z = be.from_host(np.zeros((t, n), np.float32))
        f = be.from_host(np.zeros((t, n), bool))
        adv, _ = buffer.gae(z, z, z, f, f, gamma=0.99, lam=0.95, backend=be)
        assert not be.to_host(adv).any()  # it ran (zero rewards and values: zero advantages)
    assert [(b["PK_VW"], b["PK_NV"]) for b in built] == [("1", "2"), ("4", "8")]
    assert ranges == [(16,), (32,)]  # the work-group size of each launch's class too
    for size, cls in ((8192, "small"), (128 << 19, "large")):  # the suite's sizes: T*N elements, T = 128
        r = be.knob_in_force("scan_vectors_per_item", "gae", size)
        assert (r.value, r.source, r.entry, r.size_class) == (layout[cls]["scan_vectors_per_item"], "table mine", "gae", cls)
        assert suite.config_origin("gae", be, size=size)["scan_vectors_per_item"] == f"table mine (gae, {cls})"
    # medium (128 x 16384): no entry in any class, no class-free one: the fallback (the GPU shape), said so
    assert be.knob_in_force("scan_vectors_per_item", "gae", 128 << 14).source == "fallback"
    assert "small:" in be.describe()["defaults gae"] and "large:" in be.describe()["defaults gae"]


@needs_opencl
def test_the_shipped_table_gives_the_benchmarks_scan_sizes_their_own_class(monkeypatch):
    # bench/cpu/buffer_peers.py's 128 x 4096 and 128 x 65536: a small and a medium entry measured for
    # each scan on every CPU driver the table has a row for, never the large layout at 4096 columns.
    from portkern.backends import opencl as ocl_mod
    from portkern.backends.opencl import OpenCLBackend

    monkeypatch.setenv("PORTKERN_NO_TUNE_CACHE", "1")
    checked = 0
    for _, label in sorted(ocl_mod.device_ids().items()):
        be = OpenCLBackend(label)
        if be.device_kind() != "cpu" or not any(s.startswith("table") for s, _ in be.tuned_defaults.sources):
            continue
        for op in tuning.SCAN_OPS:
            for size, cls in ((128 * 4096, "small"), (128 * 65536, "medium")):
                r = be.knob_in_force("scan_vectors_per_item", op, size)
                assert (r.source.startswith("table"), r.entry, r.size_class) == (True, op, cls), (label, op, size)
        checked += 1
    if not checked:
        pytest.skip("no OpenCL CPU device with a row in the shipped table")


# ---- from a tune run: tuned.json, the cache, re-tune penalties per class ---------------------------
_LARGE = 1 << 26  # gae's size as the suite counts it (T*N, T = 128): 524288 columns, the large class
#: A synthetic second size for the committed tiny tune run's gae search (PoCL on CI's Xeon): at 2048
#: elements local_size=64 wins (as measured); here, at a large size, 256 does by far.
_LARGE_RATES = {None: 1.0e8, 32: 0.9e8, 64: 1.1e8, 128: 1.2e8, 256: 3.0e8}


def _two_class_tune_run(tmp_path: Path) -> Path:
    run = json.loads((DATA / "run-ci-vm-tune-tiny.json").read_text())
    for d in run["machine_info"]["portkern"]["devices"]:
        d["platform"] = d["device"].split(": ")[0] if ": " in d["device"] else ""
    searched = [c for c in run["portkern"]["cases"]
                if c["kernel"] == "gae" and c["backend"] == "opencl" and not c["simulator"]]  # fmt: skip
    assert len(searched) == len(_LARGE_RATES)
    for c in searched:
        big = copy.deepcopy(c)
        big["case_id"] = c["case_id"].replace("-n2048-", f"-n{_LARGE}-")
        big.update(size=_LARGE, items=_LARGE)
        run["portkern"]["cases"].append(big)
        run["benchmarks"].append({"extra_info": {"case_id": big["case_id"]},
                                  "stats": {"min": _LARGE / _LARGE_RATES[c["config"]["local_size"]]}})  # fmt: skip
    path = tmp_path / "results.json"
    path.write_text(json.dumps(run))
    return path


def test_write_tuned_gives_each_size_class_its_own_best(tmp_path):
    tuned = write_tuned(_two_class_tune_run(tmp_path), tmp_path / "tuned.json")
    assert json.loads((tmp_path / "tuned.json").read_text()) == tuned
    gae = tuned["devices"]["ci-vm/cpu"]["opencl/gae"]
    assert gae["classes"]["small"]["config"] == {"local_size": 64} and gae["classes"]["small"]["size"] == 2048
    assert gae["classes"]["large"]["config"] == {"local_size": 256} and gae["classes"]["large"]["size"] == _LARGE
    assert gae["classes"]["large"]["configs_tried"] == len(_LARGE_RATES)
    assert (gae["config"], gae["size"]) == ({"local_size": 256}, _LARGE)  # the largest size, as before classes


def test_the_cache_holds_an_entry_per_class_and_a_backend_reads_its_class(tmp_path, monkeypatch):
    cache = tmp_path / "cache.json"
    (key,) = tuning.write_cache(_two_class_tune_run(tmp_path), cache)
    entry = json.loads(cache.read_text())["devices"][key]
    assert entry["classes"]["small"]["kernels"]["gae"] == {"local_size": 64}
    assert entry["classes"]["large"]["kernels"]["gae"] == {"local_size": 256}
    assert entry["classes"]["large"]["sizes"] == [_LARGE]
    assert entry["kernels"]["gae"] == {"local_size": 256}  # class-free: the run's largest size per kernel
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(cache))
    monkeypatch.delenv("PORTKERN_NO_TUNE_CACHE", raising=False)
    d = tuning.Defaults(tuning.Identity(*key.split(" | "), "cpu"), {"gae": {"local_size": None}})
    got = {c: d.resolve("local_size", "gae", "gae", c) for c in tuning.CLASS_NAMES}
    assert {c: (r.value, r.source, r.size_class) for c, r in got.items()} == {
        "small": (64, "cache", "small"), "medium": (256, "cache", "all"), "large": (256, "cache", "large")}


def test_retune_penalties_are_per_size_class():
    devices = {d: {"kind": "cpu"} for d in ("A", "B")}

    def rec(device: str, size: int, ls: int, rate: float) -> Record:
        return Record(kernel="gae", backend="opencl", device_key=device, size=size, status="pass",
                      config={"local_size": ls}, max_error=0.0, reason="", min_s=size / rate, items=size)  # fmt: skip

    # Small: A's best (64) is B's best too. Large: A's best (256) runs at half of B's best (64) there.
    recs = [rec("A", 2048, 64, 2.0), rec("A", 2048, 256, 1.0), rec("B", 4096, 64, 2.0), rec("B", 4096, 256, 1.0),
            rec("A", _LARGE, 64, 1.0), rec("A", _LARGE, 256, 2.0), rec("B", _LARGE, 64, 2.0), rec("B", _LARGE, 256, 1.0)]
    rows = {(r["size_class"], r["source"]): r for r in report.retune(recs, devices)}
    assert set(rows) == {("small", "A"), ("small", "B"), ("large", "A"), ("large", "B")}  # no "largest": same class
    assert rows[("small", "A")]["penalty"] == pytest.approx(0.0)
    assert (rows[("small", "A")]["source_size"], rows[("small", "A")]["target_size"]) == (2048, 4096)
    assert rows[("large", "A")]["penalty"] == pytest.approx(0.5)
    assert rows[("large", "A")]["config"] == {"local_size": 256}
    assert rows[("large", "A")]["target_best_config"] == {"local_size": 64}


def test_searches_split_over_runs_make_one_row_with_each_class(tmp_path):
    # The small search in one run file, the large one in another (how the shipped table's classes were
    # measured: one kernel per run): one table row holding both classes.
    both = json.loads(_two_class_tune_run(tmp_path).read_text())
    for part, keep in (("small", lambda c: c["size"] != _LARGE), ("large", lambda c: c["size"] == _LARGE)):
        run = copy.deepcopy(both)
        run["portkern"]["cases"] = [c for c in both["portkern"]["cases"] if keep(c)]
        (tmp_path / f"{part}.json").write_text(json.dumps(run))
    row = tuning.table_row_from_run([tmp_path / "small.json", tmp_path / "large.json"], "Portable Computing", "test")
    assert row["classes"]["small"]["kernels"]["gae"] == {"local_size": 64}
    assert row["classes"]["large"]["kernels"]["gae"] == {"local_size": 256}
    assert row["classes"]["large"]["sizes"] == [_LARGE]
