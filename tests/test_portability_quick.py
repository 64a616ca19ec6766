"""The quick run's case selection: which cases repeat another and are left out, and that the results say so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from portkern.portability import report, suite
from portkern.portability.bench_run import run_pytest
from portkern.backends import get_backend
from portkern.envs import ENVS
from portkern.policy import MLPPolicy, RandomPolicy
from portkern.runs import load_run
from portkern.step import make


@pytest.mark.parametrize("backend", sorted(suite.DEVICE_PATH_IS_FUSED))
def test_device_path_of_a_backend_without_launches_repeats_its_fused_path(backend: str) -> None:
    assert suite.quick_left_out(backend, "rollout:CartPole-v1:device", False) == "rollout:CartPole-v1:fused"
    assert suite.quick_left_out(backend, "rollout:CartPole-v1:device:mlp", False) == "rollout:CartPole-v1:fused:mlp"
    for kept in ("rollout:CartPole-v1:fused", "rollout:CartPole-v1:host", "step:CartPole-v1", "gae", "copy"):
        assert suite.quick_left_out(backend, kept, False) is None


def test_a_launching_backend_keeps_every_path() -> None:
    # OpenCL runs one launch per step on the device path and ceil(T / steps_per_launch) on the fused one.
    for path in ("host", "device", "fused"):
        assert suite.quick_left_out("opencl", f"rollout:Pendulum-v1:{path}", False) is None


def test_a_simulator_keeps_its_kernels_and_leaves_out_the_paths_that_repeat_them() -> None:
    assert suite.quick_left_out("opencl", "rollout:Acrobot-v1:host", True) == "step:Acrobot-v1"
    assert suite.quick_left_out("cuda_host", "rollout:CartPole-v1:host:mlp", True) == "step:CartPole-v1"
    assert suite.quick_left_out("opencl", "rollout:Acrobot-v1:device", True) == "rollout:Acrobot-v1:fused"
    for kept in ("rollout:Acrobot-v1:fused", "step:Acrobot-v1", "normalize"):
        assert suite.quick_left_out("cuda_host", kept, True) is None


def test_a_malformed_rollout_kernel_is_still_rejected() -> None:
    with pytest.raises(ValueError, match="kernel: expected rollout"):
        suite.quick_left_out("numpy", "rollout:CartPole-v1:sideways", False)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("mlp", [False, True])
def test_device_and_fused_paths_agree_bit_for_bit_where_they_are_one_code(backend: str, mlp: bool) -> None:
    # The premise of leaving the device case out: on these backends steps_per_launch changes nothing.
    pytest.importorskip(backend)
    policy = MLPPolicy.init(ENVS["CartPole-v1"], hidden=8, seed=1) if mlp else RandomPolicy()
    bufs = []
    for path in ("device", "fused"):
        env = make("CartPole-v1", 64, backend=backend, seed=3)
        env.reset()
        buf = env.rollout(40, policy, path=path)  # past CartPole's first terminations: autoreset included
        bufs.append({f: np.array(env.backend.to_host(getattr(buf, f))) for f in suite.FIELDS})
    for f in suite.FIELDS:
        assert np.array_equal(bufs[0][f], bufs[1][f]), f


TINY = ["--pk-backend=numpy", "--pk-kernels=rollout:CartPole-v1", "--pk-sizes=32", "--pk-rounds=2", "--pk-slot-ms=1",
        "--pk-group-s=0.05", "--pk-visits=1", "--pk-rollout-steps=2", "--pk-no-simulators"]  # fmt: skip


def _run(tmp_path: Path, cases: str) -> Path:
    path = tmp_path / f"{cases}.json"
    code, failed, out = run_pytest(path, [*TINY, f"--pk-cases={cases}"], progress=False)
    assert code == 0 and not failed, out[-2000:]
    return path


def test_a_quick_selection_lists_each_case_it_left_out_and_times_the_rest(tmp_path: Path) -> None:
    path = _run(tmp_path, "quick")
    pk = json.loads(path.read_text())["portkern"]
    ran = {c["kernel"] for c in pk["cases"]}
    assert "rollout:CartPole-v1:device" not in ran and "rollout:CartPole-v1:device:mlp" not in ran
    assert {"rollout:CartPole-v1:host", "rollout:CartPole-v1:fused", "rollout:CartPole-v1:fused:mlp"} <= ran
    assert pk["left_out"]["cases"] == "quick"
    left = {(c["kernel"], c["backend"], c["repeats"]) for c in pk["left_out"]["left_out"]}
    assert left == {("rollout:CartPole-v1:device", "numpy", "rollout:CartPole-v1:fused"),
                    ("rollout:CartPole-v1:device:mlp", "numpy", "rollout:CartPole-v1:fused:mlp")}  # fmt: skip
    assert all(c["status"] == "pass" and c["rounds"] >= 2 for c in pk["cases"])
    md = report.markdown(report.build(load_run(path)))  # the report says so where its figures are read
    assert f"**A subset.** {path} left out 2 case(s) that repeat another" in md
    assert "the device path on numpy;" in md


@pytest.mark.slow  # a second bench run; the quick selection's own test above is the fast one
def test_all_cases_leave_nothing_out(tmp_path: Path) -> None:
    path = _run(tmp_path, "all")
    pk = json.loads(path.read_text())["portkern"]
    assert pk["left_out"] == {"cases": "all", "left_out": []}
    assert {"rollout:CartPole-v1:device", "rollout:CartPole-v1:device:mlp"} <= {c["kernel"] for c in pk["cases"]}
    assert "A subset." not in report.markdown(report.build(load_run(path)))


@pytest.mark.parametrize("env_id", sorted(ENVS))
def test_every_envs_step_case_passes_parity_on_numpy(env_id: str) -> None:
    # Each env's actions in its own shape: [N] for a 1-wide Box or discrete actions, [N, action_dim] otherwise.
    prep = suite.prepare(get_backend("numpy"), f"step:{env_id}", 16)
    prep.run()
    assert prep.check().status == "pass"
