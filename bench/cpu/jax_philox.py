"""The jax backend's Philox: the 64-bit products as written now against the first build, on XLA's CPU compiler.

The first build formed each round's 64-bit product from 16-bit halves with the low word sharing the halves'
middle sum with the high word. Compiled by XLA:CPU (jax 0.10), a program that kept both words of one product
(words 0 and 1, or 2 and 3, of a draw) and not the other pair ran its Philox at some 15 us per element: on
Pendulum-v1 (a two-variable reset draw, and the Gaussian policy's Box-Muller pair) the `jax` training stack spent
180 ms per update in a 32-env x 128-step rollout, 74 % of its wall time. The draws are the same bit for bit
(tests/test_jax_backend.py); this times the calls a user makes, built each way, side by side:

* ``step`` -- ``env.step(actions)`` on the jax backend (actions on the device, autoreset on);
* ``rollout`` -- ``env.rollout(T, policy, buffer)``, the fused scan with an MLP policy (the in-scan draws);
* ``train rollout`` -- the `jax` training stack's rollout program (phase "env") on the task's pinned config.

    python bench/cpu/jax_philox.py --out bench/cpu/results/jax_philox.json

The old build is this file's copy of the first ``_mulhilo``, swapped into ``portkern.backends._jax_ops`` while
a second backend instance (its own compiled programs) traces; both are compiled and run before any timing.
Each row: calls per second of both builds, median and 10th-90th percentile of the rounds (shuffled order per
round), and new over old: the ratio of medians and the 10th-90th percentile of the per-round ratios.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import Any

import jax
import numpy as np
from _common import interleaved, machine_info, paired_ratio, rate_summary, write_json
from rich.console import Console
from rich.table import Table

from portkern import envs, step
from portkern.backends import _jax_ops as ops
from portkern.backends import get_backend
from portkern.backends.jax import JaxBackend
from portkern.policy import MLPPolicy
from portkern.train import config as train_config
from portkern.train import jax_ppo

U32 = np.uint32


def old_mulhilo(m: int, c: Any) -> tuple[Any, Any]:
    """``_jax_ops._mulhilo`` as first written (uint32 only; ``lo`` shares ``mid`` with ``hi``)."""
    mh, ml = m >> 16, m & 0xFFFF
    ch, cl = c >> 16, c & 0xFFFF
    a = cl * U32(ml)
    b = cl * U32(mh)
    d = ch * U32(ml)
    mid = (a >> 16) + (b & 0xFFFF) + (d & 0xFFFF)
    lo = (a & 0xFFFF) | (mid << 16)
    hi = ch * U32(mh) + (b >> 16) + (d >> 16) + (mid >> 16)
    return hi, lo


@contextmanager
def old_build():
    new = ops._mulhilo
    ops._mulhilo = old_mulhilo
    try:
        yield
    finally:
        ops._mulhilo = new


def cases_for(env_id: str, n: int, steps: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """{case: {build: call}} for one env; every call compiled (the old one under :func:`old_build`) and run once."""
    spec = envs.get(env_id)
    trained = env_id in train_config.load()  # the training stack runs only the pinned tasks
    out: dict[str, dict[str, Callable[[], Any]]] = {"step": {}, "rollout": {}}
    if trained:
        out["train rollout"] = {}
    policy = MLPPolicy.init(spec, hidden=64, seed=0)
    g = np.random.default_rng(0)
    host_actions = (g.integers(0, spec.discrete_actions, (n,)).astype(spec.action_dtype) if spec.is_discrete
                    else g.uniform(-1, 1, (n, spec.action_dim) if spec.action_dim > 1 else (n,)).astype(spec.action_dtype))  # fmt: skip
    st = jax_ppo.Static.of(train_config.task(env_id)) if trained else None
    for build in ("new", "old"):
        be = get_backend("jax") if build == "new" else JaxBackend()
        env = step.make(env_id, n, backend=be, seed=0)
        env.reset()
        actions = be.from_host(host_actions)
        buf = env.rollout_buffer(steps)

        def do_step(env=env, actions=actions, be=be):
            env.step(actions)
            be.synchronize()

        def do_rollout(env=env, buf=buf, be=be):
            env.rollout(steps, policy, buf)
            be.synchronize()

        calls = {"step": do_step, "rollout": do_rollout}
        if trained:
            fn, state = jax.jit(partial(jax_ppo.rollout, st)), jax_ppo.init_state(st, 1)
            calls["train rollout"] = lambda fn=fn, state=state: jax.block_until_ready(fn(state))
        with old_build() if build == "old" else nullcontext():
            for name, call in calls.items():
                call()  # traces and compiles this build's program
                out[name][build] = call
    return out


def measure(env_id: str, n: int, steps: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for case, builds in cases_for(env_id, n, steps).items():
        secs = interleaved(builds, repeats)
        rates = {b: [1.0 / s for s in xs] for b, xs in secs.items()}
        ppo = train_config.task(env_id).ppo if case == "train rollout" else None
        shape = ({"num_envs": ppo.num_envs, "T": ppo.num_steps} if ppo is not None
                 else {"num_envs": n, "T": steps if case == "rollout" else 1})  # fmt: skip
        rows.append({
            "env": env_id, "case": case, **shape, "seconds": secs,
            "calls_per_s": {b: rate_summary(r) for b, r in rates.items()},
            "new_over_old": paired_ratio(rates["new"], rates["old"]),
        })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--envs", default=",".join(envs.ENVS), help="env ids, comma-separated (default: every env)"
    )
    ap.add_argument("--num-envs", type=int, default=1024, help="N for step and rollout (default 1024)")
    ap.add_argument("--steps", type=int, default=16, help="rollout length T (default 16)")
    ap.add_argument("--repeats", type=int, default=15, help="interleaved rounds (default 15)")
    ap.add_argument("--out", default="bench/cpu/results/jax_philox.json")
    args = ap.parse_args()
    rows = []
    table = Table(title="jax backend on the CPU, calls/s: median [10th-90th percentile of the rounds]")
    for col in ("env", "case", "N x T", "new build", "first build", "new / first"):
        table.add_column(col)
    fmt = lambda d: f"{d['median']:.4g} [{d['p10']:.4g}-{d['p90']:.4g}]"
    for env_id in args.envs.split(","):
        for row in measure(env_id, args.num_envs, args.steps, args.repeats):
            rows.append(row)
            r, q = row["calls_per_s"], row["new_over_old"]
            ratio = f"{q['ratio_of_medians']:.3g}x [{q['per_round']['p10']:.3g}-{q['per_round']['p90']:.3g}] {q['result']}"
            table.add_row(
                env_id, row["case"], f"{row['num_envs']} x {row['T']}", fmt(r["new"]), fmt(r["old"]), ratio
            )
            print(f"{env_id} {row['case']}: {ratio}", flush=True)
    Console().print(table)
    path = write_json(args.out, {"machine": machine_info([get_backend("jax")]), "options": vars(args), "rows": rows,
                                 "order": "a seeded shuffle of the two builds every round (_common.round_orders)",
                                 "interval": "10th to 90th percentile (portkern.portability.metrics.spread)"})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
