"""Constructed ``portkern train`` files (schema portkern-train/1) with known wall times, steps and phases.

Not measurements: every figure is chosen so the tests can compute H, ratios, shares and factors by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CPU, POCL, INTEL, GPU = "box/cpu", "box/cpu/portable-computing-language", "box/cpu/intel-opencl", "box/gpu0"
DEVICES = {
    CPU: {"backend": "numpy", "device_key": CPU, "hardware_key": CPU, "device_label": "Test CPU", "kind": "cpu",
          "vendor": "AMD", "driver": "", "platform": "", "machine": "box"},
    POCL: {"backend": "opencl", "device_key": POCL, "hardware_key": CPU, "device_label": "Test CPU (PoCL)",
           "kind": "cpu", "vendor": "AMD", "driver": "3.0", "platform": "Portable Computing Language", "machine": "box"},
    INTEL: {"backend": "opencl", "device_key": INTEL, "hardware_key": CPU, "device_label": "Test CPU (Intel)",
            "kind": "cpu", "vendor": "AMD", "driver": "2026.1", "platform": "Intel(R) OpenCL", "machine": "box"},
    GPU: {"backend": "torch", "device_key": GPU, "hardware_key": GPU, "device_label": "Test GPU", "kind": "gpu",
          "vendor": "NVIDIA", "driver": "", "platform": "", "machine": "box"},
}  # fmt: skip
PHASES = {"setup": "setup", "act": "acting", "env": "environment stepping", "adv": "advantages", "update": "update",
          "move": "data movement", "other": "other"}  # fmt: skip
UPDATE_PARTS = {"gather": "minibatch gather", "normalize": "advantage normalisation"}
#: Phase shares of every run unless a run says otherwise (fractions of its wall time; untimed = the rest).
SHARES = {"setup": 0.01, "act": 0.20, "env": 0.30, "adv": 0.05, "update": 0.34, "move": 0.05, "other": 0.02}  # 97%
PARTS = {"gather": 0.04, "normalize": 0.01}
DEVICE_HOUR = "device-hours per converged policy = wall seconds of the run / 3600 (constructed test file)."


def run(task: str, stack: str, device: str, seed: int, wall: float, steps: int, converged: bool = True,
        stop: str | None = None, shares: dict[str, float] | None = None, parts: dict[str, float] | None = None,
        mode: str = "step", best: float = 500.0) -> dict[str, Any]:  # fmt: skip
    sh = {**SHARES, **(shares or {})}
    pt = {**PARTS, **(parts or {})}
    phases = {k: v * wall for k, v in sh.items()}
    return {
        "task": task, "stack": stack, "mode": mode, "backend": DEVICES[device]["backend"], "device_key": device,
        "hardware_key": DEVICES[device]["hardware_key"], "agent_device": "cpu", "seed": seed, "converged": converged,
        "stop_reason": "converged" if converged else (stop or "time budget"), "env_steps": steps,
        "steps_to_converge": steps if converged else None, "updates": steps // 2048, "wall_s": wall,
        "device_hours": wall / 3600 if converged else None, "steps_per_s": steps / wall,
        "final_return": best - 1.0, "episodes": 100, "phases": phases,
        "update_parts": {k: v * wall for k, v in pt.items()}, "untimed_s": wall - sum(phases.values()),
        "compile_s": 0.0, "losses": {"pg": 0.0, "v": 1.0, "entropy": 0.5, "approx_kl": 0.01}, "losses_finite": True,
        "curve": [[1, 2048, 1.0, best - 100.0], [2, 4096, 2.0, best], [3, 6144, 3.0, best - 1.0]],
    }  # fmt: skip


def task_config(env_id: str, target: float) -> dict[str, Any]:
    return {"env_id": env_id, "target": target, "total_timesteps": 10_000_000, "max_seconds": 9000.0, "default": True,
            "ppo": {"num_envs": 32, "num_steps": 64, "solve_window": 20, "lr": 0.001}, "version": 1, "doc": ""}


def runs() -> list[dict[str, Any]]:
    """CartPole-v1 on the CPU (numpy, opencl on PoCL, opencl@intel, torch never converging), on the GPU
    (torch@cuda), and Acrobot-v1 (numpy, opencl) on the CPU."""
    cp = "CartPole-v1"
    return [
        # numpy: H = 3600, 7200, 5400 s; env-steps/s 1000, 1200, 800; shares per seed (act keeps 97 % timed)
        run(cp, "numpy", CPU, 1, 3600.0, 3_600_000, shares={"act": 0.20, "env": 0.30, "adv": 0.05},
            parts={"gather": 0.04, "normalize": 0.01}),
        run(cp, "numpy", CPU, 2, 7200.0, 8_640_000, shares={"act": 0.13, "env": 0.40, "adv": 0.02},
            parts={"gather": 0.02, "normalize": 0.03}),
        run(cp, "numpy", CPU, 3, 5400.0, 4_320_000, shares={"act": 0.27, "env": 0.20, "adv": 0.08},
            parts={"gather": 0.06, "normalize": 0.02}),
        # opencl on PoCL: seeds 1 and 2 converge (2000 s, 3000 s); seed 3 hits the time budget. Steps/s 1500, 1800, 1600.
        run(cp, "opencl", POCL, 1, 2000.0, 3_000_000),
        run(cp, "opencl", POCL, 2, 3000.0, 5_400_000),
        run(cp, "opencl", POCL, 3, 2500.0, 4_000_000, converged=False, best=400.0),
        run(cp, "opencl@intel", INTEL, 1, 4000.0, 4_000_000),
        run(cp, "opencl@intel", INTEL, 2, 4000.0, 4_400_000),
        run(cp, "opencl@intel", INTEL, 3, 4000.0, 3_600_000),
        # torch never converges: best window mean 300.5
        *(run(cp, "torch", CPU, s, 9000.0, 2_700_000, converged=False, best=300.5, mode="resident") for s in (1, 2, 3)),
        # torch@cuda on the GPU: its own hardware group; seed 3 leaves 13 % of its wall time untimed (> 5 %)
        *(run(cp, "torch@cuda", GPU, s, 600.0 + 60 * s, 3_000_000, mode="resident",
              shares={"update": 0.34 if s < 3 else 0.24}) for s in (1, 2, 3)),
        run("Acrobot-v1", "numpy", CPU, 1, 1000.0, 500_000, shares={"act": 0.10, "env": 0.5, "adv": 0.1, "update": 0.19},
            parts={"gather": 0.05, "normalize": 0.05}),
        run("Acrobot-v1", "opencl", POCL, 1, 800.0, 600_000),
    ]  # fmt: skip


def doc(run_list: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    rs = runs() if run_list is None else run_list
    tasks = {"CartPole-v1": task_config("CartPole-v1", 475.0), "Acrobot-v1": task_config("Acrobot-v1", -100.0)}
    return {
        "schema": "portkern-train/1", "portkern_version": "0.1.0", "created": "2026-01-01T00:00:00+00:00",
        "command": "constructed by tests/train_docs.py",
        "config": {"source": "portkern/data/train_configs.json", "version": 1, "tasks": tasks},
        "device_hour": DEVICE_HOUR, "phases": PHASES, "update_parts": UPDATE_PARTS, "untimed_tolerance": 0.05,
        "host": {"machine": "box", "cpu": "Test CPU", "cores": 2, "python": "3.11", "torch": "2.3",
                 "load_avg": [0.1, 0.1, 0.1], "load_avg_end": [0.1, 0.1, 0.1]},
        "order": "seed-major", "prime_s": {"CartPole-v1": {"numpy": 0.5, "opencl": 1.5}},
        "devices": {k: v for k, v in DEVICES.items() if any(r["device_key"] == k for r in rs)}, "runs": rs,
    }  # fmt: skip


def write(path: Path, data: dict[str, Any] | None = None) -> Path:
    path.write_text(json.dumps(doc() if data is None else data, indent=1))
    return path


# ---- K seeds at once (--parallel-seeds): the check both batch stacks' tests make -------------------------
SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "portkern" / "data" / "train_configs.json"


def easy_config(tmp_path: Path, target: float = 10.0) -> Path:
    """The shipped training config with CartPole-v1's target lowered to one a random policy meets."""
    cfg = json.loads(SHIPPED_CONFIG.read_text())
    cfg["tasks"]["CartPole-v1"]["target"] = target
    path = tmp_path / "easy.json"
    path.write_text(json.dumps(cfg))
    return path


def check_batch_converged_at_update_1(doc: dict[str, Any], k: int, target: float = 10.0) -> None:
    """Every seed of a K-seed batch on :func:`easy_config` converged at update 1 and shares the batch's wall."""
    for r in doc["runs"]:
        assert r["converged"] and r["updates"] == 1 and r["steps_to_converge"] == 32 * 64
        assert r["device_seconds_per_policy"] == pytest.approx(r["wall_s"] / k, abs=1e-5)
        assert r["device_hours"] == pytest.approx(r["device_seconds_per_policy"] / 3600)
        assert len(r["curve"]) == 1 and r["curve"][0][3] >= target
        assert 0 < r["converged_at_s"] <= r["wall_s"]
