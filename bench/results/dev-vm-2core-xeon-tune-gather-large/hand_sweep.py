"""Hand sweep of the OpenCL gather's layouts, the public call, beside torch (and JAX when cold).

usage: python hand_sweep.py DEVICE ROWS ROUNDS [cold]
Warm (default): int64 indices, torch.index_select on 2 threads, the same arrays every call.
cold: int32 indices (as bench/cpu/buffer_peers.py), a 64 MB buffer written before every timed call,
JAX's jit(x[idx]) added and torch on 1 thread.
"""
import time, statistics, numpy as np, sys
from portkern import buffer
from portkern.backends import get_backend
dev = sys.argv[1]; M = int(sys.argv[2]); reps = int(sys.argv[3]); cold = sys.argv[4:] == ["cold"]
b = get_backend("opencl", device=dev)
rng = np.random.default_rng(0)
x = rng.standard_normal((M, 4)).astype(np.float32)
idx = rng.permutation(M).astype(np.int32 if cold else np.int64)
dx, di = b.from_host(x), b.from_host(idx)
cases = {}
grid = [(None, 0, 1, 0), (256, 0, 1, 0), (None, 1, 1, 0), (256, 1, 1, 0), (None, 1, 4, 0), (256, 4, 1, 0), (256, 16, 1, 16), (256, 64, 1, 16), (None, 16, 4, 16), (256, 16, 4, 16), (None, 64, 4, 0), (256, 256, 1, 0)]
for ls, rpi, vw, pf in grid:
    def run(k=(ls, rpi, vw, pf)):
        sv = (b.local_size, b.gather_rows_per_item, b.gather_vector_width, b.gather_prefetch)
        b.local_size, b.gather_rows_per_item, b.gather_vector_width, b.gather_prefetch = k
        try:
            buffer.gather(dx, di, backend=b); b.synchronize()
        finally:
            b.local_size, b.gather_rows_per_item, b.gather_vector_width, b.gather_prefetch = sv
    cases[(ls, rpi, vw, pf)] = run
cases["default"] = lambda: (buffer.gather(dx, di, backend=b), b.synchronize())
import torch
torch.set_num_threads(1 if cold else 2)
tx, ti = torch.from_numpy(x), torch.from_numpy(idx); tout = torch.empty_like(tx)
if cold:
    import jax, jax.numpy as jnp
    jx, ji = jnp.asarray(x), jnp.asarray(idx)
    fj = jax.jit(lambda a, i: a[i])
    cases["jax"] = lambda: fj(jx, ji).block_until_ready()
cases["torch.index_select"] = lambda: torch.index_select(tx, 0, ti, out=tout)
for r in cases.values():
    for _ in range(2): r()
ts = {k: [] for k in cases}
junk = np.zeros(16 << 20, np.float32) if cold else None
for rep in range(reps):
    ks = list(cases.items())
    if rep % 2: ks = ks[::-1]
    for k, r in ks:
        if cold:
            junk[:] += 1.0
        t0 = time.perf_counter(); r(); ts[k].append((time.perf_counter()-t0)*1e3)
print(dev, M, "rows; describe:", b.describe().get("tuned_defaults", "")[:80])
for k, v in sorted(ts.items(), key=lambda kv: statistics.median(kv[1])): print(k, "median ms", round(statistics.median(v), 3), "p10", round(statistics.quantiles(v, n=10)[0], 3))
