"""The rollout data paths in the suite and the report: cases, knobs, parity, GPU-hours, the Data paths section."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from portkern.backends import get_backend
from portkern.envs import ENVS
from portkern.portability import metrics, report, suite
from portkern.runs import Run, load_run

DATA = Path(__file__).parent / "data"
# pytest bench/test_rollout_paths.py bench/test_ceiling.py --pk-sizes=256 --pk-rollout-steps=16 --pk-machine=ci-vm
#   -k "CartPole or Pendulum or copy" --benchmark-json=FILE (NumPy, PoCL and Oclgrind; written without indents)
PATHS_RUN = DATA / "run-ci-vm-paths-tiny.json"
TUNE_RUN = DATA / "run-ci-vm-tune-tiny.json"  # has no rollout cases
CPU, SIM = "ci-vm/cpu", "ci-vm/oclgrind-simulator"


@pytest.fixture(scope="module")
def run() -> Run:
    return load_run(PATHS_RUN)


@pytest.fixture(scope="module")
def rep(run: Run) -> dict:
    return report.build(run)


def _row(rep: dict, backend: str, env: str, policy: str = "random") -> dict:
    return next(r for r in rep["data_paths"]["rows"] if (r["device"], r["backend"], r["env"], r["policy"]) ==
                (CPU, backend, env, policy))  # fmt: skip


def _best(run: Run, kernel: str, backend: str) -> float:
    return max(r.items_per_s for r in run.records if (r.kernel, r.backend, r.device_key) == (kernel, backend, CPU))


# ---- GPU-hours arithmetic -----------------------------------------------------------------------
def test_device_hours_per_billion_steps_hand_computed() -> None:
    # 1e9 steps at 2.5e8 steps/s take 4 s = 4/3600 h
    assert metrics.device_hours_per_billion_steps(2.5e8) == pytest.approx(4 / 3600)


def test_device_hours_is_none_without_a_throughput() -> None:
    assert metrics.device_hours_per_billion_steps(0.0) is None and metrics.device_hours_per_billion_steps(None) is None


def test_rollout_rates_add_env_steps_and_device_hours() -> None:
    prep = suite.Prepared(lambda: None, lambda: suite.Parity("pass"), items=1000, bytes=42000, unit="env steps",
                          info={"path": "fused"})  # fmt: skip
    rates = prep.rates(1e-3)
    assert rates["env_steps_per_s"] == pytest.approx(1e6)
    assert rates["device_hours_per_1e9_steps"] == pytest.approx(1e9 / 1e6 / 3600)


def test_report_device_hours_follow_from_the_measured_rate(rep: dict, run: Run) -> None:
    host = _row(rep, "opencl", "CartPole-v1")["paths"]["host"]
    assert host["steps_per_s"] == pytest.approx(_best(run, "rollout:CartPole-v1:host", "opencl"))
    assert host["device_hours_per_1e9_steps"] == pytest.approx(1e9 / host["steps_per_s"] / 3600)


# ---- the suite's rollout cases ------------------------------------------------------------------
def test_rollout_kernels_cover_every_env_and_path_and_the_cartpole_mlp() -> None:
    assert len(suite.ROLLOUT_KERNELS) == len(ENVS) * 3 + 3 and "rollout:CartPole-v1:fused:mlp" in suite.ROLLOUT_KERNELS
    assert suite.rollout_kernel("rollout:Acrobot-v1:device") == suite.RolloutKernel("Acrobot-v1", "device", "random")


def test_a_malformed_rollout_kernel_is_rejected() -> None:
    with pytest.raises(ValueError, match="rollout:<env>:<path>"):
        suite.rollout_kernel("rollout:CartPole-v1:gpu")


def test_steps_per_launch_is_a_fused_case_knob_up_to_t() -> None:
    b = get_backend("numpy")
    assert suite.knobs("rollout:CartPole-v1:fused", b, steps=16) == {"steps_per_launch": (1, 8, 16)}
    assert suite.current_config("rollout:CartPole-v1:fused", b, steps=16) == {"steps_per_launch": 16}
    assert suite.knobs("rollout:CartPole-v1:host", b, steps=16) == {}


def test_case_knobs_are_not_set_on_the_backend() -> None:
    b = get_backend("numpy")
    with suite.applied(b, {"steps_per_launch": 8}):
        assert not hasattr(b, "steps_per_launch")


@pytest.mark.parametrize("kernel", ["rollout:CartPole-v1:fused", "rollout:Acrobot-v1:device",
                                    "rollout:Pendulum-v1:host", "rollout:CartPole-v1:fused:mlp"])  # fmt: skip
def test_numpy_rollout_case_passes_parity_and_times(kernel: str) -> None:
    prep = suite.prepare(get_backend("numpy"), kernel, 16, {"steps_per_launch": 3} if "fused" in kernel else None, 6)
    assert prep.check().status == "pass"
    prep.run()
    assert (prep.items, prep.info["T"], prep.info["N"]) == (96, 6, 16)


def test_fused_steps_per_launch_is_recorded() -> None:
    prep = suite.prepare(get_backend("numpy"), "rollout:CartPole-v1:fused", 4, {"steps_per_launch": 3}, 6)
    assert prep.info == {"env": "CartPole-v1", "path": "fused", "policy": "random", "T": 6, "N": 4,
                         "steps_per_launch": 3}  # fmt: skip


# ---- parity of a path against the host path -------------------------------------------------------
def _buffer(steps: int = 4, n: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    return {"obs": g.normal(size=(steps, n, 4)).astype(np.float32), "actions": g.integers(0, 2, (steps, n)).astype(np.int32),
            "rewards": np.ones((steps, n), np.float32), "terminated": np.zeros((steps, n), bool),
            "truncated": np.zeros((steps, n), bool), "final_obs": g.normal(size=(steps, n, 4)).astype(np.float32)}  # fmt: skip


def test_random_policy_paths_must_match_bit_for_bit() -> None:
    want = _buffer()
    got = {k: v.copy() for k, v in want.items()}
    got["obs"][2, 5, 1] = np.nextafter(got["obs"][2, 5, 1], np.float32(np.inf))
    parity = suite._compare_paths(got, want, discrete=True, exact=True)
    assert parity.status == "fail" and "obs: 1 of" in parity.reason


def test_mlp_action_flip_within_rounding_ends_that_envs_comparison() -> None:
    want = _buffer()
    got = {k: v.copy() for k, v in want.items()}
    got["actions"][1, 7] ^= 1  # env 7 flips at step 1 and diverges from there
    got["obs"][2:, 7] += 1.0
    got["rewards"][1:, 7] = 0.0
    parity = suite._compare_paths(got, want, discrete=True, exact=False)
    assert parity.status == "pass" and "1 of 1000 envs flip" in parity.reason


def test_mlp_flips_beyond_rounding_fail() -> None:
    want = _buffer()
    got = {k: v.copy() for k, v in want.items()}
    got["actions"][0, :10] ^= 1
    assert suite._compare_paths(got, want, discrete=True, exact=False).status == "fail"


@pytest.mark.parametrize(("step", "error", "drift", "status"), [
    (5, 5e-5, False, "fail"),  # rounding drift over many steps: beyond RTOL/ATOL
    (5, 5e-5, True, "pass"),   # a backend whose paths agree to rounding: within the drift bound after PARITY_STEPS
    (1, 5e-5, True, "fail"),   # but not in the first steps from the reset
    (5, 0.05, True, "fail"),   # and never an error the size of a wrong step
])  # fmt: skip
def test_rounding_drift_is_allowed_only_after_the_first_steps_and_only_small(step, error, drift, status) -> None:
    want = _buffer(steps=8)
    got = {k: v.copy() for k, v in want.items()}
    got["obs"][step, 3, 0] = np.float32(0.01)
    want["obs"][step, 3, 0] = np.float32(0.01 + error)
    parity = suite._compare_paths(got, want, discrete=False, exact=False, drift=drift)
    assert parity.status == status, parity


def _chaotic(steps: int = 12, n: int = 1000, env: int = 3, growth: float = 10.0, start: float = 1e-7):
    """An env whose error grows by ``growth`` per step from ``start`` (amplified rounding), the rest equal."""
    want = _buffer(steps=steps, n=n)
    want["obs"][:, env, 0] = np.float32(0.5)
    got = {k: v.copy() for k, v in want.items()}
    got["obs"][:, env, 0] = (0.5 + start * growth ** np.arange(steps)).astype(np.float32)
    return got, want


def test_amplified_rounding_ends_that_envs_comparison_where_it_leaves_the_drift_bound() -> None:
    got, want = _chaotic()  # 1e-7 * 10^t: 1e-4 at step 3, 1e-3 at 4, 1e-2 at 5 (> the bound) and on
    got["rewards"][6:, 3] = 0.0  # a diverged trajectory may differ in anything from there
    parity = suite._compare_paths(got, want, discrete=False, exact=False, drift=True)
    assert parity.status == "pass", parity
    assert "1 of 1000 envs diverge by amplified rounding from step 5" in parity.reason


def test_divergence_is_not_cut_without_drift_or_before_the_parity_steps() -> None:
    got, want = _chaotic()
    assert suite._compare_paths(got, want, discrete=False, exact=False, drift=False).status == "fail"
    got, want = _chaotic(growth=1e3, start=1e-5)  # out of the bound at step 1: inside the strict first steps
    assert suite._compare_paths(got, want, discrete=False, exact=False, drift=True).status == "fail"


def test_an_error_that_jumps_out_of_the_drift_bound_fails() -> None:
    got, want = _chaotic()
    got["obs"][:, 3, 0] = np.float32(0.5) + np.float32([0, 0, 0, 1e-6, 1e-6, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05])
    parity = suite._compare_paths(got, want, discrete=False, exact=False, drift=True)
    assert parity.status == "fail" and "after step" in parity.reason, parity


# ---- the report's Data paths section -------------------------------------------------------------
def test_fused_and_device_factors_against_host_hand_computed(rep: dict, run: Run) -> None:
    row = _row(rep, "opencl", "CartPole-v1")
    host = _best(run, "rollout:CartPole-v1:host", "opencl")
    assert row["fused_vs_host"] == pytest.approx(_best(run, "rollout:CartPole-v1:fused", "opencl") / host)
    assert row["device_vs_host"] == pytest.approx(_best(run, "rollout:CartPole-v1:device", "opencl") / host)
    assert (row["N"], row["T"]) == (256, 16)


def test_mlp_rows_are_separate_from_random_ones(rep: dict) -> None:
    assert {(r["backend"], r["env"], r["policy"]) for r in rep["data_paths"]["rows"]} == {
        (b, e, p) for b in ("opencl", "numpy") for e, p in
        (("CartPole-v1", "random"), ("CartPole-v1", "mlp"), ("Pendulum-v1", "random"))}  # fmt: skip


def test_stack_spread_is_fastest_over_slowest_on_the_device(rep: dict) -> None:
    s = next(x for x in rep["data_paths"]["spread"] if (x["env"], x["policy"]) == ("CartPole-v1", "random"))
    rates = [v["steps_per_s"] for r in rep["data_paths"]["rows"] if (r["env"], r["policy"]) == ("CartPole-v1", "random")
             for v in r["paths"].values()]  # fmt: skip
    assert s["factor"] == pytest.approx(max(rates) / min(rates))


def test_simulator_rollouts_are_functional_only(rep: dict) -> None:
    assert rep["functional"][f"opencl@{SIM}"]["kernels"]["rollout:CartPole-v1"]["status"] == "pass"
    assert not any(r["device"] == SIM for r in rep["data_paths"]["rows"])


def test_functional_matrix_counts_one_rollout_kernel_per_env(rep: dict) -> None:
    assert [k for k in rep["functional_kernels"] if k.startswith("rollout")] == ["rollout:CartPole-v1",
                                                                                 "rollout:Pendulum-v1"]
    assert rep["functional"][f"opencl@{CPU}"]["share"] == 1.0


def test_each_path_is_its_own_kernel_in_the_efficiency_tables(rep: dict) -> None:
    rows = [r for r in rep["efficiency"] if r["kernel"] == "rollout:CartPole-v1:fused" and r["device"] == CPU]
    assert {r["backend"] for r in rows} == {"opencl", "numpy"} and max(r["app_eff"] for r in rows) == 1.0


def test_a_failing_path_fails_its_envs_rollout_kernel(run: Run) -> None:
    recs = [dataclasses.replace(r, status="fail", max_error=0.5, reason="obs: 3 of 4096 values differ")
            if (r.kernel, r.backend, r.device_key) == ("rollout:CartPole-v1:fused:mlp", "opencl", CPU) else r
            for r in run.records]  # fmt: skip
    rep = report.build(dataclasses.replace(run, records=recs))
    cell = rep["functional"][f"opencl@{CPU}"]["kernels"]["rollout:CartPole-v1"]
    assert cell["status"] == "fail" and cell["reason"].startswith("rollout:CartPole-v1:fused:mlp")
    mlp = _row(rep, "opencl", "CartPole-v1", "mlp")
    assert mlp["paths"]["fused"]["status"] == "fail" and mlp["fused_vs_host"] is None
    assert _row(rep, "opencl", "CartPole-v1")["fused_vs_host"] is not None  # the random policy's paths still count


def test_markdown_has_the_data_paths_table_and_definitions(rep: dict) -> None:
    md = report.markdown(rep)
    assert "## Data paths" in md and "| fused / host | device / host |" in md and "**data paths**" in md
    assert f"| {CPU} | opencl | CartPole-v1 | random | 256 x 16 |" in md


def test_write_draws_the_data_paths_plot(tmp_path: Path) -> None:
    rep = report.write([str(PATHS_RUN)], tmp_path)
    assert (tmp_path / "data-paths.png").stat().st_size > 10_000
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["data_paths"]["rows"][0]["paths"]["fused"]["device_hours_per_1e9_steps"] == pytest.approx(
        rep["data_paths"]["rows"][0]["paths"]["fused"]["device_hours_per_1e9_steps"])


def test_a_run_without_rollouts_says_so_and_draws_no_data_paths_plot(tmp_path: Path) -> None:
    rep = report.write([str(TUNE_RUN)], tmp_path)
    assert rep["data_paths"] == {"rows": [], "spread": []} and not (tmp_path / "data-paths.png").exists()
    assert "No rollout cases in these runs" in (tmp_path / "report.md").read_text()


def test_rollout_kernels_can_be_workload_phases() -> None:
    assert report.parse_mix("loop=rollout:CartPole-v1:fused:0.7,gae:0.3") == {
        "loop": {"rollout:CartPole-v1:fused": 0.7, "gae": 0.3}}


@pytest.mark.parametrize("name", ["numpy", "torch", "jax", "opencl"])
def test_stagger_episodes_spreads_the_truncations_over_the_launches(name):
    """From a reset every MountainCar env truncates on step 200 at once (no push never reaches the goal); staggered,
    each env truncates once in any 200 launches and no launch resets more than a few of them."""
    from portkern.portability.suite.rollouts import make_env, reset_staggered

    b = get_backend(name)
    n = 2000
    env = make_env("MountainCar-v0", n, backend=b, seed=3)
    reset_staggered(env)
    counts = np.asarray(b.to_host(env._bufs.steps))
    assert counts.dtype == np.int32 and counts.min() >= 0 and counts.max() < 200 and len(np.unique(counts)) > 150
    idle = b.from_host(np.ones(n, np.int32))
    per_launch = [int(np.asarray(b.to_host(env.step(idle)[3])).sum()) for _ in range(200)]
    assert sum(per_launch) == n and max(per_launch) <= 40, per_launch


@pytest.mark.parametrize("kernel", ["step:MountainCar-v0", "rollout:MountainCar-v0:fused", "rollout:Pendulum-v1:device"])
def test_suite_cases_time_staggered_episodes_and_still_pass_parity(kernel, monkeypatch):
    from portkern.portability.suite import cases, rollouts

    staggered = []
    real = rollouts.reset_staggered
    spy = lambda env: staggered.append(env) or real(env)
    monkeypatch.setattr(cases, "reset_staggered", spy)
    monkeypatch.setattr(rollouts, "reset_staggered", spy)
    prep = suite.prepare(get_backend("numpy"), kernel, 64, None, 8)
    assert len(staggered) == 1
    steps = staggered[0]._bufs.steps
    assert len(np.unique(steps)) > 32  # spread, not the reset's zeros
    assert prep.check().status == "pass"
    assert len(staggered) == 2 and len(np.unique(staggered[1]._bufs.steps)) > 32  # staggered again after the check
    prep.run()
