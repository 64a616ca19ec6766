"""``portkern train --parallel-seeds K`` on the jax stack: K seeds in one vmapped program, as PureJaxRL trains
seeds (the single-seed stack is jax_ppo.py; this module reuses its agent, stages and record)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Callable

import numpy as np

from .config import PPOConfig, TaskConfig
from .jax_ppo import Static, _jax, _result_class, advantages, bootstrap, init_state, rollout, update


@lru_cache(maxsize=None)
def _batch_result_class(base: type) -> type:
    """A K-seed batch's record: the jax record plus the batch it shared the device with."""

    @dataclass
    class JaxBatchResult(_result_class(base)):
        """See :data:`PARALLEL_NOTE`."""

        #: The seeds trained at once with this one (itself included), in order.
        batch_seeds: list[int] = dataclasses.field(default_factory=list)
        #: Updates the batch ran (every seed ran them all: a converged one trains on with the others).
        batch_updates: int = 0
        #: Updates per compiled call (the batch checks convergence after each chunk).
        chunk_updates: int = 0
        #: Seconds from the batch's start to the end of the update at which this seed converged (pro-rated
        #: inside its chunk), or None.
        converged_at_s: float | None = None
        #: XLA devices the batch's seeds were spread over (several on a CPU started with one device per core,
        #: each training K / n seeds; the device held is still the whole processor), else 1.
        spread_over: int = 1

    return JaxBatchResult



# ---- many policies per device: K seeds in one program (vmap), as PureJaxRL trains seeds ---------------
#: Updates per compiled call when K seeds train at once. Per update, K seeds' compute dwarfs one dispatch and
#: one host read (tens of microseconds against K x ~20 ms on a CPU), so a short chunk costs nothing measurable
#: and wastes little: the batch can only stop at a chunk's end, up to CHUNK - 1 updates after its last seed
#: converged.
CHUNK = 4

#: What a batch record says about its phases and its convergence (the runner's JSON carries it per run).
PARALLEL_NOTE = (
    "jax stack, K seeds at once (vmap over seeds): every update's env, act, adv and update run fused in one "
    "compiled program per chunk of updates (lax.scan over the chunk), so the record has one fused phase, "
    "'fused', and its env/act/adv/update are 0; 'setup' includes building the K states, 'other' the host's "
    "reads of each chunk's per-update outputs. Convergence is exact per seed: the scan carries every update's "
    "ring of the last solve_window finished returns out, and the host applies the single-seed test to each "
    "update in order; only a curve row's wall seconds inside a chunk are pro-rated (chunk time x updates done "
    "/ chunk length). The batch stops at the end of the chunk in which its last seed converged (or at its "
    "budget); a converged seed trains on with the others until then, and that work is on the bill. "
    "device_seconds_per_policy = the batch's wall time / its converged policies, the same on each converged "
    "seed's record; an unconverged seed's record has none (its device time is charged to the converged ones; "
    "none converged: none anywhere). On a CPU, `portkern train --parallel-seeds K` starts JAX with one CPU "
    "device per core and spreads the K seeds over them (spread_over; K / cores each): the device held is the whole "
    "processor either way, as for a single-seed run. compile_s is 0: the chunk program is compiled before the "
    "batches (prime_s)."
)  # fmt: skip


def _chunk(st: Static, state: dict, lrs: Any) -> tuple[dict, dict]:
    """``len(lrs)`` whole updates (the four stages in order) as one scan; per update, what the host needs to
    book it exactly as the single-seed loop does."""
    from jax import lax

    def body(state, lr):
        state, out = rollout(st, state)
        nv = bootstrap(st, state["params"], out["store"]["final_obs"])
        adv, ret = advantages(st, out["store"], nv)
        state, losses = update(st, state, out["store"], adv, ret, lr)
        return state, {"finished": state["finished"], "ring": state["ring"], "episodes": out["episodes"],
                       "return_sum": out["return_sum"], "losses": losses}  # fmt: skip

    return lax.scan(body, state, lrs)


@lru_cache(maxsize=None)
def chunk_program(st: Static) -> Callable:
    """A chunk of updates for K seeds at once: the state has a leading seed axis, the learning rates
    (one per update of the chunk) are shared. jit specialises it per K and chunk length."""
    jax = _jax()
    return jax.jit(jax.vmap(partial(_chunk, st), in_axes=(0, None)))


def spread_cpu_devices(n: int) -> bool:
    """Start JAX with ``n`` CPU devices (XLA:CPU runs each device's programs on its own threads), so that a
    K-seed batch can spread its seeds over the processor's cores; True if JAX has them. A no-op returning
    False once JAX has started (the setting only applies before the first JAX operation of the process)."""
    jax = _jax_module()
    if jax is None:
        return False
    try:
        jax.config.update("jax_num_cpu_devices", max(1, n))
    except RuntimeError:  # JAX already started in this process: it keeps the devices it has
        return len(jax.devices("cpu")) >= n
    return True


def _jax_module() -> Any:
    try:
        import jax
    except ImportError:
        return None
    return jax


def _placement(device: Any, k: int) -> tuple[Any, int]:
    """Where a K-seed state lives: on a CPU with several XLA CPU devices (see :func:`spread_cpu_devices`) whose
    count divides K, sharded along the seed axis over all of them (each core trains K / n seeds; the seeds never
    exchange data, so the partitioned program has no communication); else on ``device``. (placement, n)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if device.platform == "cpu":
        devs = jax.devices("cpu")
        if len(devs) > 1 and k % len(devs) == 0:
            return NamedSharding(Mesh(np.array(devs), ("seed",)), PartitionSpec("seed")), len(devs)
    return device, 1


def _stacked_state(st: Static, seeds: list[int], device: Any) -> tuple[dict, int]:
    import jax
    import jax.numpy as jnp

    states = [init_state(st, s) for s in seeds]
    where, n = _placement(device, len(seeds))
    return jax.device_put(jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states), where), n


def _recent(ring: Any, total: int, w: int) -> list[float]:
    """The ring's last min(total, w) finished returns in finishing order: slots (total - k .. total - 1) mod w."""
    k = min(total, w)
    return [float(ring[i % w]) for i in range(total - k, total)]


def _lrs(cfg: PPOConfig, first: int, n: int, num_updates: int) -> np.ndarray:
    """Learning rates of updates first .. first + n - 1 (1-based), annealed as the single-seed loop anneals;
    updates past the budget (a last chunk's padding, whose results are discarded) get 0."""
    u = np.arange(first, first + n, dtype=np.float64)
    lr = cfg.lr * (1.0 - (u - 1.0) / num_updates) if cfg.anneal_lr else np.full(n, cfg.lr)
    return np.where(u <= num_updates, lr, 0.0).astype(np.float32)


def prime_parallel(task: TaskConfig, k: int, device: str | None = None, chunk: int = CHUNK) -> float:
    """Compile the chunk program for ``k`` seeds (throwaway seeds; cached per process, K and chunk length), so
    the timed batches start warm as single-seed runs do after prime(); seconds taken."""
    from ..backends.registry import get_backend

    jax = _jax()
    t0 = time.perf_counter()
    st = Static.of(task)
    state, _ = _stacked_state(st, list(range(10_000, 10_000 + k)), get_backend("jax", device).device)
    jax.block_until_ready(chunk_program(st)(state, _lrs(task.ppo, 1, chunk, task.num_updates)))
    return time.perf_counter() - t0


def train_batch(task: TaskConfig, spec: Any, seeds: list[int], chunk: int = CHUNK,
                on_update: Callable[[int, int, float], None] | None = None, *,
                result_class: type) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
    """Train ``len(seeds)`` policies at once on one device (``spec.device``) until every one converged or the
    budget ran out: (one record per seed, the device's identity). See :data:`PARALLEL_NOTE` for what the
    records hold; ``result_class`` is the runner's RunResult."""
    from ..backends.registry import get_backend
    from ..identity import Target, device_info, machine_label
    from .ppo import PHASES, UPDATE_PARTS, record_update, window_mean

    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct seeds, got {seeds!r}")
    if chunk < 1:
        raise ValueError(f"chunk: expected an integer >= 1, got {chunk!r}")
    jax = _jax()
    cfg, st, k = task.ppo, Static.of(task), len(seeds)
    w, batch = cfg.solve_window, cfg.batch_size
    seconds = {**dict.fromkeys(PHASES, 0.0), "fused": 0.0}
    t_start = time.perf_counter()
    b = get_backend("jax", spec.device)
    program = chunk_program(st)
    state, spread = _stacked_state(st, seeds, b.device)
    jax.block_until_ready(state)
    seconds["setup"] = time.perf_counter() - t_start
    identity = device_info(b, Target(b.name, b.device_name), machine_label())
    curves: list[list[list[float]]] = [[] for _ in seeds]
    recents: list[list[float]] = [[] for _ in seeds]
    losses: list[tuple[float, ...]] = [(math.nan,) * 4 for _ in seeds]
    episodes = [0] * k
    done_at: dict[int, int] = {}  # seed index -> the update at which it converged
    stop, ran = "step budget", 0
    while ran < task.num_updates:
        t0 = time.perf_counter()
        state, out = program(state, _lrs(cfg, ran + 1, chunk, task.num_updates))
        jax.block_until_ready(out)
        t1 = time.perf_counter()
        out = jax.device_get(out)
        n = min(chunk, task.num_updates - ran)  # a padded last chunk's surplus updates are not booked
        for j in range(n):
            u = ran + j + 1
            elapsed = (t0 - t_start) + (t1 - t0) * (j + 1) / chunk  # pro-rated inside the chunk
            for i in range(k):
                if i in done_at:
                    continue
                total, n_new = int(out["finished"][i, j]), int(out["episodes"][i, j])
                episodes[i] = total
                recents[i] = _recent(out["ring"][i, j], total, w)
                losses[i] = tuple(float(x) for x in out["losses"][i, j])
                this = float(out["return_sum"][i, j]) / n_new if n_new else math.nan
                if record_update(task, curves[i], u, u * batch, elapsed, recents[i], this, None) == "converged":
                    done_at[i] = u
        ran += n
        seconds["fused"] += t1 - t0
        seconds["other"] += time.perf_counter() - t1
        if on_update is not None:
            pending = [window_mean(recents[i]) for i in range(k) if i not in done_at]
            on_update(ran * batch, task.num_updates * batch, min(pending) if pending else math.nan)
        if len(done_at) == k:
            stop = "converged"
            break
        if time.perf_counter() - t_start >= task.max_seconds:
            stop = "time budget"
            break
    wall = time.perf_counter() - t_start
    n_conv = len(done_at)
    per_policy = round(wall / n_conv, 6) if n_conv else None
    label = batch_label(spec.label, k)
    results = []
    for i, seed in enumerate(seeds):
        conv = i in done_at
        updates = done_at.get(i, ran)
        results.append(_batch_result_class(result_class)(
            task=task.env_id, stack=label, mode=spec.mode, backend="jax", device_key=identity["device_key"],
            hardware_key=identity["hardware_key"], agent_device=b.describe()["jax_device"], seed=seed,
            converged=conv, stop_reason="converged" if conv else stop, env_steps=ran * batch,
            steps_to_converge=updates * batch if conv else None, updates=updates, wall_s=round(wall, 6),
            device_hours=per_policy / 3600 if conv and per_policy else None, steps_per_s=ran * batch / wall,
            final_return=window_mean(recents[i]), episodes=episodes[i],
            phases={kk: round(v, 6) for kk, v in seconds.items()}, update_parts=dict.fromkeys(UPDATE_PARTS, 0.0),
            untimed_s=round(wall - sum(seconds.values()), 6), compile_s=0.0,
            losses=dict(zip(("pg", "v", "entropy", "approx_kl"), losses[i])),
            losses_finite=all(math.isfinite(x) for x in losses[i]), curve=curves[i],
            device_seconds_per_policy=per_policy if conv else None, parallel_seeds=k,
            phase_note=PARALLEL_NOTE, batch_seeds=list(seeds), batch_updates=ran, chunk_updates=chunk,
            converged_at_s=curves[i][-1][2] if conv else None, spread_over=spread,
        ))  # fmt: skip
    return results, identity


def batch_label(label: str, k: int) -> str:
    """The stack label of a K-seed batch's records: ``jax/8`` (``jax/8@gpu``), so that K seeds sharing a device
    are never pooled with single-seed runs (their H is another quantity); K = 1 keeps the stack's own label."""
    if k == 1:
        return label
    name, at, device = label.partition("@")
    return f"{name}/{k}{at}{device}"


__all__ = ["CHUNK", "PARALLEL_NOTE", "batch_label", "chunk_program", "prime_parallel", "spread_cpu_devices",
           "train_batch"]
