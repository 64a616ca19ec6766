"""``portkern train``: argument parsing and the summary printed at the end (registered by portkern.cli)."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

DEFAULT_STACKS = ("gymnasium", "numpy", "opencl", "opencl+fused", "torch")
DEFAULT_SEEDS = (1, 2, 3)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="train pinned PPO tasks to convergence on several stacks: device-hours per converged policy",
        description="Train the pinned PPO tasks (portkern/data/train_configs.json) to convergence on each stack "
                    "and seed, timing every phase with a device synchronise, and write one JSON "
                    "(portkern-train/1) for `portkern report` and `portkern cost --train`. Stacks: gymnasium "
                    "(Gymnasium's SyncVectorEnv on the host), a backend (one launch per step: numpy, opencl, "
                    "cupy, numba), BACKEND+fused (one in-kernel-MLP rollout per update), torch/torch_compile "
                    "(resident, zero-copy); each optionally @DEVICE (opencl@intel, torch@cuda).",
    )  # fmt: skip
    p.add_argument("--task", action="append", default=[],
                   help="env id of a pinned task (repeatable; default: the config's default tasks)")
    p.add_argument("--stack", action="append", default=[],
                   help=f"stack spec NAME[@DEVICE] (repeatable or comma-separated; default: {', '.join(DEFAULT_STACKS)}, "
                        "those available here)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: 1,2,3)")
    p.add_argument("--out", default="portkern-train.json", help="the JSON to write (default: ./portkern-train.json)")
    p.add_argument("--config", default=None, help="a training config file (default: the shipped, versioned one)")
    p.add_argument("--updates", type=int, default=None,
                   help="stop after this many PPO updates (a smoke run: the env-step budget becomes updates x batch)")
    p.add_argument("--max-seconds", type=float, default=None, help="wall-time budget per run (default: the task's)")
    p.add_argument("--machine", default=None,
                   help="name of this machine in the results (default: $PORTKERN_MACHINE, else the host name)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar; a line per finished run only")
    p.add_argument("--resume", action="store_true",
                   help="finish an interrupted grid: skip the runs its journal (<out>.journal) holds, after checking "
                        "that the config, code revision and machine are the same")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run the grid on Ray (pip install 'portkern[ray]'): no ADDRESS starts a local Ray for the "
                        "run; an ADDRESS (ray://host:10001, host:6379 or auto) joins an existing cluster. One run "
                        "per piece of hardware at a time: a GPU, or --cores-per-run cores of a CPU")
    p.add_argument("--parallel-seeds", type=int, default=1, metavar="K",
                   help="train K seeds at once on one device (the jax stack: vmap over seeds, PureJaxRL's way; the "
                        "torch and torch_compile stacks: a batched ensemble, the K agents' parameters stacked and "
                        "torch.func.vmap over seeds), the seeds in batches of K consecutive ones; each run's "
                        "device_seconds_per_policy is then its batch's wall time / the batch's converged policies "
                        "(default 1: one seed at a time). On a CPU the jax stack's K seeds spread over its cores (JAX "
                        "started with one CPU device per core)")
    p.add_argument("--refill", action="store_true",
                   help="with --parallel-seeds K, the jax stack only: train every seed of the list in one batch of K "
                        "slots, a slot whose seed converged (or ran out of budget) taking the next seed, so that no "
                        "slot waits for the slowest seed while seeds remain; any number of seeds >= K")
    p.add_argument("--cores-per-run", type=int, default=None, metavar="K",
                   help="with --ray: the CPU cores each run reserves for itself (pinned, disjoint; default 1)")
    p.set_defaults(func=cmd_train)


def _stacks(values: list[str]) -> tuple[list[Any], list[str]]:
    from ..backends import backends
    from .stacks import parse_stack

    records = {r.name: r for r in backends()}
    explicit = [s.strip() for v in values for s in v.split(",") if s.strip()]
    skipped = []
    specs = []
    for text in explicit or DEFAULT_STACKS:
        spec = parse_stack(text)
        if spec.backend is not None and not records[spec.backend].available:
            why = f"{spec.backend} unavailable here ({records[spec.backend].reason})"
            if explicit:
                raise ValueError(f"--stack {text}: {why}")
            skipped.append(f"{text}: {why}")
            continue
        if spec.backend is None:
            try:
                import gymnasium  # noqa: F401
            except ImportError:
                if explicit:
                    raise ValueError(f"--stack {text}: needs Gymnasium: pip install 'portkern[train]'") from None
                skipped.append(f"{text}: Gymnasium is not installed (pip install 'portkern[train]')")
                continue
        if spec.label in {s.label for s in specs}:
            raise ValueError(f"--stack {text}: given twice")
        specs.append(spec)
    return specs, skipped


def _seeds(text: str | None) -> list[int]:
    if text is None:
        return list(DEFAULT_SEEDS)
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds {text!r}: expected comma-separated integers, e.g. 1,2,3") from None
    if not seeds or any(s < 0 or s >= 2**32 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r}: expected distinct integers in [0, 2**32)")
    return seeds


def cmd_train(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise RuntimeError("portkern train needs PyTorch: pip install 'portkern[train]' (a CPU build is enough)") from None
    from . import config
    from .runner import Interrupted, check_parallel, train_many

    if args.machine is not None:
        if not args.machine.strip() or "/" in args.machine:
            raise ValueError(f"--machine {args.machine!r}: expected a non-empty name without '/'")
        os.environ["PORTKERN_MACHINE"] = args.machine.strip()

    tasks_all = config.load(args.config)
    names = [t.strip() for v in args.task for t in v.split(",") if t.strip()] or \
        [k for k, t in tasks_all.items() if t.default]
    overrides: dict[str, Any] = {}
    if args.updates is not None:
        if args.updates < 1:
            raise ValueError(f"--updates: expected an integer >= 1, got {args.updates}")
    if args.max_seconds is not None:
        if not args.max_seconds > 0:
            raise ValueError(f"--max-seconds: expected a number > 0, got {args.max_seconds}")
        overrides["max_seconds"] = args.max_seconds
    tasks = []
    for name in names:
        if name not in tasks_all:
            raise ValueError(f"--task {name}: no pinned config; configured: {', '.join(tasks_all)}")
        t = config.task(name, args.config, **overrides)
        if args.updates is not None:
            t = config.task(name, args.config, **overrides, total_timesteps=args.updates * t.ppo.batch_size)
        tasks.append(t)
    if args.parallel_seeds > 1:
        # Before anything starts JAX (the backend probes below do): one XLA CPU device per core this process
        # may use, so that K seeds on a CPU spread over its cores (on a GPU the seeds share the one device).
        from .jax_batch import spread_cpu_devices

        spread_cpu_devices(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    stacks, skipped = _stacks(args.stack)
    if not stacks:
        raise ValueError("no stack can run here: " + "; ".join(skipped))
    seeds = _seeds(args.seeds)
    check_parallel(stacks, seeds, args.parallel_seeds, args.refill)
    if args.parallel_seeds > 1 and args.ray is not None:
        raise ValueError(f"--parallel-seeds {args.parallel_seeds}: not with --ray (a Ray grid runs one seed per piece "
                         "of hardware)")  # fmt: skip
    out = Path(args.out)
    grid = None
    if args.cores_per_run is not None and args.ray is None:
        raise ValueError("--cores-per-run: only with --ray (a serial run holds the whole machine)")
    if args.ray is not None:
        from .ray_grid import RayGrid

        grid = RayGrid(None if args.ray == "local" else args.ray,
                       1 if args.cores_per_run is None else args.cores_per_run, stacks)  # fmt: skip
    for line in skipped:
        print(f"skipped stack {line}", file=sys.stderr)
    at_once = f", {args.parallel_seeds} seeds at once" if args.parallel_seeds > 1 else ""
    print(f"portkern train: {len(tasks)} task(s) x {len(stacks)} stack(s) x {len(seeds)} seed(s) = "
          f"{len(tasks) * len(stacks) * len(seeds)} runs{at_once} -> {out}", file=sys.stderr)  # fmt: skip
    command = "portkern train " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["train"] else ""
    try:
        doc = train_many(tasks, stacks, seeds, out, args.config or "portkern/data/train_configs.json",
                         command=command, progress=not args.no_progress, resume=args.resume, grid=grid,
                         parallel_seeds=args.parallel_seeds, refill=args.refill)  # fmt: skip
    except Interrupted as exc:
        print(f"portkern train: {exc}", file=sys.stderr)
        return 130
    print(summary(doc))
    for f in doc.get("failed", []):  # runs whose workers died twice (a Ray grid): listed, never hidden
        print(f"failed: {f['task']} {f['stack']} seed {f['seed']}: {f['reason']} (--resume runs it again)")
    print(f"wrote {out}")
    return 0 if not doc.get("failed") else 1


def summary(doc: dict[str, Any]) -> str:
    """A line per (task, stack): converged seeds, median device-seconds per converged policy (a K-seed batch's
    share, device_seconds_per_policy, where the run has one), steps, steps/s."""
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in doc["runs"]:
        rows.setdefault((r["task"], r["stack"]), []).append(r)
    lines = [f"{'task':<14} {'stack':<22} {'converged':>9} {'H (device-s)':>14} {'env steps':>10} {'steps/s':>9}"]
    for (task, stack), rs in rows.items():
        ok = [r for r in rs if r["converged"]]
        h = statistics.median(r.get("device_seconds_per_policy") or r["wall_s"] for r in ok) if ok else math.nan
        steps = statistics.median(r["steps_to_converge"] for r in ok) if ok else math.nan
        sps = statistics.median(r["steps_per_s"] for r in rs)
        lines.append(f"{task:<14} {stack:<22} {len(ok):>4} of {len(rs):<2} {h:>14.1f} {steps:>10,.0f} {sps:>9,.0f}")
    return "\n".join(lines)
