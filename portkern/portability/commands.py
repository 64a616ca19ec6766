"""CLI subcommands bench, tune, report and cost (registered by portkern.cli when this module imports)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from ..journal import journal_path
from ..tuning import cache_path, write_cache
from . import bench_journal, cost, report, suite, training
from .bench_run import Interrupted, command_line, resume_hint, run_pytest
from .names import base_kernel, kernel_structure
from .options import MAX_ITEMS, select_backends, structure_values
from .tune import write_tuned

#: Interleaved rounds per group, shortest slot and group budget with --quick. Given explicitly, so
#: --quick --sizes N keeps the quick timing; a full run uses the suite's defaults.
QUICK_TIMING = [f"--pk-rounds={suite.QUICK_ROUNDS}", f"--pk-slot-ms={suite.QUICK_SLOT_S * 1e3:g}",
                f"--pk-group-s={suite.QUICK_GROUP_BUDGET_S:g}", f"--pk-visits={suite.QUICK_VISITS}"]  # fmt: skip
FULL_TIMING: list[str] = []
QUICK_ROLLOUT_STEPS = suite.QUICK_ROLLOUT_T  # T of the rollout cases with --quick


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


#: The console output of bench/tune/report fits this many columns; wider tables are in report.md only.
CONSOLE_COLUMNS = 100
_CONSOLE_MAX_COLUMNS, _CONSOLE_MAX_ROWS = 6, 40


def _print_tables(tables: dict[str, tuple[list[str], list[list[str]]]]) -> None:
    """The tables a person reads first, within 100 columns: the summary as wrapped text, the narrow tables
    with their cells folded (never cut), and the names of the wide ones, which report.md has in full."""
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    # A log file or pipe has no width of its own (rich would assume 80); a narrower terminal keeps its own.
    console.width = min(console.width, CONSOLE_COLUMNS) if console.is_terminal else CONSOLE_COLUMNS
    elsewhere = []
    for title, (header, rows) in tables.items():
        if header == ["finding"]:  # the summary: one paragraph per finding reads better than a one-column table
            console.print(f"[bold]{escape(title)}[/]")
            for i, (text,) in enumerate(rows, 1):
                console.print(f"{i}. {escape(text.replace('**', ''))}", overflow="fold")
            console.print()
            continue
        if len(header) > _CONSOLE_MAX_COLUMNS or len(rows) > _CONSOLE_MAX_ROWS:
            elsewhere.append(title)
            continue
        t = Table(title=title, title_justify="left", expand=False)
        for h in header:
            t.add_column(escape(h), overflow="fold")
        for r in rows:
            t.add_row(*[escape(c.replace("**", "")) for c in r])
        console.print(t)
    if elsewhere:  # one title a line: each one is what a reader searches report.md for
        console.print("In report.md (too wide for the console):")
        for title in elsewhere:
            console.print(f"  {escape(title)}", overflow="fold")


def suite_options(args: argparse.Namespace, tune: bool) -> list[str]:
    """The suite's ``--pk-*`` options for bench/tune's arguments: everything that shapes the grid (a resumed
    run must pass the same ones, bench_journal.identity)."""
    sizes = args.sizes or ("quick" if args.quick else "full")
    argv = [f"--pk-sizes={sizes}", *(QUICK_TIMING if args.quick else FULL_TIMING)]
    if args.backend:
        argv.append(f"--pk-backend={','.join(args.backend)}")
    if args.device:
        argv.append(f"--pk-device={args.device}")
    if args.machine:
        argv.append(f"--pk-machine={args.machine}")
    if tune:
        argv.append("--pk-tune")
    if getattr(args, "rounds", None) is not None:
        argv.append(f"--pk-rounds={args.rounds}")
    steps = args.rollout_steps if args.rollout_steps is not None else (QUICK_ROLLOUT_STEPS if args.quick else None)
    if steps is not None:
        argv.append(f"--pk-rollout-steps={steps}")
    if getattr(args, "links", None):
        argv.append(f"--pk-links={','.join(map(str, structure_values(args.links)['links']))}")
    if getattr(args, "kernels", None):
        argv.append(f"--pk-kernels={','.join(k for ks in args.kernels for k in ks)}")
    return argv


def run_suite(json_path: Path, args: argparse.Namespace, tune: bool) -> tuple[int, list[str], str]:
    """Run the pytest-benchmark suite in this process: (pytest exit code, failures, captured output).

    The run's journal, if any, comes as ``args.bench_journal`` (tests substitute this function with its
    three-argument signature)."""
    return run_pytest(json_path, suite_options(args, tune), getattr(args, "bench_journal", None))


def check_out(path: str, *, create: bool) -> Path:
    """``--out``: a folder, new or existing, that this process can write; ``create`` makes it now.

    Checked before anything runs, by writing (and removing) a file where the output will go, so a
    read-only location fails here rather than after the benchmark.
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: an existing file; expected a folder (new or existing) for the results and "
                         "the report")  # fmt: skip
    parent = out
    while not parent.exists() and parent != parent.parent:  # the nearest folder that exists
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"--out {out}: {parent} is a file, so no folder can be made there")
    try:
        if create:
            out.mkdir(parents=True, exist_ok=True)
            parent = out
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".portkern-write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write there ({exc.strerror or exc}); choose a writable folder") from None
    return out


def check_sizes(text: str | None) -> None:
    if text is None or text in ("quick", "full"):
        return
    expected = f"expected quick, full or N[,N...] with each N an item count in [1, {MAX_ITEMS}]"
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise ValueError(f"--sizes {text}: {expected}") from None
    bad = [n for n in sizes if not 1 <= n <= MAX_ITEMS]
    if bad:
        raise ValueError(f"--sizes {text}: {expected}; got {', '.join(map(str, bad))}")


def check_run_options(args: argparse.Namespace) -> dict[str, dict[str, float]] | None:
    """Every option of bench/tune, checked before the suite runs (the workload mixes are returned)."""
    mixes = _mixes(args)
    check_sizes(args.sizes)
    if args.rollout_steps is not None and not 1 <= args.rollout_steps <= MAX_ITEMS:
        raise ValueError(f"--rollout-steps: expected an int in [1, {MAX_ITEMS}] (steps per rollout), "
                         f"got {args.rollout_steps}")  # fmt: skip
    if getattr(args, "rounds", None) is not None and not 2 <= args.rounds <= 10_000:
        raise ValueError(f"--rounds: expected an int in [2, 10000] (interleaved rounds per group), got {args.rounds}")
    if args.machine is not None and not args.machine.strip():
        raise ValueError("--machine: expected a non-empty label")
    links = getattr(args, "links", None)
    if links is not None and not links.strip():
        raise ValueError("--links: expected K[,K...], the link counts of Chain-v0 to time (2..16)")
    timed = structure_values(links).get("links")  # each K in range, naming --links, before anything runs
    kernels = [k for ks in getattr(args, "kernels", None) or [] for k in ks]
    _check_kernels(kernels)
    for name in kernels:
        k = kernel_structure(name).get("links")
        if k is not None and k not in (timed or ()):
            raise ValueError(f"--kernels {name}: links={k} is not timed in this run; add it to --links "
                             f"(--links {','.join(map(str, (*(timed or ()), k)))})")  # fmt: skip
    select_backends(args.backend, args.device)
    return mixes


def _check_kernels(names: list[str]) -> None:
    """``--kernels``: each a kernel the suite times or a family of them (the prefix before a ':')."""
    known = (*suite.KERNELS, *suite.ROLLOUT_KERNELS, "copy")

    def plain(name: str) -> str:  # step:Chain-v0/links=10 is step:Chain-v0 at another K (--links times it)
        try:
            return base_kernel(name)
        except ValueError as exc:  # a structural value the env does not take, or spelt another way
            if "/" not in name:
                return name
            raise ValueError(f"--kernels {name}: {str(exc).removeprefix('kernel: ')}") from None

    bad = [n for n in names if not any(k == plain(n) or k.startswith(plain(n) + ":") for k in known)]
    if bad:
        families = sorted({k.split(":")[0] for k in known} | {":".join(k.split(":")[:2]) for k in known})
        raise ValueError(f"--kernels {','.join(bad)}: no such kernel; expected kernels or families of them: "
                         f"{', '.join(families)}")  # fmt: skip


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def _run_journaled(json_path: Path, args: argparse.Namespace, tune: bool) -> list[str]:
    """The suite on this machine, each visit journaled next to ``json_path`` as it finishes: the failures."""
    from . import suite

    kind = "tune" if tune else "bench"
    ident = bench_journal.identity(suite_options(args, tune), suite.machine_label(args.machine))
    journal = bench_journal.BenchJournal.open(
        journal_path(json_path), kind, ident, args.resume,
        extra={"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": command_line(kind)})
    before = _stamp(json_path)
    args.bench_journal = journal  # how run_suite hands it to the suite (its signature is fixed)
    try:
        code, failed, captured = run_suite(json_path, args, tune)
    except BaseException:
        journal.close() if journal.finished() else journal.finish()
        raise
    finally:
        args.bench_journal = None
    if journal.error:  # the resumed grid collected other cases than the journal's
        journal.close()
        raise ValueError(journal.error)
    if journal.interrupted:
        if not journal.finished():  # nothing to keep: a journal would only make the next plain run ask for --resume
            journal.finish()
            raise Interrupted(f"interrupted before any visit finished: nothing written to {json_path}")
        journal.close()
        raise Interrupted(f"interrupted after {journal.finished()} finished visit(s)/case(s): nothing written to "
                          f"{json_path}; they are kept in {journal_path(json_path)}; finish the rest with "
                          f"{resume_hint(command_line(kind))}")  # fmt: skip
    if code not in (0, 1) or _stamp(json_path) in (None, before):
        kept = ""
        if journal.finished():
            journal.close()
            kept = (f"; the {journal.finished()} finished visit(s)/case(s) are kept in {journal_path(json_path)} "
                    "(--resume reuses them)")  # fmt: skip
        else:
            journal.finish()
        sys.stderr.write(captured[-4000:])
        if code == 0:  # pytest-benchmark writes no file when nothing was timed
            raise RuntimeError("the benchmark suite did not complete: it timed no case; every case it selected was skipped or is "
                               "functional only (a simulator, or the cuda_host correctness harness), and a run needs "
                               f"at least one timed case; add a timed backend (e.g. --backend numpy){kept}")
        raise RuntimeError(f"the benchmark suite did not complete (pytest exit code {code}); output above{kept}")
    journal.finish()  # results.json holds everything the journal did
    return failed


def _bench_or_tune(args: argparse.Namespace, tune: bool) -> int:
    t0 = time.perf_counter()
    mixes = check_run_options(args)
    out = check_out(args.out, create=True)
    # The suite writes straight into the output folder, so the measurements are kept whatever happens
    # to the report (and a path printed in the log is where the file stays).
    json_path = out / "results.json"
    try:
        if getattr(args, "ray", None) is not None:
            from .bench_ray import bench_on_ray

            runs, failed = bench_on_ray(args, out, suite_options(args, tune), command_line("bench"))
        else:
            runs, failed = [json_path], _run_journaled(json_path, args, tune)
    except Interrupted as exc:
        print(f"portkern {'tune' if tune else 'bench'}: {exc}", file=sys.stderr)
        return 130
    if tune:
        write_tuned(json_path, out / "tuned.json")
        # The per-machine cache: this device's defaults from now on (tuning.py, source "cache"). A cache
        # that cannot be written costs neither the measurements nor the report: warn and go on.
        try:
            keys = write_cache(json_path)
        except (OSError, ValueError) as exc:
            print(f"warning: the tuned defaults were not written to the per-machine cache {cache_path()} "
                  f"({type(exc).__name__}: {exc}); {out / 'tuned.json'} has them", file=sys.stderr)  # fmt: skip
        else:
            for key in keys:
                print(f"tuned defaults of {key} written to {cache_path()}")
            if not keys:
                print(f"no device was tuned in this run: the per-machine cache {cache_path()} is unchanged")
    if not runs:
        raise RuntimeError("no node of the cluster completed its bench: nothing to report (reasons above)")
    named = " ".join(str(r) for r in runs)
    try:
        rep = report.write([str(r) for r in runs], out, mixes)
    except Exception as exc:
        raise RuntimeError(f"the report could not be built ({type(exc).__name__}: {exc}); the measurements are "
                           f"kept in {named}: `portkern report {named} --out {out}` builds it "
                           "again") from exc  # fmt: skip
    _print_tables(report.headline(rep))
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    # Wrapped to the console width the tables keep (CONSOLE_COLUMNS); the folder last, on its own line.
    print(textwrap.fill(f"wrote {', '.join(names)}", width=CONSOLE_COLUMNS, subsequent_indent="  ",
                        break_on_hyphens=False))  # fmt: skip
    print(f"  to {out} in {time.perf_counter() - t0:.0f} s")
    if failed:
        print(f"{len(failed)} case(s) failed (recorded as fail in the report):", file=sys.stderr)
        for f in failed:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


def _mixes(args: argparse.Namespace) -> dict[str, dict[str, float]] | None:
    if not getattr(args, "mix", None):
        return None
    mixes = dict(report.DEFAULT_MIXES)
    for m in args.mix:
        mixes.update(report.parse_mix(m))
    return mixes


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark suite on the devices present and write results.json plus the report."""
    return _bench_or_tune(args, tune=False)


def cmd_tune(args: argparse.Namespace) -> int:
    """Time every legal knob configuration per device (one size per size class) and write tuned.json plus the report."""
    if getattr(args, "merge", None) or getattr(args, "table", None):  # --merge: runs into the tuned defaults
        from .tune_merge import command

        return command(args)
    return _bench_or_tune(args, tune=True)


def cmd_report(args: argparse.Namespace) -> int:
    """Merge run files from any machines into report.md, report.json and plots (or, with --compare, check
    two runs' verdicts against each other)."""
    mixes = _mixes(args)
    if args.compare:
        trains = [r for r in args.runs if training.is_train_file(r)]
        if trains:
            raise ValueError(f"--compare: compares two bench runs; {', '.join(trains)} is a training file (report it "
                             "without --compare)")  # fmt: skip
        gpu = [r for r in args.runs if report.gpu_bench.is_gpu_bench_file(r)]
        if gpu:
            raise ValueError(f"--compare: compares two bench runs; {', '.join(gpu)} is a GPU measurement file "
                             "(bench/gpu/gpu_bench.py: report it without --compare)")  # fmt: skip
        if len(args.runs) != 2:
            raise ValueError(f"--compare: expected two run files, got {len(args.runs)}")
        out = Path(args.out)
        check_out(str(out.parent if out.suffix == ".md" else out), create=False)
        cmp = report.write_comparison(args.runs[0], args.runs[1], out, mixes)
        where = out if out.suffix == ".md" else out / "consistency.md"
        print(f"{cmp['compared']} comparisons, {cmp['contradictions']} contradiction(s): "
              + ", ".join(f"{k} {v}" for k, v in sorted(cmp["counts"].items())))
        print(f"wrote {where} and {where.with_suffix('.json')}")
        return 0
    out = check_out(args.out, create=False)  # made only once every run file has been read and checked
    rep = report.write(args.runs + args.port_check, out, mixes, prices=args.price or None)
    _print_tables(report.headline(rep))
    print(f"wrote report.md, report.json and plots to {args.out}")
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    """The lock-in premium, with the throughput ratio from a report, from training runs, or given by hand."""
    if args.train:
        return _cost_train(args)
    if args.locked or args.portable or args.task:
        raise ValueError("--locked, --portable and --task go with --train RUN.json (training runs)")
    if args.gpu_hours is None:
        raise ValueError("--gpu-hours: expected H, the GPU-hours per converged policy when locked (or give --train "
                         "RUN.json --locked STACK@DEVICE --portable STACK@DEVICE to take it from training runs)")
    if args.ratio is not None or args.penalty is not None:
        if args.ratio is not None and args.penalty is not None:
            raise ValueError("give --ratio or --penalty, not both")
        ratio = args.ratio if args.ratio is not None else 1.0 - args.penalty
        source, interval = "given by hand", None
    elif args.report:
        if not (args.backend and args.device):
            raise ValueError("--report needs --backend and --device (and --workload or --kernel)")
        ratio, interval, source = cost.ratio_from_report(args.report, args.backend, args.device, args.workload,
                                                         args.kernel)  # fmt: skip
    else:
        raise ValueError("give the throughput ratio: --report REPORT.json --backend B --device D, or --ratio/--penalty "
                         "(or --train RUN.json --locked STACK@DEVICE --portable STACK@DEVICE for H and the ratio)")
    inputs = cost.CostInputs(args.gpu_hours, args.locked_rate, args.portable_rate, args.policies,
                             args.retune_hours, args.hourly_rate, ratio)  # fmt: skip
    if args.json:
        print(json.dumps(cost.as_json(inputs, source, interval), indent=1,
                         default=lambda x: None if isinstance(x, float) and math.isinf(x) else x))  # fmt: skip
    else:
        print(cost.render(inputs, source, interval))
    return 0


def _cost_train(args: argparse.Namespace) -> int:
    """``cost --train``: H from the locked stack's converged runs, the ratio from both stacks' env-steps/s."""
    clash = [o for o, v in (("--report", args.report), ("--ratio", args.ratio), ("--penalty", args.penalty),
                            ("--gpu-hours", args.gpu_hours), ("--backend", args.backend), ("--device", args.device),
                            ("--workload", args.workload), ("--kernel", args.kernel)) if v is not None]  # fmt: skip
    if clash:
        raise ValueError(f"--train: takes H and the ratio from the training runs; drop {', '.join(clash)} (or drop "
                         "--train to give them yourself)")  # fmt: skip
    if not (args.locked and args.portable):
        raise ValueError("--train needs --locked STACK@DEVICE and --portable STACK@DEVICE (e.g. --locked torch@cuda "
                         "--portable opencl@pocl)")  # fmt: skip
    t = training.cost_from_train(args.train, args.locked, args.portable, args.task)
    if (t["locked"]["stack"], t["locked"]["device_key"]) == (t["portable"]["stack"], t["portable"]["device_key"]):
        # The same runs on both sides: a ratio of 1 by construction, which the premium would read as a port.
        t["ratio_source"] += (f"; --locked and --portable are both {t['locked']['stack']} on "
                              f"{t['locked']['device_key']}, so the ratio {cost.ITSELF} (1 by definition, not a "
                              "measured port): give two different stacks or devices of the training files")  # fmt: skip
    inputs = cost.CostInputs(t["gpu_hours"], args.locked_rate, args.portable_rate, args.policies,
                             args.retune_hours, args.hourly_rate, t["ratio"])  # fmt: skip
    note = "min portable / max locked to max portable / min locked env-steps/s over seeds"
    if args.json:
        extra = {"train": {k: v for k, v in t.items() if k not in ("h_source", "ratio_source")}}
        print(json.dumps(cost.as_json(inputs, t["ratio_source"], t["ratio_interval"], t["gpu_hours_range"],
                                      t["h_source"], extra), indent=1,
                         default=lambda x: None if isinstance(x, float) and math.isinf(x) else x))  # fmt: skip
    else:
        print(cost.render(inputs, t["ratio_source"], t["ratio_interval"], t["gpu_hours_range"], t["h_source"],
                          interval_note=note, unit="device-hours"))  # fmt: skip
    return 0


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", action="append", default=[], help="only this backend (repeatable)")
    p.add_argument("--device", default=None, help="only devices whose name contains this substring")
    p.add_argument("--quick", action="store_true",
                   help=f"small sizes without the cases that repeat another (listed in results.json), "
                        f"{suite.QUICK_ROUNDS} short interleaved rounds: indicative figures (at most three minutes on 2 "
                        "quiet cores once the compile caches are warm; a first run compiles every program)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=None,
                   help=f"interleaved rounds per group (default {suite.ROUNDS}; {suite.QUICK_ROUNDS} with --quick)")
    p.add_argument("--sizes", default=None, help="override sizes: quick, full or N[,N...] items (N >= 1)")
    p.add_argument("--rollout-steps", type=int, default=None, metavar="T",
                   help=f"steps per rollout of the data-path cases (default {suite.ROLLOUT_T}; {suite.QUICK_ROLLOUT_T} "
                        "with --quick)")  # fmt: skip
    p.add_argument("--machine", default=None, help="label of this machine in reports (default: hostname)")
    p.add_argument("--out", default="out/bench", help="output folder, new or existing (default: out/bench)")
    p.add_argument("--mix", action="append", default=[], help="workload mix: FILE.json or name=kernel:share,...")
    p.add_argument("--kernels", action="append", default=[], metavar="K[,K...]", type=_comma_list,
                   help="only these kernels, or families (step, rollout, rollout:CartPole-v1, gae, copy...); "
                        "repeatable (default: every kernel)")  # fmt: skip
    p.add_argument("--links", default=None, metavar="K[,K...]",
                   help="time the kernels of envs with a `links` keyword (Chain-v0) at each of these link counts "
                        "(2..16), as kernels of their own (step:Chain-v0/links=10; the plain name is the default "
                        "K = 3, so list 3 to keep it); other envs are unaffected (default: the default K only)")  # fmt: skip
    p.add_argument("--resume", action="store_true",
                   help="finish an interrupted run: reuse the visits its journal (<out>/results.json.journal) holds, "
                        "after checking that the options, code and machine are the same")  # fmt: skip


def _comma_list(text: str) -> list[str]:
    names = [k.strip() for k in text.split(",") if k.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected K[,K...], got {text!r}")
    return names


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="run the portability benchmark here and write results + report")
    _run_options(p)
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="the bench on every node of a Ray cluster (pip install 'portkern[ray]'), one bench per node, "
                        "merged into one report: no ADDRESS starts a local Ray for the run; an ADDRESS "
                        "(ray://host:10001, host:6379 or auto) joins an existing cluster")  # fmt: skip
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("tune", help="search each kernel's tuning knobs per device; write tuned.json + report")
    _run_options(p)
    from .tune_merge import add_options  # --merge ROW RUN.json [...] and --table FILE

    add_options(p)
    p.set_defaults(func=cmd_tune)
    p = sub.add_parser("report", help="merge bench runs and training runs (any machines) into report.md/json and "
                                      "plots")  # fmt: skip
    p.add_argument("runs", nargs="+", help="results.json files from portkern bench/tune or pytest bench, and/or "
                                           "portkern train JSON files (told apart by their schema)")  # fmt: skip
    p.add_argument("--out", required=True, help="output folder, new or existing (with --compare: a folder or FILE.md)")
    p.add_argument("--mix", action="append", default=[], help="workload mix: FILE.json or name=kernel:share,...")
    p.add_argument("--compare", action="store_true",
                   help="two runs of one machine: report each and list where their verdicts agree, where one is "
                        "within noise, and any contradiction (consistency.md/.json)")  # fmt: skip
    p.add_argument("--price", action="append", default=[], metavar="DEVICE=RATE",
                   help="price per device-hour of a device (key, substring, pocl/intel, or host; repeatable) or a "
                        "JSON file {DEVICE: RATE}: the cross-device section adds cost per 1e6 env steps")  # fmt: skip
    p.add_argument("--port-check", action="append", default=[], metavar="FILE",
                   help="a portkern port-check --json file: adds \"Port readiness: compiled, not run\" (also found "
                        "among the runs by its schema)")  # fmt: skip
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("cost", help="lock-in premium of a policy program from a report's throughput ratio or "
                                    "from training runs")  # fmt: skip
    t = p.add_argument_group("H and the ratio from training runs (portkern train; instead of --report, --ratio, "
                             "--gpu-hours)")  # fmt: skip
    t.add_argument("--train", nargs="+", metavar="RUN.json",
                   help="portkern train JSON files: H = the locked stack's median device-hours per converged policy, "
                        "ratio = median env-steps/s portable / locked")  # fmt: skip
    t.add_argument("--locked", metavar="STACK@DEVICE",
                   help="the locked stack as in the runs' stack label (before any @), @ a unique substring of its "
                        "device key (optional when it ran on one device), e.g. torch@cuda; or a run's whole stack "
                        "label as given to portkern train (opencl+fused@pocl)")  # fmt: skip
    t.add_argument("--portable", metavar="STACK@DEVICE", help="the portable stack, likewise, e.g. opencl+fused@pocl")
    t.add_argument("--task", help="env id when both stacks ran several tasks")
    g = p.add_argument_group("throughput ratio (from a report, or by hand)")
    g.add_argument("--report", help="report.json (or the folder holding it)")
    g.add_argument("--backend", help="portable backend, e.g. opencl")
    g.add_argument("--device", help="device key from the report (or a unique substring)")
    g.add_argument("--workload", help="workload mix name (default: the report's first)")
    g.add_argument("--kernel", help="use one kernel's ratio instead of a workload")
    g.add_argument("--ratio", type=float, help="portable/locked throughput ratio, by hand")
    g.add_argument("--penalty", type=float, help="throughput penalty (1 - ratio), by hand")
    p.add_argument("--gpu-hours", type=float, default=None,
                   help="H: GPU-hours per converged policy when locked (required unless --train)")
    p.add_argument("--locked-rate", type=float, required=True, help="price per GPU-hour, locked platform")
    p.add_argument("--portable-rate", type=float, required=True, help="price per GPU-hour, portable platform")
    p.add_argument("--policies", type=float, required=True, help="P: expected number of policies")
    p.add_argument("--retune-hours", type=float, default=0.0, help="engineering hours to port and re-tune")
    p.add_argument("--hourly-rate", type=float, default=0.0, help="price per engineering hour")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=cmd_cost)
    from . import port_check_cli  # the compilers' plumbing loads with its command only

    port_check_cli.register(sub)


__all__ = ["register"]
