"""Chain-v0 stepping on this CPU: portkern's ``env.step`` (NumPy, OpenCL on PoCL and Intel) against MuJoCo's
batched C stepping (``mujoco.rollout``) and MJX.

Every row does the same job: N envs x T env steps of the K-link chain (the MJCF of
``portkern.envs.chain.mjcf(K)``), each env step ``FRAME_SKIP`` MuJoCo steps (RK4) with the control held,
from the same start states (one seeded ``reset`` of the NumPy env, float64, rounded to a row's dtype) under
the same controls (a [T, N, K] float32 array drawn once, uniform in [-1, 1)). Rows:

* ``mujoco.rollout``: ``mujoco.rollout.Rollout(nthread=C)`` with one ``MjData`` per thread (C: the CPUs
  of this process's affinity), as MuJoCo's docs write it; ``nstep = T * FRAME_SKIP``, the [N, T, K]
  controls repeated FRAME_SKIP times along the steps, outputs (every step's full physics state, as the
  API records it) preallocated once. ``mujoco.rollout@1t``: the same on the calling thread
  (``nthread=0``, one ``MjData``). float64: MuJoCo computes in double.
* ``mjx``: ``jax.jit(jax.vmap(f))`` over the N envs, ``f`` a ``lax.scan`` over the T controls of a
  ``lax.scan`` of FRAME_SKIP ``mjx.step`` calls (T * FRAME_SKIP steps), as MJX's docs batch it; the
  final qpos/qvel returned. float32 (JAX's default) unless ``--mjx-x64`` (then float64). Compile time is
  reported apart (``mjx_compile_s``), never in the rounds. Two settings by default, both recorded in
  each result's ``mjx_path`` (see "MJX on this CPU" below): the MJX model's ``opt.jacobian`` is sparse
  (``--mjx-jacobian``), and the executable is compiled with XLA's CPU fusion emitters off
  (``--mjx-fusion-emitters`` keeps them). ``--mjx-chunk B`` runs ``lax.map(f, ..., batch_size=B)``
  (a vmap over chunks of B envs, one chunk after the other) instead of one vmap.
* ``portkern:<backend>:<dtype>``: ``env = step.make("Chain-v0", N, links=K, ...)`` and T calls of
  ``env.step(actions)`` with the host [N, K] float32 actions of that step, the public call a user makes
  (argument checks, the copy to the device, observations, rewards and flags included), synchronised at the
  end. On NumPy and on the OpenCL CPU drivers PoCL and Intel (``--devices``), float32 and float64.
  Termination is switched off (``target_height`` = 2 > 1) and T < 200 (the truncation limit), so no env
  resets mid-call and the state follows the same physics as the peers'; ``set_state`` puts the start
  states back before each sample, outside the timing. A driver without the env's kernel
  (``EnvKernelMissing``), without float64, or whose first call fails is reported as
  ``"skipped: <reason>"``, never fatal.

Correctness: every sample of a row starts from the same states under the same controls, so after the
rounds each row's final (qpos, qvel) is compared with ``mujoco.rollout``'s: portkern's NumPy float64 state
must equal it to 1e-7 (the script fails otherwise); the others' largest differences are recorded (float32
rows drift by far more over T chaotic steps).

Timing: T is chosen per size so that one call of the slowest row (MJX aside: its compile at each T is
what would dominate) takes about ``--round-s`` (``--steps`` fixes it). Rounds interleave every row (in an
order shuffled afresh each round, seeded) on this shared machine; each sample is one call. Rates are env steps per second
(N * T per call) over wall time and over the process's CPU time (all its threads: MuJoCo's pool, XLA's,
PoCL's, Intel's TBB), which load from other jobs disturbs less; medians with the min-max over rounds.
Each portkern row gets its ratio to the fastest peer (by median) with the per-round ratios' min-max.

    PYTHONPATH=. python bench/cpu/chain_peers.py [--sizes 4096x3,4096x10,65536x3,65536x10] [--repeats 5]
        [--round-s 1] [--steps T] [--no-opencl] [--no-mjx] [--mjx-x64] [--mjx-jacobian sparse|auto|dense]
        [--mjx-fusion-emitters] [--mjx-chunk B] [--quick]
    (--sizes also takes NxKxT: T env steps per call at that size, e.g. 65536x10x2)
    (pip install 'portkern[opencl,opencl-intel,bench,mujoco,mjx]')

MJX: ``mujoco-mjx``'s releases track MuJoCo's; the newest, 3.17.0, declares ``mujoco>=3.17.0.dev0`` and
runs on mujoco 4.0.0 and jax 0.10.2, installed without changing either (the ``mjx`` extra). It prints
"Failed to import warp" on import (its optional MuJoCo Warp path), harmless on a CPU. Without it the MJX
row is reported as skipped.

MJX on this CPU (jax/jaxlib 0.10.2, mujoco-mjx 3.17.0, 2-CPU VMs, December 2026). MJX with its defaults
hits two separate problems here; neither is MJX's arithmetic, and the defaults above avoid both:

* A deadlock at N = 65,536 (K = 3), MJX's default Jacobian setting ("auto": dense below nv = 60). The
  mass matrix is factorised with ``jax.scipy.linalg.cho_factor``, under vmap jaxlib's batched LAPACK
  custom call ``lapack_spotrf_ffi``. The executable compiles (about 8 s, the same as at N = 4,096) and
  its first call never returns: a gdb backtrace of the hung process shows both threads of XLA's 2-thread
  intra-op pool inside ``lapack_spotrf_ffi`` -> ``jax::ParallelBatchMap`` -> ``BlockingCounter::Wait``,
  each waiting for batch pieces queued on that same pool, 0 % CPU. N = 4,096 and 16,384 ran. Either
  of two user-level changes avoids it: ``opt.jacobian = mjJAC_SPARSE`` (MJX then factorises M with its
  own sparse L'DL code, plain gathers and arithmetic, no LAPACK call in the executable), or chunking the
  batch, ``lax.map(..., batch_size=8192)`` (65,536 x 3 ran at about 3.5e4 env steps/s that way). The
  sparse Jacobian is the default here; it holds in float64 (``--mjx-x64``: 1.8e-12 from
  mujoco.rollout's qvel after 2 env steps at K = 10).
* Run time exponential in the chain's depth, from XLA's CPU fusion emitters. At K = 10 one env step of
  16 envs took 33.7 s (K = 3: about 30 us per env and env step); the time is spent in one generated
  fused kernel (``fused_computation_*``, calling itself down the tree). Compiled with
  ``xla_cpu_use_fusion_emitters=False`` (a per-executable compiler option, no global XLA_FLAGS), the same
  call took 6.7 ms. Upstream reports of the same symptom on chains of bodies: jax-ml/jax#33761,
  google-deepmind/mujoco#2957.

What remains is MJX on XLA's CPU backend: the vmapped executable runs on one core at most (its CPU time
is at most its wall time), its cost per env step about linear in N and slightly above (K = 3, T = 1, the
defaults above, third call, process CPU time per env and env step: 24, 26, 28, 32 us at N = 256, 4,096,
16,384, 65,536, on a loaded 2-core Xeon VM), its compile time independent of N (K = 3: 8-9 s on a quiet
machine, 15-18 s loaded; K = 10: 35-75 s).
float32 MJX at K = 10 differs from mujoco.rollout by about 5e-4 rad/s in qvel after 2 env steps on either
factorisation path (float32 rounding in a 10-link chain; float64 agrees to 1e-12).
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import statistics
import sys
import time
from importlib import metadata
from typing import Any

import mujoco
import numpy as np
from _common import machine_info, round_orders, write_json
from mujoco import rollout as mj_rollout
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from portkern import step as pk_step
from portkern.envs.chain import FRAME_SKIP, mjcf

ENV_ID = "Chain-v0"
#: Termination off (the tip's height / reach never exceeds 1), so every row integrates the same physics.
NO_TERMINATION = {"target_height": 2.0}
#: T stays under the 200-step truncation limit: no env resets inside a call.
MAX_STEPS = 199
#: portkern's NumPy float64 state after T steps against mujoco.rollout's (radians, rad/s).
CROSS_CHECK_ATOL = 1e-7
FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS.value
SEED = 0
#: The MJX model's opt.jacobian per --mjx-jacobian value.
MJX_JACOBIAN = {"sparse": mujoco.mjtJacobian.mjJAC_SPARSE, "auto": mujoco.mjtJacobian.mjJAC_AUTO,
                "dense": mujoco.mjtJacobian.mjJAC_DENSE}  # fmt: skip


class Row:
    """One way of doing the job: ``load(controls)`` (untimed: allocations, compilation), then per sample
    ``prepare()`` (untimed: the start states back) and ``run()`` (timed); ``final()`` is the [N, 2K]
    float64 (qpos, qvel) the last run reached."""

    name: str
    dtype: str
    peer: bool

    def load(self, controls: np.ndarray) -> None:
        raise NotImplementedError

    def prepare(self) -> None:
        pass

    def run(self) -> None:
        raise NotImplementedError

    def final(self) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass


class RolloutRow(Row):
    """``mujoco.rollout`` on ``nthread`` threads (0: the calling thread), one MjData per thread."""

    peer, dtype = True, "float64"

    def __init__(self, model: mujoco.MjModel, start: np.ndarray, nthread: int) -> None:
        self.name = "mujoco.rollout" if nthread else "mujoco.rollout@1t"
        self.model, self.nthread = model, nthread
        self.pool = mj_rollout.Rollout(nthread=nthread)
        self.datas = [mujoco.MjData(model) for _ in range(max(nthread, 1))]
        # The full physics state of each start (time 0, qpos, qvel), as mj_getState writes it.
        k = model.nq
        d = mujoco.MjData(model)
        self.init = np.empty((start.shape[0], mujoco.mj_stateSize(model, FULL)))
        for i, s in enumerate(start):
            d.qpos[:], d.qvel[:] = s[:k], s[k:]
            mujoco.mj_getState(model, d, self.init[i], FULL)
        self.offset = mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_TIME.value)  # qpos, qvel follow time

    def load(self, controls: np.ndarray) -> None:
        t, n, _ = controls.shape
        per_env = np.ascontiguousarray(controls.transpose(1, 0, 2), dtype=np.float64)  # [N, T, K]
        self.control = np.repeat(per_env, FRAME_SKIP, axis=1)  # [N, T * FRAME_SKIP, K]: each held
        self.state = np.empty((n, t * FRAME_SKIP, self.init.shape[1]))
        self.sensordata = np.empty((n, t * FRAME_SKIP, self.model.nsensordata))

    def run(self) -> None:
        self.pool.rollout(self.model, self.datas, self.init, self.control, state=self.state,
                          sensordata=self.sensordata)  # fmt: skip

    def final(self) -> np.ndarray:
        k = self.model.nq
        return self.state[:, -1, self.offset : self.offset + 2 * k].copy()

    def close(self) -> None:
        self.pool.close()


class MjxRow(Row):
    """MJX: a jitted, vmapped scan of ``mjx.step`` over the envs (see the module docstring).

    ``jacobian``: the MJX model's ``opt.jacobian`` ("sparse": MJX's own sparse L'DL factorisation of the
    mass matrix, no LAPACK call; "auto": MJX's default, dense below nv = 60, which factorises with
    ``jax.scipy.linalg.cho_factor``, jaxlib's batched LAPACK ``potrf``). ``fusion_emitters``: XLA's CPU
    fusion emitters on (its default) or off (``xla_cpu_use_fusion_emitters=False``, this executable only).
    ``chunk``: 0 for one ``vmap`` over all N envs, B > 0 for ``lax.map(..., batch_size=B)`` (a vmap over
    chunks of B envs, the chunks in sequence). None of these change the dynamics: the cross-check
    against mujoco.rollout holds for each."""

    peer = True

    def __init__(self, model: mujoco.MjModel, start: np.ndarray, jacobian: str = "sparse",
                 fusion_emitters: bool = False, chunk: int = 0) -> None:  # fmt: skip
        import jax
        from mujoco import mjx

        self.jax, self.mjx = jax, mjx
        self.name = "mjx"
        self.dtype = "float64" if jax.config.jax_enable_x64 else "float32"
        self.k = model.nq
        if jacobian not in MJX_JACOBIAN:
            raise ValueError(f"jacobian: expected one of {sorted(MJX_JACOBIAN)}, got {jacobian!r}")
        if chunk < 0 or (chunk and start.shape[0] % chunk):
            raise ValueError(f"chunk: expected 0 or a divisor of N = {start.shape[0]}, got {chunk}")
        self.jacobian, self.fusion_emitters, self.chunk = jacobian, fusion_emitters, chunk
        model = copy.copy(model)  # the same MJCF; only the MJX model's Jacobian path is chosen
        model.opt.jacobian = MJX_JACOBIAN[jacobian]
        self.mx = mjx.put_model(model)
        d0 = mjx.put_data(model, mujoco.MjData(model))
        q = jax.device_put(start[:, : self.k].astype(self.dtype))
        v = jax.device_put(start[:, self.k :].astype(self.dtype))
        self.batch = jax.vmap(lambda q, v: d0.replace(qpos=q, qvel=v))(q, v)
        self.compile_s: float | None = None

    def path(self) -> dict[str, Any]:
        """How the row runs, for the JSON."""
        return {"batching": f"lax.map(batch_size={self.chunk}) of vmap" if self.chunk else "vmap",
                "jacobian": self.jacobian, "xla_cpu_use_fusion_emitters": self.fusion_emitters,
                "mass_matrix_factorisation": "MJX sparse L'DL (no LAPACK)" if self.jacobian == "sparse"
                else "MJX default (dense below nv = 60: jaxlib LAPACK potrf)"}  # fmt: skip

    def load(self, controls: np.ndarray) -> None:
        jax, mjx, mx = self.jax, self.mjx, self.mx

        def episode(d, ctrl):  # one env: T env steps, each FRAME_SKIP mjx.step with the control held
            def env_step(d, u):
                d = d.replace(ctrl=u)
                d, _ = jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=FRAME_SKIP)
                return d, None

            d, _ = jax.lax.scan(env_step, d, ctrl)
            return d.qpos, d.qvel

        if self.chunk:
            def batched(d, ctrl):  # ctrl [T, N, K] -> per env [T, K], lax.map over chunks of envs
                per_env = jax.numpy.swapaxes(ctrl, 0, 1)
                return jax.lax.map(lambda a: episode(*a), (d, per_env), batch_size=self.chunk)
        else:
            batched = jax.vmap(episode, in_axes=(0, 1))
        self.ctrl = jax.device_put(controls.astype(self.dtype))  # [T, N, K]: vmapped over axis 1
        opts = {} if self.fusion_emitters else {"xla_cpu_use_fusion_emitters": False}
        t0 = time.perf_counter()
        self.fn = jax.jit(batched).lower(self.batch, self.ctrl).compile(compiler_options=opts)
        self.compile_s = time.perf_counter() - t0

    def run(self) -> None:
        self.out = self.jax.block_until_ready(self.fn(self.batch, self.ctrl))

    def final(self) -> np.ndarray:
        return np.concatenate([np.asarray(x, dtype=np.float64) for x in self.out], axis=1)


class PortkernRow(Row):
    """``env.step`` T times with host [N, K] float32 actions, on one backend and dtype."""

    peer = False

    def __init__(self, env: Any, label: str, start: np.ndarray) -> None:
        self.env, self.name, self.dtype = env, f"portkern:{label}:{env.dtype}", str(env.dtype)
        self.start, self.zeros = start, np.zeros(start.shape[0], np.int64)

    def load(self, controls: np.ndarray) -> None:
        self.controls = controls

    def prepare(self) -> None:
        self.env.set_state(self.start, self.zeros)

    def run(self) -> None:
        env = self.env
        for actions in self.controls:
            env.step(actions)
        env.backend.synchronize()

    def final(self) -> np.ndarray:
        return self.env.get_state()["state"].astype(np.float64)


def portkern_rows(n: int, k: int, start: np.ndarray, devices: list[str],
                  skipped: dict[str, str]) -> list[PortkernRow]:  # fmt: skip
    """NumPy and each OpenCL driver, float32 and float64; what cannot be made goes to ``skipped``."""
    rows = []
    for backend, device in [("numpy", None)] + [("opencl", d) for d in devices]:
        label = backend if device is None else f"{backend}:{device}"
        for dtype in ("float32", "float64"):
            name = f"portkern:{label}:{dtype}"
            try:
                env = pk_step.make(ENV_ID, n, links=k, backend=backend, device=device, dtype=dtype,
                                   params=NO_TERMINATION, seed=SEED)  # fmt: skip
            except Exception as exc:  # noqa: BLE001  (EnvKernelMissing, no driver, no float64: reported)
                skipped[name] = f"skipped: {type(exc).__name__}: {exc}"
                continue
            rows.append(PortkernRow(env, label, start))
    return rows


def parse_sizes(text: str, steps: int | None) -> list[tuple[int, int, int | None]]:
    """``"4096x3,65536x10x4"`` -> [(N, K, T)]: T from the third field, else ``steps`` (None: calibrated)."""
    out = []
    for item in text.split(","):
        try:
            f = [int(x) for x in item.lower().split("x")]
        except ValueError:
            f = []
        if len(f) not in (2, 3) or f[0] < 1 or not 2 <= f[1] <= 16:
            raise ValueError(f"--sizes: expected comma-separated NxK or NxKxT with N >= 1 and 2 <= K <= 16 "
                             f"(e.g. 4096x3,65536x10x4), got {item!r} in {text!r}")  # fmt: skip
        if len(f) == 3 and not 1 <= f[2] <= MAX_STEPS:
            raise ValueError(f"--sizes: T in {item!r}: expected 1 to {MAX_STEPS} (under the 200-step "
                             "truncation limit)")  # fmt: skip
        out.append((f[0], f[1], f[2] if len(f) == 3 else steps))
    return out


def start_states(n: int, k: int) -> np.ndarray:
    """[N, 2K] float64 (qpos, qvel): one seeded reset of the NumPy env (links near rest, at rest)."""
    env = pk_step.make(ENV_ID, n, links=k, dtype="float64", params=NO_TERMINATION, seed=SEED)
    env.reset(seed=SEED)
    return env.get_state()["state"]


def mjx_row(model: mujoco.MjModel, start: np.ndarray, skipped: dict[str, str],
            **path: Any) -> MjxRow | None:  # fmt: skip
    try:
        return MjxRow(model, start, **path)
    except ImportError as exc:
        skipped["mjx"] = f"skipped: mujoco-mjx is not importable ({exc}); pip install 'portkern[mjx]'"
        return None


# ---- timing -----------------------------------------------------------------------------------
def rounds(rows: list[Row], repeats: int) -> dict[str, dict[str, list[float]]]:
    """Wall and process-CPU seconds of each row per round; the order is shuffled afresh each round (seeded,
    ``round_orders``), so that neither load drift on the shared machine nor the state a neighbour leaves
    favours one row."""
    out: dict[str, dict[str, list[float]]] = {r.name: {"wall": [], "cpu": []} for r in rows}
    by_name = {r.name: r for r in rows}
    for order in round_orders(list(by_name), repeats):
        for r in (by_name[n] for n in order):
            r.prepare()
            gc.collect()
            w, c = time.perf_counter(), time.process_time()
            r.run()
            out[r.name]["cpu"].append(time.process_time() - c)
            out[r.name]["wall"].append(time.perf_counter() - w)
    return out


def rates(count: int, secs: list[float]) -> dict[str, float]:
    r = sorted(count / s for s in secs)
    return {"median": statistics.median(r), "min": r[0], "max": r[-1]}


def first_call(row: Row, skipped: dict[str, str]) -> float | None:
    """The untimed first call (PoCL and Intel build their kernels here); a portkern row that fails is
    reported as skipped, a peer's failure is fatal (the script measures against them)."""
    row.prepare()
    t0 = time.perf_counter()
    try:
        row.run()
    except Exception as exc:
        if row.peer:
            raise
        skipped[row.name] = f"skipped: first call raised {type(exc).__name__}: {exc}"
        return None
    return time.perf_counter() - t0


def calibrate(rows: list[Row], controls: np.ndarray, round_s: float, skipped: dict[str, str],
              first: dict[str, float]) -> int:  # fmt: skip
    """T such that the slowest row's call (one env step, timed after the row's first call, which is
    recorded in ``first``) takes about ``round_s``."""
    one = controls[:1]
    slowest = 0.0
    for r in rows:
        r.load(one)
        s = first_call(r, skipped)
        if s is None:
            continue
        first[r.name] = s
        best = float("inf")
        for _ in range(2):  # the faster of two: one sample on a loaded machine can be a stall
            r.prepare()
            t0 = time.perf_counter()
            r.run()
            best = min(best, time.perf_counter() - t0)
        slowest = max(slowest, best)
    return int(min(MAX_STEPS, max(1, round(round_s / slowest)))) if slowest > 0 else 1


def cross_check(rows: list[Row], reference: np.ndarray) -> dict[str, dict[str, Any]]:
    """Each row's final state against mujoco.rollout's: the largest absolute difference in qpos and qvel."""
    k = reference.shape[1] // 2
    out = {}
    for r in rows:
        got = r.final()
        err = np.abs(got - reference)
        out[r.name] = {"max_abs_qpos": float(err[:, :k].max()), "max_abs_qvel": float(err[:, k:].max()),
                       "dtype": r.dtype}  # fmt: skip
    return out


def ratio(secs: dict[str, dict[str, list[float]]], r: dict[str, dict[str, float]], name: str, other: str,
          basis: str) -> dict[str, Any]:  # fmt: skip
    """``name``'s rate over ``other``'s: the ratio of medians and the min-max of the per-round ratios (the two
    ran in the same round, so load drift cancels). "above" / "below": every round's ratio is over / under 1;
    "within noise" otherwise."""
    per_round = sorted(o / p for o, p in zip(secs[other][basis], secs[name][basis]))  # rates: times inverted
    lo, hi = per_round[0], per_round[-1]
    return {"against": other, "ratio_of_medians": r[name]["median"] / r[other]["median"],
            "per_round_ratio": {"median": statistics.median(per_round), "min": lo, "max": hi},
            "result": "above" if lo > 1 else "below" if hi < 1 else "within noise"}  # fmt: skip


def verdict(result: dict, peers: list[str], ours: list[str]) -> dict[str, Any]:
    """Per portkern row and time basis: against the fastest peer (by median), and against every peer."""
    out: dict[str, Any] = {}
    for basis in ("wall", "cpu"):
        r = result[f"items_per_s_{basis}"]
        if not peers:
            continue
        best = max(peers, key=lambda k: r[k]["median"])
        for name in ours:
            v = out.setdefault(name, {})
            v[basis] = {"fastest_peer": best, **ratio(result["seconds"], r, name, best, basis)}
            v.setdefault("vs_peers", {})[basis] = {
                p: ratio(result["seconds"], r, name, p, basis)["ratio_of_medians"] for p in peers
            }
    return out


def opencl_devices(wanted: str | None) -> list[str]:
    """The OpenCL CPU drivers to run ("pocl", "intel"), or the ones asked for."""
    if wanted is not None:
        return [d for d in wanted.split(",") if d]
    return ["pocl", "intel"]


def versions(mjx_dtype: str | None) -> dict[str, str]:
    out = {"mujoco": mujoco.__version__}
    for pkg in ("mujoco-mjx", "jax", "jaxlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    if mjx_dtype is not None:
        import jax

        out["jax_backend"] = jax.devices()[0].platform
        out["mjx_dtype"] = mjx_dtype
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help="comma-separated NxK (envs x links) or NxKxT (T env "
                    "steps per call at that size, over --steps); default "
                    "4096x3,4096x10,65536x3,65536x10, with --quick 64x3")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=None,
                    help="interleaved timed rounds per size (default 5; 2 with --quick)")
    ap.add_argument("--round-s", type=float, default=1.0,
                    help="target seconds of the slowest row's call (sets T)")
    ap.add_argument("--steps", type=int, default=None,
                    help=f"T, env steps per call (1-{MAX_STEPS}; default: from --round-s; 3 with --quick)")
    ap.add_argument("--devices", default=None,
                    help="comma-separated OpenCL drivers (default: pocl,intel; '' for none)")  # fmt: skip
    ap.add_argument("--no-opencl", action="store_true", help="no portkern OpenCL rows")
    ap.add_argument("--no-mjx", action="store_true", help="no MJX row")
    ap.add_argument("--mjx-x64", action="store_true",
                    help="MJX in float64 (jax_enable_x64) rather than float32")
    ap.add_argument("--mjx-jacobian", choices=sorted(MJX_JACOBIAN), default="sparse",
                    help="the MJX model's opt.jacobian (default sparse: MJX's own mass-matrix "
                    "factorisation; auto: MJX's default, LAPACK potrf, deadlocks at N = 65,536 on 2 CPUs)")
    ap.add_argument("--mjx-fusion-emitters", action="store_true",
                    help="keep XLA's CPU fusion emitters on for MJX (its default; at K = 10 one env step "
                    "then takes seconds per env); default off for the MJX executable")
    ap.add_argument("--mjx-chunk", type=int, default=0,
                    help="B > 0: MJX as lax.map(..., batch_size=B) over the envs (chunked vmap); 0 (default): "
                    "one vmap over all N")
    ap.add_argument("--quick", action="store_true",
                    help="tiny sizes, 3 steps, 2 rounds: a smoke run for the tests")  # fmt: skip
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "chain_peers.json"))
    args = ap.parse_args(argv)
    sizes_arg = args.sizes or ("64x3" if args.quick else "4096x3,4096x10,65536x3,65536x10")
    steps = args.steps if args.steps is not None else (3 if args.quick else None)
    if steps is not None and not 1 <= steps <= MAX_STEPS:
        ap.error(f"--steps: expected 1 to {MAX_STEPS} (under the 200-step truncation limit), got {steps}")
    try:
        sizes = parse_sizes(sizes_arg, steps)
    except ValueError as exc:
        ap.error(str(exc))
    if args.mjx_chunk < 0 or any(args.mjx_chunk and n % args.mjx_chunk for n, _, _ in sizes):
        ap.error(f"--mjx-chunk: expected 0 or a divisor of every N, got {args.mjx_chunk}")
    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 5)
    if repeats < 1:
        ap.error(f"--repeats: expected >= 1, got {repeats}")
    if args.mjx_x64 and not args.no_mjx:
        import jax

        jax.config.update("jax_enable_x64", True)
    devices = [] if args.no_opencl else opencl_devices(args.devices)
    nthread = len(os.sched_getaffinity(0))
    console = Console(width=200)
    load = {"start": os.getloadavg()}
    results, backends, mjx_dtype = [], {}, None
    def save(done: bool) -> Any:
        """The JSON so far: written after every size, so that a long run's finished sizes survive it."""
        load["end" if done else "now"] = os.getloadavg()
        payload = {
            "benchmark": "Chain-v0 stepping: portkern's env.step (numpy; opencl on PoCL and Intel; float32 "
            "and float64) vs mujoco.rollout (multithreaded and one thread) and MJX, same job per row",
            "machine": dict(machine_info(list(backends.values())), peers=versions(mjx_dtype), loadavg=load,
                            rollout_threads=nthread),
            "settings": {
                "env": ENV_ID, "frame_skip": FRAME_SKIP, "repeats": repeats, "order": "shuffled per round (seeded)", "round_s": args.round_s,
                "steps": steps if steps is not None and all(t == steps for _, _, t in sizes)
                else "per size: NxKxT in --sizes, else --steps, else from --round-s (the slowest row's "
                "call, MJX aside)",
                "quick": args.quick,
                "controls": f"[T, N, K] float32 uniform in [-1, 1), numpy default_rng({SEED}); held "
                "FRAME_SKIP MuJoCo steps",
                "start": f"one reset(seed={SEED}) of the NumPy float64 env (qpos ~ U[-0.1, 0.1), "
                "qvel = 0)",
                "portkern": "env.step(actions) T times, host [N, K] float32 actions, synchronised; "
                f"termination off ({NO_TERMINATION}), T < 200 so no truncation; set_state before each "
                "sample, untimed",
                "dtypes": "mujoco.rollout float64; mjx " + (mjx_dtype or "not run") + "; portkern as named",
                "cross_check_atol": CROSS_CHECK_ATOL,
                "mjx": "not run" if args.no_mjx else mjx_path,
            },
            "results": results,
        }
        payload["complete"] = done
        return write_json(args.out, payload), payload

    mjx_path = {"jacobian": args.mjx_jacobian, "fusion_emitters": args.mjx_fusion_emitters,
                "chunk": args.mjx_chunk}
    for n, k, size_steps in sizes:
        skipped: dict[str, str] = {}
        model = mujoco.MjModel.from_xml_string(mjcf(k))
        start = start_states(n, k)
        rows: list[Row] = [RolloutRow(model, start, nthread), RolloutRow(model, start, 0)]
        rows += portkern_rows(n, k, start, devices, skipped)
        for r in rows:
            if isinstance(r, PortkernRow) and r.env.backend.name != "numpy":
                backends[r.env.backend.device_name] = r.env.backend
        rng = np.random.default_rng(SEED)
        t = size_steps
        first: dict[str, float] = {}  # the first call of each row: kernel builds, caches
        if t is None:
            one = rng.uniform(-1.0, 1.0, (1, n, k)).astype(np.float32)
            t = calibrate(rows, one, args.round_s, skipped, first)
            rows = [r for r in rows if r.name not in skipped]
        controls = np.random.default_rng(SEED).uniform(-1.0, 1.0, (t, n, k)).astype(np.float32)
        mjx = None if args.no_mjx else mjx_row(model, start, skipped, **mjx_path)
        if mjx is not None:
            rows.insert(2, mjx)
            mjx_dtype = mjx.dtype
        for r in rows:
            r.load(controls)
            if r.name not in first:  # not warmed up by the calibration (MJX, or T given)
                s = first_call(r, skipped)
                if s is not None:
                    first[r.name] = s
        rows = [r for r in rows if r.name not in skipped]
        timed = rounds(rows, repeats)
        # Every sample starts from the same states under the same controls: the last one's end is the job's.
        check = cross_check(rows, rows[0].final())  # against mujoco.rollout's
        pk64 = "portkern:numpy:float64"
        worst = max(check[pk64]["max_abs_qpos"], check[pk64]["max_abs_qvel"])
        if not worst <= CROSS_CHECK_ATOL:
            raise AssertionError(f"{pk64} differs from mujoco.rollout after {t} steps at N={n}, K={k}: "
                                 f"max abs error {worst:.3g} > {CROSS_CHECK_ATOL:g}")  # fmt: skip
        count = n * t
        peers = [r.name for r in rows if r.peer]
        ours = [r.name for r in rows if not r.peer]
        result = {
            "num_envs": n, "links": k, "steps": t, "items": count, "unit": "env steps",
            "rows": {r.name: {"status": "ok", "dtype": r.dtype, "peer": r.peer} for r in rows}
            | {name: {"status": why, "peer": name == "mjx"} for name, why in skipped.items()},
            "items_per_s_wall": {name: rates(count, v["wall"]) for name, v in timed.items()},
            "items_per_s_cpu": {name: rates(count, v["cpu"]) for name, v in timed.items()},
            "seconds": timed, "cross_check": check, "first_call_s": first,
            "mjx_compile_s": mjx.compile_s if mjx is not None else None,
            "mjx_path": mjx.path() if mjx is not None else None,
        }  # fmt: skip
        result["verdict"] = verdict(result, peers, ours)
        results.append(result)
        console.print(f"N={n} K={k} T={t}: " + ", ".join(
            f"{name} {v['median']:.3g}" for name, v in result["items_per_s_wall"].items()))  # fmt: skip
        for name, why in skipped.items():
            console.print(escape(f"  {name}: {why}"))
        for r in rows:
            r.close()
        del rows, mjx
        gc.collect()
        save(False)
    path, payload = save(True)
    print_table(console, results, path)
    return payload


def print_table(console: Console, results: list[dict], path: Any) -> None:
    for basis in ("wall", "cpu"):
        tab = Table(title=escape(f"env steps/s over {basis} time: median [min-max] of interleaved rounds"))
        names = list(dict.fromkeys(name for r in results for name in r["rows"]))
        tab.add_column("row")
        for r in results:
            tab.add_column(f"N={r['num_envs']} K={r['links']} T={r['steps']}", justify="right")
        for name in names:
            dtypes = [r["rows"][name]["dtype"] for r in results if "dtype" in r["rows"].get(name, {})]
            dtype = dtypes[0] if dtypes else ""
            cells = []
            for r in results:
                v = r[f"items_per_s_{basis}"].get(name)
                cells.append(escape(f"{v['median']:.3g} [{v['min']:.2g}-{v['max']:.2g}]") if v else
                             ("skipped" if name in r["rows"] else "-"))  # fmt: skip
            tab.add_row(f"{name} ({dtype})" if dtype and not name.endswith(dtype) else name, *cells)
        console.print(tab)
        head = f"portkern rows, {basis} time: ratio of medians [per-round min-max] vs the fastest peer"
        console.print(escape(head))
        for r in results:
            for name, v in r["verdict"].items():
                c = v[basis]
                span = f"[{c['per_round_ratio']['min']:.2f}-{c['per_round_ratio']['max']:.2f}]"
                size = f"N={r['num_envs']} K={r['links']}"
                vs = f"vs {c['against']} ({c['result']})"
                console.print(escape(f"  {size} {name}: {c['ratio_of_medians']:.2f}x {span} {vs}"))
    console.print("cross-check against mujoco.rollout (max abs qpos / qvel):")
    for r in results:
        for name, c in r["cross_check"].items():
            console.print(f"  N={r['num_envs']} K={r['links']} T={r['steps']} {name}: "
                          f"{c['max_abs_qpos']:.2g} / {c['max_abs_qvel']:.2g}")  # fmt: skip
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
