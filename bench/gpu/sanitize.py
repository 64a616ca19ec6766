"""Every CuPy kernel once, small, for compute-sanitizer (bench/gpu/run_gpu.sh).

pytest under the sanitizer spent its whole 30 s budget importing (the test suite's conftest probes
torch, JAX and Numba, each initialising CUDA under the tool) on the first H200 run. This imports
CuPy and NumPy only: each env's step (the "device" path: one step per launch) and fused rollout (random
and MLP policies), GAE, discounted returns, normalize and gather, each checked against the NumPy
reference, so a race that corrupts a result also fails here. Exit status 1 on a mismatch; the
sanitizer's own errors are its exit code (run_gpu.sh passes --error-exitcode).

    compute-sanitizer --tool memcheck python3 bench/gpu/sanitize.py [backend, default cupy]

On a machine without a GPU, ``python3 bench/gpu/sanitize.py cuda_host`` runs the same CUDA C on the CPU.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import portkern
from portkern import buffer, envs, step
from portkern.policy import MLPPolicy, RandomPolicy

N, T = 1000 + 37, 8  # not a multiple of any block size


def _check(name: str, got, want, tol: float) -> bool:
    try:
        np.testing.assert_allclose(portkern.to_numpy(got), want, rtol=tol, atol=tol)
    except AssertionError as exc:
        print(f"MISMATCH {name}: {str(exc).splitlines()[-1]}")
        return False
    return True


def main(backend: str = "cupy", env_ids: list[str] | None = None) -> int:
    ok = True
    for env_id in env_ids or list(envs.ENVS):
        spec = envs.ENVS[env_id]
        for label, policy, path in (("device", RandomPolicy(), "device"), ("fused", RandomPolicy(), "fused"),
                                    ("fused-mlp", MLPPolicy.init(spec, hidden=16, seed=3), "fused")):  # fmt: skip
            got, want = (step.make(env_id, N, backend=b, seed=5) for b in (backend, "numpy"))
            got.reset()
            want.reset()
            g, w = got.rollout(T, policy, path=path), want.rollout(T, policy, path=path)
            ok &= _check(f"{env_id} {label} obs", g.obs, portkern.to_numpy(w.obs), 1e-4)
            ok &= _check(f"{env_id} {label} rewards", g.rewards, portkern.to_numpy(w.rewards), 1e-4)
    cp = portkern.get_backend(backend)
    rng = np.random.default_rng(0)
    shape = (33, 300)
    r, v, nv = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    term, trunc = rng.random(shape) < 0.1, rng.random(shape) < 0.05
    up = [cp.from_host(a) for a in (r, v, nv, term, trunc)]
    want_adv, want_ret = buffer.gae(r, v, nv, term, trunc, gamma=0.99, lam=0.95)
    adv, ret = buffer.gae(*up, gamma=0.99, lam=0.95)
    ok &= _check("gae advantages", adv, want_adv, 1e-5) & _check("gae returns", ret, want_ret, 1e-5)
    want = buffer.discounted_returns(r, term, trunc, nv[-1].copy(), gamma=0.97)
    got = buffer.discounted_returns(up[0], up[3], up[4], cp.from_host(nv[-1].copy()), gamma=0.97)
    ok &= _check("discounted_returns", got, want, 1e-5)
    for size in (1, 257, 100_003):
        x = (rng.normal(size=size) * 3 + 5).astype(np.float32)
        ok &= _check(f"normalize[{size}]", buffer.normalize(cp.from_host(x)), buffer.normalize(x), 1e-5)
    x = rng.normal(size=(300, 5)).astype(np.float32)
    idx = rng.permutation(300)[:77].astype(np.int64)
    ok &= _check("gather", buffer.gather(cp.from_host(x), cp.from_host(idx)), x[idx], 0.0)
    print(
        f"sanitize.py ({backend}): every kernel matched the reference"
        if ok
        else f"sanitize.py ({backend}): MISMATCH (above)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Every CuPy kernel once, small, for compute-sanitizer.")
    ap.add_argument("backend", nargs="?", default="cupy",
                    help="cupy on a GPU; cuda_host runs the same CUDA C on the CPU")  # fmt: skip
    ap.add_argument("--envs", help="comma-separated env ids (default: every env)")
    a = ap.parse_args()
    sys.exit(main(a.backend, a.envs.split(",") if a.envs else None))
