"""Defaults of the OpenCL tuning knobs come from measurements: the per-machine cache, then the shipped
table, then a documented fallback; never from what the driver advertises. Benchmark cases record the
values that ran; a `portkern tune` run becomes the defaults of the backends opened after it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from portkern import tuning
from portkern.backends import probe
from portkern.portability import suite
from portkern.runs import load_run

_PROBE = probe("opencl")
pytestmark = pytest.mark.skipif(not _PROBE.available, reason=f"opencl: {_PROBE.reason}")
if _PROBE.available:
    from portkern.backends import opencl as ocl_mod
    from portkern.backends.opencl import OpenCLBackend

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No per-machine cache but the test's own, and a table the test writes."""
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(tmp_path / "cache.json"))
    rows: dict = {}
    monkeypatch.setattr(tuning, "table", lambda: {"schema": tuning.TABLE_SCHEMA, "rows": rows})
    return rows


def _any_cpu() -> str:
    cpus = [label for pid, label in sorted(ocl_mod.device_ids().items())
            if OpenCLBackend(label).device_kind() == "cpu"]  # fmt: skip
    if not cpus:
        pytest.skip("needs an OpenCL CPU device")
    return cpus[0]


def _row(be, kernels=None, families=None) -> dict:
    return {"match": {"backend": "opencl", "platform": be.platform.name.strip(), "kind": be.device_kind()},
            "measured": "test", "kernels": kernels or {}, "families": families or {}}  # fmt: skip


def _vw(be, kernel: str, family: str) -> int:
    return be._env_options(np.float32, kernel, family)[1]


def test_without_measurements_the_fallback_is_used_not_the_advertised_width(isolated):
    be = OpenCLBackend(_any_cpu())
    assert _vw(be, "step:CartPole-v1", "step") == ocl_mod._FALLBACK_CPU_VW
    assert be.tuned_defaults.resolve("env_vector_width", "step", "step:CartPole-v1").source == "fallback"
    assert be.describe()["tuned_defaults"].startswith("fallback")


def test_the_table_row_of_the_driver_family_applies_kernel_entries_first(isolated):
    be = OpenCLBackend(_any_cpu())
    isolated["mine"] = _row(be, kernels={"step:CartPole-v1": {"env_vector_width": 16, "local_size": 64}},
                            families={"step": {"env_vector_width": 4, "local_size": None}})  # fmt: skip
    be = OpenCLBackend(be.device_name)  # defaults are read when the backend opens its device
    assert _vw(be, "step:CartPole-v1", "step") == 16 and _vw(be, "step:Acrobot-v1", "step") == 4
    k = be._kernel("cartpole.cl", "pk_cartpole_step", be._env_options(np.float32, "step:CartPole-v1", "step")[0])
    assert be._ranges(100, k) == ((128,), (64,))  # the kernel's tuned work-group, rounded up
    r = be.tuned_defaults.resolve("env_vector_width", "step", "step:Acrobot-v1")
    assert (r.source, r.entry) == ("table mine", "step")
    assert "table mine" in be.describe()["defaults step"]


def test_a_row_for_another_platform_does_not_apply(isolated):
    be = OpenCLBackend(_any_cpu())
    isolated["other"] = dict(_row(be, families={"step": {"env_vector_width": 2}}),
                             match={"backend": "opencl", "platform": "Some Other OpenCL", "kind": "cpu"})  # fmt: skip
    assert _vw(OpenCLBackend(be.device_name), "step:CartPole-v1", "step") == ocl_mod._FALLBACK_CPU_VW


def test_a_tuned_value_the_device_cannot_run_falls_through(isolated):
    be = OpenCLBackend(_any_cpu())
    too_big = int(be.device.max_work_group_size) * 2
    isolated["mine"] = _row(be, families={"gae": {"local_size": too_big}, "normalize": {"reduce_wg": 96}})
    be = OpenCLBackend(be.device_name)
    assert be.tuned_defaults.resolve("local_size", "gae", "gae").source == "fallback"
    assert be.reduce_wg == 1 << int(np.log2(min(256, be.device.max_work_group_size)))  # 96: not a power of two


def test_the_machines_own_tune_run_comes_before_the_table(isolated, tmp_path):
    be = OpenCLBackend(_any_cpu())
    isolated["mine"] = _row(be, families={"step": {"env_vector_width": 4}})
    platform, device, driver = be._device_key()
    cache = {"schema": tuning.CACHE_SCHEMA, "devices": {
        tuning.Identity("opencl", platform, device, driver, "cpu").key: {"families": {"step": {"env_vector_width": 2}}},
        tuning.Identity("opencl", platform, device, "another driver", "cpu").key: {"families": {"step": {"env_vector_width": 1}}},
    }}  # fmt: skip
    Path(tuning.cache_path()).write_text(json.dumps(cache))
    be = OpenCLBackend(be.device_name)
    assert _vw(be, "step:CartPole-v1", "step") == 2  # this driver's entry; another version is another device
    assert be.tuned_defaults.resolve("env_vector_width", "step").source == "cache"
    assert str(tuning.cache_path()) in be.describe()["tuned_defaults"]


def test_a_knob_set_by_hand_wins_and_tuned_goes_back(isolated):
    be = OpenCLBackend(_any_cpu())
    be.env_vector_width = 2
    assert _vw(be, "step:CartPole-v1", "step") == 2
    be.env_vector_width = None  # asked for: the driver's preferred width, for comparisons
    pref = be.device.preferred_vector_width_float
    assert _vw(be, "step:CartPole-v1", "step") == 1 << int(np.log2(max(1, min(16, pref))))
    be.env_vector_width = tuning.TUNED
    assert _vw(be, "step:CartPole-v1", "step") == ocl_mod._FALLBACK_CPU_VW
    be.env_vector_width = 3
    with pytest.raises(ValueError, match="env_vector_width: expected 'tuned', None, 1, 2, 4, 8 or 16, got 3"):
        _vw(be, "step:CartPole-v1", "step")


def test_a_case_config_is_undone_to_the_setting_not_the_value_it_read_as(isolated):
    """suite.applied sets knobs for one case and puts back what was set: TUNED stays TUNED (reduce_wg reads
    as the resolved integer, and restoring that integer would pin it and change its origin)."""
    be = OpenCLBackend(_any_cpu())
    before = {k: be.knob_setting(k) for k in ("reduce_wg", "env_vector_width", "local_size")}
    assert before["reduce_wg"] == tuning.TUNED and isinstance(be.reduce_wg, int)
    with suite.applied(be, {"reduce_wg": 64, "env_vector_width": 4, "local_size": 32}):
        assert (be.reduce_wg, be.env_vector_width, be.local_size) == (64, 4, 32)
    assert {k: be.knob_setting(k) for k in before} == before
    assert be.knob_in_force("reduce_wg", "normalize").source != "attribute"


def test_each_launch_takes_its_own_kernels_default(isolated):
    # Step, fused rollout and MLP read their own entries, and the results do not depend on them.
    be = OpenCLBackend(_any_cpu())
    isolated["mine"] = _row(be, families={"step": {"env_vector_width": 16}, "fused": {"env_vector_width": 2},
                                          "rollout": {"env_vector_width": 4}})  # fmt: skip
    be = OpenCLBackend(be.device_name)
    assert [_vw(be, "rollout:CartPole-v1:fused", "fused"), _vw(be, None, "rollout")] == [2, 4]
    from portkern import step
    from portkern.policy import RandomPolicy

    bufs = []
    for width in (tuning.TUNED, 1):
        be.env_vector_width = width
        env = step.make("CartPole-v1", 77, backend=be, seed=3)
        env.reset()
        buf = env.rollout(6, RandomPolicy(), path="fused")
        bufs.append(be.to_host(buf.obs))
    np.testing.assert_array_equal(bufs[0], bufs[1])


# ---- from tune runs ------------------------------------------------------------------------------
class _Rec:
    def __init__(self, kernel: str, config: dict, rate: float, size: int = 10) -> None:
        self.kernel, self.config, self.items_per_s, self.size, self.status = kernel, config, rate, size, "pass"
        self.config_key = json.dumps(config, sort_keys=True)


def test_entries_pick_each_kernels_best_and_the_familys_safest():
    recs = [_Rec("step:A", {"env_vector_width": w}, r) for w, r in ((4, 10.0), (16, 9.0), (None, 11.0))]
    recs += [_Rec("step:B", {"env_vector_width": w}, r) for w, r in ((4, 5.0), (16, 10.0), (None, 12.0))]
    recs.append(_Rec("step:A", {"env_vector_width": 16}, 99.0, size=5))  # a smaller size: not the tuned one
    entries = tuning.entries_from_records(recs)
    # None ("the driver's width") is never a default: it is one of the widths under another name.
    assert entries["kernels"] == {"step:A": {"env_vector_width": 4}, "step:B": {"env_vector_width": 16}}
    # 16 keeps at least 0.9 of the best on both kernels; 4 drops to 0.5 on B.
    assert entries["families"]["step"] == {"env_vector_width": 16, "_worst_share": 0.9}


def test_the_device_path_joins_no_family_its_launches_do_not_read():
    """rollout:<env>:device is searched with the rollout knobs but launches the fused kernel (family "fused"): its
    records give it a kernel entry, and neither the "rollout" family (the per-step MLP's) nor "fused"."""
    recs = [_Rec("rollout:CartPole-v1:host", {"env_vector_width": w}, r) for w, r in ((4, 10.0), (16, 5.0))]
    recs += [_Rec("rollout:CartPole-v1:device", {"env_vector_width": w}, r) for w, r in ((4, 1.0), (16, 10.0))]
    entries = tuning.entries_from_records(recs)
    assert entries["kernels"]["rollout:CartPole-v1:device"] == {"env_vector_width": 16}
    # with the device path in it, the family would have to keep 16 (worst share 0.5) rather than 4 (0.1)
    assert entries["families"] == {"rollout": {"env_vector_width": 4, "_worst_share": 1.0}}
    assert tuning.launch_family("rollout:CartPole-v1:device") == "fused"
    assert tuning.family("rollout:CartPole-v1:device") == "rollout"  # its search space
    assert tuning.launch_family("rollout:CartPole-v1:fused:mlp") == tuning.family("rollout:CartPole-v1:fused:mlp")


def _recorded_tune_run(tmp_path: Path) -> Path:
    """The committed tiny tune run (CI's VM), with the platform names its devices did not record yet."""
    run = json.loads((DATA / "run-ci-vm-tune-tiny.json").read_text())
    for d in run["machine_info"]["portkern"]["devices"]:
        d["platform"] = d["device"].split(": ")[0] if ": " in d["device"] else ""
    path = tmp_path / "results.json"
    path.write_text(json.dumps(run))
    return path


def test_a_tune_run_writes_the_machine_cache(tmp_path, monkeypatch):
    path = _recorded_tune_run(tmp_path)
    cache = tmp_path / "cache.json"
    written = tuning.write_cache(path, cache)
    assert written == ["opencl | Portable Computing Language | pthread-Intel(R) Xeon(R) Processor @ 2.80GHz | 3.0-rc2"]
    entry = json.loads(cache.read_text())["devices"][written[0]]
    assert set(entry["kernels"]) >= {"step:CartPole-v1", "gae", "normalize"} and "copy" not in entry["kernels"]
    assert entry["run"] == str(path.resolve()) and "local_size" in entry["families"]["step"]


def test_the_shipped_table_is_readable_and_matches_by_driver_family():
    rows = tuning.table()["rows"]
    for name, row in rows.items():
        assert {"match", "measured", "kernels", "families"} <= row.keys(), name
        for config in [*row["kernels"].values(), *row["families"].values()]:
            assert config.get("env_vector_width", 1) is not None, f"{name}: an advertised width as a default"


_BROKEN = {
    "not JSON": "{not json",
    "a JSON list": "[1, 2]",
    "another schema": json.dumps({"schema": "portkern-tune-cache/0", "devices": {}}),
    "an entry that is a list": json.dumps({"schema": tuning.CACHE_SCHEMA, "devices": {"KEY": [1]}}),
    "a configuration that is a number": json.dumps({"schema": tuning.CACHE_SCHEMA,
                                                     "devices": {"KEY": {"families": {"step": 4}}}}),
}  # fmt: skip


@pytest.mark.parametrize("text", _BROKEN.values(), ids=_BROKEN)
def test_a_broken_cache_is_warned_about_naming_it_and_ignored(isolated, text):
    label = _any_cpu()
    key = OpenCLBackend(label).tuned_defaults.identity.key  # this device's entry: read at every launch
    cache = tuning.cache_path()
    cache.write_text(text.replace("KEY", json.dumps(key)[1:-1]))
    with pytest.warns(RuntimeWarning, match=re.escape(f"tuned defaults: {cache}: ") + ".*delete it"):
        be = OpenCLBackend(label)
    assert _vw(be, "step:CartPole-v1", "step") == ocl_mod._FALLBACK_CPU_VW
    assert be.knob_in_force("env_vector_width", "step:CartPole-v1").source == "fallback"
    assert be.describe()["tuned_defaults"].startswith(f"fallback (no tuned entry for this device); {cache}: ")


# ---- the values a benchmark case records: what runs, never the sentinel ------------------------------
#: Per kernel: knob -> (OpenCL function launched, what shows the knob's value: a -D option or "local size").
_SHOWN_BY = {
    "step:CartPole-v1": {"env_vector_width": ("pk_cartpole_step", "PK_VW"),
                         "local_size": ("pk_cartpole_step", "local size")},
    "rollout:CartPole-v1:host": {"env_vector_width": ("pk_cartpole_step", "PK_VW")},
    "rollout:CartPole-v1:device": {"env_vector_width": ("pk_cartpole_rollout", "PK_VW")},
    "rollout:CartPole-v1:fused": {"env_vector_width": ("pk_cartpole_rollout", "PK_VW"),
                                  "steps_per_launch": (None, "T")},
    "rollout:CartPole-v1:device:mlp": {"env_vector_width": ("pk_cartpole_rollout", "PK_VW")},
    "gae": {"local_size": ("pk_gae", "local size"), "scan_vector_width": ("pk_gae", "PK_VW"),
            "scan_vectors_per_item": ("pk_gae", "PK_NV")},
    # (the table's chunk layout: its apply pass combines the partials itself)
    "normalize": {"reduce_wg": ("pk_normalize_apply_partials", "PK_WG"),
                  "local_size": ("pk_normalize_apply_partials", "local size"),
                  "reduce_chunk": ("pk_normalize_apply_partials", "PK_CHUNK"),
                  "reduce_vector_width": ("pk_normalize_apply_partials", "PK_VW")},
    "gather": {"local_size": ("pk_gather_rows_checked_i32", "local size"),
               "gather_rows_per_item": ("pk_gather_rows_checked_i32", "PK_ROWS"),
               "gather_vector_width": ("pk_gather_rows_checked_i32", "PK_GVW"),
               "gather_prefetch": ("pk_gather_rows_checked_i32", "PK_GPF"),
               "gather_row_vector": ("pk_gather_rows_checked_i32", "PK_GROWVEC")},
}  # fmt: skip
_STEPS = 4  # T of the rollout cases here
#: A table row unlike the fallback, whose entries tell apart every entry a launch could read.
_FAMILIES = {"step": {"env_vector_width": 1, "local_size": 32}, "rollout": {"env_vector_width": 4},
             "fused": {"env_vector_width": 1},
             "gae": {"local_size": 128, "scan_vector_width": 4, "scan_vectors_per_item": 2},
             "normalize": {"reduce_wg": 32, "local_size": 16, "reduce_chunk": 256, "reduce_vector_width": 4},
             "gather": {"local_size": 8, "gather_rows_per_item": 4, "gather_vector_width": 2, "gather_prefetch": 3,
                        "gather_row_vector": 0}}  # fmt: skip
#: As a tune run writes them: the host rollout's winner too, which its launches (the step kernel's) do not read.
_KERNELS = {"step:CartPole-v1": {"env_vector_width": 2, "local_size": 64},
            "rollout:CartPole-v1:host": {"env_vector_width": 4}, "rollout:CartPole-v1:device": {"env_vector_width": 4},
            "rollout:CartPole-v1:fused": {"env_vector_width": 8}}  # fmt: skip
#: Where each recorded value comes from (the table row is "mine").
_ORIGINS = {
    "step:CartPole-v1": {"env_vector_width": "table mine (step:CartPole-v1)",
                         "local_size": "table mine (step:CartPole-v1)"},
    "rollout:CartPole-v1:host": {"env_vector_width": "table mine (step:CartPole-v1)"},  # the step kernel's entry
    "rollout:CartPole-v1:device": {"env_vector_width": "table mine (rollout:CartPole-v1:device)"},  # its own entry
    "rollout:CartPole-v1:fused": {"env_vector_width": "table mine (rollout:CartPole-v1:fused)", "steps_per_launch": "T"},
    "rollout:CartPole-v1:device:mlp": {"env_vector_width": "table mine (fused)"},
    **{op: {k: f"table mine ({op})" for k in _FAMILIES[op]} for op in ("gae", "normalize", "gather")},
}  # fmt: skip


def _launched(be, monkeypatch, kernel: str) -> dict[str, dict[str, object]]:
    """function name -> {"-D" option name: value, "local size": value} of one run of the suite's case."""
    size = {"gae": 1024, "normalize": 1024}.get(kernel, 64)
    prep = suite.prepare(be, kernel, size, None, _STEPS)
    seen: dict[str, dict[str, object]] = {}
    fetch, ranges = be._kernel, be._ranges

    def spy_kernel(filename, name, options):
        opts = dict(o[2:].split("=", 1) for o in options if o.startswith("-DPK_"))
        seen.setdefault(name, {}).update({k: int(v) for k, v in opts.items()})
        return fetch(filename, name, options)

    def spy_ranges(n, k=None):
        out = ranges(n, k)
        seen.setdefault(k.function_name, {})["local size"] = None if out[1] is None else out[1][0]
        return out

    monkeypatch.setattr(be, "_kernel", spy_kernel)
    monkeypatch.setattr(be, "_ranges", spy_ranges)
    prep.run()
    be.synchronize()
    return seen


@pytest.mark.parametrize("kernel", list(_SHOWN_BY))
def test_a_default_case_records_the_values_its_launches_use(isolated, monkeypatch, kernel):
    be = OpenCLBackend(_any_cpu())
    isolated["mine"] = _row(be, kernels=_KERNELS, families=_FAMILIES)
    be = OpenCLBackend(be.device_name)
    config = suite.current_config(kernel, be, steps=_STEPS)
    assert set(config) == set(_SHOWN_BY[kernel])  # every knob the case has is checked below
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in config.values()), config  # never "tuned"
    assert suite.config_origin(kernel, be, steps=_STEPS) == _ORIGINS[kernel]
    seen = _launched(be, monkeypatch, kernel)
    ran = {k: _STEPS if how == "T" else seen[fn][how] for k, (fn, how) in _SHOWN_BY[kernel].items()}
    assert config == ran


def test_without_a_tuned_entry_a_case_records_the_fallback_values(isolated):
    be = OpenCLBackend(_any_cpu())
    assert suite.current_config("step:CartPole-v1", be) == {"local_size": None,
                                                             "env_vector_width": ocl_mod._FALLBACK_CPU_VW}
    assert suite.current_config("gae", be) == {"local_size": None, "scan_vector_width": 1, "scan_vectors_per_item": 1}
    assert set(suite.config_origin("gae", be).values()) == {"fallback"}


def test_a_searched_configuration_is_told_apart_from_the_default(isolated):
    be = OpenCLBackend(_any_cpu())
    kernel = "step:CartPole-v1"
    default = suite.current_config(kernel, be)
    assert "config" not in suite.config_origin(kernel, be).values() and suite.config_id(None) == "default"
    with suite.applied(be, default):  # the default's own values, searched: the same configuration...
        assert suite.current_config(kernel, be, default) == default
        assert set(suite.config_origin(kernel, be, default).values()) == {"config"}  # ...set by the case
    assert be.env_vector_width == tuning.TUNED and be.local_size == tuning.TUNED  # applied() put the sentinel back
    be.env_vector_width = 4  # set by hand: what runs, from the attribute
    assert suite.current_config(kernel, be)["env_vector_width"] == 4
    assert suite.config_origin(kernel, be)["env_vector_width"] == "attribute"


def test_a_bench_run_without_a_tuned_device_leaves_the_cache_alone(tmp_path):
    # A bench run measures each kernel's default only: nothing was searched, so nothing is tuned.
    cache = tmp_path / "cache.json"
    assert tuning.write_cache(DATA / "run-ci-vm-paths-tiny.json", cache) == []
    assert not cache.exists()


def test_writing_over_a_broken_cache_keeps_it_aside_and_writes_a_new_one(tmp_path):
    run = _recorded_tune_run(tmp_path)
    cache = tmp_path / "cache.json"
    cache.write_text("{not json")
    kept = tmp_path / "cache.json.unreadable"
    with pytest.warns(RuntimeWarning, match=re.escape(f"{cache}: not a readable") + ".*" + re.escape(f"moved to {kept}")):
        written = tuning.write_cache(run, cache)
    assert kept.read_text() == "{not json"
    assert list(json.loads(cache.read_text())["devices"]) == written and len(written) == 1


# ---- portkern tune -> the per-machine cache -> the next backend, end to end ----------------------------
def _pocl() -> str:
    found = [label for pid, label in ocl_mod.device_ids().items() if pid == "pocl"]
    assert found, "no PoCL device: install portkern[test] (pyopencl[pocl])"
    return found[0]


def _suite(out: Path, *options: str) -> dict:
    """The real benchmark suite in a subprocess: PoCL, CartPole's step kernel, 64 envs, the shortest timing."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PORTKERN_TUNE_CACHE": str(out.with_name("no-cache.json"))}
    env.pop("PORTKERN_NO_TUNE_CACHE", None)
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "bench" / "test_env_step.py"), "-q", "-n", "0", "-p", "no:cacheprovider",
           "--pk-backend=opencl", "--pk-device=pthread", "--pk-sizes=64", "--pk-rounds=2", "--pk-slot-ms=0.2",
           "--pk-visits=1", "--pk-group-s=0.2", "--pk-machine=test-machine", "-k", "CartPole",
           f"--benchmark-json={out}", *options]  # fmt: skip
    done = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def tune_run(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tune") / "results.json"
    _suite(path, "--pk-tune")
    return path


def test_a_bench_run_records_the_default_values_that_ran(tmp_path, monkeypatch):
    cases = _suite(tmp_path / "results.json")["portkern"]["cases"]
    (case,) = [c for c in cases if c["kernel"] == "step:CartPole-v1"]
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(tmp_path / "no-cache.json"))
    monkeypatch.delenv("PORTKERN_NO_TUNE_CACHE", raising=False)
    be = OpenCLBackend(_pocl())  # the shipped table, as in the run
    # the entry of the case's own size class (the table has small and medium entries for the step kernels)
    assert case["config"] == suite.current_config("step:CartPole-v1", be, size=case["size"])
    assert case["config"]["env_vector_width"] == _vw(be, "step:CartPole-v1", "step")  # a width, not "tuned"
    assert case["config_origin"] == suite.config_origin("step:CartPole-v1", be, size=case["size"])
    assert all(o.startswith("table pocl-cpu (") for o in case["config_origin"].values())  # the shipped PoCL row


def test_a_tune_run_becomes_the_defaults_of_backends_opened_after_it(tune_run, tmp_path, monkeypatch):
    cache = tmp_path / "cache.json"
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(cache))
    monkeypatch.delenv("PORTKERN_NO_TUNE_CACHE", raising=False)
    label, kernel = _pocl(), "step:CartPole-v1"
    assert OpenCLBackend(label).knob_in_force("env_vector_width", kernel).source == "table pocl-cpu"
    cases = [c for c in json.loads(tune_run.read_text())["portkern"]["cases"] if c["kernel"] == kernel]
    assert len(cases) == len(suite.all_configs(kernel, OpenCLBackend(label)))
    assert all(set(c["config_origin"].values()) == {"config"} for c in cases)  # searched points, not defaults

    written = tuning.write_cache(tune_run, cache)
    after = OpenCLBackend(label)
    assert written == [after.tuned_defaults.identity.key]  # this device under this driver version
    passed = [r for r in load_run(tune_run).records if r.kernel == kernel and r.status == "pass"]
    best = max(passed, key=lambda r: r.items_per_s).config
    assert json.loads(cache.read_text())["devices"][written[0]]["kernels"][kernel] == best
    for knob in best:
        r = after.knob_in_force(knob, kernel)
        assert (r.value, r.source, r.entry) == (best[knob], "cache", kernel)  # before the shipped table
    assert _vw(after, kernel, "step") == best["env_vector_width"]  # what the launch builds
    assert suite.current_config(kernel, after) == best
    assert after.knob_in_force("env_vector_width", "step:Acrobot-v1") == tuning.Resolved(
        json.loads(cache.read_text())["devices"][written[0]]["families"]["step"]["env_vector_width"], "cache", "step")
    assert after.knob_in_force("local_size", "gae").source == "table pocl-cpu"  # not tuned in this run
    assert f"cache {cache}, then table pocl-cpu" in after.describe()["tuned_defaults"]

    monkeypatch.setenv("PORTKERN_NO_TUNE_CACHE", "1")
    assert OpenCLBackend(label).knob_in_force("env_vector_width", kernel).source == "table pocl-cpu"


@pytest.mark.parametrize("existing", [None, "{not json"], ids=["no-cache", "broken-cache"])
def test_portkern_tune_writes_the_machine_cache(tmp_path, monkeypatch, capsys, existing):
    from portkern import cli
    from portkern.portability import commands  # the report layer: imported by this test only

    run, cache = _recorded_tune_run(tmp_path), tmp_path / "cache.json"
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(cache))
    if existing is not None:
        cache.write_text(existing)

    def run_suite(json_path: Path, args, tune: bool):  # the recorded run stands in for the measurement
        assert tune
        shutil.copyfile(run, json_path)
        return 0, [], ""

    monkeypatch.setattr(commands, "run_suite", run_suite)
    with pytest.warns(RuntimeWarning) if existing else contextlib.nullcontext():
        assert cli.main(["tune", "--backend", "opencl", "--out", str(tmp_path / "out")]) == 0
    (key,) = json.loads(cache.read_text())["devices"]
    assert f"tuned defaults of {key} written to {cache}" in capsys.readouterr().out
    assert (tmp_path / "out" / "report.md").exists()  # a broken cache costs neither the cache nor the report



def test_portkern_tune_with_an_unwritable_cache_warns_and_still_reports(tmp_path, monkeypatch, capsys):
    from portkern import cli
    from portkern.portability import commands

    run = _recorded_tune_run(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache's folder would be")
    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(blocker / "cache.json"))

    def run_suite(json_path: Path, args, tune: bool):
        shutil.copyfile(run, json_path)
        return 0, [], ""

    monkeypatch.setattr(commands, "run_suite", run_suite)
    assert cli.main(["tune", "--backend", "opencl", "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "the tuned defaults were not written to the per-machine cache" in err and str(blocker) in err
    assert (tmp_path / "out" / "report.md").exists() and (tmp_path / "out" / "tuned.json").exists()
