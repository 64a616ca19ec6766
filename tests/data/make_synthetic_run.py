"""Writes synthetic-h200-run.json: a made-up "other machine" run (NVIDIA H200, CuPy + OpenCL) for report tests.

Not a measurement. Throughputs follow the shape of shared/device/README.md's figures; OpenCL's
normalize fails parity and one OpenCL gather configuration is illegal, so both paths are exercised.
Run: python tests/data/make_synthetic_run.py (from the repository root).
"""

from __future__ import annotations

import json
from pathlib import Path

MACHINE = "synthetic-h200"
KEY = f"{MACHINE}/nvidia-h200"
KERNELS = {  # kernel -> (size, bytes per item, CuPy items/s at its best configuration)
    "step:CartPole-v1": (1 << 22, 82, 96e9), "step:Pendulum-v1": (1 << 22, 66, 80e9),
    "step:MountainCar-v0": (1 << 22, 58, 90e9), "step:MountainCarContinuous-v0": (1 << 22, 58, 88e9),
    "step:Acrobot-v1": (1 << 22, 114, 30e9), "gae": (1 << 24, 22, 175e9),
    "discounted_returns": (1 << 24, 10, 300e9), "normalize": (1 << 24, 8, 400e9), "gather": (1 << 22, 36, 90e9),
}  # fmt: skip
CUPY = {128: 0.93, 256: 1.0}  # block_size -> share of the best
OPENCL = {None: 0.90, 32: 0.70, 64: 0.97, 128: 0.94, 256: 0.88}  # local_size -> share of CuPy's best


def main() -> None:
    cases, benchmarks = [], []

    def add(kernel: str, backend: str, device: str, config: dict, status: str, rate: float | None,
            size: int, bpi: float, max_error: float | None = 0.0, reason: str = "") -> None:  # fmt: skip
        cid = f"synthetic::{kernel}[{backend}-{json.dumps(config, sort_keys=True)}]"
        rec = {"case_id": cid, "kernel": kernel, "backend": backend, "device": device, "size": size,
               "simulator": False, "device_key": KEY, "device_label": "NVIDIA H200", "kind": "gpu",
               "vendor": "NVIDIA", "machine": MACHINE, "config": config, "status": status,
               "max_error": max_error, "reason": reason}  # fmt: skip
        if rate:
            rec.update(items=size, bytes=int(size * bpi), unit="items", min_s=size / rate)
            benchmarks.append({"name": cid, "fullname": cid, "group": kernel, "extra_info": dict(rec),
                               "stats": {"min": size / rate, "median": size / rate * 1.02, "rounds": 5}})  # fmt: skip
        cases.append(rec)

    for kernel, (size, bpi, best) in KERNELS.items():
        for bs, share in CUPY.items():
            add(kernel, "cupy", "NVIDIA H200", {"block_size": bs}, "pass", best * share, size, bpi)
        for ls, share in OPENCL.items():
            cfg = {"local_size": ls}
            if kernel == "normalize":
                add(kernel, "opencl", "NVIDIA CUDA: NVIDIA H200", cfg, "fail", best * share, size, bpi,
                    max_error=0.5, reason="out0: 812 of 16777216 values off (max abs error 0.5)")
            elif kernel == "gather" and ls == 256:
                add(kernel, "opencl", "NVIDIA CUDA: NVIDIA H200", cfg, "invalid-config", None, size, bpi,
                    max_error=None, reason="LogicError: clEnqueueNDRangeKernel failed: INVALID_WORK_GROUP_SIZE")
            else:
                add(kernel, "opencl", "NVIDIA CUDA: NVIDIA H200", cfg, "pass", best * share, size, bpi)
    add("copy", "cupy", "NVIDIA H200", {}, "pass", 4.22e12 / 8, 1 << 28, 8)
    devices = [{"backend": b, "device": n, "device_key": KEY, "device_label": "NVIDIA H200", "kind": "gpu",
                "vendor": "NVIDIA", "driver": "synthetic", "machine": MACHINE, "versions": {}}
               for b, n in (("cupy", "NVIDIA H200"), ("opencl", "NVIDIA CUDA: NVIDIA H200"))]  # fmt: skip
    run = {
        "machine_info": {"node": MACHINE, "portkern": {
            "schema": "portkern-bench/1", "portkern": "0.1.0", "machine": MACHINE, "synthetic": True,
            "devices": devices,
            "backends": [{"name": "cupy", "available": True, "reason": "", "devices": ["NVIDIA H200"]},
                         {"name": "opencl", "available": True, "reason": "", "devices": ["NVIDIA CUDA: NVIDIA H200"]},
                         {"name": "numba", "available": False, "reason": "synthetic run: not measured",
                          "devices": []}]}},  # fmt: skip
        "commit_info": {}, "benchmarks": benchmarks, "datetime": "2026-11-30T00:00:00+00:00", "version": "5.3.1",
        "portkern": {"schema": "portkern-bench/1", "portkern": "0.1.0", "machine": MACHINE, "sizes": "synthetic",
                     "tune": True, "synthetic": True, "cases": cases},
    }  # fmt: skip
    Path(__file__).with_name("synthetic-h200-run.json").write_text(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
