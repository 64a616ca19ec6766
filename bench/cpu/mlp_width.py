"""Fused MLP rollouts built for the policy's hidden width against the run-time-width build, per device.

The kernels' MLP has two builds (kernels/*/pk_policy.h*): with PK_MLP_HIDDEN (the host's default, one build
per width: the hidden layers' accumulators unrolled into registers) and without it (loops bounded by the
run-time width over per-thread arrays of the widest width, 64). On the first H200 run the fused MLP rollout
ran ~90x slower than the random policy's, and ptxas gave each rollout kernel a 512-byte local-memory frame
for those arrays. The results are equal bit for bit (tests/test_mlp_width.py); this times the two builds
of the public ``env.rollout`` interleaved, a shuffled order per round, on every OpenCL driver here.

    python bench/cpu/mlp_width.py --out bench/cpu/results/mlp_width.json

Each row: env-steps/s of both builds, median and 10th-90th percentile over the rounds, and the width
build's rate over the run-time build's: the ratio of medians and the 10th-90th percentile of the per-round
ratios (the two ran in the same round). bench/gpu/gpu_bench.py has the same pair on the GPU backends.
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import interleaved, machine_info, paired_ratio, rate_summary, write_json
from rich.console import Console
from rich.table import Table

from portkern import envs, step
from portkern.backends import get_backend
from portkern.backends import opencl as _opencl  # noqa: F401  (registers PyPI OpenCL drivers first)
from portkern.backends._opencl_devices import device_ids
from portkern.policy import MLPPolicy

BUILDS = {"width": True, "run-time": False}


def cpu_opencl_devices() -> list[str]:
    return [label for _, label in sorted(device_ids().items())]


def measure(device: str, env_id: str, n: int, steps: int, hidden: int, repeats: int) -> dict[str, Any]:
    be = get_backend("opencl", device)
    policy = MLPPolicy.init(envs.get(env_id), hidden=hidden, seed=0)
    env = step.make(env_id, n, backend=be, seed=0)
    env.reset()
    buf = env.rollout_buffer(steps)

    def case(fixed: bool):
        def run() -> None:
            be.fixed_mlp_width = fixed
            env.rollout(steps, policy, buf)
            be.synchronize()

        return run

    cases = {name: case(fixed) for name, fixed in BUILDS.items()}
    secs = interleaved(cases, repeats)  # builds and warms both first
    be.fixed_mlp_width = True
    rates = {name: [n * steps / s for s in xs] for name, xs in secs.items()}
    return {
        "device": be.device_name, "env": env_id, "num_envs": n, "T": steps, "hidden": hidden,
        "seconds": secs,
        "env_steps_per_s": {name: rate_summary(r) for name, r in rates.items()},
        "width_over_run_time": paired_ratio(rates["width"], rates["run-time"]),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--envs", default="CartPole-v1,Acrobot-v1,Pendulum-v1")
    ap.add_argument("--sizes", default="4096", help="env counts, comma-separated")
    ap.add_argument("--steps", type=int, default=16, help="rollout length T")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=15, help="interleaved rounds")
    ap.add_argument("--out", default="bench/cpu/results/mlp_width.json")
    args = ap.parse_args()
    devices = cpu_opencl_devices()
    rows = []
    table = Table(title="fused MLP rollout, env-steps/s: median [10th-90th percentile of the rounds]")
    for col in ("device", "env", "N", "width build", "run-time build", "width / run-time"):
        table.add_column(col)
    for device in devices:
        for env_id in args.envs.split(","):
            for n in (int(s) for s in args.sizes.split(",")):
                row = measure(device, env_id, n, args.steps, args.hidden, args.repeats)
                rows.append(row)
                r, q = row["env_steps_per_s"], row["width_over_run_time"]
                fmt = lambda d: f"{d['median']:.3g} [{d['p10']:.3g}-{d['p90']:.3g}]"
                table.add_row(device, env_id, str(n), fmt(r["width"]), fmt(r["run-time"]),
                              f"{q['ratio_of_medians']:.2f}x [{q['per_round']['p10']:.2f}-{q['per_round']['p90']:.2f}] {q['result']}")  # fmt: skip
                print(f"{device} {env_id} N={n}: {q['ratio_of_medians']:.2f}x ({q['result']})", flush=True)
    Console().print(table)
    backends = [get_backend("opencl", d) for d in devices]
    path = write_json(args.out, {"machine": machine_info(backends), "options": vars(args), "rows": rows,
                                 "order": "a seeded shuffle of the two builds every round (_common.round_orders)",
                                 "interval": "10th to 90th percentile (portkern.portability.metrics.spread)"})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
