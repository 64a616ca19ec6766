"""Writes the synthetic runs the report tests read (schema portkern-bench/2, with interleaved rounds). Not measurements.

* synthetic-h200-run.json: a made-up "other machine" (NVIDIA H200) with CuPy on the bare GPU and OpenCL
  on its NVIDIA CUDA platform. Throughputs follow the shape of shared/device/README.md's figures;
  OpenCL's normalize fails parity and one OpenCL gather configuration is illegal.
* synthetic-xeon-two-drivers-run.json: one CPU under two OpenCL platforms (PoCL and Intel's runtime)
  with NumPy and torch on the bare host CPU, so the report must show two devices, each with NumPy and
  torch beside it; torch and NumPy tie on gae (within noise), and the rollouts' three paths are
  one interleaved group.

Rounds: every case of one group shares a drift factor per round (a shared machine's load, up to
about 2x) and has its own 1 % jitter; each case's factors are scaled so that its median throughput
is exactly the nominal one (hand-computed ratios stay exact), while paired per-round ratios show
only the jitter. Run: python tests/data/make_synthetic_run.py (from the repository root).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROUNDS = 15
HERE = Path(__file__).parent
_drifts: dict[str, np.ndarray] = {}
_rng = np.random.default_rng(7)


def round_seconds(group: str, seconds: float, jitter: float = 0.01) -> list[float]:
    if group not in _drifts:
        _drifts[group] = np.exp(_rng.normal(0.0, 0.3, ROUNDS))
    f = _drifts[group] * np.exp(_rng.normal(0.0, jitter, ROUNDS))
    return [float(x) for x in seconds * f / np.median(f)]


class Run:
    def __init__(self, machine: str) -> None:
        self.machine, self.cases, self.benchmarks, self.devices = machine, [], [], []

    def device(self, backend: str, name: str, key: str, hw: str, label: str, kind: str, vendor: str,
               platform: str = "", stack: str = "custom kernels") -> dict:  # fmt: skip
        d = {"backend": backend, "device": name, "device_key": key, "hardware_key": hw, "device_label": label,
             "kind": kind, "vendor": vendor, "driver": "synthetic", "platform": platform, "machine": self.machine,
             "timed": True, "stack_class": stack, "versions": {}}  # fmt: skip
        self.devices.append(d)
        return d

    def add(self, dev: dict, kernel: str, config: dict, status: str, rate: float | None, size: int, bpi: float,
            max_error: float | None = 0.0, reason: str = "", stack: str | None = None,
            items: int | None = None) -> None:  # fmt: skip
        items = items or size
        cid = f"synthetic::{kernel}[{dev['backend']}-{dev['device_key']}-n{size}-{json.dumps(config, sort_keys=True)}]"
        rec = {"case_id": cid, "kernel": kernel, "backend": dev["backend"], "device": dev["device"], "size": size,
               "simulator": False, **{k: dev[k] for k in ("device_key", "hardware_key", "device_label", "kind",
                                                          "vendor", "machine", "platform", "timed")},
               "stack_class": stack or dev["stack_class"], "config": config, "status": status,
               "max_error": max_error, "reason": reason}  # fmt: skip
        if rate:
            group = f"{kernel.rsplit(':', 1)[0] if kernel.startswith('rollout:') else kernel}@{dev['hardware_key']}-n{size}"
            secs = round_seconds(group, items / rate)
            rec.update(items=items, bytes=int(items * bpi), unit="items", round_group=group, rounds=ROUNDS,
                       round_reps=1, round_s=secs, rate_basis="median of interleaved rounds")  # fmt: skip
            self.benchmarks.append({"name": cid, "fullname": cid, "group": kernel, "extra_info": dict(rec),
                                    "stats": {"min": min(secs), "median": float(np.median(secs)), "rounds": ROUNDS}})
        self.cases.append(rec)

    def write(self, name: str, backends: list[dict]) -> None:
        run = {
            "machine_info": {"node": self.machine, "portkern": {
                "schema": "portkern-bench/2", "portkern": "0.1.0", "machine": self.machine, "synthetic": True,
                "devices": self.devices, "backends": backends}},
            "commit_info": {}, "benchmarks": self.benchmarks, "datetime": "2026-11-30T00:00:00+00:00",
            "version": "5.3.1",
            "portkern": {"schema": "portkern-bench/2", "portkern": "0.1.0", "machine": self.machine,
                         "sizes": "synthetic", "tune": True, "synthetic": True,
                         "timing": {"method": "synthetic", "rounds": ROUNDS}, "cases": self.cases},
        }  # fmt: skip
        (HERE / name).write_text(json.dumps(run, indent=1))


H200_KERNELS = {  # kernel -> (size, bytes per item, CuPy items/s at its best configuration)
    "step:CartPole-v1": (1 << 22, 82, 96e9), "step:Pendulum-v1": (1 << 22, 66, 80e9),
    "step:MountainCar-v0": (1 << 22, 58, 90e9), "step:MountainCarContinuous-v0": (1 << 22, 58, 88e9),
    "step:Acrobot-v1": (1 << 22, 114, 30e9), "gae": (1 << 24, 22, 175e9),
    "discounted_returns": (1 << 24, 10, 300e9), "normalize": (1 << 24, 8, 400e9), "gather": (1 << 22, 36, 90e9),
}  # fmt: skip
CUPY = {128: 0.93, 256: 1.0}  # block_size -> share of the best
OPENCL = {None: 0.90, 32: 0.70, 64: 0.97, 128: 0.94, 256: 0.88}  # local_size -> share of CuPy's best


def h200() -> None:
    run = Run("synthetic-h200")
    hw = "synthetic-h200/nvidia-h200"
    cupy = run.device("cupy", "NVIDIA H200", hw, hw, "NVIDIA H200", "gpu", "NVIDIA")
    ocl = run.device("opencl", "NVIDIA CUDA: NVIDIA H200", f"{hw}/nvidia-cuda", hw, "NVIDIA H200 (NVIDIA CUDA)",
                     "gpu", "NVIDIA", platform="NVIDIA CUDA")  # fmt: skip
    for kernel, (size, bpi, best) in H200_KERNELS.items():
        for bs, share in CUPY.items():
            run.add(cupy, kernel, {"block_size": bs}, "pass", best * share, size, bpi)
        for ls, share in OPENCL.items():
            cfg = {"local_size": ls}
            if kernel == "normalize":
                run.add(ocl, kernel, cfg, "fail", best * share, size, bpi, max_error=0.5,
                        reason="out0: 812 of 16777216 values off (max abs error 0.5)")
            elif kernel == "gather" and ls == 256:
                run.add(ocl, kernel, cfg, "invalid-config", None, size, bpi, max_error=None,
                        reason="LogicError: clEnqueueNDRangeKernel failed: INVALID_WORK_GROUP_SIZE")
            else:
                run.add(ocl, kernel, cfg, "pass", best * share, size, bpi)
    run.add(cupy, "copy", {}, "pass", 4.22e12 / 8, 1 << 28, 8)
    run.write("synthetic-h200-run.json", [
        {"name": "cupy", "available": True, "reason": "", "devices": ["NVIDIA H200"]},
        {"name": "opencl", "available": True, "reason": "", "devices": ["NVIDIA CUDA: NVIDIA H200"]},
        {"name": "numba", "available": False, "reason": "synthetic run: not measured", "devices": []}])


#: Host CPU, two OpenCL platforms: kernel -> (size, bytes per item, {stack: items/s}).
XEON_KERNELS = {
    "step:CartPole-v1": (1 << 16, 82, {"numpy": 2.0e7, "torch": 1.0e7, "pocl": 6.0e7, "intel": 9.0e7}),
    "step:Acrobot-v1": (1 << 16, 114, {"numpy": 2.0e6, "torch": 1.5e6, "pocl": 1.6e7, "intel": 2.4e7}),
    "gae": (1 << 20, 22, {"numpy": 3.0e7, "torch": 3.0e7, "pocl": 1.2e8, "intel": 1.1e8}),
    "discounted_returns": (1 << 20, 10, {"numpy": 5.0e7, "torch": 4.0e7, "pocl": 2.0e8, "intel": 2.2e8}),
    "normalize": (1 << 20, 8, {"numpy": 4.0e8, "torch": 6.0e8, "pocl": 5.0e8, "intel": 7.0e8}),
    "gather": (1 << 20, 36, {"numpy": 1.0e8, "torch": 1.6e8, "pocl": 1.6e8, "intel": 1.6e8}),  # a tie
}  # fmt: skip
#: rollout:CartPole-v1:<path> env-steps/s at N = 4096, T = 32.
XEON_ROLLOUT = {"host": {"numpy": 3.0e6, "torch": 1.0e6, "pocl": 1.5e6, "intel": 1.6e6},
                "device": {"numpy": 3.0e6, "torch": 1.2e6, "pocl": 2.0e7, "intel": 2.5e7},
                "fused": {"numpy": 3.0e6, "torch": 1.2e6, "pocl": 8.0e7, "intel": 1.2e8}}  # fmt: skip


def xeon() -> None:
    run = Run("synthetic-xeon")
    hw, label = "synthetic-xeon/cpu", "Intel Xeon Gold 6338"
    devs = {
        "numpy": run.device("numpy", "host CPU (x86_64)", hw, hw, label, "cpu", "Intel", stack="framework eager"),
        "torch": run.device("torch", "host CPU (x86_64)", hw, hw, label, "cpu", "Intel", stack="framework eager"),
        "pocl": run.device("opencl", "Portable Computing Language: pthread-Intel Xeon Gold 6338",
                           f"{hw}/portable-computing-language", hw, f"{label} (Portable Computing Language)",
                           "cpu", "Intel", platform="Portable Computing Language"),
        "intel": run.device("opencl", "Intel(R) OpenCL: Intel(R) Xeon(R) Gold 6338", f"{hw}/intel-opencl", hw,
                            f"{label} (Intel(R) OpenCL)", "cpu", "Intel", platform="Intel(R) OpenCL"),
    }  # fmt: skip
    for kernel, (size, bpi, rates) in XEON_KERNELS.items():
        for name, rate in rates.items():
            run.add(devs[name], kernel, {}, "pass", rate, size, bpi)
    n, t = 4096, 32
    for path, rates in XEON_ROLLOUT.items():
        for name, rate in rates.items():
            stack = "fused custom" if path == "fused" and name in ("pocl", "intel") else None
            run.add(devs[name], f"rollout:CartPole-v1:{path}", {}, "pass", rate, n, 42, stack=stack, items=n * t)
    run.add(devs["numpy"], "copy", {}, "pass", 2.0e10, 1 << 25, 8)
    run.write("synthetic-xeon-two-drivers-run.json", [
        {"name": b, "available": True, "reason": "", "devices": sorted({d["device"] for d in run.devices
                                                                         if d["backend"] == b})}
        for b in ("numpy", "torch", "opencl")])  # fmt: skip


if __name__ == "__main__":
    h200()
    xeon()
