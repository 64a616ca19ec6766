"""The three rollout data paths on this CPU: host round-trip, one launch per step, fused.

``path="host"``: obs come back every step, the policy runs in NumPy, actions go down (an
off-device simulator's loop). ``"device"``: the fused kernel, one step per launch. ``"fused"``:
the policy inside the env kernel, all T steps in one launch. Random and MLP policies, every env,
on the OpenCL backend (PoCL) and on the NumPy reference.

The key figure: CartPole, N = 2^16 envs, T = 128, random policy, fused vs host, measured in one
run with interleaved repeats. The all-envs matrix runs at a smaller N and T so the whole script
stays within a few minutes on a 2-core machine (the host path with the MLP policy is slow).

    PYTHONPATH=. python bench/cpu/rollout_paths.py [--n 65536] [--t 128] [--out FILE]
"""

from __future__ import annotations

import argparse
import os

from _common import interleaved, machine_info, median, write_json
from rich.console import Console
from rich.table import Table

from portkern import envs, step
from portkern.policy import MLPPolicy, RandomPolicy

PATHS = ("host", "device", "fused")


def _case(backend: str, env_id: str, n: int, t: int, policy_name: str, path: str, spl: int | None):
    """A function that runs one T-step rollout into a preallocated buffer and waits for it."""
    env = step.make(env_id, n, backend=backend, seed=0)
    env.reset()
    policy = RandomPolicy() if policy_name == "random" else MLPPolicy.init(env.spec, hidden=64, seed=0)
    buf = env.rollout_buffer(t, host=path == "host")
    b = env.backend

    def go():
        env.rollout(t, policy, buf, path=path, steps_per_launch=spl)
        b.synchronize()

    return env, go


def _row(backend, env_id, n, t, policy, path, times, cores):
    sps = n * t / median(times)
    return {
        "backend": backend, "env": env_id, "n": n, "t": t, "policy": policy, "path": path,
        "seconds_median": median(times), "seconds_all": times, "env_steps_per_s": sps,
        # This machine's hours (all its cores) and core-hours per 1e9 env steps: the CPU
        # analogue of GPU-hours per billion steps.
        "machine_hours_per_1e9_steps": 1e9 / sps / 3600,
        "core_hours_per_1e9_steps": 1e9 / sps / 3600 * cores,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2**16, help="envs for the key CartPole figure")
    ap.add_argument("--t", type=int, default=128, help="steps per rollout for the key figure")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats for the key figure")
    ap.add_argument("--matrix-n", type=int, default=2**14, help="envs for the all-envs matrix")
    ap.add_argument("--matrix-t", type=int, default=16, help="steps per rollout for the matrix")
    ap.add_argument("--steps-per-launch", type=int, default=None,
                    help="fused path: steps per launch (default all)")  # fmt: skip
    ap.add_argument("--out", default="rollout_paths.json", help="JSON results file")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    spl = args.steps_per_launch
    rows = []

    # Key figure: CartPole random policy, the three paths interleaved in one run.
    cases, env = {}, None
    for path in PATHS:
        env, cases[path] = _case("opencl", "CartPole-v1", args.n, args.t, "random", path, spl)
    times = interleaved(cases, args.repeats)
    key = [_row("opencl", "CartPole-v1", args.n, args.t, "random", p, times[p], cores) for p in PATHS]
    rows += key
    backends = [env.backend]

    # Matrix: every env x policy x path, OpenCL and the NumPy reference, one warm-up + one timed run.
    for backend in ("opencl", "numpy"):
        for env_id in envs.ENVS:
            for policy in ("random", "mlp"):
                cases = {p: _case(backend, env_id, args.matrix_n, args.matrix_t, policy, p, spl)[1]
                         for p in PATHS}  # fmt: skip
                times = interleaved(cases, 1)
                rows += [_row(backend, env_id, args.matrix_n, args.matrix_t, policy, p, times[p], cores)
                         for p in PATHS]  # fmt: skip

    sps = {r["path"]: r["env_steps_per_s"] for r in key}
    payload = {
        "benchmark": "portkern rollout data paths (host round-trip, device per-step, fused)",
        "machine": machine_info(backends),
        "settings": vars(args),
        "key_figure": {
            "env": "CartPole-v1",
            "n": args.n,
            "t": args.t,
            "policy": "random",
            "fused_vs_host": sps["fused"] / sps["host"],
            "device_vs_host": sps["device"] / sps["host"],
            "fused_vs_device": sps["fused"] / sps["device"],
        },
        "results": rows,
    }
    path = write_json(args.out, payload)
    _print(payload, path)


def _print(payload: dict, path) -> None:
    c = Console(width=200)
    k = payload["key_figure"]
    c.print(
        f"[bold]key figure[/]: CartPole-v1, N={k['n']}, T={k['t']}, random policy on opencl: fused "
        f"{k['fused_vs_host']:.2f}x the host round-trip (device per-step {k['device_vs_host']:.2f}x; "
        f"fused {k['fused_vs_device']:.2f}x device per-step)"
    )
    tab = Table(title=f"rollout paths ({payload['machine']['backends'][0]['device']})")
    for col in ("backend", "env", "N", "T", "policy", "path", "env-steps/s", "s/rollout",
                "machine-h / 1e9 steps", "core-h / 1e9 steps"):  # fmt: skip
        tab.add_column(col, justify="right" if col[0].isupper() or "/" in col or col == "T" else "left")
    for r in payload["results"]:
        tab.add_row(
            r["backend"], r["env"], str(r["n"]), str(r["t"]), r["policy"], r["path"],
            f"{r['env_steps_per_s']:.3g}", f"{r['seconds_median']:.3f}",
            f"{r['machine_hours_per_1e9_steps']:.3g}", f"{r['core_hours_per_1e9_steps']:.3g}",
        )  # fmt: skip
    c.print(tab)
    m = payload["machine"]
    c.print(f"{m['cpu']}, {m['cpus_available']} CPUs; medians of interleaved repeats; wrote {path}")


if __name__ == "__main__":
    main()
