"""The ``portkern`` command: devices, demo, the benchmark commands (bench, report, cost, tune) and train."""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Sequence

import numpy as np

from . import __version__, step
from .backends import EnvKernelMissing, backends, get_backend
from .envs import ENVS
from .portability import commands
from .portability.options import MAX_ITEMS, select_backends
from .train import cli as train_cli


def _console():
    try:
        from rich.console import Console

        return Console()
    except ImportError:
        return None


SIMULATED = "simulator: parity only, never timed"


def _simulated_devices(records: Sequence[Any]) -> set[str]:
    """Device labels that are simulators or correctness harnesses, not hardware (Oclgrind; a backend that
    is a simulator as a whole, such as cuda_host, says so in its status)."""
    if not any(r.name == "opencl" and r.available for r in records):
        return set()
    from .backends import _opencl_devices

    every = _opencl_devices.device_ids(include_simulators=True).values()
    return set(every) - set(_opencl_devices.device_ids().values())


def cmd_devices(args: argparse.Namespace) -> int:
    """Backends and devices found here, with the reason (and the fix) for each missing one."""
    records = backends(refresh=True)
    sims = _simulated_devices(records)

    def shown(r: Any) -> list[str]:
        return [f"{d} ({SIMULATED})" if d in sims else d for d in r.devices]

    console = _console()
    if console is not None:
        from rich.markup import escape
        from rich.table import Table

        table = Table(title="portkern backends")
        table.add_column("backend", style="bold")
        table.add_column("status")
        table.add_column("devices")
        table.add_column("why not / how to fix")
        for r in records:
            status = "[green]available[/]" if r.available else "[red]unavailable[/]"
            if r.available and r.simulator:
                status = "[yellow]simulator only[/]"
            # escape: reasons hold pip extras such as 'portkern[cuda]', which rich would read as markup
            table.add_row(r.name, status, escape("\n".join(shown(r)) or "-"), escape(r.reason or ""))
        console.print(table)
    else:
        for r in records:
            state = "available" if r.available else "unavailable"
            if r.available and r.simulator:
                state = "simulator only"
            print(f"{r.name:13s} {state:15s} {'; '.join(shown(r)) or '-'}  {r.reason}")
    if getattr(args, "verbose", False):
        _print_details(records, sims)
    return 0


#: describe_verbose() keys that say the same about every device of a backend (how the OpenCL ICD loader was
#: pointed at the drivers): printed under the first device only.
_SHARED_KEYS = ("icd",)


def _print_details(records: Sequence[Any], sims: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """``devices --verbose``: every device opened, with what its backend says about it (describe_verbose)."""
    said: dict[str, str] = {}
    for r in records:
        if not r.available:
            continue
        for dev in r.devices:
            print(f"\n{r.name}: {dev}")
            if dev in sims:
                print(f"  {SIMULATED} (its kind is the device it emulates; not in any timing or PP)")
            try:
                info = get_backend(r.name, None if len(r.devices) == 1 else dev).describe_verbose()
            except Exception as exc:  # noqa: BLE001 - one device that does not open must not hide the others
                print(f"  could not open it: {type(exc).__name__}: {exc}")
                continue
            for key, value in info.items():
                if key in ("backend", "device"):
                    continue
                if key in _SHARED_KEYS:
                    if said.get(key) == str(value):
                        continue
                    said[key] = str(value)
                lines = str(value).splitlines() or [""]
                print(f"  {key}: {lines[0]}")
                for line in lines[1:]:
                    print(f"      {line}")


def cmd_demo(args: argparse.Namespace) -> int:
    """Step every env on every available backend for a moment and print the throughput."""
    if not (math.isfinite(args.seconds) and args.seconds > 0):
        raise ValueError(f"--seconds: expected a number of seconds > 0, got {args.seconds:g}")
    if not 1 <= args.num_envs <= MAX_ITEMS:
        raise ValueError(f"--num-envs: expected an int in [1, {MAX_ITEMS}], got {args.num_envs}")
    rng = np.random.default_rng(0)
    records = select_backends([args.backend] if args.backend else [], args.device)
    # Without --backend: the real devices only (a simulator would take minutes per env).
    names = [r.name for r in records if args.backend or not r.simulator]
    selected = [get_backend(name, args.device) for name in names]  # every device opened before any output
    width = max([7, *(len(n) for n in names)])
    print(f"{'backend':{width}s} {'env':26s} {'num_envs':>9s} {'steps/s':>14s}  device")
    for name, b in zip(names, selected):
        for env_id, spec in ENVS.items():
            try:
                env = step.make(env_id, args.num_envs, backend=b, seed=0)
            except EnvKernelMissing as exc:  # an env registered before its kernels for this API exist
                print(f"{name:{width}s} {env_id:26s} {'-':>9s} {'-':>14s}  {exc}")
                continue
            env.reset()
            acts = spec.random_actions(rng, args.num_envs, overshoot=1.0)
            dev_acts = b.from_host(acts)
            env.step(dev_acts)  # warm-up: builds kernels
            b.synchronize()
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < args.seconds:
                env.step(dev_acts)
                n += 1
            b.synchronize()
            rate = n * args.num_envs / (time.perf_counter() - t0)
            print(f"{name:{width}s} {env_id:26s} {args.num_envs:9d} {rate:14.4g}  {b.device_name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="portkern", description=__doc__)
    parser.add_argument("--version", action="version", version=f"portkern {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list backends and devices, with reasons for missing ones")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="open every device: driver registration, versions, tuned defaults and their source, "
                        "compiler output")  # fmt: skip
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("demo", help="step every env briefly on each available backend")
    p.add_argument("--backend", default=None, help="only this backend")
    p.add_argument("--device", default=None, help="device substring (e.g. pocl, nvidia, cpu, gpu)")
    p.add_argument("--num-envs", type=int, default=65536)
    p.add_argument("--seconds", type=float, default=0.5, help="time per env and backend (> 0)")
    p.set_defaults(func=cmd_demo)
    commands.register(sub)
    train_cli.register(sub)  # imports no torch until `portkern train` runs
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, OSError, RuntimeError) as exc:  # OSError: a file or folder named on the line
        print(f"portkern {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
