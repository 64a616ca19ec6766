"""Rollout-buffer ops on this CPU: portkern (OpenCL on every CPU driver, PyTorch) against NumPy, PyTorch, JAX.

The ops of portkern.buffer over time-major [T, N] float32 buffers: gae, discounted_returns,
normalize, and gather (rows of a flattened [T*N, 4] array at a permutation, as a minibatch epoch).

portkern's rows time the call a user makes: ``portkern.buffer.gae(...)`` (argument checks included,
outputs from the backend's per-op buffer, no ``out=``), with the backend's default knobs:

* opencl:<driver>: the OpenCL backend on each OpenCL CPU device;
* portkern:torch, portkern:torch_compile: the PyTorch backends (eager; Inductor), each also on one
  thread ("@1t"), as the torch peers;
* opencl:<driver> (backend op, preallocated): a second, internal row: the backend's op alone, outputs
  preallocated, no checks, with the layout knobs (scan_vector_width x scan_vectors_per_item,
  reduce_chunk x reduce_vector_width, gather_rows_per_item x gather_vector_width) chosen by a short
  interleaved sweep first. What the kernel can do, never what a user gets.

Peers, each written the way its community writes it, inputs already where each one computes:

* numpy: portkern's NumPy backend op (the reference), outputs preallocated; plain float32 NumPy for normalize;
* torch_loop: the CleanRL ``ppo.py`` loop over t (one small op per row); torch_vec: the same
  recursion with the masks and deltas computed as whole-array ops and in-place per-row updates;
  ``torch.index_select(..., out=)`` for gather, one expression for normalize; each on torch's
  default threads and on one ("@1t");
* jax: ``lax.scan(reverse=True)`` under ``jit`` (the purejaxrl pattern), ``jnp`` for normalize/gather.

Every case is checked against the reference before it is timed. Timed rounds interleave all cases
(in an order shuffled afresh every round, seeded) on this shared machine; each sample is as many synchronised calls,
back to back, as last ``--min-round-ms`` (one for an op that takes longer), over their count. A ratio's
interval is the 10th to 90th percentile of its per-round ratios, as in portkern's reports (min-max kept
beside it). JAX's gather reads int32 indices (its default without x64) and promises them in bounds.
Rates are items/s (elements; rows for gather) over wall time, and over the process's CPU time
(all its threads: PoCL's, Intel's TBB, OpenMP, XLA), which load from other jobs disturbs less.

    PYTHONPATH=. python bench/cpu/buffer_peers.py [--sizes 128x65536,128x4096] [--repeats 9]
        [--no-opencl] [--no-compile] [--no-torch] [--no-jax] [--no-internal]
    (pip install 'portkern[opencl,bench,peers]'; Intel's CPU runtime too: 'portkern[opencl-intel]')
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _common import machine_info, round_orders, write_json
from rich.console import Console
from rich.table import Table

from portkern import buffer
from portkern.backends import get_backend
from portkern.backends import numpy as npb
from portkern.backends import opencl as _opencl  # noqa: F401  (registers PyPI OpenCL drivers first)
from portkern.portability.metrics import spread

GAMMA, LAM, EPS = 0.99, 0.95, 1e-8
OPS = ("gae", "discounted_returns", "normalize", "gather")
FEATURES = 4  # gather: row length (CartPole's observation)
#: Layout candidates per op swept on each OpenCL device before timing; the first is the GPU shape.
SWEEP: dict[str, list[dict[str, int]]] = {
    "gae": [{"scan_vector_width": w, "scan_vectors_per_item": v}
            for w, v in ((1, 1), (8, 32), (8, 128), (8, 512), (16, 64), (16, 256))],
    "normalize": [{"reduce_chunk": 0, "reduce_vector_width": 1}]
    + [{"reduce_chunk": c, "reduce_vector_width": w} for c in (4096, 16384, 65536) for w in (8, 16)],
    "gather": [{"gather_rows_per_item": 0, "gather_vector_width": 1, "gather_row_vector": 0}]
    + [{"gather_rows_per_item": r, "gather_vector_width": w, "gather_row_vector": 0} for r in (16, 64, 256) for w in (1, 4)]
    + [{"gather_rows_per_item": r, "gather_vector_width": 1, "gather_row_vector": 1} for r in (1, 16, 64)],
}  # fmt: skip
SWEEP["discounted_returns"] = SWEEP["gae"]
#: Tolerances of the check against the reference (float32): the scans are exact on portkern's
#: kernels; peers may contract or reorder (torch's addcmul, XLA's fusion), normalize reduces in
#: another order.
RTOL, ATOL = 1e-5, 1e-5


# ---- inputs and the reference --------------------------------------------------------------
def inputs(op: str, t: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    g = np.random.default_rng(seed)
    shape = (t, n)
    if op == "gae":
        return {"r": g.standard_normal(shape, np.float32), "v": g.standard_normal(shape, np.float32),
                "nv": g.standard_normal(shape, np.float32), "te": g.random(shape, np.float32) < 0.02,
                "tr": g.random(shape, np.float32) < 0.01}  # fmt: skip
    if op == "discounted_returns":
        return {"r": g.standard_normal(shape, np.float32), "te": g.random(shape, np.float32) < 0.02,
                "tr": g.random(shape, np.float32) < 0.01, "boot": g.standard_normal(n, np.float32)}  # fmt: skip
    if op == "normalize":
        return {"x": (3.0 * g.standard_normal(shape, np.float32) + 1.5).astype(np.float32)}
    m = t * n
    return {"x": g.standard_normal((m, FEATURES), np.float32), "idx": g.permutation(m).astype(np.int32)}


def reference(op: str, a: dict[str, np.ndarray]) -> list[np.ndarray]:
    if op == "gae":
        return list(npb.gae(a["r"], a["v"], a["nv"], a["te"], a["tr"], GAMMA, LAM))
    if op == "discounted_returns":
        return [npb.discounted_returns(a["r"], a["te"], a["tr"], a["boot"], GAMMA)]
    if op == "normalize":
        return [npb.normalize(a["x"], EPS)]
    return [a["x"][a["idx"]]]


def items(op: str, a: dict[str, np.ndarray]) -> int:
    return int(a["idx"].shape[0]) if op == "gather" else int(next(iter(a.values())).size)


# A case: (run, result) — run() computes once and waits for it; result() is the last output on the host.
Case = tuple[Callable[[], None], Callable[[], list[np.ndarray]]]


# ---- numpy ------------------------------------------------------------------------------------
def numpy_cases(op: str, a: dict[str, np.ndarray]) -> dict[str, Case]:
    b = get_backend("numpy")
    if op == "gae":
        adv, ret = np.empty_like(a["r"]), np.empty_like(a["r"])
        return {"numpy": (lambda: b.gae(a["r"], a["v"], a["nv"], a["te"], a["tr"], adv, ret, GAMMA, LAM),
                          lambda: [adv, ret])}  # fmt: skip
    if op == "discounted_returns":
        out = np.empty_like(a["r"])
        return {"numpy": (lambda: b.discounted_returns(a["r"], a["te"], a["tr"], a["boot"], out, GAMMA),
                          lambda: [out])}  # fmt: skip
    if op == "normalize":
        x, out, plain = a["x"], np.empty_like(a["x"]), np.empty_like(a["x"])

        def numpy_plain() -> None:  # float32 throughout: what most NumPy code writes
            np.divide(x - x.mean(), x.std() + np.float32(EPS), out=plain)

        return {"numpy": (lambda: b.normalize(x, out, EPS), lambda: [out]),
                "numpy_plain": (numpy_plain, lambda: [plain])}  # fmt: skip
    out = np.empty_like(a["x"])
    return {"numpy": (lambda: b.gather(a["x"], a["idx"], out), lambda: [out])}


# ---- torch ------------------------------------------------------------------------------------
def torch_cases(op: str, a: dict[str, np.ndarray]) -> dict[str, Case]:
    import torch

    h = {k: torch.from_numpy(v) for k, v in a.items()}  # CPU tensors sharing NumPy's memory
    gl = float(np.float32(GAMMA) * np.float32(LAM))
    if op == "gae":
        r, v, nv, te, tr = h["r"], h["v"], h["nv"], h["te"], h["tr"]
        steps = r.shape[0]
        res: dict[str, list[Any]] = {}

        def cleanrl() -> None:  # CleanRL ppo.py: advantages[t] = lastgaelam = delta + ..., row by row
            with torch.no_grad():
                adv = torch.zeros_like(r)
                nonterm, notdone = (~te).float(), (~(te | tr)).float()
                lastgaelam = 0
                for t in reversed(range(steps)):
                    delta = r[t] + GAMMA * nv[t] * nonterm[t] - v[t]
                    adv[t] = lastgaelam = delta + gl * notdone[t] * lastgaelam
                res["loop"] = [adv, adv + v]

        adv, ret = torch.empty_like(r), torch.empty_like(r)

        def vec() -> None:  # masks and deltas as whole-array ops, one fused in-place update per row
            with torch.no_grad():
                nonterm, notdone = (~te).float(), (~(te | tr)).float()
                delta = torch.addcmul(r, nv, nonterm, value=GAMMA).sub_(v)
                adv[steps - 1].copy_(delta[steps - 1])
                for t in range(steps - 2, -1, -1):
                    torch.addcmul(delta[t], notdone[t], adv[t + 1], value=gl, out=adv[t])
                torch.add(adv, v, out=ret)

        return {"torch_loop": (cleanrl, lambda: [x.numpy() for x in res["loop"]]),
                "torch_vec": (vec, lambda: [adv.numpy(), ret.numpy()])}  # fmt: skip
    if op == "discounted_returns":
        r, te, tr, boot = h["r"], h["te"], h["tr"], h["boot"]
        steps = r.shape[0]
        out = torch.empty_like(r)
        zero = torch.zeros((), dtype=r.dtype)

        def loop() -> None:  # CleanRL-style reverse loop; truncation mid-rollout ends the return
            with torch.no_grad():
                nonterm = (~te).float()
                running = boot
                for t in reversed(range(steps)):
                    nxt = running if t == steps - 1 else torch.where(tr[t], zero, running)
                    running = r[t] + GAMMA * nxt * nonterm[t]
                    out[t] = running

        out2 = torch.empty_like(r)

        def vec() -> None:  # whole-array mask, in-place per-row updates
            with torch.no_grad():
                gmask = (~te).float().mul_(GAMMA)
                carry = (~(tr | te)).float().mul_(GAMMA)  # where truncated (and not terminated): 0
                torch.addcmul(r[steps - 1], gmask[steps - 1], boot, out=out2[steps - 1])
                for t in range(steps - 2, -1, -1):
                    torch.addcmul(r[t], carry[t], out2[t + 1], out=out2[t])

        return {"torch_loop": (loop, lambda: [out.numpy()]), "torch_vec": (vec, lambda: [out2.numpy()])}
    if op == "normalize":
        x, out = h["x"], torch.empty_like(h["x"])

        def norm() -> None:
            torch.div(x - x.mean(), x.std(correction=0) + EPS, out=out)

        return {"torch": (norm, lambda: [out.numpy()])}
    x, idx = h["x"], h["idx"]
    out = torch.empty_like(x)
    return {"torch": (lambda: torch.index_select(x, 0, idx, out=out), lambda: [out.numpy()])}


def with_one_thread(cases: dict[str, Case]) -> dict[str, Case]:
    """Each torch case as it is (torch's default threads) and on one thread ("@1t"): on a loaded
    machine OpenMP's barriers wait for descheduled threads, and one thread can be the faster."""
    import torch

    if torch.get_num_threads() == 1:
        return cases
    out = dict(cases)
    for name, (run, result) in cases.items():

        def one(run: Callable[[], None] = run) -> None:
            n = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                run()
            finally:
                torch.set_num_threads(n)

        out[f"{name}@1t"] = (one, result)
    return out


# ---- jax --------------------------------------------------------------------------------------
def jax_cases(op: str, a: dict[str, np.ndarray]) -> dict[str, Case]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    d = {k: jax.device_put(v) for k, v in a.items()}
    gl = np.float32(np.float32(GAMMA) * np.float32(LAM))
    g = np.float32(GAMMA)
    res: dict[str, Any] = {}
    if op == "gae":

        @jax.jit
        def f(r, v, nv, te, tr):  # purejaxrl _calculate_gae, with terminated/truncated kept apart
            def step(last, x):
                r, v, nv, te, done = x
                delta = r + g * nv * (1.0 - te) - v
                last = delta + gl * (1.0 - done) * last
                return last, last

            xs = (r, v, nv, te.astype(r.dtype), (te | tr).astype(r.dtype))
            _, adv = lax.scan(step, jnp.zeros_like(r[0]), xs, reverse=True)
            return adv, adv + v

        def run() -> None:
            res["out"] = jax.block_until_ready(f(d["r"], d["v"], d["nv"], d["te"], d["tr"]))

    elif op == "discounted_returns":

        @jax.jit
        def f(r, te, tr, boot):
            def step(running, x):
                r, te, tr = x
                running = r + g * jnp.where(tr, 0.0, running) * (1.0 - te)
                return running, running

            # The carry starts at the bootstrap; the last step always uses it (truncated or not).
            xs = (r, te.astype(r.dtype), tr.at[-1].set(False))
            _, out = lax.scan(step, boot, xs, reverse=True)
            return (out,)

        def run() -> None:
            res["out"] = jax.block_until_ready(f(d["r"], d["te"], d["tr"], d["boot"]))

    elif op == "normalize":

        @jax.jit
        def f(x):
            return ((x - x.mean()) / (x.std() + EPS),)

        def run() -> None:
            res["out"] = jax.block_until_ready(f(d["x"]))

    else:

        @jax.jit
        def f(x, idx):
            return (x.at[idx].get(mode="promise_in_bounds"),)

        def run() -> None:
            res["out"] = jax.block_until_ready(f(d["x"], d["idx"]))

    return {"jax": (run, lambda: [np.asarray(x) for x in res["out"]])}


# ---- portkern: the public call, and the OpenCL backend op ----------------------------------------
#: Suffix of the internal row: the backend op with preallocated outputs, at the swept knobs.
INTERNAL = " (backend op, preallocated)"


def is_portkern(name: str) -> bool:
    return name.startswith(("opencl:", "portkern:"))


def public_case(b: Any, op: str, a: dict[str, np.ndarray]) -> Case:
    """``portkern.buffer.<op>`` on backend ``b`` as a user calls it, inputs already on its device (a CPU
    torch backend's: the host arrays themselves, as the torch peers' ``torch.from_numpy``)."""
    if b.name.startswith("torch") and str(getattr(b, "device", "")) == "cpu":
        import torch

        d = {k: torch.from_numpy(v) for k, v in a.items()}
    else:
        d = {k: b.from_host(v) for k, v in a.items()}
    res: dict[str, Any] = {}
    if op == "gae":
        call = lambda: buffer.gae(d["r"], d["v"], d["nv"], d["te"], d["tr"], gamma=GAMMA, lam=LAM, backend=b)
    elif op == "discounted_returns":
        call = lambda: (
            buffer.discounted_returns(d["r"], d["te"], d["tr"], d["boot"], gamma=GAMMA, backend=b),
        )
    elif op == "normalize":
        call = lambda: (buffer.normalize(d["x"], EPS, backend=b),)
    else:
        call = lambda: (buffer.gather(d["x"], d["idx"], backend=b),)

    def run() -> None:
        res["out"] = call()
        b.synchronize()

    return run, lambda: [np.array(b.to_host(o)) for o in res["out"]]


def opencl_op_case(b: Any, op: str, a: dict[str, np.ndarray]) -> Case:
    """The internal row: the backend op alone, with outputs allocated once beforehand."""
    dv = {k: b.from_host(v) for k, v in a.items()}
    if op == "gae":
        outs = [b.empty(a["r"].shape, np.float32) for _ in range(2)]
        call = lambda: b.gae(dv["r"], dv["v"], dv["nv"], dv["te"], dv["tr"], *outs, GAMMA, LAM)
    elif op == "discounted_returns":
        outs = [b.empty(a["r"].shape, np.float32)]
        call = lambda: b.discounted_returns(dv["r"], dv["te"], dv["tr"], dv["boot"], outs[0], GAMMA)
    elif op == "normalize":
        outs = [b.empty(a["x"].shape, np.float32)]
        call = lambda: b.normalize(dv["x"], outs[0], EPS)
    else:
        outs = [b.empty(a["x"].shape, np.float32)]
        call = lambda: b.gather(dv["x"], dv["idx"], outs[0])

    def run() -> None:
        call()
        b.synchronize()

    return run, lambda: [b.to_host(o) for o in outs]


def with_knobs(b: Any, knobs: dict[str, int], run: Callable[[], None]) -> Callable[[], None]:
    """run() with ``knobs`` set on the backend for its duration (the backend is shared by cases)."""

    def go() -> None:
        saved = {k: getattr(b, k) for k in knobs}
        for k, v in knobs.items():
            setattr(b, k, v)
        try:
            run()
        finally:
            for k, v in saved.items():
                setattr(b, k, v)

    return go


def opencl_devices(wanted: list[str] | None) -> list[str]:
    """Substrings naming every OpenCL CPU device (simulators excluded), or the ones asked for."""
    if wanted:
        return wanted
    import pyopencl as cl

    found = []
    for p in cl.get_platforms():
        if "oclgrind" in p.name.lower():
            continue
        for d in p.get_devices():
            if d.type & cl.device_type.CPU:
                found.append(p.name.strip())
    return found


def short(platform: str) -> str:
    """A case name for an OpenCL platform: pocl, intel, or its first word."""
    low = platform.lower()
    if "portable computing language" in low or "pocl" in low:
        return "pocl"
    return "intel" if low.startswith("intel") else "".join(c for c in low.split()[0] if c.isalnum())


# ---- timing -----------------------------------------------------------------------------------
def calls_per_round(cases: dict[str, Callable[[], None]], min_round_s: float) -> dict[str, int]:
    """How many back-to-back calls make one timed sample of each case: enough to last ``min_round_s``
    (from one more untimed call, after the first), so that a 2 ms op's sample is not one timer read
    and one scheduler blip; 1 for a call that lasts that long already."""
    reps = {}
    for name, fn in cases.items():
        t0 = time.perf_counter()
        fn()
        reps[name] = max(1, math.ceil(min_round_s / max(time.perf_counter() - t0, 1e-9)))
    return reps


def rounds(cases: dict[str, Callable[[], None]], repeats: int,
           reps: dict[str, int] | None = None) -> dict[str, dict[str, list[float]]]:  # fmt: skip
    """Wall and process-CPU seconds per call of each case per round (a round's ``reps[name]`` calls,
    back to back, over their count); the order is shuffled afresh each round (seeded, ``round_orders``), so that
    neither load drift on the shared machine nor the state a neighbour leaves favours one case."""
    names = list(cases)
    reps = reps or {}
    out = {n: {"wall": [], "cpu": []} for n in names}
    for order in round_orders(names, repeats):
        for n in order:
            gc.collect()
            fn, count = cases[n], reps.get(n, 1)
            w, c = time.perf_counter(), time.process_time()
            for _ in range(count):
                fn()
            out[n]["cpu"].append((time.process_time() - c) / count)
            out[n]["wall"].append((time.perf_counter() - w) / count)
    return out


def rates(count: int, secs: list[float]) -> dict[str, float]:
    r = sorted(count / s for s in secs)
    lo, hi = spread(r)
    return {"median": statistics.median(r), "p10": lo, "p90": hi, "min": r[0], "max": r[-1]}


def check(name: str, got: list[np.ndarray], want: list[np.ndarray]) -> str:
    for g, w in zip(got, want):
        if g.shape != w.shape or not np.allclose(g, w, rtol=RTOL, atol=ATOL):
            err = float(np.max(np.abs(g.astype(np.float64) - w))) if g.shape == w.shape else float("nan")
            raise AssertionError(f"{name}: differs from the reference (max abs error {err:.3g})")
    exact = all(np.array_equal(g, w) for g, w in zip(got, want))
    return "exact" if exact else f"within rtol {RTOL:g}, atol {ATOL:g}"


def sweep(b: Any, op: str, run: Callable[[], None], a: dict[str, np.ndarray],
          repeats: int) -> tuple[dict[str, int], list[dict]]:  # fmt: skip
    """The layout knobs of ``op`` on backend ``b``: the candidate with the best median wall rate, among
    those the device's compiler can build (float32 lanes within ``max_vector_bytes``, where it has one)."""
    cap = getattr(b, "max_vector_bytes", None)
    fits = [k for k in SWEEP[op]
            if cap is None or all(4 * w <= cap for n, w in k.items() if n.endswith("vector_width"))]
    cands = {str(k): with_knobs(b, k, run) for k in fits}
    t = rounds(cands, repeats)
    n = items(op, a)
    table = [{"knobs": k, "wall": rates(n, t[str(k)]["wall"]), "cpu": rates(n, t[str(k)]["cpu"])}
             for k in fits]  # fmt: skip
    best = max(table, key=lambda row: row["wall"]["median"])
    return best["knobs"], table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="128x65536,128x4096", help="comma-separated TxN buffer shapes")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--repeats", type=int, default=9, help="interleaved timed rounds per (op, size)")
    ap.add_argument("--min-round-ms", type=float, default=20.0,
                    help="each case's timed sample is as many back-to-back calls as last this long (one call "
                    "for an op that takes longer); 0: one call per sample")
    ap.add_argument("--sweep-repeats", type=int, default=5, help="rounds of the knob sweep per device")
    ap.add_argument(
        "--devices", default=None, help="comma-separated OpenCL device substrings (default: every CPU device)"
    )
    ap.add_argument("--no-opencl", action="store_true", help="no OpenCL rows (the torch rows and peers only)")
    ap.add_argument("--no-torch", action="store_true", help="no torch peers and no portkern torch rows")
    ap.add_argument("--no-compile", action="store_true", help="no portkern:torch_compile rows")
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--no-internal", action="store_true",
                    help="no '(backend op, preallocated)' rows and no knob sweep: the public calls and the peers "
                    "only (the sweep is most of a run's time on a loaded 2-core machine)")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch's intra-op threads for every torch row (default: torch's own, each row also "
                    "on one thread as '<row>@1t'); 1 on a loaded machine, where 2 threads wait on each other")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "buffer_peers.json"))
    args = ap.parse_args()
    sizes = [tuple(int(x) for x in s.lower().split("x")) for s in args.sizes.split(",")]
    devices = [] if args.no_opencl else opencl_devices(args.devices.split(",") if args.devices else None)
    backends = {f"opencl:{short(d)}": get_backend("opencl", d) for d in devices}
    torch_backends: dict[str, Any] = {}
    versions: dict[str, str] = {}
    if not args.no_torch:
        import torch

        if args.torch_threads is not None:
            torch.set_num_threads(args.torch_threads)
        versions["torch"] = f"{torch.__version__} ({torch.get_num_threads()} threads)"
        torch_backends["portkern:torch"] = get_backend("torch", "cpu")
        if not args.no_compile:
            torch_backends["portkern:torch_compile"] = get_backend("torch_compile", "cpu")
    if not args.no_jax:
        import jax

        versions["jax"] = f"{jax.__version__} ({jax.devices()[0].platform})"
    load = {"start": os.getloadavg()}
    results = []
    console = Console(width=200)
    for op in args.ops.split(","):
        for t, n in sizes:
            a = inputs(op, t, n)
            want = reference(op, a)
            count = items(op, a)
            cases: dict[str, Case] = dict(numpy_cases(op, a))
            if not args.no_torch:
                pk = {name: public_case(b, op, a) for name, b in torch_backends.items()}
                both = {**torch_cases(op, a), **pk}
                cases.update(both if args.torch_threads is not None else with_one_thread(both))
            if not args.no_jax:
                cases.update(jax_cases(op, a))
            chosen, sweeps = {}, {}
            for name, b in backends.items():
                cases[name] = public_case(b, op, a)  # the backend's own defaults, as a user gets them
                if args.no_internal:
                    continue
                run, result = opencl_op_case(b, op, a)
                knobs, sweeps[name] = sweep(b, op, run, a, args.sweep_repeats)
                chosen[name] = knobs
                cases[name + INTERNAL] = (with_knobs(b, knobs, run), result)
            agreement, first_call = {}, {}
            for name, (run, result) in cases.items():
                t0 = time.perf_counter()
                run()  # also torch_compile's compilation and jit's tracing, kept out of the timed rounds
                first_call[name] = time.perf_counter() - t0
                agreement[name] = check(name, result(), want)
            runs = {k: v[0] for k, v in cases.items()}
            reps = calls_per_round(runs, args.min_round_ms / 1e3)
            timed = rounds(runs, args.repeats, reps)
            row = {
                "op": op, "shape": [t, n], "items": count, "unit": "rows" if op == "gather" else "elements",
                "items_per_s_wall": {k: rates(count, v["wall"]) for k, v in timed.items()},
                "items_per_s_cpu": {k: rates(count, v["cpu"]) for k, v in timed.items()},
                "seconds": timed, "calls_per_round": reps, "check": agreement, "first_call_s": first_call, "opencl_knobs": chosen,
                "opencl_sweep": sweeps,
            }  # fmt: skip
            row["verdict"] = verdict(row)
            results.append(row)
            console.print(f"{op} {t}x{n}: " + ", ".join(
                f"{k} {v['median']:.3g}" for k, v in row["items_per_s_wall"].items()))  # fmt: skip
            del cases, a, want
            gc.collect()
    load["end"] = os.getloadavg()
    payload = {
        "benchmark": "rollout-buffer ops: portkern's public calls (opencl on every CPU driver, torch, "
        "torch_compile) and the OpenCL backend op vs NumPy, PyTorch and JAX",
        "machine": dict(machine_info([*backends.values(), *torch_backends.values()]), peers=versions,
                        loadavg=load),
        "settings": {
            "gamma": GAMMA,
            "lam": LAM,
            "eps": EPS,
            "repeats": args.repeats,
            "order": "shuffled afresh each round (seeded, _common.round_orders); before 2026-12-04 it rotated, "
            "which kept each case behind the same neighbour",
            "min_round_s": args.min_round_ms / 1e3,
            "interval": "10th to 90th percentile of the per-round values (portkern's reports' interval); "
            "min and max kept beside it",
            "jax_gather_indices": "int32: jnp.asarray of the int64 permutation under JAX's default "
            "(jax_enable_x64 off), as a JAX user's jax.random.permutation; every other row reads int64",
            "torch_threads": args.torch_threads if args.torch_threads is not None
            else "torch's default, each row also on one thread (@1t)",
            "sweep_repeats": None if args.no_internal else args.sweep_repeats,
            "internal_rows": not args.no_internal,
            "gather_row_len": FEATURES,
            "dtype": "float32",
            "flags": "bool inputs; peers convert them inside the timed call",
            "portkern_rows": "opencl:<driver>, portkern:<backend>: the public portkern.buffer call (checks, "
            "outputs from the per-op buffer, no out=), default knobs; '<name>" + INTERNAL + "': the backend "
            "op alone with preallocated outputs and the swept knobs (internal, not what a user gets)",
            "sweep": {op: SWEEP[op] for op in OPS},
        },
        "results": results,
    }
    path = write_json(args.out, payload)
    print_table(console, results, path)


def ratio(row: dict, name: str, other: str, basis: str) -> dict[str, Any]:
    """``name``'s rate over ``other``'s: the ratio of medians and the interval of the per-round ratios (the
    two ran in the same round, so load drift cancels): their 10th to 90th percentile, the interval every
    portkern report uses (portkern.portability.metrics.spread), with the min-max beside it. "above" /
    "below": the interval is over / under 1; "within noise" otherwise (docs/ARCHITECTURE.md: a ratio
    whose interval straddles 1 is never a winner)."""
    r, secs = row[f"items_per_s_{basis}"], row["seconds"]
    per_round = sorted(p / o for o, p in zip(secs[name][basis], secs[other][basis]))  # rates: times inverted
    lo, hi = spread(per_round)
    return {"against": other, "ratio_of_medians": r[name]["median"] / r[other]["median"],
            "per_round_ratio": {"median": statistics.median(per_round), "p10": lo, "p90": hi,
                                "min": per_round[0], "max": per_round[-1]},
            "result": "above" if lo > 1 else "below" if hi < 1 else "within noise"}  # fmt: skip


def idiomatic_torch(op: str) -> str:
    """The torch peer a torch user writes: the CleanRL loop for the scans, the one-liner otherwise."""
    return "torch_loop" if op in ("gae", "discounted_returns") else "torch"


def verdict(row: dict) -> dict[str, Any]:
    """Per portkern row and time basis: against the fastest peer (by median); the torch rows also
    against the idiomatic torch peer on the same threads, and torch_compile against eager."""
    out: dict[str, Any] = {}
    names = list(row["items_per_s_wall"])
    peers = [k for k in names if not is_portkern(k)]
    for basis in ("wall", "cpu"):
        r = row[f"items_per_s_{basis}"]
        best = max(peers, key=lambda k: r[k]["median"]) if peers else None
        for name in names:
            if not is_portkern(name):
                continue
            v = out.setdefault(name, {})
            if best is not None:
                v[basis] = {"fastest_peer": best, **ratio(row, name, best, basis)}
            suffix = "@1t" if name.endswith("@1t") else ""
            if name.startswith("portkern:"):
                for key, other in (("vs_idiomatic_torch", idiomatic_torch(row["op"]) + suffix),
                                   ("vs_eager", "portkern:torch" + suffix)):  # fmt: skip
                    if other in r and other != name and (key != "vs_eager" or "torch_compile" in name):
                        v.setdefault(key, {})[basis] = ratio(row, name, other, basis)
    return out


def print_table(console: Console, results: list[dict], path: Any) -> None:
    for basis in ("wall", "cpu"):
        tab = Table(title=f"items/s over {basis} time: median [10th-90th percentile] of interleaved rounds")
        names = sorted({k for r in results for k in r[f"items_per_s_{basis}"]},
                       key=lambda k: (is_portkern(k), k))  # fmt: skip
        tab.add_column("case")
        for r in results:
            tab.add_column(f"{r['op']} {r['shape'][0]}x{r['shape'][1]}", justify="right")
        for n in names:
            cells = []
            for r in results:
                v = r[f"items_per_s_{basis}"].get(n)
                cells.append(f"{v['median']:.3g} [{v.get('p10', v['min']):.2g}-{v.get('p90', v['max']):.2g}]" if v else "-")
            tab.add_row(n, *cells)
        console.print(tab)
        console.print(f"portkern rows, {basis} time: ratio of medians [10th-90th percentile of the per-round ratios]")
        for r in results:
            for name, v in r["verdict"].items():
                parts = [v[basis]] if basis in v else []
                parts += [v[k][basis] for k in ("vs_idiomatic_torch", "vs_eager") if k in v]
                line = "; ".join(f"{c['ratio_of_medians']:.2f}x [{c['per_round_ratio']['p10']:.2f}-"
                                 f"{c['per_round_ratio']['p90']:.2f}] vs {c['against']} ({c['result']})"
                                 for c in parts)  # fmt: skip
                console.print(f"  {r['op']} {r['shape'][0]}x{r['shape'][1]} {name}: {line}")
    for r in results:
        if r["opencl_knobs"]:
            shape = f"{r['shape'][0]}x{r['shape'][1]}"
            console.print(f"{r['op']} {shape} swept knobs (internal rows): {r['opencl_knobs']}")
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
