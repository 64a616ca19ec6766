"""GPU measurements for one lent machine: copy ceiling, CartPole step, GAE, zero-copy to torch, rollout data paths,
Chain-v0 step at K = 3 and 10; writes JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from portkern import step as pk_step
from portkern.backends import EnvBuffers, get_backend, probe
from portkern.envs import ENVS
from portkern.policy import MLPPolicy, RandomPolicy, RolloutBuffer

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
    # OpenCL picks its platform by substring; torch needs "cuda" (its default is the CPU); the CUDA
    # backends take the default GPU.
    if name == "opencl":
        return os.environ.get("PORTKERN_OPENCL_DEVICE", "nvidia")
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


_DEADLINE = [float("inf")]  # perf_counter() after which sections are skipped (--budget-s)


def section(results: dict[str, Any], key: str, fn: Callable[[], Any]) -> None:
    """Run one measurement; a failure is recorded (one line + traceback tail), never fatal."""
    t0 = time.perf_counter()
    if t0 > _DEADLINE[0]:
        results[key] = {"skipped": "out of the run's time budget (--budget-s)"}
        print(f"[  skip] {key}: out of time", flush=True)
        return
    try:
        results[key] = fn()
        _free()
    except Exception as exc:
        results[key] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0],
                        "traceback": traceback.format_exc().splitlines()[-6:]}  # fmt: skip
    print(
        f"[{time.perf_counter() - t0:6.1f}s] {key}: {json.dumps(results[key], default=str)[:400]}", flush=True
    )


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
    }
    try:
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.memory", "--format=csv,noheader"],
            check=False, capture_output=True, text=True, timeout=20).stdout.strip()  # fmt: skip
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
    # A copy reads and writes every byte: 2 x nbytes cross the memory bus.
    return {
        "bytes_copied": nbytes,
        "bytes_moved": 2 * nbytes,
        "seconds": sec,
        "bytes_per_s": 2 * nbytes / sec,
    }


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


def rollout(name: str, env_id: str, path: str, n: int, steps: int) -> dict[str, Any]:
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
    return out


def chain_step(name: str, n: int, links: int, steps: int) -> dict[str, Any]:
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
    if compile_before is not None:
        out["compile_seconds_total"] = be.compile_seconds
    return out


def _host(be: Any, a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else be.to_host(a)


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--envs-log2", type=int, default=24)
    ap.add_argument("--gae-t", type=int, default=128)
    ap.add_argument("--gae-n-log2", type=int, default=20)
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rollout-t", type=int, default=128)
    ap.add_argument("--rollout-n-log2", type=int, default=20)
    ap.add_argument(
        "--rollout-host-n-log2",
        type=int,
        default=16,
        help="the host path runs the NumPy policy every step: a smaller N keeps it to seconds",
    )
    ap.add_argument(
        "--chain-n-log2", type=int, default=20, help="Chain-v0 envs (log2) of the chain_step sections"
    )
    ap.add_argument("--chain-steps", type=int, default=20)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=float("inf"),
        help="skip the sections that would start after this many seconds (results so far are kept)",
    )
    args = ap.parse_args()
    _DEADLINE[0] = time.perf_counter() + args.budget_s
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "gpu_bench.json")
    # The schema tells `portkern report` this file from bench runs and training files.
    results: dict[str, Any] = {
        "schema": "portkern-gpu-bench/1",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }

    def save() -> None:
        with open(path, "w") as fh:
            json.dump(results, fh, indent=2, default=str)

    section(results, "machine", machine_info)
    save()
    section(results, "copy_bandwidth", lambda: copy_bandwidth(args.copy_mib << 20))
    ceiling = results["copy_bandwidth"].get("bytes_per_s")
    save()

    def steps(names: tuple[str, ...]) -> None:
        for name in names:
            section(results, f"cartpole_step_{name}",
                    lambda name=name: cartpole_step(name, 1 << args.envs_log2, args.steps, ceiling))  # fmt: skip
            save()

    def rollouts(env_id: str, names: tuple[str, ...]) -> None:
        for name in names:
            for data_path in ROLLOUT_PATHS:
                n_log2 = args.rollout_host_n_log2 if data_path == "host" else args.rollout_n_log2
                section(results, f"rollout_{env_id.split('-')[0].lower()}_{data_path}_{name}",
                        lambda name=name, env_id=env_id, p=data_path, n=1 << n_log2: rollout(
                            name, env_id, p, n, args.rollout_t))  # fmt: skip
                save()

    # The order puts what a run cut short by --budget-s most needs first: the CartPole rollouts (with the
    # MLP builds' pair) before GAE, and the compiled frameworks (torch_compile's compiles took ~15 s each)
    # after the others.
    eager = tuple(b for b in BACKENDS if b not in COMPILED)
    steps(eager)
    rollouts(ROLLOUT_ENVS[0], eager)
    for name in BACKENDS:
        section(
            results, f"gae_{name}", lambda name=name: gae(name, args.gae_t, 1 << args.gae_n_log2, ceiling)
        )
        save()
    section(results, "zero_copy_torch", zero_copy)
    save()
    steps(COMPILED)
    rollouts(ROLLOUT_ENVS[0], COMPILED)
    for env_id in ROLLOUT_ENVS[1:]:
        rollouts(env_id, BACKENDS)
    _ROLLOUT_ENVS.clear()
    # Chain-v0 last (each K is its own build on every backend): stepping where the physics is the bill.
    for links in (3, 10):
        for name in BACKENDS:
            section(
                results,
                f"chain_step_k{links}_{name}",
                lambda name=name, links=links: chain_step(
                    name, 1 << args.chain_n_log2, links, args.chain_steps
                ),
            )
            save()
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    save()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
