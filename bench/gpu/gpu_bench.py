"""GPU measurements for one lent machine, one process per backend family (bench/gpu/run_gpu.sh runs it once for
cupy and numba, once for OpenCL, once for torch and torch.compile, once for JAX, so each family's imports and CUDA
context are paid once): the device (name, memory, clocks, copy ceiling, fp32 and fp64 peaks, measured), in the
CUDA family a check (trig_bits: pk_common.cuh's and Numba's float sin and cos against CUDA's, bit for bit; its
failure fails the process), the CartPole step kernel's bytes against the copy ceiling, GAE, the fused rollouts
(random and MLP policy), Chain-v0 at K = 3 and 10, then the lower-value sections. Every section is bounded (its declared limit, an alarm) and the
JSON is rewritten after each one, with a timing entry per section (declared limit, used seconds, status).

    python3 bench/gpu/gpu_bench.py --family cuda --backends cupy,numba --device-info --out DIR

Without a GPU (``run_gpu.sh --rehearse``) the same sections run on CPU stand-ins (cuda_host or Numba's simulator,
PoCL, torch and JAX on the CPU) at tiny sizes (trig_bits builds its kernel only), and ``--strict`` turns any
failed section into exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

_T0 = time.perf_counter()  # the process's start: --budget-s counts the imports below

import numpy as np  # noqa: E402

from portkern import step as pk_step  # noqa: E402
from portkern.backends import EnvBuffers, get_backend, probe  # noqa: E402
from portkern.envs import ENVS  # noqa: E402
from portkern.policy import MLPPolicy, RandomPolicy, RolloutBuffer  # noqa: E402

#: Every GPU backend, one stack class after another: custom kernels (cupy, numba, opencl), framework
#: eager (torch) and framework compiled (torch_compile, Inductor's Triton kernels; jax, XLA: the
#: gymnax / PureJaxRL way of running an env on a GPU, jit and lax.scan).
BACKENDS = ("cupy", "numba", "opencl", "torch", "torch_compile", "jax")
#: Compiled by their framework on first use (Inductor, XLA): timed after the others, so their compiles
#: do not push the others past --budget-s.
COMPILED = ("torch_compile", "jax")
#: CartPole same_step, float32, per env and step, as the kernel moves them: reads state 16 + steps 4 +
#: action 4; writes state 16 + steps 4 + obs 16 + final_obs 16 + reward 4 + terminated 1 + truncated 1.
#: Resets (episodes read + write, ~5% of envs per step under random actions) and params are not counted.
CARTPOLE_BYTES_PER_STEP = 82
#: GAE per element: rewards, values, next_values (3 x 4) + terminated, truncated (2 x 1) + 2 outputs (2 x 4).
GAE_BYTES_PER_ELEMENT = 22
#: Rollout envs and data paths, in the order they are measured (the most wanted first, so a run cut
#: short by its time budget still has them).
ROLLOUT_ENVS = ("CartPole-v1", "Acrobot-v1")
#: fused_mlp_run_time_width: the MLP kernel built without its width (the kernel backends' fixed_mlp_width
#: off), a labelled comparison row beside fused_mlp, the default build (bench/cpu/mlp_width.py on CPUs).
ROLLOUT_PATHS = (
    "fused",
    "device",
    "fused_mlp",
    "fused_mlp_run_time_width",
    "host",
)  # device paths share one env


def _device(name: str) -> str | None:
    """PORTKERN_<NAME>_DEVICE (run_gpu.sh exports them: nvidia and cuda on a GPU, pocl and cpu in the
    rehearsal), else the GPU defaults: OpenCL picks its platform by substring; torch needs "cuda" (its
    default is the CPU); the CUDA backends take the default GPU."""
    env = os.environ.get(f"PORTKERN_{name.upper()}_DEVICE")
    if env:
        return env
    if name == "opencl":
        return "nvidia"
    return "cuda" if name.startswith("torch") else None


def _timed(
    fn: Callable[[], None], sync: Callable[[], None], reps: int, rounds: int = 3, warmup: bool = True
) -> float:
    """Best-of-rounds seconds per call, synchronising inside the timed region."""
    if warmup:
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


_DEADLINE = [float("inf"), float("inf")]  # perf_counter(): no section starts after [0]; none runs past [1]
#: Declared limit (seconds) per kind of section on a GPU; the compiled frameworks' sections get COMPILED_FACTOR
#: times more (torch.compile's Inductor compile, XLA). A section past its limit is stopped (SIGALRM, which
#: Python takes as soon as the running call returns to it) and recorded as failed; --budget-s bounds the process.
SECTION_LIMITS = {"device": 25, "check": 15, "step": 10, "gae": 8, "rollout": 12, "chain": 15, "extra": 8}
COMPILED_FACTOR = 2.5
_TIMINGS: list[dict[str, Any]] = []  # one entry per section: declared limit, used seconds, status


class SectionTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:  # noqa: ARG001 - the signal handler's signature
    raise SectionTimeout("past its declared limit")


#: Every section run so far: key -> (its function, its limit), for the rehearsal's one retry of an error.
_SECTIONS: dict[str, tuple[Callable[[], Any], float]] = {}


def section(results: dict[str, Any], key: str, fn: Callable[[], Any], limit: float = 60.0) -> None:
    """Run one measurement, bounded by ``limit`` seconds (and the process's --budget-s); a failure or a timeout
    is recorded (one line + traceback tail), never fatal."""
    _SECTIONS[key] = (fn, limit)
    t0 = time.perf_counter()
    if t0 > _DEADLINE[0]:
        results[key] = {"skipped": "out of the run's time budget (--budget-s)"}
        _TIMINGS.append({"section": key, "limit_s": limit, "used_s": 0.0, "status": "skipped"})
        print(f"[  skip] {key}: out of time", flush=True)
        return
    bound = max(1, int(min(limit, _DEADLINE[1] - t0) + 0.999))
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(bound)
    try:
        results[key] = fn()
        status = "ok" if not (isinstance(results[key], dict) and "not_applicable" in results[key]) else "n/a"
    except SectionTimeout:
        results[key] = {"error": f"timed out after {bound} s (declared limit {limit:g} s)"}
        status = "timeout"
    except Exception as exc:
        tb = traceback.format_exc()
        results[key] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                        "traceback": tb.splitlines()[-6:]}  # fmt: skip
        status = "error"
        if "SectionTimeout" in tb:  # a framework (Inductor, XLA) wrapped the alarm in its own exception
            results[key]["error"] = (f"timed out after {bound} s (declared limit {limit:g} s), inside "
                                     f"{type(exc).__name__}")  # fmt: skip
            status = "timeout"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    try:
        _free()
    except Exception:  # noqa: BLE001, S110 - freeing is best effort
        pass
    used = time.perf_counter() - t0
    _TIMINGS.append({"section": key, "limit_s": limit, "used_s": round(used, 3), "status": status})
    print(f"[{used:6.1f}s] {key}: {json.dumps(results[key], default=str)[:400]}", flush=True)


def _smi(fields: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                              check=False, capture_output=True, text=True, timeout=20).stdout.strip()  # fmt: skip
    except Exception as exc:
        return f"unavailable: {type(exc).__name__}"


SMI_FIELDS = ("name,memory.total,clocks.max.sm,clocks.max.memory,clocks.sm,clocks.mem,driver_version,"
              "power.limit,pci.bus_id,compute_cap")  # fmt: skip


def machine_info(backends: tuple[str, ...] = BACKENDS) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "host_cpus": os.cpu_count(),
    }
    info["nvidia_smi"] = _smi("name,driver_version,memory.total,clocks.max.memory")
    modules = {"cupy": "cupy", "numba": "numba", "torch": "torch", "torch_compile": "torch", "opencl": "pyopencl",
               "jax": "jax"}  # fmt: skip
    for mod in sorted({modules.get(b, "numpy") for b in backends}):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as exc:
            info[mod] = f"unavailable: {type(exc).__name__}"
    for name in backends:
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


def _cupy() -> Any:
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:  # noqa: BLE001 - no CUDA GPU: the CPU stand-ins measure instead
        return None


def copy_bandwidth(nbytes: int) -> dict[str, Any]:
    """The device's copy ceiling: CuPy's copyto on the GPU (NumPy's on the host CPU, the rehearsal's stand-in)."""
    cupy = _cupy()
    xp = cupy if cupy is not None else np
    src = xp.ones(nbytes // 4, dtype=np.float32)
    dst = xp.empty_like(src)
    sync = cupy.cuda.Device().synchronize if cupy is not None else (lambda: None)
    sec = _timed(lambda: xp.copyto(dst, src), sync, reps=10)
    # A copy reads and writes every byte: 2 x nbytes cross the memory bus.
    return {
        "method": "cupy.copyto" if cupy is not None else "numpy.copyto (host CPU stand-in)",
        "bytes_copied": nbytes,
        "bytes_moved": 2 * nbytes,
        "seconds": sec,
        "bytes_per_s": 2 * nbytes / sec,
    }


_FMA_KERNEL = r"""
extern "C" __global__ void pk_fma_peak(REAL* out, REAL a, REAL b, int iters) {
  REAL x0 = threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3, x4 = x0 + 4, x5 = x0 + 5, x6 = x0 + 6, x7 = x0 + 7;
  for (int i = 0; i < iters; ++i) {
    x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
    x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
}
"""


def flop_peaks(iters: int) -> dict[str, Any]:
    """Measured fp32 and fp64 peaks: 8 independent FMA chains per thread (2 flops each), every SM busy (a CuPy
    RawKernel); on the host CPU (the rehearsal) NumPy's matmul stands in."""
    cupy = _cupy()
    out: dict[str, Any] = {}
    if cupy is None:
        for name, dt in (("fp32", np.float32), ("fp64", np.float64)):
            a = np.ones((256, 256), dt)
            sec = _timed(lambda a=a: a @ a, lambda: None, reps=3)
            out[f"{name}_flops_per_s"] = 2 * 256**3 / sec
        out["method"] = "numpy matmul 256^3 (host CPU stand-in)"
        return out
    dev = cupy.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    threads, blocks = 256, sms * 16
    for name, ctype, dt in (("fp32", "float", np.float32), ("fp64", "double", np.float64)):
        kern = cupy.RawKernel(_FMA_KERNEL.replace("REAL", ctype), "pk_fma_peak")
        buf = cupy.empty(threads * blocks, dt)
        n = iters if name == "fp32" else max(1, iters // 4)
        sec = _timed(lambda kern=kern, buf=buf, dt=dt, n=n: kern((blocks,), (threads,), (buf, dt(0.999), dt(1e-3),
                     np.int32(n))), dev.synchronize, reps=5)  # fmt: skip
        out[f"{name}_flops_per_s"] = 2 * 8 * n * threads * blocks / sec
    out["method"] = f"CuPy RawKernel, {blocks} blocks x {threads} threads x 8 FMA chains"
    return out


def device_info(copy_mib: int, fma_iters: int) -> dict[str, Any]:
    """What this device is and its own ceilings, read or measured here (nothing assumes an H100 or an H200):
    name, memory, clocks (nvidia-smi and the CUDA runtime), copy ceiling, fp32 and fp64 peaks."""
    out: dict[str, Any] = {"nvidia_smi_fields": SMI_FIELDS, "nvidia_smi": _smi(SMI_FIELDS)}
    cupy = _cupy()
    if cupy is not None:
        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        out.update({"name": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_bytes": int(props["totalGlobalMem"]), "sms": int(props["multiProcessorCount"]),
                    "sm_clock_khz": int(props.get("clockRate", 0)),
                    "memory_clock_khz": int(props.get("memoryClockRate", 0)),
                    "memory_bus_bits": int(props.get("memoryBusWidth", 0)),
                    "l2_bytes": int(props.get("l2CacheSize", 0)),
                    "compute_capability": f"{props['major']}.{props['minor']}"})  # fmt: skip
        if out["memory_clock_khz"] and out["memory_bus_bits"]:  # DDR: two transfers a clock
            out["memory_bytes_per_s_theoretical"] = 2 * out["memory_clock_khz"] * 1e3 * out["memory_bus_bits"] / 8
    else:
        model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                     platform.processor() or "host CPU") if os.path.exists("/proc/cpuinfo") else "host CPU"  # fmt: skip
        out.update({"name": f"{model} (host CPU stand-in, no GPU)", "cpus": os.cpu_count()})
    out["copy"] = copy_bandwidth(copy_mib << 20)
    out["copy_bytes_per_s"] = out["copy"]["bytes_per_s"]
    if out.get("memory_bytes_per_s_theoretical"):
        out["copy_of_theoretical"] = out["copy_bytes_per_s"] / out["memory_bytes_per_s_theoretical"]
    out.update(flop_peaks(fma_iters))
    return out


def cartpole_step(name: str, n: int, steps: int, ceiling: float | None) -> dict[str, Any]:
    be = get_backend(name, _device(name))
    spec = ENVS["CartPole-v1"]
    dt = np.dtype(np.float32)
    z = be.zeros
    bufs = EnvBuffers(z((spec.state_dim, n), dt), z((n,), np.int32), z((n,), np.uint32),
                      z((n,), np.bool_), z((n, spec.obs_dim), dt), z((n, spec.obs_dim), dt), z((n,), dt),
                      z((n,), np.bool_), z((n,), np.bool_))  # fmt: skip
    params = spec.param_vector(spec.resolve_params(None), dt)
    actions = be.from_host(np.random.default_rng(0).integers(0, 2, n).astype(np.int32))
    be.env_reset(spec, bufs, params, 0, True)
    compile_before = getattr(be, "compile_seconds", None)
    sec = _timed(lambda: be.env_step(spec, bufs, actions, params, 0, 500, "same_step"), be.synchronize, steps)
    ends = float(be.to_host(bufs.terminated).mean())
    out = {"backend": name, "device": be.device_name, "num_envs": n, "steps_timed": steps, "seconds_per_step": sec,
           "steps_per_s": n / sec, "bytes_per_env_step": CARTPOLE_BYTES_PER_STEP,
           "bytes_per_s": n * CARTPOLE_BYTES_PER_STEP / sec, "terminated_fraction_last_step": ends}  # fmt: skip
    if ceiling:
        out["fraction_of_copy_bandwidth"] = out["bytes_per_s"] / ceiling
    if compile_before is not None:  # torch_compile: the warm-up's compile, kept apart from throughput
        out["compile_seconds_total"] = be.compile_seconds
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
    sec = _timed(
        lambda: be.gae(rewards, values, next_values, term, trunc, adv, ret, 0.99, 0.95), be.synchronize, 10
    )
    nbytes = GAE_BYTES_PER_ELEMENT * steps * n
    out = {
        "backend": name,
        "T": steps,
        "N": n,
        "seconds": sec,
        "bytes_moved": nbytes,
        "bytes_per_s": nbytes / sec,
    }
    if ceiling:
        out["fraction_of_copy_bandwidth"] = out["bytes_per_s"] / ceiling
    return out


def _empty(be: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialised device array (a rollout writes every element): no host zeros to upload."""
    if be.name == "cupy":
        import cupy

        return cupy.empty(shape, dtype)
    if be.name == "numba":
        from numba import cuda

        return cuda.device_array(shape, dtype)
    if be.name == "opencl":
        import pyopencl.array as cla

        return cla.empty(be.queue, shape, dtype)
    return be.zeros(shape, dtype)


def _rollout_buffer(env: pk_step.VectorEnv, steps: int, host: bool) -> RolloutBuffer:
    if host:
        return env.rollout_buffer(steps, host=True)
    n, d, be = env.num_envs, env.spec.obs_dim, env.backend
    act = np.int32 if env.spec.is_discrete else np.float32
    return RolloutBuffer(_empty(be, (steps, n, d), env.dtype), _empty(be, (steps, n), act),
                         _empty(be, (steps, n), env.dtype), _empty(be, (steps, n), np.bool_),
                         _empty(be, (steps, n), np.bool_), _empty(be, (steps, n, d), env.dtype))  # fmt: skip


_ROLLOUT_ENVS: dict[tuple[str, str, int, bool], tuple[pk_step.VectorEnv, RolloutBuffer]] = {}


def rollout(
    name: str, env_id: str, path: str, n: int, steps: int, ceiling: float | None = None
) -> dict[str, Any]:
    """env.rollout(T, policy, path=...) throughput: the random policy on each data path, and the MLP fused.

    The host path brings obs back every step and runs the NumPy policy there (an off-device simulator's
    loop); the device path launches the fused kernel one step at a time; fused runs all T in one launch.
    """
    be = get_backend(name, _device(name))
    spec = ENVS[env_id]
    run_time_width = path == "fused_mlp_run_time_width"
    if run_time_width and not hasattr(be, "fixed_mlp_width"):
        return {"not_applicable": f"{name} builds no MLP kernel (the policy runs in its framework's ops)"}
    mlp = path.startswith("fused_mlp")
    data_path = "fused" if mlp else path
    key = (name, env_id, n, data_path == "host")
    if key not in _ROLLOUT_ENVS:  # one env and buffer per (backend, env, N), shared by its paths
        _ROLLOUT_ENVS.clear()
        _free()
        env = pk_step.make(env_id, n, backend=be, seed=0)
        env.reset()
        _ROLLOUT_ENVS[key] = (env, _rollout_buffer(env, steps, host=data_path == "host"))
    env, buf = _ROLLOUT_ENVS[key]
    policy = MLPPolicy.init(spec, hidden=64, seed=0) if mlp else RandomPolicy()
    builds = hasattr(be, "fixed_mlp_width")
    if builds:
        be.fixed_mlp_width = not run_time_width  # both builds stay cached; the default is restored below
    try:
        t0 = time.perf_counter()
        env.rollout(2, policy, path=data_path)  # compile and warm up outside the timed region
        be.synchronize()
        warm = time.perf_counter() - t0
        # The host path is slow (NumPy's policy at N envs per step): one timed run; the others best of 3.
        rounds = 1 if data_path == "host" else 3
        sec = _timed(lambda: env.rollout(steps, policy, buf, path=data_path), be.synchronize, reps=1,
                     rounds=rounds, warmup=False)  # fmt: skip
    finally:
        if builds:
            be.fixed_mlp_width = True
    env_steps = n * steps
    rate = env_steps / sec
    out = {"backend": name, "device": be.device_name, "env": env_id, "path": data_path,
           "policy": f"mlp(hidden={policy.hidden})" if mlp else "random", "num_envs": n, "T": steps,
           "mlp_build": ("run-time width" if run_time_width else "width") if mlp else None,
           "seconds_per_rollout": sec, "env_steps_per_s": rate, "gpu_hours_per_billion_steps": 1e9 / rate / 3600,
           "compile_and_warmup_s": warm, "terminated_fraction": float(np.mean(_host(be, buf.terminated)))}  # fmt: skip
    # What the buffer must receive per env-step (obs and final obs, action, reward, two flags): a floor on the
    # bytes moved, so its share of the copy ceiling says how far the rollout is from memory-bound.
    item = np.dtype(env.dtype).itemsize
    out["bytes_per_env_step"] = 2 * spec.obs_dim * item + 4 * max(1, getattr(spec, "action_dim", 1)) + item + 2
    out["bytes_per_s"] = out["bytes_per_env_step"] * rate
    if ceiling:
        out["fraction_of_copy_bandwidth"] = out["bytes_per_s"] / ceiling
    return out


def chain_step(name: str, n: int, links: int, steps: int, ceiling: float | None = None) -> dict[str, Any]:
    """The public ``env.step`` of Chain-v0 at K = ``links`` (the physics-heavy env: 20 articulated-body passes
    per step), float32, actions already on the device; termination off so every step is the same physics."""
    be = get_backend(name, _device(name))
    env = pk_step.make("Chain-v0", n, links=links, backend=be, seed=0, params={"target_height": 2.0})
    env.reset()
    actions = be.from_host(np.random.default_rng(0).uniform(-1, 1, (n, links)).astype(np.float32))
    compile_before = getattr(be, "compile_seconds", None)
    sec = _timed(lambda: env.step(actions), be.synchronize, steps)
    out = {"backend": name, "device": be.device_name, "env": "Chain-v0", "links": links, "num_envs": n,
           "steps_timed": steps, "seconds_per_step": sec, "env_steps_per_s": n / sec}  # fmt: skip
    # The compulsory bytes of a step (state read and written, obs and final obs, actions, reward, flags, the
    # step counter): the physics is the bill here, so this share of the copy ceiling stays small.
    es, item = env.spec, np.dtype(env.dtype).itemsize
    out["bytes_per_env_step"] = (2 * es.state_dim + 2 * es.obs_dim + 1) * item + 4 * links + 2 + 8
    out["bytes_per_s"] = out["bytes_per_env_step"] * n / sec
    if ceiling:
        out["fraction_of_copy_bandwidth"] = out["bytes_per_s"] / ceiling
    if compile_before is not None:
        out["compile_seconds_total"] = be.compile_seconds
    return out


def _host(be: Any, a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else be.to_host(a)


def zero_copy() -> dict[str, Any]:
    import torch

    if _cupy() is None or not torch.cuda.is_available():
        return {"not_applicable": "no CUDA GPU: zero-copy from CuPy and Numba-CUDA to torch needs one"}
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
        r["as_tensor_bool_shares"] = (
            torch.as_tensor(flags, device="cuda").data_ptr() == flags.__cuda_array_interface__["data"][0]
        )
        try:
            r["from_dlpack_shares"] = torch.from_dlpack(obs).data_ptr() == ptr
        except Exception as exc:
            r["from_dlpack_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if name == "cupy":
            r["cupy_data_ptr_matches"] = ptr == obs.data.ptr
        out[name] = r
    return out


def _free() -> None:
    """Hand CuPy's cached blocks back, so the next measurement has the whole device."""
    if "cupy" in sys.modules:
        try:
            sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001, S110 - no GPU: nothing to free
            pass


#: Sections that check rather than measure: a failure fails the process, --strict or not.
CHECKS = ("trig_bits",)


def trig_bits() -> dict[str, Any]:
    """bench/gpu/trig_bits.py: pk_common.cuh's float sin and cos against CUDA's sinf, cosf and sincosf, bit for bit
    (without a GPU, its kernel built through NVRTC only: not applicable)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("trig_bits", os.path.join(os.path.dirname(__file__), "trig_bits.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"cuda_c": mod.check(), "numba": mod.check_numba()}


def _limit(kind: str, name: str | None = None) -> float:
    return SECTION_LIMITS[kind] * (COMPILED_FACTOR if name in COMPILED else 1) * _LIMIT_SCALE[0]


_LIMIT_SCALE = [1.0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--family", default="all",
                    help="names the JSON: gpu_bench_<family>.json (gpu_bench.json for all)")  # fmt: skip
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated, in the order they are timed")  # fmt: skip
    ap.add_argument("--device-info", action="store_true",
                    help="measure the device first (name, memory, clocks, copy ceiling, fp32/fp64 peaks) and write "
                         "device.json beside the JSON; without it the ceiling is read from that device.json")  # fmt: skip
    ap.add_argument("--envs-log2", type=int, default=24)
    ap.add_argument("--gae-t", type=int, default=128)
    ap.add_argument("--gae-n-log2", type=int, default=20)
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--fma-iters", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rollout-t", type=int, default=128)
    ap.add_argument("--rollout-n-log2", type=int, default=20)
    ap.add_argument("--rollout-host-n-log2", type=int, default=16,
                    help="the host path runs the NumPy policy every step: a smaller N keeps it to seconds")  # fmt: skip
    ap.add_argument("--chain-n-log2", type=int, default=20,
                    help="Chain-v0 envs (log2) of the chain_step sections")  # fmt: skip
    ap.add_argument("--chain-steps", type=int, default=20)
    ap.add_argument("--chain-links", default="3,10")
    ap.add_argument("--no-extras", action="store_true",
                    help="skip the lower-value sections (device and host paths, the run-time-width MLP build, "
                         "zero-copy, Acrobot)")  # fmt: skip
    ap.add_argument("--compiled-sections", default="step,gae,rollout,chain,extra",
                    help="the kinds of section the compiled frameworks (torch_compile, jax) run (the rehearsal "
                         "keeps their compiles few: Inductor and XLA on two CPU cores take tens of seconds each)")  # fmt: skip
    ap.add_argument("--limit-scale", type=float, default=1.0,
                    help="multiply every section's declared limit (SECTION_LIMITS) by this")
    ap.add_argument("--budget-s", type=float, default=float("inf"),
                    help="start no section after this many seconds from the process's start (results so far are "
                         "kept); a running section is stopped 2 s after it")  # fmt: skip
    ap.add_argument("--strict", action="store_true",
                    help="exit status 1 if any section failed or timed out (the rehearsal: a stand-in must run "
                         "every section)")  # fmt: skip
    args = ap.parse_args(argv)
    _DEADLINE[:] = [_T0 + args.budget_s, _T0 + args.budget_s + 2.0]
    _LIMIT_SCALE[0] = args.limit_scale
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    os.makedirs(args.out, exist_ok=True)
    name = "gpu_bench.json" if args.family == "all" else f"gpu_bench_{args.family}.json"
    path = os.path.join(args.out, name)
    # The schema tells `portkern report` this file from bench runs and training files.
    results: dict[str, Any] = {"schema": "portkern-gpu-bench/1", "family": args.family, "backends": list(backends),
                               "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "timings": _TIMINGS}  # fmt: skip

    def save() -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(results, fh, indent=2, default=str)
        os.replace(tmp, path)  # a run cut short leaves the last whole file, never half of one
        hook = os.environ.get("PK_GPU_SAVE_HOOK")  # run_gpu.sh: refresh the archive under $OUT
        if hook:
            subprocess.run(hook, shell=True, check=False, timeout=30)  # noqa: S602 - the script's own command

    dev_path = os.path.join(args.out, "device.json")
    section(results, "machine", lambda: machine_info(backends), _limit("device"))
    if args.device_info:
        section(results, "device", lambda: device_info(args.copy_mib, args.fma_iters), _limit("device"))
        if "error" not in results["device"]:
            with open(dev_path, "w") as fh:
                json.dump(results["device"], fh, indent=2, default=str)
    elif os.path.exists(dev_path):
        with open(dev_path) as fh:
            results["device"] = {"read_from": "device.json", **json.load(fh)}
    ceiling = (results.get("device") or {}).get("copy_bytes_per_s")
    results["copy_bandwidth"] = (results.get("device") or {}).get("copy") or {"skipped": "no device.json"}
    save()

    compiled_kinds = {k.strip() for k in args.compiled_sections.split(",") if k.strip()}
    if "cupy" in backends or "cuda_host" in backends:  # the CUDA family (cuda_host: the rehearsal's stand-in)
        section(results, "trig_bits", trig_bits, _limit("check"))
        save()

    def run(key: str, kind: str, b: str | None, fn: Callable[[], Any]) -> None:
        if b in COMPILED and kind not in compiled_kinds:
            return
        section(results, key, fn, _limit(kind, b))
        save()

    # By value: what no other machine can give first (the step kernel's bytes against the ceiling, GAE, the
    # fused rollouts with the random and the MLP policy, Chain-v0 at each K), then the rest; the compiled
    # frameworks (torch.compile's Inductor, ~15 s a compile; XLA) after the others of their family, so their
    # compiles never push an eager backend's figures out of the budget.
    env0 = ROLLOUT_ENVS[0].split("-")[0].lower()
    n_roll, t_roll = 1 << args.rollout_n_log2, args.rollout_t
    links = [int(k) for k in args.chain_links.split(",") if k.strip()]
    for group in ([b for b in backends if b not in COMPILED], [b for b in backends if b in COMPILED]):
        for b in group:
            run(f"cartpole_step_{b}", "step", b,
                lambda b=b: cartpole_step(b, 1 << args.envs_log2, args.steps, ceiling))  # fmt: skip
        for b in group:
            run(f"gae_{b}", "gae", b, lambda b=b: gae(b, args.gae_t, 1 << args.gae_n_log2, ceiling))
        for b in group:
            for p in ("fused", "fused_mlp"):
                run(f"rollout_{env0}_{p}_{b}", "rollout", b,
                    lambda b=b, p=p: rollout(b, ROLLOUT_ENVS[0], p, n_roll, t_roll, ceiling))  # fmt: skip
        _ROLLOUT_ENVS.clear()
        for k in links:
            for b in group:
                run(f"chain_step_k{k}_{b}", "chain", b,
                    lambda b=b, k=k: chain_step(b, 1 << args.chain_n_log2, k, args.chain_steps, ceiling))  # fmt: skip
    if not args.no_extras:
        for b in backends:
            for p in ("device", "fused_mlp_run_time_width", "host"):
                n = 1 << (args.rollout_host_n_log2 if p == "host" else args.rollout_n_log2)
                run(f"rollout_{env0}_{p}_{b}", "extra", b,
                    lambda b=b, p=p, n=n: rollout(b, ROLLOUT_ENVS[0], p, n, t_roll, ceiling))  # fmt: skip
        if "cupy" in backends:
            run("zero_copy_torch", "extra", None, zero_copy)
        for env_id in ROLLOUT_ENVS[1:]:
            for b in backends:
                for p in ("fused", "fused_mlp"):
                    run(f"rollout_{env_id.split('-')[0].lower()}_{p}_{b}", "extra", b,
                        lambda b=b, p=p, e=env_id: rollout(b, e, p, n_roll, t_roll, ceiling))  # fmt: skip
    _ROLLOUT_ENVS.clear()
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    results["process_seconds"] = round(time.perf_counter() - _T0, 3)
    save()
    if args.strict:  # the rehearsal: a section that raised runs once more (a harness slip fails both times; the
        # CPU stand-ins, Numba's simulator above all, have failed a section once and passed the next run)
        for key in [t["section"] for t in _TIMINGS if t["status"] == "error"]:
            first = results[key]["error"]
            section(results, key, *_SECTIONS[key])
            if _TIMINGS[-1]["status"] == "skipped":
                results[key]["error"] = first
            if _TIMINGS[-1]["status"] == "ok":
                print(f"  {key}: passed on its second attempt; the first raised {first}")
                results[key] = {**results[key], "first_attempt_error": first} if isinstance(results[key], dict) \
                    else {"value": results[key], "first_attempt_error": first}
        save()
    last = {t["section"]: t["status"] for t in _TIMINGS}  # a retried section: its last attempt
    # a retry that could not run (out of the budget) leaves the first error standing
    failed = [k for k, st in last.items() if st in ("error", "timeout") or (st == "skipped" and "error" in results[k])]
    print(f"wrote {path} ({len(last)} sections in {results['process_seconds']:.1f} s"
          + (f"; failed: {', '.join(failed)})" if failed else ")"))  # fmt: skip
    for key in failed:  # the reason in the step's log too, not only in the JSON (a lease may end before read-back)
        print(f"  {key}: {str((results.get(key) or {}).get('error', '?')).splitlines()[0][:300]}")
    return 1 if (args.strict and failed) or set(failed) & set(CHECKS) else 0


if __name__ == "__main__":
    sys.exit(main())
