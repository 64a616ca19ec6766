"""``portkern port-check``: the command line, the console table (100 columns) and the JSON file.

The table has one row per kernel, dtype and language and one column per target; a cell is the
kernel's registers per thread (NVIDIA regs, AMD VGPRs (+AGPRs), Intel GRF), ``*`` when it spills,
``x`` when it does not build, ``ok`` for SPIR-V (no registers), ``-`` where the target does not take
that language. The JSON (``--json FILE``) holds everything: each kernel's figures, occupancy,
first error, and each compiler's version.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from ..toolchains.targets import TARGETS, parse_targets
from . import port_check
from .port_check import NOT_IN_OUTPUT

WIDTH = 100
_API = {"cuda": "cu", "opencl": "cl"}
_DT = {"float32": "f32", "float64": "f64", "any": "-", "as given": ""}


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if not r["builds"]:
        return "n/a" if r["error"].startswith("not available here") else "x"
    if r["target"] == "spirv":
        return "ok"
    regs = r["registers"]
    n = regs.get("regs", regs.get("GRF", regs.get("VGPR", 0) + regs.get("AGPR", 0)))
    return f"{n}{'*' if r.get('spills') else ''}"


def _fit(label: str, width: int) -> str:
    """A row label cut to ``width`` from the env's name, never from what follows it ("mountain_car_con~ rollout
    mlp64"), so the random and MLP rollouts of a long name stay two different rows."""
    if len(label) <= width:
        return label
    head, _, rest = label.partition(" ")
    rest = f" {rest}" if rest else ""
    keep = width - len(rest) - 1
    return head[:keep] + "~" + rest if keep > 0 else label[: width - 1] + "~"


def table_lines(doc: dict[str, Any]) -> list[str]:
    """The console table, at most :data:`WIDTH` columns wide, then the legend and per-target summary."""
    targets = list(doc["targets"])
    rows: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in doc["results"]:
        rows.setdefault((r["kernel"], _API[r["api"]], _DT.get(r["dtype"], r["dtype"])), {})[r["target"]] = r
    cw = max(5, min(8, (WIDTH - 34) // max(len(targets), 1) - 1))
    kw = WIDTH - 9 - len(targets) * (cw + 1)
    kw = max(12, min(kw, max((len(k[0]) for k in rows), default=12)))
    head = f"{'kernel':<{kw}} {'api':3} {'dt':3}" + "".join(f" {t[:cw]:>{cw}}" for t in targets)
    out = [head, "-" * len(head)]
    for (kernel, api, dt), per in rows.items():
        out.append(f"{_fit(kernel, kw):<{kw}} {api:3} {dt:3}" + "".join(f" {_cell(per.get(t)):>{cw}}" for t in targets))
    out += ["", f"Registers per thread ({port_check.LABEL}): NVIDIA regs, AMD VGPRs (+AGPRs), Intel GRF; "
            "* spills, x does not build, n/a compiler missing, - target takes the other language (cl on gfx: "
            "OpenCL C through clang; cu on gfx: CUDA C as HIP)."]  # fmt: skip
    for s in doc["summary"].values():
        tool = doc["toolchains"][s["toolchain"]]
        if not tool["available"]:
            out.append(f"{s['toolchain']:8} {s['target']:8} not available here: {tool['install']}")
            continue
        line = f"{s['toolchain']:8} {s['target']:8} builds {s['builds']}/{s['kernels']}, spilling {s['spilling']}"
        out.append(line + (f"; first failure: {s['failures'][0]}" if s["failures"] else ""))
    notes: dict[str, None] = {}
    for tc, t in doc["toolchains"].items():
        if t["available"]:
            out.append(f"{tc}: {t['version']}")
        notes.update(dict.fromkeys(t["notes"]))
    out += [f"substituted: {n}" for n in notes]  # AMD's device libraries (portkern/toolchains/amd.py)
    out += [f"left out: {x}" for x in doc.get("left_out", [])]
    cpu = f", compilers {doc['cpu_seconds']} CPU-s" if doc.get("cpu_seconds") else ""
    out.append(f"{doc['builds']} builds ({doc['cache_hits']} cached) in {doc['seconds']} s on {doc['workers']} "
               f"worker(s){cpu}")  # fmt: skip
    return [w for ln in out for w in (textwrap.wrap(ln, WIDTH, subsequent_indent="    ") if len(ln) > WIDTH else [ln])]


#: Without a terminal (a CI log), a progress line at most this often, and only on a run that takes longer.
PLAIN_EVERY_S = 30.0


def _progress(stream: Any = None):
    """(a rich progress bar to enter or None, the progress callback) for a long cold run, on stderr: the bar on
    a terminal; elsewhere (CI logs) one line every :data:`PLAIN_EVERY_S` seconds, so a warm run prints none."""
    stream = stream or sys.stderr
    if stream.isatty():
        try:
            from rich import progress as rp
            from rich.console import Console
        except ImportError:
            pass
        else:
            bar = rp.Progress(rp.TextColumn("{task.description}"), rp.BarColumn(), rp.MofNCompleteColumn(),
                              rp.TextColumn("builds ({task.fields[cached]} cached)"), rp.TimeElapsedColumn(),
                              rp.TimeRemainingColumn(), transient=True, console=Console(file=stream))  # fmt: skip
            task = bar.add_task("port-check: compiling", total=None, cached=0)
            return bar, lambda done, total, cached: bar.update(task, completed=done, total=total, cached=cached)
    t0 = time.monotonic()
    last = [t0]

    def line(done: int, total: int, cached: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PLAIN_EVERY_S and done < total:
            last[0] = now
            print(f"port-check: {done}/{total} builds done ({cached} cached) after {now - t0:.0f} s", file=stream,
                  flush=True)  # fmt: skip

    return None, line


def cmd_port_check(args: argparse.Namespace) -> int:
    """Build the project's kernels (or a user's file) for every target here; print the table, write --json."""
    targets = parse_targets(args.targets)
    dtypes = tuple(args.dtypes.split(",")) if args.dtypes else ("float32", "float64")
    bad = [d for d in dtypes if d not in port_check.DTYPES]
    if bad:
        raise ValueError(f"--dtypes: unknown {', '.join(bad)}; expected float32 and/or float64")
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs: expected a positive number of compilers at once, got {args.jobs}")
    if args.json:
        parent = Path(args.json).resolve().parent
        if not parent.is_dir():
            raise ValueError(f"--json {args.json}: folder {parent} does not exist")
    if args.file:
        kernels = [k for k in (args.kernels or "").split(",") if k.strip()]
        jobs = port_check.user_jobs(args.file, targets, args.define, args.include, kernels,
                                    dtypes if args.dtypes else ())  # fmt: skip
    else:
        if args.define or args.include or args.kernels:
            raise ValueError("-D, -I and --kernels: only with a FILE of your own kernels")
        jobs = port_check.project_jobs(targets, dtypes)
    left_out = () if args.file else port_check.skipped(targets, dtypes)
    bar, progress = _progress()
    if bar is not None:
        with bar:
            doc = port_check.check(jobs, args.jobs, not args.no_cache, progress, left_out)
    else:
        doc = port_check.check(jobs, args.jobs, not args.no_cache, progress, left_out)
    if args.file:
        _check_user_result(args.file, doc)
    print("\n".join(table_lines(doc)))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    return 0


def _check_user_result(path: str, doc: dict[str, Any]) -> None:
    """A user's file that builds for no target at all is bad input (a syntax error, a missing include)."""
    ran = [r for r in doc["results"] if not r["error"].startswith("not available here")]
    absent = NOT_IN_OUTPUT
    missing = sorted({r["kernel"] for r in ran if r["error"] == absent})
    missing = [k for k in missing if not any(r["builds"] and r["kernel"] == k for r in ran)]
    if missing:
        raise ValueError(f"--kernels: {', '.join(missing)} not found in {path}")
    if ran and not any(r["builds"] for r in ran):
        raise ValueError(f"{path}: builds for no target: {ran[0]['error']}")


def register(sub: Any) -> None:
    p = sub.add_parser("port-check", help="build every kernel for every GPU target with no GPU here: registers, "
                                          "spills, occupancy (compile-level, not a measurement of speed)")  # fmt: skip
    p.add_argument("file", nargs="?", help="your own .cl or .cu file (default: every portkern kernel)")
    p.add_argument("--targets", help=f"comma list of {', '.join(TARGETS)} (default: all)")
    p.add_argument("--dtypes", help="float32,float64 (default: both; your own file: as given)")
    p.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]",
                   help="a define for your file (repeatable)")
    p.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                   help="an include folder for your file (repeatable)")
    p.add_argument("--kernels", help="comma list of your file's kernels to report (default: all it has)")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument("--jobs", type=int, default=None, help="compilers run at once (default: the CPUs here)")
    p.add_argument("--no-cache", action="store_true", help="compile everything again (and write no cache)")
    p.set_defaults(func=cmd_port_check)
