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
        #: Updates the batch's program ran per slot (without refills every seed ran them all: a converged one
        #: trains on with the others; with refills a slot's seeds ran them between them).
        batch_updates: int = 0
        #: Updates per compiled call (the batch checks convergence after each chunk).
        chunk_updates: int = 0
        #: Seconds from the batch's start to the end of the update at which this seed converged (pro-rated
        #: inside its chunk), or None.
        converged_at_s: float | None = None
        #: XLA devices the batch's seeds were spread over (several on a CPU started with one device per core,
        #: each training K / n seeds; the device held is still the whole processor), else 1.
        spread_over: int = 1
        #: Whether a slot freed by a finished seed took the next seed of the list (``--refill``: more seeds than
        #: slots), so that the K slots stay busy until the list is exhausted.
        refill: bool = False
        #: The slot (0 .. K - 1) that trained this seed.
        slot: int = 0
        #: Seconds from the batch's start to when this seed got its slot (0 for the first K); its curve's wall
        #: seconds and its time budget count from there.
        started_at_s: float = 0.0
        #: When a refilling batch moved its live seeds to a smaller program, once the list was out:
        #: [updates the batch had run, slots after], in order (empty: it never did).
        shrunk: list[list[int]] = dataclasses.field(default_factory=list)

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
    "'fused', and its env/act/adv/update are 0; 'setup' includes building every seed's state (the first K, and "
    "each refill's), 'other' the host's reads of each chunk's per-update outputs. Convergence is exact per "
    "seed: the scan carries every update's ring of the last solve_window finished returns out, and the host "
    "applies the single-seed test to each "
    "update in order; only a curve row's wall seconds inside a chunk are pro-rated (chunk time x updates done "
    "/ chunk length). Each seed has its own budget (total_timesteps; max_seconds from when it got its slot) and "
    "its own annealed learning rate. Without refills (as many seeds as slots) the batch stops at the end of the "
    "chunk in which its last seed finished; a converged seed trains on with the others until then, and that work "
    "is on the bill. With refills (--refill: more seeds than slots) a slot whose seed finished takes the next "
    "seed of the list at the chunk's end, freshly initialised (the same init as a seed's own run, and the slots "
    "never exchange data, so its run is the one it would have had in that slot from the start); once the list is "
    "out, freed slots idle (their updates still computed, on the bill) until at most half the slots train: then "
    "the live seeds move to a program of half the slots (shrunk: when), as long as it still fills every device "
    "the seeds are spread over, down to the last seed's finish (XLA's kernels for fewer slots round differently in "
    "the last bits, so a seed that moves is the same computation up to float rounding, not bit for bit); a "
    "record's curve seconds count from its started_at_s. "
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
    """A chunk of updates for K seeds at once: the state and the learning rates (K x chunk: each seed's own
    annealing, as a refilled slot's seed is at another update than its neighbours) have a leading seed axis.
    jit specialises it per K and chunk length."""
    jax = _jax()
    return jax.jit(jax.vmap(partial(_chunk, st), in_axes=(0, 0)))


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


def prime_parallel(task: TaskConfig, k: int, device: str | None = None, chunk: int = CHUNK,
                   n_seeds: int | None = None) -> float:  # fmt: skip
    """Compile the chunk program for ``k`` seeds, and for every smaller batch a refilling batch of ``n_seeds``
    seeds may shrink to (throwaway seeds; cached per process, K and chunk length), so the timed batches start
    warm as single-seed runs do after prime(); seconds taken."""
    from ..backends.registry import get_backend

    jax = _jax()
    t0 = time.perf_counter()
    st = Static.of(task)
    dev = get_backend("jax", device).device
    for size in program_sizes(k, n_seeds or k, _placement(dev, k)[1]):
        state, _ = _stacked_state(st, list(range(10_000, 10_000 + size)), dev)
        lrs = np.tile(_lrs(task.ppo, 1, chunk, task.num_updates), (size, 1))
        jax.block_until_ready(chunk_program(st)(state, lrs))
    return time.perf_counter() - t0


def refill(state: dict, rows: dict[int, dict], where: Any) -> dict:
    """``state`` (K seeds stacked on the leading axis) with slot i replaced by ``rows[i]`` (a single seed's state,
    as :func:`init_state` builds it), placed as ``where``. Done on the host: the state is a few hundred kB at
    most, and a device-side scatter would compile once per number of slots refilled at a time. The slots never
    exchange data, so every other slot goes on exactly as it would have."""
    import jax

    host = jax.tree_util.tree_map(np.array, jax.device_get(state))  # writable copies

    def put(slot: int) -> Callable[[np.ndarray, Any], None]:
        def _set(x: np.ndarray, y: Any) -> None:
            x[slot] = y

        return _set

    for slot, row in rows.items():
        jax.tree_util.tree_map(put(slot), host, jax.device_get(row))
    return jax.device_put(host, where)


def program_sizes(k: int, n_seeds: int, spread: int = 1) -> list[int]:
    """The slot counts a batch of ``n_seeds`` seeds in ``k`` slots runs programs of: ``k``, and with refills
    (more seeds than slots) ``k / 2``, ``k / 4``, ... for its tail, while the halves stay whole and still
    fill the ``spread`` devices the seeds are spread over (fewer slots than devices would leave cores idle
    without making the rest faster)."""
    out = [k]
    while n_seeds > k and out[-1] % 2 == 0 and (out[-1] // 2) % max(1, spread) == 0:
        out.append(out[-1] // 2)
    return out


def compact(state: dict, keep: list[int], where: Any) -> dict:
    """``state`` with only the slots ``keep`` (in that order), placed as ``where``: a smaller batch for the tail."""
    import jax

    return jax.device_put(jax.tree_util.tree_map(lambda x: np.asarray(x)[keep], jax.device_get(state)), where)


def train_batch(task: TaskConfig, spec: Any, seeds: list[int], chunk: int = CHUNK,
                on_update: Callable[[int, int, float], None] | None = None, *,
                result_class: type, slots: int | None = None,
                shrink: bool = True) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
    """Train the policies of ``seeds`` on one device (``spec.device``), ``slots`` K of them at once (default:
    all): (one record per seed, the device's identity). With fewer slots than seeds, a slot whose seed converged
    or ran out of budget takes the next seed of the list at the end of the chunk (:func:`refill`), so K slots
    stay busy until the list is exhausted. Each seed has its own budget (``task.num_updates`` updates, and
    ``task.max_seconds`` from the moment it got its slot) and its own annealed learning rate. Once the list is
    out and at most half the slots still train (``shrink``), the live ones move to a program of half the slots
    (:func:`program_sizes`), so that the tail does not pay for idle slots. See
    :data:`PARALLEL_NOTE` for what the records hold; ``result_class`` is the runner's RunResult."""
    from ..backends.registry import get_backend
    from ..identity import Target, device_info, machine_label
    from .ppo import PHASES, UPDATE_PARTS, record_update, window_mean

    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct seeds, got {seeds!r}")
    if chunk < 1:
        raise ValueError(f"chunk: expected an integer >= 1, got {chunk!r}")
    n_seeds = len(seeds)
    k = n_seeds if slots is None else slots
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_seeds:
        raise ValueError(f"slots: expected an integer from 1 to the {n_seeds} seed(s), got {slots!r}")
    jax = _jax()
    cfg, st = task.ppo, Static.of(task)
    w, batch, budget = cfg.solve_window, cfg.batch_size, task.num_updates
    seconds = {**dict.fromkeys(PHASES, 0.0), "fused": 0.0}
    t_start = time.perf_counter()
    b = get_backend("jax", spec.device)
    program = chunk_program(st)
    state, spread = _stacked_state(st, seeds[:k], b.device)
    where = _placement(b.device, k)[0]
    jax.block_until_ready(state)
    seconds["setup"] = time.perf_counter() - t_start
    identity = device_info(b, Target(b.name, b.device_name), machine_label())
    curves: list[list[list[float]]] = [[] for _ in seeds]
    recents: list[list[float]] = [[] for _ in seeds]
    losses: list[tuple[float, ...]] = [(math.nan,) * 4 for _ in seeds]
    episodes, updates = [0] * n_seeds, [0] * n_seeds
    slot_of = [min(i, k - 1) for i in range(n_seeds)]  # the first K seeds' slots; a refill sets its seed's
    started = [t_start] * n_seeds  # when each seed got its slot (its own clock: curve, time budget)
    ended = [t_start] * n_seeds  # when its slot let it go (end of the chunk in which it finished)
    stop: dict[int, str] = {}  # seed index -> why it stopped ("converged", "step budget", "time budget")
    holder: list[int | None] = list(range(k))  # slot -> index of the seed it trains, None once the list is out
    nxt, ran, booked = k, 0, 0
    # Program sizes the batch may shrink to once the list is out (each primed by prime_parallel), and when it did.
    sizes = set(program_sizes(k, n_seeds, spread) if shrink else [k])
    shrunk: list[list[int]] = []
    while any(i is not None and i not in stop for i in holder):
        lrs = np.stack([_lrs(cfg, updates[i] + 1, chunk, budget) if i is not None else np.zeros(chunk, np.float32)
                        for i in holder])  # fmt: skip
        t0 = time.perf_counter()
        state, out = program(state, lrs)
        jax.block_until_ready(out)
        t1 = time.perf_counter()
        out = jax.device_get(out)
        last = 0  # updates of this chunk booked by some slot (a padded last chunk's surplus is not)
        for slot, i in enumerate(holder):
            if i is None:
                continue
            for j in range(chunk):
                if i in stop:  # finished earlier in this chunk: the slot's later updates are not booked
                    break
                last = max(last, j + 1)
                updates[i] += 1
                u = updates[i]
                elapsed = (t0 - started[i]) + (t1 - t0) * (j + 1) / chunk  # pro-rated inside the chunk
                total, n_new = int(out["finished"][slot, j]), int(out["episodes"][slot, j])
                episodes[i] = total
                recents[i] = _recent(out["ring"][slot, j], total, w)
                losses[i] = tuple(float(x) for x in out["losses"][slot, j])
                this = float(out["return_sum"][slot, j]) / n_new if n_new else math.nan
                end = record_update(task, curves[i], u, u * batch, elapsed, recents[i], this, None)
                if end is None and u >= budget:
                    end = "step budget"
                if end is not None:
                    stop[i] = end
        booked, ran = ran + last, ran + chunk
        seconds["fused"] += t1 - t0
        t2 = time.perf_counter()
        seconds["other"] += t2 - t1
        rows = {}
        for slot, i in enumerate(holder):
            if i is not None and i in stop:
                ended[i] = t1
                holder[slot] = None
                if nxt < n_seeds:  # the slot takes the next seed: a fresh init, as if it had started there
                    holder[slot], slot_of[nxt], started[nxt] = nxt, slot, t2
                    rows[slot] = init_state(st, seeds[nxt])
                    nxt += 1
        if rows:
            state = refill(state, rows, where)
            jax.block_until_ready(state)
            seconds["setup"] += time.perf_counter() - t2
        live = [slot for slot, i in enumerate(holder) if i is not None and i not in stop]
        size = len(holder)
        while live and size // 2 in sizes and len(live) <= size // 2:
            size //= 2
        if live and size < len(holder):  # the list is out, half the slots idle: the live go on in a smaller program
            t3 = time.perf_counter()
            keep = live + [slot for slot in range(len(holder)) if slot not in live][: size - len(live)]
            where = _placement(b.device, size)[0]
            state = compact(state, keep, where)
            jax.block_until_ready(state)
            holder = [holder[slot] for slot in keep]
            shrunk.append([ran, size])
            seconds["other"] += time.perf_counter() - t3
        if on_update is not None:
            pending = [window_mean(recents[i]) for i in range(n_seeds) if i not in stop]
            on_update(sum(updates) * batch, n_seeds * budget * batch, min(pending) if pending else math.nan)
    wall = time.perf_counter() - t_start
    n_conv = sum(why == "converged" for why in stop.values())
    per_policy = round(wall / n_conv, 6) if n_conv else None
    label = batch_label(spec.label, k)
    results = []
    for i, seed in enumerate(seeds):
        conv = stop[i] == "converged"
        # Updates its slot ran for it: to the end of the chunk in which it finished (those past its last booked
        # update are trained, not booked: it is off the books once it converged or ran out of budget).
        held = -(-updates[i] // chunk) * chunk if k < n_seeds else booked
        steps = min(held, budget) * batch
        results.append(_batch_result_class(result_class)(
            task=task.env_id, stack=label, mode=spec.mode, backend="jax", device_key=identity["device_key"],
            hardware_key=identity["hardware_key"], agent_device=b.describe()["jax_device"], seed=seed,
            converged=conv, stop_reason=stop[i], env_steps=steps,
            steps_to_converge=updates[i] * batch if conv else None, updates=updates[i], wall_s=round(wall, 6),
            device_hours=per_policy / 3600 if conv and per_policy else None,
            steps_per_s=steps / max(ended[i] - started[i], 1e-9) if k < n_seeds else steps / wall,
            final_return=window_mean(recents[i]), episodes=episodes[i],
            phases={kk: round(v, 6) for kk, v in seconds.items()}, update_parts=dict.fromkeys(UPDATE_PARTS, 0.0),
            untimed_s=round(wall - sum(seconds.values()), 6), compile_s=0.0,
            losses=dict(zip(("pg", "v", "entropy", "approx_kl"), losses[i])),
            losses_finite=all(math.isfinite(x) for x in losses[i]), curve=curves[i],
            device_seconds_per_policy=per_policy if conv else None, parallel_seeds=k,
            phase_note=PARALLEL_NOTE, batch_seeds=list(seeds), batch_updates=booked, chunk_updates=chunk,
            converged_at_s=round(started[i] - t_start + curves[i][-1][2], 4) if conv else None,
            spread_over=spread, refill=k < n_seeds, shrunk=shrunk, slot=slot_of[i],
            started_at_s=round(started[i] - t_start, 4),
        ))  # fmt: skip
    return results, identity


def batch_label(label: str, k: int) -> str:
    """The stack label of a K-seed batch's records: ``jax/8`` (``jax/8@gpu``), so that K seeds sharing a device
    are never pooled with single-seed runs (their H is another quantity); K = 1 keeps the stack's own label."""
    if k == 1:
        return label
    name, at, device = label.partition("@")
    return f"{name}/{k}{at}{device}"


__all__ = ["CHUNK", "PARALLEL_NOTE", "batch_label", "chunk_program", "compact", "prime_parallel", "program_sizes",
           "refill", "spread_cpu_devices", "train_batch"]
