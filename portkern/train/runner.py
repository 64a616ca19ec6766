"""``portkern train``: pinned PPO tasks to convergence on several stacks and seeds, one schema'd JSON."""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .. import __version__
from ..identity import cpu_model, machine_label
from .config import TRAIN_SCHEMA, TaskConfig
from .ppo import (COMPILED_PARTS_NOTE, PHASES, UPDATE_PARTS, Agent, PhaseTimer, bootstrap_values, finished_returns,
                  make_optimizer, ppo_update, record_update, window_mean)
from .stacks import Stack, StackSpec, Storage, build
from .update import CompiledUpdate

DEVICE_HOUR = (
    "device-hours per converged policy = wall-clock seconds from the start of setup (env build, kernel "
    "compile, model init) to the end of the update at which the policy converged, / 3600, with the device "
    "held by the run for all of it. On a GPU the device is one GPU; on a CPU it is the whole processor (every "
    "core of the machine: the env backend and PyTorch may use any of them), whatever the run's core use. K seeds "
    "trained at once on one device (--parallel-seeds K): the batch's wall-clock seconds, start of setup to the "
    "end of the chunk in which its last seed finished, / its converged policies, / 3600 (with --refill the batch "
    "is every seed of the list, K at a time, a finished seed's slot taking the next)."
)
#: Untimed gaps between phases may not exceed this share of the wall time (tests hold runs to it).
UNTIMED_TOLERANCE = 0.05


@dataclass
class RunResult:
    task: str
    stack: str
    mode: str
    backend: str
    device_key: str
    hardware_key: str
    agent_device: str
    seed: int
    converged: bool
    stop_reason: str  # "converged", "step budget", "time budget"
    env_steps: int
    steps_to_converge: int | None
    updates: int
    wall_s: float
    device_hours: float | None
    steps_per_s: float
    final_return: float
    episodes: int
    phases: dict[str, float]
    update_parts: dict[str, float]
    untimed_s: float
    compile_s: float
    losses: dict[str, float]
    losses_finite: bool
    #: Per update: [update, env steps, wall s, mean return of the last solve_window episodes, of this update's episodes]
    curve: list[list[float]] = field(default_factory=list)
    #: Device seconds per converged policy: the run's own wall time (a single-seed run that converged), or its
    #: batch's wall time / the batch's converged policies (K seeds at once); None for an unconverged run.
    device_seconds_per_policy: float | None = None
    #: Seeds sharing the device at once with this run (itself included): 1, or K of --parallel-seeds K.
    parallel_seeds: int = 1
    #: The PPO update that ran: "compiled" (torch.compile calls: the whole update on a CPU, a few minibatches
    #: each on CUDA) or "eager";
    #: None where the run is not the torch instrument's (the jax stack compiles its own whole loop).
    update: str | None = None
    #: Where update_parts are not timed apart, why (a compiled update gathers and normalises inside its call).
    update_parts_note: str | None = None
    #: How a torch stack acted and stepped: "compiled" (torch.compile calls of a few steps each, phase "env") or
    #: "eager" (its +eager-act variant, or an env step that does not compile to one graph); None on the other
    #: stacks.
    collect: str | None = None

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def train_one(task: TaskConfig, spec: StackSpec, seed: int,
              on_update: Callable[[int, int, float], None] | None = None,
              threads: int | None = None) -> tuple[RunResult, dict[str, Any]]:  # fmt: skip
    """One run of ``task`` on ``spec`` with ``seed``: (result, the env device's identity). ``threads`` caps
    PyTorch's threads at the cores the run reserved (a Ray worker's K cores), never above the pinned count."""
    cfg = task.ppo
    if spec.backend == "jax":  # the whole PPO in JAX: its own loop, the same record
        from .jax_ppo import train_one as train_one_jax

        return train_one_jax(task, spec, seed, on_update, threads, result_class=RunResult)
    pin_threads(task, threads)
    torch.manual_seed(seed)
    stack: Stack = build(spec, task, seed)
    timer = PhaseTimer(stack.sync)
    compile_before = 0.0
    t_start = time.perf_counter()
    try:
        with timer("setup"):
            next_obs = stack.setup()
            compile_before = _compile_seconds(stack)
            device = stack.agent_device
            agent = Agent(stack.obs_dim, stack.n_actions, cfg.hidden, stack.action_dim).to(device)
            optimizer = make_optimizer(agent, cfg)
            compiled = CompiledUpdate(agent, cfg) if spec.compiled_update else None
            if compiled is not None:
                compiled.warm_up(optimizer, cfg.batch_size)  # compiled once per process (prime): a call here
            T, N, D = cfg.num_steps, cfg.num_envs, stack.obs_dim
            store = Storage.zeros(T, N, D, stack.discrete, device, stack.action_dim)
            stack.warm_up(agent)
            episode_return = torch.zeros(N, dtype=torch.float64, device=device)
        identity = stack.identity()
        recent: deque[float] = deque(maxlen=cfg.solve_window)
        episodes = global_step = 0
        curve: list[list[float]] = []
        losses = (math.nan,) * 4
        stop = "step budget"
        update = 0
        for update in range(1, task.num_updates + 1):
            with timer("other"):
                if cfg.anneal_lr:
                    optimizer.param_groups[0]["lr"] = cfg.lr * (1.0 - (update - 1.0) / task.num_updates)
            next_obs = stack.collect(agent, store, timer, next_obs)
            with timer("act"), torch.no_grad():
                # V(obs each step reached): GAE zeroes it where the step terminated, keeps it where it truncated.
                next_values = bootstrap_values(agent, store.values, store.final_obs, store.truncated)
            advantages, returns = stack.advantages(store, next_values, timer)
            with timer("update"):
                losses = ppo_update(agent, optimizer, cfg, timer, store.obs.reshape(-1, D), store.actions.flatten(0, 1),
                                    store.logprobs.reshape(-1), store.values.reshape(-1), advantages.reshape(-1),
                                    returns.reshape(-1), compiled)  # fmt: skip
            with timer("other"):
                finished = finished_returns(episode_return, store.rewards, store.terminated | store.truncated)
                global_step += T * N
                episodes += len(finished)
                recent.extend(finished)
                end = record_update(task, curve, update, global_step, time.perf_counter() - t_start, recent,
                                    window_mean(finished), on_update)
            if end is not None:
                stop = end
                break
        wall = time.perf_counter() - t_start
    finally:
        stack.close()
    phases = {k: round(v, 6) for k, v in timer.seconds.items()}
    compile_s = _compile_seconds(stack) - compile_before
    converged = stop == "converged"
    result = RunResult(
        task=task.env_id, stack=spec.label, mode=spec.mode, backend=spec.backend or "gymnasium",
        device_key=identity["device_key"], hardware_key=identity["hardware_key"], agent_device=str(device),
        seed=seed, converged=converged, stop_reason=stop, env_steps=global_step,
        steps_to_converge=global_step if converged else None, updates=update, wall_s=round(wall, 6),
        device_hours=wall / 3600 if converged else None, steps_per_s=global_step / wall,
        final_return=window_mean(recent), episodes=episodes, phases=phases,
        update_parts={k: round(v, 6) for k, v in timer.parts.items()},
        untimed_s=round(wall - sum(timer.seconds.values()), 6), compile_s=round(compile_s, 6),
        losses=dict(zip(("pg", "v", "entropy", "approx_kl"), losses)),
        losses_finite=all(math.isfinite(x) for x in losses), curve=curve,
        device_seconds_per_policy=round(wall, 6) if converged else None,
        update="compiled" if compiled is not None else "eager",
        update_parts_note=COMPILED_PARTS_NOTE if compiled is not None else None,
        collect=getattr(stack, "collect_kind", None),
    )  # fmt: skip
    return result, identity


def pin_threads(task: TaskConfig, threads: int | None = None) -> None:
    """PyTorch's threads for a run or prime of ``task``: the pinned count, capped at the cores the run reserved
    (``threads``, a Ray worker's). Compiled graphs are per thread count, so a prime must run at its runs' count."""
    cfg = task.ppo
    torch.set_num_threads(cfg.torch_threads if threads is None else max(1, min(cfg.torch_threads, threads)))


def _compile_seconds(stack: Stack) -> float:
    """Seconds the stack's backend has spent compiling so far (torch.compile backends count them)."""
    return float(sum(getattr(stack.backend, "compile_seconds", {}).values())) if stack.backend is not None else 0.0


def prime(task: TaskConfig, spec: StackSpec, threads: int | None = None) -> float:
    """Build, compile and warm up ``spec`` once, untimed by the runs: kernel programs and compiled graphs are
    cached per process, so without this the first seed of a stack would pay its one-off compile and the
    others not. ``threads`` as :func:`train_one` takes it (the graphs are compiled at the runs' thread count).
    Returns the seconds it took (the report lists them as one-off costs)."""
    pin_threads(task, threads)
    t0 = time.perf_counter()
    stack = build(spec, task, 0)
    try:
        stack.setup()
        agent = Agent(stack.obs_dim, stack.n_actions, task.ppo.hidden, stack.action_dim).to(stack.agent_device)
        stack.warm_up(agent)
        if spec.compiled_update:  # the update's compiled minibatch step, cached per process like the kernels
            CompiledUpdate(agent, task.ppo).warm_up(make_optimizer(agent, task.ppo), task.ppo.batch_size)
    finally:
        stack.close()
    return time.perf_counter() - t0


def code_revision() -> str | None:
    """The git commit of the portkern checkout running (with "+dirty" for local changes), or None (a wheel)."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=here.parent, capture_output=True,
                               text=True, timeout=5).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return rev.stdout.strip() + ("+dirty" if dirty else "")


def host_info() -> dict[str, Any]:
    try:
        load = os.getloadavg()
    except OSError:
        load = (math.nan,) * 3
    return {"machine": machine_label(), "cpu": cpu_model(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__, "load_avg": [round(x, 2) for x in load]}  # fmt: skip


class Interrupted(RuntimeError):
    """The run was stopped (Ctrl-C): no final JSON was written; the journal keeps every finished run."""


#: What H is per, when every run holds the whole machine (the serial default).
WHOLE_MACHINE = "the whole processor (every core of the machine), or one GPU, held by one run at a time"
#: ... and when K seeds train at once (--parallel-seeds K).
WHOLE_MACHINE_BATCH = ("the whole processor (every core of the machine), or one GPU, held by one batch of K seeds "
                       "at a time, its wall time shared by the batch's converged policies")
#: Backends whose stacks train K seeds at once on one device (--parallel-seeds K): jax (vmap over seeds) and the
#: resident torch stacks (a batched ensemble: stacked parameters, torch.func.vmap over seeds).
PARALLEL_STACKS = ("jax", "torch", "torch_compile")


def grid_identity(tasks: Sequence[TaskConfig], stacks: Sequence[StackSpec], seeds: Sequence[int],
                  config_source: str, unit: str, parallel_seeds: int = 1,
                  refill: bool = False) -> dict[str, Any]:  # fmt: skip
    """What a resume must find unchanged: the pinned task configs, stacks, seeds, the unit H is per, the code
    revision and the machine (a run from another machine or another commit is another measurement), and K
    (and refilling) when seeds train K at once."""
    extra = {"parallel_seeds": parallel_seeds} if parallel_seeds > 1 else {}
    if refill:  # only then: journals from before --refill keep their identity
        extra["refill"] = True
    return {**extra,
        "config": {"source": config_source, "tasks": {t.env_id: t.as_dict() for t in tasks}},
        "stacks": [s.label for s in stacks], "seeds": list(seeds), "unit": unit,
        "code_revision": code_revision(),
        "machine": {"name": machine_label(), "cpu": cpu_model(), "cores": os.cpu_count()},
    }  # fmt: skip


def run_key(task: TaskConfig, spec: StackSpec, seed: int) -> list[Any]:
    return ["run", task.env_id, spec.label, seed]


def batch_key(task: TaskConfig, spec: StackSpec, seeds: Sequence[int]) -> list[Any]:
    """The journal key of K seeds trained at once: one journal unit (the batch's records are written together,
    and a resume reruns an unfinished batch whole)."""
    return ["batch", task.env_id, spec.label, *seeds]


def check_parallel(stacks: Sequence[StackSpec], seeds: Sequence[int], k: int, refill: bool = False) -> None:
    """Refuse a K the grid cannot run: a stack that trains one seed at a time, or seeds that do not split into
    batches of K (without refills), or fewer seeds than K slots (with)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"--parallel-seeds: expected an integer >= 1, got {k!r}")
    if refill and k == 1:
        raise ValueError("--refill: only with --parallel-seeds K > 1 (it refills the K slots of a batch)")
    if k == 1:
        return
    bad = [s.label for s in stacks if s.backend not in PARALLEL_STACKS or s.mode != "resident"]
    if bad:
        raise ValueError(f"--parallel-seeds {k}: only the jax stack and the torch stacks (torch, torch_compile) train "
                         f"several seeds at once on one device (vmap over seeds); not {', '.join(bad)}: run those "
                         "without --parallel-seeds, in a grid of their own")  # fmt: skip
    eager = [s.label for s in stacks if s.backend != "jax" and not s.compiled_update]
    if eager:
        raise ValueError(f"--parallel-seeds {k}: the torch stacks' K seeds always compile their update (one vmapped "
                         f"call per minibatch); not {', '.join(eager)}: drop +eager-update")  # fmt: skip
    if refill and any(s.backend != "jax" for s in stacks):
        no = ", ".join(s.label for s in stacks if s.backend != "jax")
        raise ValueError(f"--refill: only the jax stack refills its slots; not {no} (its K seeds train together "
                         "to the end of the batch): drop --refill or run that stack in a grid of its own")  # fmt: skip
    if refill:
        if len(seeds) < k:
            raise ValueError(f"--parallel-seeds {k} --refill: {len(seeds)} seed(s) for {k} slots; give at least {k} "
                             "seeds (or a smaller K)")  # fmt: skip
    elif len(seeds) % k:
        raise ValueError(f"--parallel-seeds {k}: {len(seeds)} seed(s) do not split into batches of {k}; give a "
                         f"multiple of {k} seeds")  # fmt: skip


def local_schedule(start: float, end: float, hardware_key: str) -> dict[str, Any]:
    """Where and when a run ran: the worker (host:pid), its hardware, the cores it may use, start and end, and
    the earlier attempts at it that a dead worker cut short (a Ray grid's; none here)."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no affinity call; the run may use every core
        cores = list(range(os.cpu_count() or 1))
    return {"worker": f"{platform.node()}:{os.getpid()}", "hardware": hardware_key, "cores": cores,
            "start": _iso(start), "end": _iso(end), "attempts": []}  # fmt: skip


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")


def train_many(tasks: Sequence[TaskConfig], stacks: Sequence[StackSpec], seeds: Sequence[int], out: Path,
               config_source: str, command: str = "", progress: bool = True, resume: bool = False,
               grid: Any = None, parallel_seeds: int = 1, refill: bool = False) -> dict[str, Any]:  # fmt: skip
    """Every (task, seed, stack), seed-major so a shared machine's drift hits every stack alike. Each finished
    run is appended to the journal next to ``out`` (``<out>.journal``) as it finishes; once every run has
    finished the JSON is built from the journal and written to ``out`` atomically, and the journal removed
    (kept when runs failed, so that a resume runs them again). ``resume`` skips the runs the journal holds (after checking it is this grid's: config, code, machine).
    ``grid`` runs the remaining runs elsewhere (a :class:`portkern.train.ray_grid.RayGrid`); default: here,
    one after another. ``parallel_seeds`` K > 1 trains the seeds K at once on one device (the jax and torch
    stacks), in batches of consecutive seeds, each batch one journal unit; with ``refill`` (jax only), every seed
    of the list in one batch of K slots (a finished seed's slot takes the next seed), one journal unit per task and
    stack."""
    from ..journal import Journal, journal_path, write_json_atomically

    out = Path(out)
    if out.exists() and out.is_dir():
        raise ValueError(f"--out {out}: is a folder; expected a JSON file path")
    if not out.parent.exists():
        raise ValueError(f"--out {out}: folder {out.parent} does not exist")
    k = parallel_seeds
    check_parallel(stacks, seeds, k, refill)
    if k > 1 and grid is not None:
        raise ValueError(f"--parallel-seeds {k} with --ray: not supported (a Ray grid runs one seed per piece of "
                         "hardware); run the batches without --ray")  # fmt: skip
    plan = [(t, s, sd) for t in tasks for sd in seeds for s in stacks]
    unit = grid.unit if grid is not None else WHOLE_MACHINE_BATCH if k > 1 else WHOLE_MACHINE
    journal = Journal.open(
        journal_path(out), "train", grid_identity(tasks, stacks, seeds, config_source, unit, k, refill), resume,
        extra={"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "host": host_info(),
               "command": command},
    )  # fmt: skip
    group = len(seeds) if refill else k  # seeds per batch (journal unit)
    batches = [(t, s, tuple(seeds[i:i + group])) for t in tasks for i in range(0, len(seeds), group) for s in stacks]
    batch_of = {(t.env_id, s.label, sd): b for b in batches for t, s, sds in [b] for sd in sds}

    def finished(t: TaskConfig, s: StackSpec, sd: int) -> bool:
        if k > 1:
            return tuple(batch_key(*batch_of[(t.env_id, s.label, sd)])) in journal.done
        return tuple(run_key(t, s, sd)) in journal.done

    todo = [(t, s, sd) for t, s, sd in plan if not finished(t, s, sd)]
    todo_batches = [b for b in batches if k > 1 and tuple(batch_key(*b)) not in journal.done]
    bar = _Progress(len(plan), enabled=progress)

    def record(task: TaskConfig, spec: StackSpec, seed: int, run: dict[str, Any], device: dict[str, Any]) -> None:
        journal.append(run_key(task, spec, seed), {"run": run, "device": device})

    def record_failed(task: TaskConfig, spec: StackSpec, seed: int, reason: str, attempts: list[Any]) -> None:
        failure = {"task": task.env_id, "stack": spec.label, "seed": seed, "reason": reason, "attempts": attempts}
        journal.append(run_key(task, spec, seed), failure, status="failed")

    def record_prime(task: TaskConfig, spec: StackSpec, seconds: float) -> None:
        journal.append(["prime", task.env_id, spec.label], {"seconds": round(seconds, 4)}, status="note")

    try:
        if grid is not None:
            grid.execute(todo, record, record_failed, record_prime, progress=progress)
        elif todo_batches:
            _run_batches(todo_batches, len(plan) - len(todo), bar, journal, k)
        elif todo:
            # Fail fast: every stack still to run builds and compiles before the first run starts.
            pairs = {(t.env_id, s.label): (t, s) for t, s, _ in todo}
            for task, spec in pairs.values():
                record_prime(task, spec, prime(task, spec))
            with bar:
                bar.skip(len(plan) - len(todo))
                for i, (task, spec, seed) in enumerate(todo):
                    bar.start_run(f"{task.env_id} {spec.label} seed {seed}", i)
                    start = time.time()
                    result, identity = train_one(task, spec, seed, bar.update)
                    run = {**result.as_dict(), "schedule": local_schedule(start, time.time(), identity["hardware_key"])}
                    record(task, spec, seed, run, identity)
                    bar.end_run(result)
    except KeyboardInterrupt:
        done = sum(finished(*p) for p in plan)
        if not done:  # nothing to keep: a journal would only make the next plain run ask for --resume
            journal.finish()
            raise Interrupted(f"interrupted before any run finished: nothing written to {out}") from None
        journal.close()
        again = f"`{command} --resume`" if command and "--resume" not in command.split() else \
            f"`{command}`" if command else "the same command with --resume"
        raise Interrupted(f"interrupted after {done} of {len(plan)} runs: nothing written to {out} yet; the "
                          f"finished runs are kept in {journal.path}; finish the rest with {again}") from None
    except BaseException:  # a stack that fails to build, a bad cluster: keep what finished, if anything did
        if any(finished(*p) for p in plan):
            journal.close()
        else:
            journal.finish()
        raise
    doc = build_document(journal.header, journal.done, journal.failed, journal.notes, tasks, plan, config_source, command)
    write_json_atomically(out, doc)
    if doc["failed"]:
        journal.close()  # kept: --resume runs the failed runs again and rewrites the JSON
    else:
        journal.finish()
    return doc


def _run_batches(batches: Sequence[tuple[TaskConfig, StackSpec, tuple[int, ...]]], skipped: int, bar: _Progress,
                 journal: Any, k: int) -> None:
    """K seeds at a time on one device (the jax stack's vmap, the torch stacks' batched ensemble), each batch
    journaled as one unit once all its records are in: an interrupted batch leaves nothing, and a resume runs it
    again whole. A batch of more than K seeds refills (jax only): its K slots take its seeds in turn."""
    from . import jax_batch, torch_batch

    def prime_batch(task: TaskConfig, spec: StackSpec, n: int) -> float:
        if spec.backend == "jax":
            return jax_batch.prime_parallel(task, k, spec.device, n_seeds=n)
        return torch_batch.prime_parallel(task, k, spec, n_seeds=n)

    pairs = {(t.env_id, s.label): (t, s, len(sds)) for t, s, sds in batches}
    for task, spec, n in pairs.values():  # compile each K's programs before the first timed batch
        seconds = prime_batch(task, spec, n)
        journal.append(["prime", task.env_id, jax_batch.batch_label(spec.label, k)], {"seconds": round(seconds, 4)},
                       status="note")  # fmt: skip
    with bar:
        bar.skip(skipped)
        for i, (task, spec, seeds) in enumerate(batches):
            bar.start_run(f"{task.env_id} {jax_batch.batch_label(spec.label, k)} seeds "
                          f"{','.join(map(str, seeds))}", i)  # fmt: skip
            start = time.time()
            module = jax_batch if spec.backend == "jax" else torch_batch
            results, identity = module.train_batch(task, spec, list(seeds), on_update=bar.update,
                                                   result_class=RunResult, slots=k)  # fmt: skip
            schedule = local_schedule(start, time.time(), identity["hardware_key"])
            runs = [{**r.as_dict(), "schedule": schedule} for r in results]
            journal.append(batch_key(task, spec, seeds), {"runs": runs, "device": identity})
            for r in results:
                bar.end_run(r)


def _expand_batches(done: dict[tuple[Any, ...], dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The journal's finished records with every batch's records filed under their own run keys."""
    out = dict(done)
    for key, data in done.items():
        if key[0] == "batch":
            for run in data["runs"]:
                out[("run", key[1], key[2], run["seed"])] = {"run": run, "device": data["device"]}
    return out


def build_document(header: dict[str, Any], done: dict[tuple[Any, ...], dict[str, Any]],
                   failed: dict[tuple[Any, ...], dict[str, Any]], notes: dict[tuple[Any, ...], dict[str, Any]],
                   tasks: Sequence[TaskConfig],
                   plan: Sequence[tuple[TaskConfig, StackSpec, int]], config_source: str,
                   command: str) -> dict[str, Any]:  # fmt: skip
    """The final JSON from a journal's records: the runs in plan order, whichever process or worker ran them and
    in whatever order they finished, so a resumed or distributed grid has the schema of an uninterrupted one."""
    runs: list[dict[str, Any]] = []
    devices: dict[str, dict[str, Any]] = {}
    primed: dict[str, dict[str, float]] = {}
    done = _expand_batches(done)
    for key, data in notes.items():
        if key[0] == "prime":
            primed.setdefault(key[1], {})[key[2]] = data["seconds"]
    for task, spec, seed in plan:
        rec = done.get(tuple(run_key(task, spec, seed)))
        if rec is not None:
            runs.append(rec["run"])
            devices[rec["device"]["device_key"]] = rec["device"]
    failures = [data for key, data in failed.items() if key[0] == "run" and key not in done]
    host_start = header.get("host") or host_info()
    k = header["identity"].get("parallel_seeds", 1)
    refill = header["identity"].get("refill", False)
    return {
        "schema": TRAIN_SCHEMA, "portkern_version": __version__, "code_revision": header["identity"]["code_revision"],
        "created": header.get("created"), "command": command,
        "config": {"source": config_source, "version": tasks[0].version if tasks else None,
                   "tasks": {t.env_id: t.as_dict() for t in tasks}},
        "device_hour": DEVICE_HOUR, "unit": header["identity"]["unit"], "phases": PHASES,
        "update_parts": UPDATE_PARTS, "untimed_tolerance": UNTIMED_TOLERANCE,
        "host": {**host_start, "load_avg_end": host_info()["load_avg"]},
        "order": "seed-major: for each task, every stack runs seed s before any runs seed s+1" if k == 1 else
                 f"refill: for each task, every stack trains all the seeds in {k} slots, a finished seed's slot "
                 "taking the next seed of the list, before the next stack" if refill else
                 f"batch-major: for each task, every stack trains a batch of {k} seeds at once (consecutive seeds "
                 "of the list) before any trains the next batch",
        "prime_s": primed, "devices": devices, "runs": runs, "failed": failures,
    }  # fmt: skip


class _Progress:
    """A rich progress bar (runs done, and env steps of the current run), or plain lines without rich/a tty."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.enabled = total, enabled
        self.rich = None
        if enabled:
            try:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

                self.rich = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                     transient=False, disable=not sys.stderr.isatty())  # fmt: skip
            except ImportError:
                self.rich = None

    def __enter__(self) -> _Progress:
        if self.rich is not None:
            self.rich.__enter__()
            self.all = self.rich.add_task("runs", total=self.total, info="")
            self.run = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.rich is not None:
            self.rich.__exit__(*exc)

    def skip(self, n: int) -> None:
        """Runs a resumed grid found finished in its journal."""
        if n and self.rich is not None:
            self.rich.advance(self.all, n)
        elif n and self.enabled:
            print(f"{n} run(s) already finished in the journal: skipped", file=sys.stderr, flush=True)

    def start_run(self, label: str, i: int) -> None:
        self.label = label
        if self.rich is not None:
            if self.run is not None:
                self.rich.remove_task(self.run)
            self.run = self.rich.add_task(label, total=None, info="")

    def update(self, steps: int, budget: int, mean: float) -> None:
        if self.rich is not None and self.run is not None:
            self.rich.update(self.run, completed=steps, total=budget,
                             info=f"return {mean:8.1f}" if not math.isnan(mean) else "")  # fmt: skip

    def end_run(self, r: RunResult) -> None:
        line = (f"{r.task} {r.stack} seed {r.seed}: {r.stop_reason} after {r.env_steps:,} steps in {r.wall_s:.1f} s "
                f"(return {r.final_return:.1f}, {r.steps_per_s:,.0f} steps/s)")  # fmt: skip
        if self.rich is not None:
            self.rich.advance(self.all)
            self.rich.console.print(line)
        else:
            print(line, file=sys.stderr, flush=True)
