"""The working tree's OpenCL kernels against those of a git revision: the fused rollout a user runs, per driver.

A kernel change that a compiler report calls better (fewer registers, no spill: ``portkern port-check``) is
compile-level evidence, not speed. This times the public ``env.rollout`` with both kernel versions in one
process on every OpenCL driver here: the revision's ``kernels/`` are extracted (``git archive``) and built
through the same backend instance, each version with its own kernel cache, the two taking turns in every
round (a seeded shuffle per round, bench/cpu/_common.py).

    python bench/cpu/kernel_ab.py --base HEAD --policy mlp --out bench/cpu/results/kernel_ab.json

Each row: env-steps/s of both versions, median and 10th-90th percentile over the rounds, and the working
tree's rate over the revision's: the ratio of medians and the 10th-90th percentile of the per-round ratios.
"""

from __future__ import annotations

import argparse
import subprocess
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

from _common import interleaved, machine_info, paired_ratio, rate_summary, write_json
from rich.console import Console
from rich.table import Table

import portkern._kernels as _kernels
from portkern import envs, step
from portkern.backends import get_backend
from portkern.backends import opencl as _opencl  # noqa: F401  (registers PyPI OpenCL drivers first)
from portkern.backends._opencl_devices import device_ids
from portkern.policy import MLPPolicy, RandomPolicy

REPO = Path(__file__).resolve().parents[2]


def extract_kernels(rev: str, into: Path) -> Path:
    """``kernels/`` as of git revision ``rev`` under ``into``; a ValueError naming ``--base`` if git cannot."""
    res = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, "kernels"], capture_output=True)
    if res.returncode:
        raise ValueError(f"--base {rev}: {res.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=BytesIO(res.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "kernels"


def measure(device: str, env_id: str, n: int, steps: int, policy_name: str, base_dir: Path,
            repeats: int) -> dict[str, Any]:  # fmt: skip
    be = get_backend("opencl", device)
    spec = envs.get(env_id)
    policy = MLPPolicy.init(spec, hidden=64, seed=0) if policy_name == "mlp" else RandomPolicy()
    env = step.make(env_id, n, backend=be, seed=0)
    env.reset()
    buf = env.rollout_buffer(steps)
    caches: dict[str, dict] = {"base": {}, "tree": {}}
    own_dir = _kernels.kernel_dir

    def case(name: str):
        def run() -> None:
            be.__dict__["_pk_caches"] = caches[name]  # this version's kernels (built on first use)
            if name == "base":
                _kernels.kernel_dir = lambda api: base_dir / api
            try:
                env.rollout(steps, policy, buf)
                be.synchronize()
            finally:
                _kernels.kernel_dir = own_dir

        return run

    secs = interleaved({name: case(name) for name in caches}, repeats)  # builds and warms both first
    be.__dict__["_pk_caches"] = {}
    rates = {name: [n * steps / s for s in xs] for name, xs in secs.items()}
    return {
        "device": be.device_name, "env": env_id, "policy": policy_name, "num_envs": n, "T": steps, "seconds": secs,
        "env_steps_per_s": {name: rate_summary(r) for name, r in rates.items()},
        "tree_over_base": paired_ratio(rates["tree"], rates["base"]),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="git revision whose kernels/ are the baseline")
    ap.add_argument("--envs", default="CartPole-v1,Acrobot-v1,Pendulum-v1,Chain-v0")
    ap.add_argument("--policy", choices=("mlp", "random"), default="mlp")
    ap.add_argument("--sizes", default="16384", help="env counts, comma-separated")
    ap.add_argument("--steps", type=int, default=16, help="rollout length T")
    ap.add_argument("--repeats", type=int, default=11, help="interleaved rounds")
    ap.add_argument("--out", default="bench/cpu/results/kernel_ab.json")
    args = ap.parse_args()
    devices = [label for _, label in sorted(device_ids().items())]
    rows = []
    table = Table(title=f"fused {args.policy} rollout, env-steps/s: median [10th-90th percentile of the rounds]")
    for col in ("device", "env", "N", "working tree", f"kernels at {args.base}", "tree / base"):
        table.add_column(col)
    with tempfile.TemporaryDirectory(prefix="portkern-kernel-ab-") as tmp:
        try:
            base_dir = extract_kernels(args.base, Path(tmp))
        except ValueError as exc:
            ap.error(str(exc))
        for device in devices:
            for env_id in args.envs.split(","):
                for n in (int(s) for s in args.sizes.split(",")):
                    row = measure(device, env_id, n, args.steps, args.policy, base_dir, args.repeats)
                    rows.append(row)
                    r, q = row["env_steps_per_s"], row["tree_over_base"]
                    fmt = lambda d: f"{d['median']:.3g} [{d['p10']:.3g}-{d['p90']:.3g}]"
                    table.add_row(device, env_id, str(n), fmt(r["tree"]), fmt(r["base"]),
                                  f"{q['ratio_of_medians']:.2f}x [{q['per_round']['p10']:.2f}-{q['per_round']['p90']:.2f}] {q['result']}")  # fmt: skip
                    print(f"{device} {env_id} N={n}: {q['ratio_of_medians']:.2f}x ({q['result']})", flush=True)
    Console().print(table)
    backends = [get_backend("opencl", d) for d in devices]
    base_commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", args.base], capture_output=True,
                                 text=True).stdout.strip()  # fmt: skip
    path = write_json(args.out, {"machine": machine_info(backends), "options": vars(args), "base_commit": base_commit,
                                 "rows": rows,
                                 "order": "a seeded shuffle of the two versions every round (_common.round_orders)",
                                 "interval": "10th to 90th percentile (portkern.portability.metrics.spread)"})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
