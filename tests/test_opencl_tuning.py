"""Defaults of the OpenCL tuning knobs come from measurements: the per-machine cache, then the shipped
table, then a documented fallback; never from what the driver advertises."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from portkern import tuning
from portkern.backends import probe

_PROBE = probe("opencl")
pytestmark = pytest.mark.skipif(not _PROBE.available, reason=f"opencl: {_PROBE.reason}")
if _PROBE.available:
    from portkern.backends import opencl as ocl_mod
    from portkern.backends.opencl import OpenCLBackend

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


def test_a_tune_run_writes_the_machine_cache(tmp_path, monkeypatch):
    run = json.loads((DATA / "run-ci-vm-tune-tiny.json").read_text())
    for d in run["machine_info"]["portkern"]["devices"]:
        d["platform"] = d["device"].split(": ")[0] if ": " in d["device"] else ""
    path = tmp_path / "results.json"
    path.write_text(json.dumps(run))
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


def test_a_broken_cache_is_reported_not_fatal(isolated):
    Path(tuning.cache_path()).write_text("{not json")
    be = OpenCLBackend(_any_cpu())
    assert _vw(be, "step:CartPole-v1", "step") == ocl_mod._FALLBACK_CPU_VW
    assert "not a readable" in be.describe()["tuned_defaults"]
