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


@dataclass
class _SeedRun:
    """One seed of a K-seed batch: where and when it trained, and its books, from which its record is made."""

    seed: int
    #: The slot that trains it: the first K seeds' own, a refill's the slot it took.
    slot: int
    #: When it got its slot (its own clock: curve, time budget), and when its slot let it go (the end of the chunk
    #: in which it finished).
    started: float
    ended: float
    curve: list[list[Any]] = dataclasses.field(default_factory=list)
    #: The last solve_window finished returns, in finishing order.
    recent: list[float] = dataclasses.field(default_factory=list)
    losses: tuple[float, ...] = (math.nan,) * 4
    episodes: int = 0
    updates: int = 0
    #: Why it stopped ("converged", "step budget", "time budget"); None while it trains.
    stop: str | None = None

    def book(self, task: TaskConfig, out: dict, slot: int, j: int, elapsed: float) -> None:
        """Update ``j`` of a chunk's outputs ``out``, which ``slot`` ran for this seed, booked as the single-seed
        loop books an update (``ppo.record_update``); sets :attr:`stop` where the run ends there."""
        from .ppo import record_update

        self.updates += 1
        u, w = self.updates, task.ppo.solve_window
        total, n_new = int(out["finished"][slot, j]), int(out["episodes"][slot, j])
        self.episodes = total
        self.recent = _recent(out["ring"][slot, j], total, w)
        self.losses = tuple(float(x) for x in out["losses"][slot, j])
        this = float(out["return_sum"][slot, j]) / n_new if n_new else math.nan
        end = record_update(task, self.curve, u, u * task.ppo.batch_size, elapsed, self.recent, this, None)
        if end is None and u >= task.num_updates:
            end = "step budget"
        self.stop = end


def _book_chunk(task: TaskConfig, holder: list[_SeedRun | None], out: dict, chunk: int, t0: float,
                t1: float) -> int:  # fmt: skip
    """Book a chunk's updates (run from ``t0`` to ``t1``) for each slot's seed, up to the update at which it
    stopped; the updates of the chunk booked by some slot (a padded last chunk's surplus is not)."""
    last = 0
    for slot, run in enumerate(holder):
        if run is None:
            continue
        for j in range(chunk):
            if run.stop is not None:  # finished earlier in this chunk: the slot's later updates are not booked
                break
            last = max(last, j + 1)
            run.book(task, out, slot, j, (t0 - run.started) + (t1 - t0) * (j + 1) / chunk)  # pro-rated in the chunk
    return last


def _free_slots(holder: list[_SeedRun | None], waiting: list[_SeedRun], t1: float, t2: float) -> list[int]:
    """Let the stopped seeds go (at ``t1``, the chunk's end) and give each freed slot the next waiting seed (at
    ``t2``) while any wait; the slots that took one."""
    taken = []
    for slot, run in enumerate(holder):
        if run is not None and run.stop is not None:
            run.ended = t1
            holder[slot] = None
            if waiting:  # the slot takes the next seed: a fresh init, as if it had started there
                new = holder[slot] = waiting.pop(0)
                new.slot, new.started = slot, t2
                taken.append(slot)
    return taken


def _kept_slots(holder: list[_SeedRun | None], sizes: set[int]) -> list[int] | None:
    """The slots a smaller program keeps (the live ones first) once at most half the slots train and a program of
    half the slots is among ``sizes``, else None."""
    live = [slot for slot, run in enumerate(holder) if run is not None and run.stop is None]
    size = len(holder)
    while live and size // 2 in sizes and len(live) <= size // 2:
        size //= 2
    if not live or size == len(holder):
        return None
    return live + [slot for slot in range(len(holder)) if slot not in live][: size - len(live)]


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
    from .ppo import PHASES, window_mean

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
    seconds = {**dict.fromkeys(PHASES, 0.0), "fused": 0.0}
    t_start = time.perf_counter()
    b = get_backend("jax", spec.device)
    program = chunk_program(st)
    state, spread = _stacked_state(st, seeds[:k], b.device)
    where = _placement(b.device, k)[0]
    jax.block_until_ready(state)
    seconds["setup"] = time.perf_counter() - t_start
    identity = device_info(b, Target(b.name, b.device_name), machine_label())
    runs = [_SeedRun(seed, min(i, k - 1), t_start, t_start) for i, seed in enumerate(seeds)]
    holder: list[_SeedRun | None] = list(runs[:k])  # slot -> the seed it trains, None once the list is out
    waiting = list(runs[k:])
    ran = booked = 0
    # Program sizes the batch may shrink to once the list is out (each primed by prime_parallel), and when it did.
    sizes = set(program_sizes(k, n_seeds, spread) if shrink else [k])
    shrunk: list[list[int]] = []
    while any(run is not None and run.stop is None for run in holder):
        lrs = np.stack([_lrs(cfg, run.updates + 1, chunk, task.num_updates) if run is not None
                        else np.zeros(chunk, np.float32) for run in holder])  # fmt: skip
        t0 = time.perf_counter()
        state, out = program(state, lrs)
        jax.block_until_ready(out)
        t1 = time.perf_counter()
        out = jax.device_get(out)
        booked, ran = ran + _book_chunk(task, holder, out, chunk, t0, t1), ran + chunk
        seconds["fused"] += t1 - t0
        t2 = time.perf_counter()
        seconds["other"] += t2 - t1
        taken = _free_slots(holder, waiting, t1, t2)
        if taken:
            state = refill(state, {slot: init_state(st, holder[slot].seed) for slot in taken}, where)
            jax.block_until_ready(state)
            seconds["setup"] += time.perf_counter() - t2
        keep = _kept_slots(holder, sizes)
        if keep is not None:  # the list is out, half the slots idle: the live go on in a smaller program
            t3 = time.perf_counter()
            where = _placement(b.device, len(keep))[0]
            state = compact(state, keep, where)
            jax.block_until_ready(state)
            holder = [holder[slot] for slot in keep]
            shrunk.append([ran, len(keep)])
            seconds["other"] += time.perf_counter() - t3
        if on_update is not None:
            pending = [window_mean(run.recent) for run in runs if run.stop is None]
            on_update(sum(run.updates for run in runs) * cfg.batch_size, n_seeds * task.num_updates * cfg.batch_size,
                      min(pending) if pending else math.nan)  # fmt: skip
    batch = _BatchRun(k, chunk, booked, spread, shrunk, t_start, time.perf_counter() - t_start, seconds, identity,
                      b.describe()["jax_device"])  # fmt: skip
    return _records(task, spec, runs, batch, result_class), identity


@dataclass
class _BatchRun:
    """What a finished K-seed batch ran and measured as a whole (every seed's record carries it)."""

    k: int
    chunk: int
    #: Updates of the batch's programs booked by some slot.
    booked: int
    spread: int
    shrunk: list[list[int]]
    t_start: float
    wall: float
    seconds: dict[str, float]
    identity: dict[str, Any]
    agent_device: str


def _records(task: TaskConfig, spec: Any, runs: list[_SeedRun], batch: _BatchRun, result_class: type) -> list[Any]:
    """One record per seed of a finished batch."""
    from .ppo import UPDATE_PARTS, window_mean

    k, chunk, wall, identity = batch.k, batch.chunk, batch.wall, batch.identity
    size, budget, refilled = task.ppo.batch_size, task.num_updates, k < len(runs)
    n_conv = sum(run.stop == "converged" for run in runs)
    per_policy = round(wall / n_conv, 6) if n_conv else None
    label = batch_label(spec.label, k)
    results = []
    for run in runs:
        conv = run.stop == "converged"
        # Updates its slot ran for it: to the end of the chunk in which it finished (those past its last booked
        # update are trained, not booked: it is off the books once it converged or ran out of budget).
        held = -(-run.updates // chunk) * chunk if refilled else batch.booked
        steps = min(held, budget) * size
        results.append(_batch_result_class(result_class)(
            task=task.env_id, stack=label, mode=spec.mode, backend="jax", device_key=identity["device_key"],
            hardware_key=identity["hardware_key"], agent_device=batch.agent_device, seed=run.seed,
            converged=conv, stop_reason=run.stop, env_steps=steps,
            steps_to_converge=run.updates * size if conv else None, updates=run.updates, wall_s=round(wall, 6),
            device_hours=per_policy / 3600 if conv and per_policy else None,
            steps_per_s=steps / max(run.ended - run.started, 1e-9) if refilled else steps / wall,
            final_return=window_mean(run.recent), episodes=run.episodes,
            phases={kk: round(v, 6) for kk, v in batch.seconds.items()}, update_parts=dict.fromkeys(UPDATE_PARTS, 0.0),
            untimed_s=round(wall - sum(batch.seconds.values()), 6), compile_s=0.0,
            losses=dict(zip(("pg", "v", "entropy", "approx_kl"), run.losses)),
            losses_finite=all(math.isfinite(x) for x in run.losses), curve=run.curve,
            device_seconds_per_policy=per_policy if conv else None, parallel_seeds=k,
            phase_note=PARALLEL_NOTE, batch_seeds=[r.seed for r in runs], batch_updates=batch.booked,
            chunk_updates=chunk,
            converged_at_s=round(run.started - batch.t_start + run.curve[-1][2], 4) if conv else None,
            spread_over=batch.spread, refill=refilled, shrunk=batch.shrunk, slot=run.slot,
            started_at_s=round(run.started - batch.t_start, 4),
        ))  # fmt: skip
    return results


def batch_label(label: str, k: int) -> str:
    """The stack label of a K-seed batch's records: ``jax/8`` (``jax/8@gpu``), so that K seeds sharing a device
    are never pooled with single-seed runs (their H is another quantity); K = 1 keeps the stack's own label."""
    if k == 1:
        return label
    name, at, device = label.partition("@")
    return f"{name}/{k}{at}{device}"


__all__ = ["CHUNK", "PARALLEL_NOTE", "batch_label", "chunk_program", "compact", "prime_parallel", "program_sizes",
           "refill", "spread_cpu_devices", "train_batch"]
