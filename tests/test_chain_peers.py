"""bench/cpu/chain_peers.py at tiny sizes (its --quick mode, in a subprocess as a user runs it): every row
does the same job, the JSON has the structure the report reads, and the cross-check holds (portkern's NumPy
float64 state after T steps is mujoco.rollout's to 1e-7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "cpu" / "chain_peers.py"
PEERS = ("mujoco.rollout", "mujoco.rollout@1t")
NUMPY_ROWS = ("portkern:numpy:float32", "portkern:numpy:float64")


def _run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "chain_peers.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, str(SCRIPT), "--quick", "--out", str(out), *args]
    res = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(out.read_text())


def _check_result(r: dict, repeats: int) -> None:
    """The timed rows' rates, intervals, cross-check and verdicts, for one size."""
    ok = [name for name, row in r["rows"].items() if row["status"] == "ok"]
    assert r["items"] == r["num_envs"] * r["steps"]
    for basis in ("wall", "cpu"):
        assert set(r[f"items_per_s_{basis}"]) == set(ok)
        for name in ok:
            v = r[f"items_per_s_{basis}"][name]
            assert 0 < v["min"] <= v["median"] <= v["max"]
            assert len(r["seconds"][name][basis]) == repeats
    assert set(r["cross_check"]) == set(ok)
    check = r["cross_check"]
    # The same library on one thread and on its pool: the same floats.
    assert check["mujoco.rollout@1t"]["max_abs_qpos"] == check["mujoco.rollout@1t"]["max_abs_qvel"] == 0.0
    assert check["portkern:numpy:float64"]["max_abs_qpos"] <= 1e-7
    assert check["portkern:numpy:float64"]["max_abs_qvel"] <= 1e-7
    # float32 rows after 3 steps near rest: rounding-sized differences, not another trajectory.
    for name in ok:
        if check[name]["dtype"] == "float32":
            assert check[name]["max_abs_qpos"] < 1e-4, (name, check[name])
            assert check[name]["max_abs_qvel"] < 1e-3, (name, check[name])
    peers = [name for name in ok if r["rows"][name]["peer"]]
    ours = [name for name in ok if not r["rows"][name]["peer"]]
    assert set(r["verdict"]) == set(ours)
    for name in ours:
        for basis in ("wall", "cpu"):
            v = r["verdict"][name][basis]
            fastest = max(peers, key=lambda p: r[f"items_per_s_{basis}"][p]["median"])
            assert v["fastest_peer"] == v["against"] == fastest
            want = r[f"items_per_s_{basis}"][name]["median"] / r[f"items_per_s_{basis}"][fastest]["median"]
            assert v["ratio_of_medians"] == pytest.approx(want)
            assert v["per_round_ratio"]["min"] <= v["per_round_ratio"]["max"]
            assert v["result"] in ("above", "below", "within noise")


def test_quick_run_rollout_and_numpy_rows_and_a_driver_that_cannot_be_made(tmp_path):
    """The fast path: MuJoCo's rollout rows and portkern on NumPy; an OpenCL driver that does not exist is
    reported as a skipped row, and the run goes on."""
    d = _run(tmp_path, "--no-mjx", "--devices", "nosuchdriver", "--sizes", "32x3,16x4")
    assert [(r["num_envs"], r["links"], r["steps"]) for r in d["results"]] == [(32, 3, 3), (16, 4, 3)]
    for r in d["results"]:
        assert {n for n, row in r["rows"].items() if row["status"] == "ok"} == {*PEERS, *NUMPY_ROWS}
        for dtype in ("float32", "float64"):
            status = r["rows"][f"portkern:opencl:nosuchdriver:{dtype}"]["status"]
            assert status.startswith("skipped: ") and "nosuchdriver" in status
        assert r["rows"]["mujoco.rollout"]["dtype"] == "float64"
        assert r["mjx_compile_s"] is None and r["mjx_path"] is None
        _check_result(r, repeats=2)
    assert d["machine"]["peers"]["mujoco"] and d["machine"]["rollout_threads"] >= 1
    assert d["settings"]["steps"] == 3 and d["settings"]["quick"] is True


@pytest.mark.slow  # MJX's compilation (tens of seconds on 2 cores) and the OpenCL kernels' builds
def test_quick_run_with_mjx_and_opencl(tmp_path):
    try:
        from mujoco import mjx  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"mujoco-mjx is not importable ({exc}): pip install 'portkern[mjx]'")
    d = _run(tmp_path)
    (r,) = d["results"]
    mjx_row = r["rows"]["mjx"]
    assert mjx_row == {"status": "ok", "dtype": "float32", "peer": True}
    assert r["mjx_compile_s"] > 0 and d["machine"]["peers"]["mjx_dtype"] == "float32"
    # The default MJX path: one vmap, MJX's sparse mass-matrix factorisation, XLA's fusion emitters off.
    assert r["mjx_path"]["batching"] == "vmap" and r["mjx_path"]["jacobian"] == "sparse"
    assert r["mjx_path"]["xla_cpu_use_fusion_emitters"] is False
    # Every OpenCL row ran or says why not (the env's kernel missing, no such driver): never a crash.
    for dev in ("pocl", "intel"):
        for dtype in ("float32", "float64"):
            status = r["rows"][f"portkern:opencl:{dev}:{dtype}"]["status"]
            assert status == "ok" or status.startswith("skipped: ")
    _check_result(r, repeats=2)


def _chain_peers():
    """The script as a module (its ``_common`` import needs bench/cpu on the path)."""
    import importlib

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        return importlib.import_module("chain_peers")
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_sizes_take_an_optional_per_size_step_count():
    cp = _chain_peers()
    assert cp.parse_sizes("4096x3,65536x10x4", None) == [(4096, 3, None), (65536, 10, 4)]
    assert cp.parse_sizes("64X3x2,32x4", 5) == [(64, 3, 2), (32, 4, 5)]
    for bad in ("4096", "4096x1", "4096x3x0", f"4096x3x{cp.MAX_STEPS + 1}", "0x3", "4096x3x2x1", "ax3"):
        with pytest.raises(ValueError, match="--sizes"):
            cp.parse_sizes(bad, None)


def test_cli_rejects_an_mjx_chunk_that_does_not_divide_n(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, str(SCRIPT), "--quick", "--sizes", "64x3", "--mjx-chunk", "48",
           "--out", str(tmp_path / "x.json")]  # fmt: skip
    res = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "--mjx-chunk" in res.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow  # three MJX compilations at K = 3 (about 10 s each on 2 cores)
def test_mjx_paths_agree_chunked_or_not_sparse_or_dense():
    """MJX's sparse factorisation and its default (LAPACK) path, one vmap or lax.map over chunks: the same
    job, float32 rounding apart, and each near mujoco.rollout's float64 state."""
    try:
        from mujoco import mjx  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"mujoco-mjx is not importable ({exc}): pip install 'portkern[mjx]'")
    import mujoco
    import numpy as np

    from portkern.envs.chain import mjcf

    cp = _chain_peers()
    n, k, t = 16, 3, 3
    model = mujoco.MjModel.from_xml_string(mjcf(k))
    start = cp.start_states(n, k)
    controls = np.random.default_rng(0).uniform(-1.0, 1.0, (t, n, k)).astype(np.float32)
    ref = cp.RolloutRow(model, start, 0)
    ref.load(controls)
    ref.run()
    want = ref.final()
    finals = {}
    for path in (
        {"jacobian": "sparse"},
        {"jacobian": "sparse", "chunk": 4},
        {"jacobian": "auto", "chunk": 8},
    ):
        row = cp.MjxRow(model, start, **path)
        row.load(controls)
        row.run()
        got = row.final()
        assert got.shape == want.shape
        np.testing.assert_allclose(got[:, :k], want[:, :k], atol=1e-4)
        np.testing.assert_allclose(got[:, k:], want[:, k:], atol=1e-3)
        assert row.compile_s > 0
        assert row.path()["batching"] == (f"lax.map(batch_size={path['chunk']}) of vmap" if "chunk" in path
                                          else "vmap")  # fmt: skip
        finals[str(path)] = got
    a, b, c = finals.values()
    np.testing.assert_array_equal(a, b)  # chunking only reorders the batch: the same floats per env
    np.testing.assert_allclose(a, c, atol=1e-4)
    with pytest.raises(ValueError, match="chunk"):
        cp.MjxRow(model, start, chunk=5)  # 16 envs do not split into chunks of 5
