"""Interleaved timing: every case of one comparison timed in the same rounds, in short runs spread over each
round in a shuffled order, so a shared machine's drift hits them alike."""

from __future__ import annotations

import gc
import math
import time
from typing import Any, Callable

import numpy as np

from ...backends import Backend
from .knobs import applied
from .prepared import Prepared
from .runinfo import cpu_ticks_each, worst_cpu_steal

#: Rounds per group, the shortest timed slot (back-to-back synchronised launches of one case) and the
#: most seconds one group's rounds may take (fewer rounds then, never under MIN_ROUNDS): full, quick.
#: A quick run's rounds are its smallest share of time (compiles, parity and preparation are most of
#: it), so fewer rounds buy little; 10 still put a paired ratio's 10th-90th percentile interval between
#: distinct values of it, where 5 would make it the min and max.
ROUNDS, QUICK_ROUNDS, MIN_ROUNDS = 30, 10, 5
#: Slots of ~10 ms span several scheduler time slices, so one preemption does not decide a round.
SLOT_S, QUICK_SLOT_S = 20e-3, 10e-3
GROUP_BUDGET_S, QUICK_GROUP_BUDGET_S = 10.0, 1.0
#: Most visits a group's rounds are split into (bench/conftest.py): a full run spreads them over the
#: run to sample its changing load; a quick run times each group in one visit, since every further
#: visit prepares, calibrates and warms each member again, which costs a slow rollout case more than
#: its rounds (its members stay paired round by round either way).
VISITS, QUICK_VISITS = 3, 1
MAX_REPS = 100_000
#: A single calibration launch up to this many slots long is timed twice (see calibrate_launch).
COLD_RETRY = 4


def make_slot(b: Backend, prep: Prepared, config: dict[str, Any] | None) -> Callable[[int], float]:
    """``slot(reps)``: seconds that ``reps`` back-to-back launches take, each synchronised, under the case's knobs.

    The synchronise is inside the timed loop: the kernel's time, not the enqueue's. Knobs are set
    outside it (on the shared backend instance, restored after).
    """

    def slot(reps: int) -> float:
        with applied(b, config):
            t0 = time.perf_counter()
            for _ in range(reps):
                prep.run()
                b.synchronize()
            return time.perf_counter() - t0

    return slot


def calibrate(slot: Callable[[int], float], slot_s: float) -> int:
    """Launches per slot so that one slot lasts at least ``slot_s`` (one warm launch first, untimed)."""
    return calibrate_launch(slot, slot_s)[0]


def calibrate_launch(slot: Callable[[int], float], slot_s: float, warm: bool = False) -> tuple[int, float]:
    """:func:`calibrate`'s launches per slot, and the seconds of one launch in a run of them. ``warm``: the case
    has just run (its parity check did, in this process), so the untimed warm launch is left out: a quick
    run's slow rollout cases take up to a second a launch.

    A launch right after other work runs cold (caches, worker threads asleep, an idle vCPU woken): on the
    2-core development VM a single env step after another backend's took 2.2-2.6x its time in runs of 8 or
    more (see MIN_RUN). So a case faster than the slot is timed once more in a run about one slot long, and that run's
    time per launch sets the launches per slot: a slot is then ``slot_s`` long in the runs it is timed in.
    A single launch of up to COLD_RETRY slots is timed once more first, the faster kept: a 1-2 ms env step
    whose first launch in its group took 14 ms got one launch per slot, every one of them cold.
    """
    if not warm:
        slot(1)
    t = max(slot(1), 1e-9)
    if slot_s <= t < COLD_RETRY * slot_s:
        t = max(min(t, slot(1)), 1e-9)
    if t < slot_s:
        n = int(min(MAX_REPS, math.ceil(slot_s / t)))
        t = max(min(t, slot(n) / n), 1e-9)
    return int(min(MAX_REPS, max(1, math.ceil(slot_s / t)))), t


def interleave(slots: list[Callable[[int], float]], reps: list[int], rounds: int, budget_s: float = math.inf,
               min_rounds: int = MIN_ROUNDS, seed: int = 0, estimate_s: float | None = None) -> list[list[float]]:  # fmt: skip
    """Time the cases of one group in interleaved rounds; per case, the seconds per launch of each round.

    Every round runs ``reps[j]`` launches of every case j, split into up to CHUNKS runs of at least
    MIN_RUN back-to-back launches (see there) that are spread evenly over the round and merged with the
    other cases' (in an order shuffled afresh each round, seeded): a change of the machine's load during a
    round hits every case of the group alike, and round r of one case pairs with round r of every
    other. One untimed round first; then as many rounds as ``budget_s`` allows (estimated from
    that round, and stopping at a round boundary once past the budget), between ``min_rounds`` and
    ``rounds``. ``estimate_s``, a round's seconds as calibration measured them (a quick run), replaces the
    untimed round, whose launches a slow group pays on top of its few timed ones. The garbage collector is
    paused while timing.
    """
    if len(slots) != len(reps):
        raise ValueError(f"interleave: {len(slots)} slots but {len(reps)} rep counts")
    if not slots:
        return []
    rng = np.random.default_rng(seed)
    warm = estimate_s if estimate_s is not None else sum(s(r) for s, r in zip(slots, reps))
    n = rounds if warm <= 0 or math.isinf(budget_s) else int(min(rounds, max(min_rounds, budget_s // warm)))
    out: list[list[float]] = [[] for _ in slots]
    gc_was_on = gc.isenabled()
    # The young generations only: the collector is off while timing anyway, and a full collection of a
    # process that has imported torch and jax costs ~0.3 s per group (a third of a quick numpy bench).
    gc.collect(1)
    gc.disable()
    t0 = time.perf_counter()
    try:
        for r in range(n):
            spent = [0.0] * len(slots)
            for j, launches in _plan(reps, rng.permutation(len(slots))):
                spent[j] += slots[j](launches)
            for j, total in enumerate(spent):
                out[j].append(total / reps[j])
            if r + 1 >= min_rounds and time.perf_counter() - t0 > budget_s:
                break  # the machine slowed down after the estimate: stop at a round boundary
    finally:
        if gc_was_on:
            gc.enable()
    return out


#: A group's rounds are timed again, once, when the hypervisor stole more than this share of one CPU's time
#: while they ran, and at least STEAL_MIN_TICKS ticks (10 ms each on Linux). A threaded runtime's parallel
#: region waits for its stolen core, a one-thread runtime's launch does not: one quick run on the 2-core VM
#: had eager torch's two-thread buffer ops 25-150x slower than the next two runs for four groups (NumPy's
#: unchanged), and 22 comparisons flipped against each of them; the run recorded only the machine's average
#: steal (1.5 %), so this guard and ``visit_steal`` are what would show such a burst.
#: Only a burst is timed again: a share above STEAL_BURST times the run's own so far (a machine stolen from
#: all along is stolen from in the second attempt too: a quick run at 14 % steal retimed 23 of 28 groups,
#: each attempt at 8-44 %, adding 47 s of rounds and changing nothing).
STEAL_RETIME, STEAL_MIN_TICKS, STEAL_BURST = 0.10, 5, 2.0


def timed_undisturbed(run: Callable[[int], list[list[float]]], ticks: Callable[[], Any] = cpu_ticks_each,
                      background: float | None = None) -> tuple[list[list[float]], list[float | None]]:  # fmt: skip
    """``run(attempt)``'s rounds, run again once when a CPU was stolen from while they ran, beyond STEAL_RETIME
    and STEAL_BURST x ``background`` (the run's worst one-CPU steal share so far): the rounds of the last
    attempt, and the worst one-CPU steal share of each attempt (None where the machine does not say)."""
    limit = max(STEAL_RETIME, STEAL_BURST * (background or 0.0))
    steals: list[float | None] = []
    for attempt in range(2):
        before = ticks()
        out = run(attempt)
        steal = worst_cpu_steal(before, ticks(), STEAL_MIN_TICKS)
        steals.append(steal)
        if steal is None or steal <= limit:
            break
    return out, steals


#: Most runs of back-to-back launches one case is split into per round (see interleave), and the fewest
#: launches in one run. The first launch of a run follows another case's and runs cold: on the 2-core
#: development VM, per-launch times of six backends' Pendulum-v1 steps at 1,024 envs, in runs of 1, 2, 4, 8,
#: 16 and 32 launches interleaved with each other, were 2.2-2.6x, 1.6-2.3x and 1.2x the median of the runs
#: of 8, 16 and 32 (which were within -17 % / +9 % of it; JAX, at 2.5 ms a launch, 1.15x and 1.3x at 1 and
#: 2 launches). Runs of one or two launches (CHUNKS = 8 in a slot of 8-16 launches) timed mostly the switch
#: between cases, not the case.
CHUNKS, MIN_RUN = 8, 8


def _plan(reps: list[int], order: Any) -> list[tuple[int, int]]:
    """One round's schedule: (case, launches) runs, each case's runs evenly spaced over the round."""
    runs = []
    for rank, j in enumerate(order):
        c = max(1, min(reps[j] // MIN_RUN, CHUNKS))
        base, extra = divmod(reps[j], c)
        runs += [((k + 0.5) / c, rank, j, base + (k < extra)) for k in range(c)]
    return [(j, launches) for _, _, j, launches in sorted(runs)]


def round_summary(seconds: list[float], items: int) -> dict[str, Any]:
    """Per-round throughput of one case: min, median and max items/s over its rounds."""
    rates = sorted(items / s for s in seconds)
    return {"rounds": len(rates), "min": rates[0], "median": float(np.median(rates)), "max": rates[-1]}
