"""GPU measurements for one lent machine: copy ceiling, CartPole step, GAE, zero-copy to torch; writes JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

from portkern.backends import EnvBuffers, get_backend, probe
from portkern.envs import ENVS

BACKENDS = ("cupy", "numba", "opencl")
#: CartPole same_step, float32, per env and step, as the kernel moves them: reads state 16 + steps 4 +
#: action 4; writes state 16 + steps 4 + obs 16 + final_obs 16 + reward 4 + terminated 1 + truncated 1.
#: Resets (episodes read + write, ~5% of envs per step under random actions) and params are not counted.
CARTPOLE_BYTES_PER_STEP = 82
#: GAE per element: rewards, values, next_values (3 x 4) + terminated, truncated (2 x 1) + 2 outputs (2 x 4).
GAE_BYTES_PER_ELEMENT = 22


def _device(name: str) -> str | None:
    # OpenCL picks its platform by substring; the CUDA backends take the default GPU.
    return os.environ.get("PORTKERN_OPENCL_DEVICE", "nvidia") if name == "opencl" else None


def _timed(fn: Callable[[], None], sync: Callable[[], None], reps: int, rounds: int = 3) -> float:
    """Best-of-rounds seconds per call, synchronising inside the timed region."""
    fn()
    sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def section(results: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    """Run one measurement; a failure is recorded (one line + traceback tail), never fatal."""
    t0 = time.perf_counter()
    try:
        results[key] = fn()
    except Exception as exc:
        results[key] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                        "traceback": traceback.format_exc().splitlines()[-6:]}  # fmt: skip
    print(f"[{time.perf_counter() - t0:6.1f}s] {key}: {json.dumps(results[key], default=str)[:400]}", flush=True)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(), "numpy": np.__version__}
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.memory", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()  # fmt: skip
    except Exception as exc:
        info["nvidia_smi"] = f"unavailable: {exc}"
    for mod in ("cupy", "numba", "torch", "pyopencl"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as exc:
            info[mod] = f"unavailable: {type(exc).__name__}"
    for name in BACKENDS:
        p = probe(name)
        entry: dict[str, Any] = {"available": p.available, "reason": p.reason, "devices": list(p.devices),
                                 "simulator": p.simulator, "versions": p.versions}  # fmt: skip
        if p.available:
            try:
                entry["describe"] = get_backend(name, _device(name)).describe()
            except Exception as exc:
                entry["describe_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        info[f"backend_{name}"] = entry
    return info


def copy_bandwidth(nbytes: int) -> dict[str, Any]:
    import cupy

    src = cupy.ones(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    sync = cupy.cuda.Device().synchronize
    sec = _timed(lambda: cupy.copyto(dst, src), sync, reps=10)
    del src, dst
    cupy.get_default_memory_pool().free_all_blocks()
    # A copy reads and writes every byte: 2 x nbytes cross the memory bus.
    return {"bytes_copied": nbytes, "bytes_moved": 2 * nbytes, "seconds": sec, "bytes_per_s": 2 * nbytes / sec}


def cartpole_step(name: str, n: int, steps: int, ceiling: float | None) -> dict[str, Any]:
    be = get_backend(name, _device(name))
    spec = ENVS["CartPole-v1"]
    dt = np.dtype(np.float32)
    z = be.zeros
    bufs = EnvBuffers([z((n,), dt) for _ in spec.state_names], z((n,), np.int32), z((n,), np.uint32),
                      z((n,), np.bool_), z((n, spec.obs_dim), dt), z((n, spec.obs_dim), dt), z((n,), dt),
                      z((n,), np.bool_), z((n,), np.bool_))  # fmt: skip
    params = spec.param_vector(spec.resolve_params(None), dt)
    actions = be.from_host(np.random.default_rng(0).integers(0, 2, n).astype(np.int32))
    be.env_reset(spec, bufs, params, 0, True)
    sec = _timed(lambda: be.env_step(spec, bufs, actions, params, 0, 500, "same_step"), be.synchronize, steps)
    ends = float(be.to_host(bufs.terminated).mean())
    out = {"backend": name, "device": be.device_name, "num_envs": n, "steps_timed": steps, "seconds_per_step": sec,
           "steps_per_s": n / sec, "bytes_per_env_step": CARTPOLE_BYTES_PER_STEP,
           "bytes_per_s": n * CARTPOLE_BYTES_PER_STEP / sec, "terminated_fraction_last_step": ends}  # fmt: skip
    if ceiling:
        out["fraction_of_copy_bandwidth"] = out["bytes_per_s"] / ceiling
    del bufs, actions
    _free(name)
    return out


_GAE_INPUTS: dict[tuple[int, int], list[np.ndarray]] = {}


def gae(name: str, steps: int, n: int, ceiling: float | None) -> dict[str, Any]:
    be = get_backend(name, _device(name))
    if (steps, n) not in _GAE_INPUTS:  # generated once, shared by every backend
        rng = np.random.default_rng(0)
        _GAE_INPUTS[(steps, n)] = [rng.standard_normal((steps, n), dtype=np.float32) for _ in range(3)] + [
            rng.random((steps, n), dtype=np.float32) < 0.01 for _ in range(2)]  # fmt: skip
    rewards, values, next_values, term, trunc = (be.from_host(a) for a in _GAE_INPUTS[(steps, n)])
    adv, ret = be.zeros((steps, n), np.float32), be.zeros((steps, n), np.float32)
    sec = _timed(lambda: be.gae(rewards, values, next_values, term, trunc, adv, ret, 0.99, 0.95), be.synchronize, 10)
    nbytes = GAE_BYTES_PER_ELEMENT * steps * n
    out = {"backend": name, "T": steps, "N": n, "seconds": sec, "bytes_moved": nbytes, "bytes_per_s": nbytes / sec}
    if ceiling:
        out["fraction_of_copy_bandwidth"] = out["bytes_per_s"] / ceiling
    del rewards, values, next_values, term, trunc, adv, ret
    _free(name)
    return out


def zero_copy() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"torch": torch.__version__}
    for name in ("cupy", "numba"):
        try:
            be = get_backend(name)
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
            continue
        obs = be.zeros((1024, 4), np.float32)
        flags = be.zeros((1024,), np.bool_)
        ptr = obs.__cuda_array_interface__["data"][0]
        r: dict[str, Any] = {}
        t = torch.as_tensor(obs, device="cuda")
        r["as_tensor_shares"] = t.data_ptr() == ptr
        r["as_tensor_bool_shares"] = torch.as_tensor(flags, device="cuda").data_ptr() == flags.__cuda_array_interface__["data"][0]
        try:
            r["from_dlpack_shares"] = torch.from_dlpack(obs).data_ptr() == ptr
        except Exception as exc:
            r["from_dlpack_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if name == "cupy":
            r["cupy_data_ptr_matches"] = ptr == obs.data.ptr
        out[name] = r
    return out


def _free(name: str) -> None:
    if name == "cupy":
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--envs-log2", type=int, default=24)
    ap.add_argument("--gae-t", type=int, default=128)
    ap.add_argument("--gae-n-log2", type=int, default=20)
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpu_bench.json")
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S")}

    def save() -> None:
        with open(path, "w") as fh:
            json.dump(results, fh, indent=2, default=str)

    section(results, "machine", machine_info)
    save()
    section(results, "copy_bandwidth", lambda: copy_bandwidth(args.copy_mib << 20))
    ceiling = results["copy_bandwidth"].get("bytes_per_s")
    save()
    for name in BACKENDS:
        section(results, f"cartpole_step_{name}", lambda: cartpole_step(name, 1 << args.envs_log2, args.steps, ceiling))
        save()
    for name in BACKENDS:
        section(results, f"gae_{name}", lambda: gae(name, args.gae_t, 1 << args.gae_n_log2, ceiling))
        save()
    section(results, "zero_copy_torch", zero_copy)
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    save()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
