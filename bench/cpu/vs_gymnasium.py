"""env.step on portkern's OpenCL backend (PoCL on this CPU) against Gymnasium's own vector envs.

CartPole: portkern at N envs vs Gymnasium's numpy-vectorised CartPoleVectorEnv at the same N.
The other four envs have no vectorised Gymnasium implementation: portkern vs SyncVectorEnv (a
Python loop over N single envs) at a size SyncVectorEnv handles, plus portkern at the large N.

    PYTHONPATH=. python bench/cpu/vs_gymnasium.py [--n 1048576] [--sync-n 512] [--out FILE]
"""

from __future__ import annotations

import argparse
import warnings

import gymnasium as gym
import numpy as np
from _common import interleaved, machine_info, median, write_json
from rich.console import Console
from rich.table import Table

from portkern import envs, step

CARTPOLE = "CartPole-v1"
OTHERS = ("Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Acrobot-v1")


def _actions(spec, n: int, k: int, seed: int) -> list[np.ndarray]:
    """k pre-generated batches of valid actions (Gymnasium's shapes: Box actions are [n, 1])."""
    g = np.random.default_rng(seed)
    if spec.is_discrete:
        return [g.integers(0, spec.discrete_actions, n).astype(np.int32) for _ in range(k)]
    return [g.uniform(-spec.action_high, spec.action_high, (n, 1)).astype(np.float32) for _ in range(k)]


def _portkern(env_id: str, n: int, k: int, device: str | None):
    """Step functions for k steps: with actions already on the device, and with host actions uploaded."""
    env = step.make(env_id, n, backend="opencl", device=device, seed=0)
    env.reset()
    b = env.backend
    host = _actions(env.spec, n, k, 1)
    host = [a.reshape(n) for a in host]
    dev = [b.from_host(a) for a in host]

    def run(actions):
        def go():
            for a in actions:
                env.step(a)
            b.synchronize()  # the queue is asynchronous: time the work, not the enqueue

        return go

    return env, run(dev), run(host)


def _gym(env_id: str, n: int, k: int, mode: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode)
    g.reset(seed=0)
    acts = _actions(envs.get(env_id), n, k, 1)
    if envs.get(env_id).is_discrete:
        acts = [a.astype(np.int64) for a in acts]

    def go():
        for a in acts:
            g.step(a)

    return g, go


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2**20, help="envs for CartPole (and portkern's large-N column)")
    ap.add_argument("--sync-n", type=int, default=512, help="envs for the SyncVectorEnv comparisons")
    ap.add_argument("--steps", type=int, default=4, help="env steps per timed sample")
    ap.add_argument("--repeats", type=int, default=7, help="timed samples per case (interleaved)")
    ap.add_argument("--device", default=None, help="OpenCL device substring (default: the backend's choice)")
    ap.add_argument("--out", default="vs_gymnasium.json", help="JSON results file")
    args = ap.parse_args()
    k, reps = args.steps, args.repeats
    rows, backends = [], []

    # CartPole at N: portkern vs CartPoleVectorEnv, interleaved.
    env, pk_dev, pk_host = _portkern(CARTPOLE, args.n, k, args.device)
    backends.append(env.backend)
    g, gy = _gym(CARTPOLE, args.n, k, "vector_entry_point")
    t = interleaved({"portkern": pk_dev, "portkern_host_actions": pk_host, "gymnasium": gy}, reps)
    g.close()
    rows.append(_row(CARTPOLE, args.n, "CartPoleVectorEnv", t, k, None))

    # The others: portkern vs SyncVectorEnv at sync-n, and portkern at N for scale.
    for env_id in OTHERS:
        _, pk_dev, pk_host = _portkern(env_id, args.sync_n, k, args.device)
        _, pk_big, _ = _portkern(env_id, args.n, k, args.device)
        g, gy = _gym(env_id, args.sync_n, k, "sync")
        t = interleaved({"portkern": pk_dev, "portkern_host_actions": pk_host, "gymnasium": gy,
                         "portkern_at_n": pk_big}, reps)  # fmt: skip
        g.close()
        rows.append(_row(env_id, args.sync_n, "SyncVectorEnv", t, k, args.n))

    payload = {
        "benchmark": "portkern opencl env.step vs Gymnasium vector envs",
        "machine": machine_info(backends),
        "settings": {
            "n": args.n,
            "sync_n": args.sync_n,
            "steps_per_sample": k,
            "repeats": reps,
            "portkern_autoreset": "same_step",
            "actions": "pre-generated; device-resident "
            "unless the column says host actions (uploaded every step)",
        },
        "results": rows,
    }
    path = write_json(args.out, payload)
    _print(rows, payload["machine"], path)


def _row(env_id: str, n: int, against: str, t: dict[str, list[float]], k: int, big_n: int | None) -> dict:
    sps = {name: n * k / median(v) for name, v in t.items()}
    if big_n is not None:
        sps["portkern_at_n"] = big_n * k / median(t["portkern_at_n"])
    return {
        "env": env_id,
        "n": n,
        "gymnasium_impl": against,
        "seconds_per_step_median": {name: median(v) / k for name, v in t.items()},
        "seconds_per_step_all": {name: [x / k for x in v] for name, v in t.items()},
        "steps_per_s": sps,
        "ratio_portkern_vs_gymnasium": sps["portkern"] / sps["gymnasium"],
        "ratio_portkern_host_actions_vs_gymnasium": sps["portkern_host_actions"] / sps["gymnasium"],
        "ratio_portkern_at_n_vs_gymnasium": (sps["portkern_at_n"] / sps["gymnasium"]) if big_n else None,
        "portkern_large_n": big_n,
    }


def _print(rows: list[dict], machine: dict, path) -> None:
    c = Console(width=200)
    tab = Table(title=f"env.step: portkern opencl ({machine['backends'][0]['device']}) vs Gymnasium")
    for col in ("env", "N", "Gymnasium impl", "Gym steps/s", "portkern steps/s", "ratio",
                "ratio (host actions)", "portkern steps/s at large N", "ratio (large N)"):  # fmt: skip
        tab.add_column(col, justify="right" if col not in ("env", "Gymnasium impl") else "left")
    for r in rows:
        s = r["steps_per_s"]
        big = r["portkern_large_n"]
        tab.add_row(
            r["env"], str(r["n"]), r["gymnasium_impl"], f"{s['gymnasium']:.3g}", f"{s['portkern']:.3g}",
            f"{r['ratio_portkern_vs_gymnasium']:.2f}x",
            f"{r['ratio_portkern_host_actions_vs_gymnasium']:.2f}x",
            f"{s['portkern_at_n']:.3g} (N={big})" if big else "-",
            f"{r['ratio_portkern_at_n_vs_gymnasium']:.1f}x" if big else "-",
        )  # fmt: skip
    c.print(tab)
    cpu = f"{machine['cpu']}, {machine['cpus_available']} CPUs"
    c.print(f"medians of interleaved repeats; {cpu}; wrote {path}")


if __name__ == "__main__":
    main()
