"""portkern train --ray: a local 2-worker Ray cluster, one run per core block, a worker killed mid-run."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import threading
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")

from portkern.cli import main  # noqa: E402
from portkern.journal import journal_path  # noqa: E402
from portkern.train import config, runner  # noqa: E402
from portkern.train.ray_grid import RayGrid, needs_gpu  # noqa: E402
from portkern.train.stacks import parse_stack  # noqa: E402


@pytest.mark.parametrize("text, gpu", [("numpy", False), ("opencl@pocl", False), ("opencl+fused@intel", False),
                                       ("torch", False), ("torch@cuda", True), ("opencl@nvidia", True),
                                       ("cupy", True)])  # fmt: skip
def test_gpu_runs_are_told_apart_from_cpu_runs(text: str, gpu: bool) -> None:
    assert needs_gpu(parse_stack(text)) is gpu


def test_bad_cores_per_run(tmp_path: Path, capsys) -> None:
    pytest.importorskip("ray")
    assert main(["train", "--stack", "numpy", "--ray", "--cores-per-run", "0", "--out", str(tmp_path / "o.json")]) == 2
    assert "--cores-per-run: expected an integer >= 1, got 0" in capsys.readouterr().err


def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@pytest.mark.slow  # a local Ray cluster: about a minute
def test_two_workers_one_killed_mid_run_the_grid_completes(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray", reason="the Ray grid needs Ray: pip install 'portkern[ray]'")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two disjoint one-core workers need two cores")
    task = config.task("CartPole-v1", total_timesteps=3 * config.task("CartPole-v1").ppo.batch_size)
    spec = parse_stack("numpy+eager-update")  # the grid, not the update: skip compiling it in each worker
    killed: list[dict] = []

    def kill_the_first_worker(label: str, worker: dict) -> None:
        if not killed:  # mid-run: after its run was handed over, before 3 updates can finish
            killed.append({"label": label, **worker})
            threading.Timer(0.3, os.kill, (worker["pid"], signal.SIGKILL)).start()

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        out = tmp_path / "ray.json"
        doc = runner.train_many([task], [spec], [1, 2, 3], out, "test", progress=False,
                                grid=RayGrid(None, 1, [spec], on_dispatch=kill_the_first_worker))  # fmt: skip
    finally:
        ray.shutdown()
    assert killed, "no run was dispatched"
    assert json.loads(out.read_text()) == doc and not journal_path(out).exists()
    assert [r["seed"] for r in doc["runs"]] == [1, 2, 3] and doc["failed"] == []  # complete, in plan order
    assert all(r["updates"] == 3 and r["losses_finite"] for r in doc["runs"])
    schedule = [r["schedule"] for r in doc["runs"]]
    assert killed[0]["worker"] not in {s["worker"] for s in schedule}  # its run was retried elsewhere
    retried = next(r for r in doc["runs"] if f"seed {r['seed']}" in killed[0]["label"])["schedule"]["attempts"]
    assert len(retried) == 1 and retried[0]["worker"] == killed[0]["worker"] and "died" in retried[0]["reason"]
    assert sum(len(s["attempts"]) for s in schedule) == 1
    assert all(len(s["cores"]) == 1 for s in schedule) and {c for s in schedule for c in s["cores"]} <= set(
        os.sched_getaffinity(0))
    # Runs that overlapped in time ran on disjoint cores.
    for i, a in enumerate(schedule):
        for b in schedule[i + 1:]:
            if _t(a["start"]) < _t(b["end"]) and _t(b["start"]) < _t(a["end"]):
                assert not set(a["cores"]) & set(b["cores"]), (a, b)
    assert doc["unit"].startswith("1 CPU core(s) reserved by one run at a time")
    assert set(doc["prime_s"]["CartPole-v1"]) == {"numpy"}
