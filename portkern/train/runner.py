"""``portkern train``: pinned PPO tasks to convergence on several stacks and seeds, one schema'd JSON."""

from __future__ import annotations

import datetime as _dt
import json
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
from .ppo import PHASES, UPDATE_PARTS, Agent, PhaseTimer, finished_returns, ppo_update, window_mean
from .stacks import Stack, StackSpec, Storage, build

DEVICE_HOUR = (
    "device-hours per converged policy = wall-clock seconds from the start of setup (env build, kernel "
    "compile, model init) to the end of the update at which the policy converged, / 3600, with the device "
    "held by the run for all of it. On a GPU the device is one GPU; on a CPU it is the whole processor (every "
    "core of the machine: the env backend and PyTorch may use any of them), whatever the run's core use."
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

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def train_one(task: TaskConfig, spec: StackSpec, seed: int,
              on_update: Callable[[int, int, float], None] | None = None) -> tuple[RunResult, dict[str, Any]]:  # fmt: skip
    """One run of ``task`` on ``spec`` with ``seed``: (result, the env device's identity)."""
    cfg = task.ppo
    torch.set_num_threads(cfg.torch_threads)
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
            agent = Agent(stack.obs_dim, stack.n_actions, cfg.hidden).to(device)
            optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
            T, N, D = cfg.num_steps, cfg.num_envs, stack.obs_dim
            store = Storage.zeros(T, N, D, stack.discrete, device)
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
                next_values = agent.value(store.final_obs.reshape(-1, D)).reshape(T, N)
            advantages, returns = stack.advantages(store, next_values, timer)
            with timer("update"):
                losses = ppo_update(agent, optimizer, cfg, timer, store.obs.reshape(-1, D), store.actions.reshape(-1),
                                    store.logprobs.reshape(-1), store.values.reshape(-1), advantages.reshape(-1),
                                    returns.reshape(-1))  # fmt: skip
            with timer("other"):
                finished = finished_returns(episode_return, store.rewards, store.terminated | store.truncated)
                global_step += T * N
                episodes += len(finished)
                recent.extend(finished)
                mean = window_mean(recent)
                elapsed = time.perf_counter() - t_start
                this = window_mean(finished)
                curve.append([update, global_step, round(elapsed, 4), None if math.isnan(mean) else round(mean, 3),
                              None if math.isnan(this) else round(this, 3)])  # fmt: skip
                solved = len(recent) == cfg.solve_window and mean >= task.target
                if on_update is not None:
                    on_update(global_step, task.num_updates * T * N, mean)
            if solved:
                stop = "converged"
                break
            if elapsed >= task.max_seconds:
                stop = "time budget"
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
    )  # fmt: skip
    return result, identity


def _compile_seconds(stack: Stack) -> float:
    """Seconds the stack's backend has spent compiling so far (torch.compile backends count them)."""
    return float(sum(getattr(stack.backend, "compile_seconds", {}).values())) if stack.backend is not None else 0.0


def prime(task: TaskConfig, spec: StackSpec) -> float:
    """Build, compile and warm up ``spec`` once, untimed by the runs: kernel programs and compiled graphs are
    cached per process, so without this the first seed of a stack would pay its one-off compile and the
    others not. Returns the seconds it took (the report lists them as one-off costs)."""
    t0 = time.perf_counter()
    stack = build(spec, task, 0)
    try:
        stack.setup()
        agent = Agent(stack.obs_dim, stack.n_actions, task.ppo.hidden).to(stack.agent_device)
        stack.warm_up(agent)
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
    """The run was stopped (Ctrl-C): nothing was written."""


def train_many(tasks: Sequence[TaskConfig], stacks: Sequence[StackSpec], seeds: Sequence[int], out: Path,
               config_source: str, command: str = "", progress: bool = True) -> dict[str, Any]:  # fmt: skip
    """Every (task, seed, stack), seed-major so a shared machine's drift hits every stack alike; the JSON
    is written to ``out`` only once every run has finished (atomically: a temporary file renamed)."""
    out = Path(out)
    if out.exists() and out.is_dir():
        raise ValueError(f"--out {out}: is a folder; expected a JSON file path")
    if not out.parent.exists():
        raise ValueError(f"--out {out}: folder {out.parent} does not exist")
    plan = [(t, s, sd) for t in tasks for sd in seeds for s in stacks]
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    host_start = host_info()
    runs: list[dict[str, Any]] = []
    devices: dict[str, dict[str, Any]] = {}
    bar = _Progress(len(plan), enabled=progress)
    primed: dict[str, dict[str, float]] = {}
    try:
        for task in tasks:  # fail fast: every stack builds and compiles before the first run starts
            for spec in stacks:
                torch.set_num_threads(task.ppo.torch_threads)
                primed.setdefault(task.env_id, {})[spec.label] = round(prime(task, spec), 4)
        with bar:
            for i, (task, spec, seed) in enumerate(plan):
                bar.start_run(f"{task.env_id} {spec.label} seed {seed}", i)
                result, identity = train_one(task, spec, seed, bar.update)
                devices[identity["device_key"]] = identity
                runs.append(result.as_dict())
                bar.end_run(result)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted after {len(runs)} of {len(plan)} runs: nothing written to {out}") from None
    doc = {
        "schema": TRAIN_SCHEMA, "portkern_version": __version__, "code_revision": code_revision(),
        "created": started, "command": command,
        "config": {"source": config_source, "version": tasks[0].version if tasks else None,
                   "tasks": {t.env_id: t.as_dict() for t in tasks}},
        "device_hour": DEVICE_HOUR, "phases": PHASES, "update_parts": UPDATE_PARTS,
        "untimed_tolerance": UNTIMED_TOLERANCE, "host": {**host_start, "load_avg_end": host_info()["load_avg"]},
        "order": "seed-major: for each task, every stack runs seed s before any runs seed s+1",
        "prime_s": primed, "devices": devices, "runs": runs,
    }  # fmt: skip
    tmp = out.with_name(out.name + ".partial")
    try:
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return doc


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
