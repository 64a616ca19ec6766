"""The public torch_compile ``env.step`` on one env and N, as NOTES.md ran it: ms per step (median of 7 rounds of
20 steps, after 5 warm-up steps) and Dynamo's graph-break count, as one JSON line.

    python torch_compile_step.py Acrobot-v1 1024
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch
import torch._dynamo.utils as dynamo_utils

import portkern
from portkern import envs, step


def main() -> None:
    env_id, n = sys.argv[1], int(sys.argv[2])
    spec = envs.get(env_id)
    env = step.make(env_id, n, backend="torch_compile", seed=0)
    env.reset()
    g = np.random.default_rng(0)
    if spec.is_discrete:
        acts = torch.from_numpy(g.integers(0, spec.discrete_actions, n).astype(spec.action_dtype))
    else:
        acts = torch.from_numpy(g.uniform(-1, 1, n).astype(spec.action_dtype))
    for _ in range(5):
        env.step(acts)
    xs = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(20):
            env.step(acts)
        xs.append((time.perf_counter() - t) / 20 * 1e3)
    print(json.dumps({"portkern": portkern.__version__, "env": env_id, "num_envs": n,
                      "ms_per_step_median": round(sorted(xs)[3], 4), "ms_per_step": [round(x, 4) for x in xs],
                      "graph_breaks": sum(dynamo_utils.counters["graph_break"].values())}))  # fmt: skip


if __name__ == "__main__":
    main()
