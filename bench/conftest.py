"""pytest-benchmark plumbing for the portability suite: options, cases, parity-then-time in interleaved groups, metadata.

Cases that are compared are timed together. A *group* is every case of one comparison kernel
(a kernel, or the three data paths of one rollout) at one size on one piece of hardware: every
backend, every driver (OpenCL platform) and, with ``--pk-tune``, every knob configuration. The
first test of a group to run prepares every member and checks its parity against the reference.
The group's rounds are then timed in *visits*, one at the first test of each of its targets (tests
run target by target, so the visits are spread over the run and sample its changing load), each
visit timing all members that run in interleaved rounds (``suite.interleave``), so the drift of a
shared machine hits them alike and round r of one member pairs with round r of another. Each test
reports its own parity outcome at once (unsupported and invalid configurations skip, parity
failures fail); its rounds reach its pytest-benchmark record and its ``portkern`` case when the
group's last visit is done (at the latest before the JSON is written). Simulators and correctness
harnesses (``identity.bench_class(...).timed`` False) are checked, never timed.

With a :class:`portkern.portability.bench_journal.BenchJournal` registered as a plugin (``portkern bench``
and ``portkern tune`` do), each visit and each functional-only case is journaled as it finishes, and a
resumed run replays what the journal holds instead of running it again (see that module).
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from portkern.backends import BackendUnavailable, backends
from portkern.backends.jax import use_compilation_cache
from portkern.portability import names as kernel_names
from portkern.portability import suite
from portkern.portability.bench_journal import BenchJournal
from portkern.portability.options import structure_values

_CASES = pytest.StashKey[list]()
_DEVICES = pytest.StashKey[dict]()
_GROUPS = pytest.StashKey[dict]()  # nodeid -> its Group (timed cases only)
_LOAD = pytest.StashKey[dict]()
_JOURNAL = pytest.StashKey["BenchJournal | None"]()
_LEFT_OUT = pytest.StashKey[dict]()  # case id -> the quick-mode case it repeats (suite.quick_left_out)


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("portkern", "portkern portability benchmark")
    g.addoption("--pk-sizes", default="full",
                help="quick | full (a ladder scaled to each device's copy bandwidth) | N[,N...] items (N >= 1)")
    g.addoption("--pk-backend", default="", help="comma-separated backends (default: all the registry knows)")
    g.addoption("--pk-kernels", default="",
                help="comma-separated kernels, or families of them (step, rollout, a rollout's env: "
                     "rollout:CartPole-v1); default: every kernel")  # fmt: skip
    g.addoption("--pk-device", default="", help="only devices whose name contains this substring")
    g.addoption("--pk-tune", action="store_true",
                help="time every legal knob configuration (one size per size class: the largest of the ladder "
                     "in each) instead of the default one")
    g.addoption("--pk-machine", default="", help="label of this machine in reports (default: hostname)")
    g.addoption("--pk-no-simulators", action="store_true", help="leave simulator devices out entirely")  # fmt: skip
    g.addoption("--pk-rollout-steps", type=int, default=None,
                help=f"T of the rollout cases (default {suite.ROLLOUT_T}; {suite.QUICK_ROLLOUT_T} with --pk-sizes=quick)")
    g.addoption("--pk-rounds", type=int, default=None,
                help=f"interleaved rounds per group (default {suite.ROUNDS}; {suite.QUICK_ROUNDS} with --pk-sizes=quick)")
    g.addoption("--pk-slot-ms", type=float, default=None,
                help=f"shortest timed slot of one case in a round, ms (default {suite.SLOT_S * 1e3:g}; "
                     f"{suite.QUICK_SLOT_S * 1e3:g} with --pk-sizes=quick)")  # fmt: skip
    g.addoption("--pk-visits", type=int, default=None,
                help="most visits a group's rounds are split into, one at the first test of each of its targets "
                     f"(spread over the run); 1: all rounds at once (default {suite.VISITS}; {suite.QUICK_VISITS} "
                     "with --pk-sizes=quick)")  # fmt: skip
    g.addoption("--pk-cases", choices=("all", "quick"), default=None,
                help="all: every case; quick: leave out the cases that repeat another (suite.quick_left_out), "
                     "listed in the JSON as left out (default: quick with --pk-sizes=quick, else all)")  # fmt: skip
    g.addoption("--pk-links", default="",
                help="K[,K...]: time every kernel of an env with a `links` keyword (Chain-v0) at each K, as kernels "
                     "of their own (step:Chain-v0/links=10; the plain name is the default K); default: the "
                     "default K only")  # fmt: skip
    g.addoption("--pk-group-s", type=float, default=None,
                help=f"most seconds of rounds per group; fewer rounds (>= {suite.MIN_ROUNDS}) beyond it (default "
                     f"{suite.GROUP_BUDGET_S:g}; {suite.QUICK_GROUP_BUDGET_S:g} with --pk-sizes=quick)")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    # Options checked before collection: a usage error (exit code 4), not an error in every test module.
    _check_sizes(config.getoption("--pk-sizes"))
    steps = config.getoption("--pk-rollout-steps")
    if steps is not None and steps < 1:
        raise pytest.UsageError(f"--pk-rollout-steps: expected an int >= 1, got {steps}")
    _timing(config)
    try:
        structure_values(config.getoption("--pk-links"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc).replace("--links", "--pk-links", 1)) from None
    if _visits(config) < 1:
        raise pytest.UsageError(f"--pk-visits: expected an int >= 1, got {config.getoption('--pk-visits')}")
    config.stash[_CASES] = []
    config.stash[_DEVICES] = {}
    config.stash[_GROUPS] = {}
    config.stash[_LEFT_OUT] = {}
    config.stash[_LOAD] = {"start": _loadavg(), "cpu": suite.cpu_ticks(), "cpu_each": suite.cpu_ticks_each(),
                           "t0": time.perf_counter()}  # fmt: skip
    # The run's journal, when its driver registered one (portkern bench/tune): visits kept as they finish.
    config.stash[_JOURNAL] = next((p for p in config.pluginmanager.get_plugins() if isinstance(p, BenchJournal)),
                                  None)  # fmt: skip
    suite.run_info()  # fingerprints the code now, at the start of the run
    # XLA's compiled programs kept on disk like Inductor's (its default): a warm run compiles neither again.
    config.stash[_LOAD]["jax_cache"] = use_compilation_cache() is not None
    config.addinivalue_line("markers", "pk_kernels(*names): the kernels a benchmark function measures, one "
                                       "case each (the function reads case.kernel)")  # fmt: skip


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class Case:
    target: suite.Target
    size: int
    config: dict[str, Any] | None  # None: whatever the backend instance has (its defaults)
    kernel: str = ""
    steps: int = suite.ROLLOUT_T  # a rollout's T

    @property
    def id(self) -> str:
        cfg = "" if self.config is None else f"-{suite.config_id(self.config)}"
        # A structural kernel's env part (Chain-v0/links=10) reads Chain-v0-links10 in the id.
        kernel = self.kernel.removeprefix("rollout:").replace(kernel_names.STRUCTURE_SEP, "-").replace("=", "")
        name = kernel.replace(":", "-") + "-" if self.kernel else ""
        return f"{name}{self.target.id}-n{self.size}{cfg}"


def _machine(config: pytest.Config) -> str:
    return suite.machine_label(config.getoption("--pk-machine") or None)


def _quick(config: pytest.Config) -> bool:
    return config.getoption("--pk-sizes") == "quick"


def _visits(config: pytest.Config) -> int:
    visits = config.getoption("--pk-visits")
    return (suite.QUICK_VISITS if _quick(config) else suite.VISITS) if visits is None else visits


def _quick_cases(config: pytest.Config) -> bool:
    """Whether this run leaves out the cases that repeat another (--pk-cases, by default a quick run)."""
    cases = config.getoption("--pk-cases")
    return _quick(config) if cases is None else cases == "quick"


def _device(config: pytest.Config, t: suite.Target) -> dict[str, Any]:
    """Device info of an available target (opened once), with the full-mode size ladder of its hardware."""
    cache = config.stash[_DEVICES]
    if t not in cache:
        b = suite.open_backend(t)
        info = suite.device_info(b, t, _machine(config))
        cache[t] = info
        if config.getoption("--pk-sizes") == "full" and info["kind"] != "simulator":
            # Every backend on one piece of hardware gets the same ladder, so they can be compared.
            same = [i for i in cache.values() if i["hardware_key"] == info["hardware_key"] and "sizes" in i]
            journal = config.stash.get(_JOURNAL, None)
            # A resumed run keeps the ladder the interrupted one measured: a new bandwidth figure could pick
            # other sizes, and the journal's visits would then belong to another grid.
            kept = journal.sizes(info["hardware_key"]) if journal is not None and not same else None
            if same:
                info["sizes"] = same[0]["sizes"]
            elif kept is not None:
                info["sizes"] = kept
            else:
                info["sizes"] = suite.full_sizes(suite.copy_bandwidth(b))
                if journal is not None:
                    journal.record_sizes(info["hardware_key"], info["sizes"])
    return cache[t]


def _sizes(config: pytest.Config, t: suite.Target, kernel: str) -> tuple[int, ...]:
    fam = suite.size_family(kernel)
    if t.simulator:
        return suite.SIM_SIZES.get(fam, ())
    mode = config.getoption("--pk-sizes")
    if mode == "quick":
        sizes = suite.QUICK_SIZES[fam]
    elif mode == "full":
        sizes = _device(config, t)["sizes"][fam]
    else:
        sizes = _check_sizes(mode) if fam != "copy" else suite.QUICK_SIZES["copy"]
    return suite.tune_sizes(sizes, kernel) if config.getoption("--pk-tune") else sizes


def _check_sizes(mode: str) -> tuple[int, ...]:
    """The item counts of ``--pk-sizes N[,N...]`` (empty for quick/full); a usage error for anything else."""
    if mode in ("quick", "full"):
        return ()
    try:
        sizes = tuple(int(s) for s in mode.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise pytest.UsageError(f"--pk-sizes: expected quick, full or N[,N...] with each N >= 1 items, got {mode!r}")
    return sizes


def _structure(config: pytest.Config) -> dict[str, tuple[int, ...]]:
    """The structural values the cases run at (``--pk-links``): keyword -> values; {} for the defaults."""
    return structure_values(config.getoption("--pk-links"))


def _rollout_steps(config: pytest.Config, t: suite.Target) -> int:
    steps = config.getoption("--pk-rollout-steps")
    if steps is None:
        steps = suite.QUICK_ROLLOUT_T if _quick(config) else suite.ROLLOUT_T
    if steps < 1:
        raise pytest.UsageError(f"--pk-rollout-steps: expected an int >= 1, got {steps}")
    return min(steps, suite.SIM_ROLLOUT_T) if t.simulator else steps  # simulators: parity only


def _timing(config: pytest.Config) -> tuple[int, float, float]:
    """(rounds, slot seconds, group budget seconds) from the options, defaults by mode."""
    q = _quick(config)
    rounds = config.getoption("--pk-rounds") or (suite.QUICK_ROUNDS if q else suite.ROUNDS)
    slot_ms = config.getoption("--pk-slot-ms")
    budget = config.getoption("--pk-group-s")
    if rounds < 2:
        raise pytest.UsageError(f"--pk-rounds: expected an int >= 2 (intervals need rounds), got {rounds}")
    if slot_ms is not None and not slot_ms > 0:
        raise pytest.UsageError(f"--pk-slot-ms: expected a number > 0, got {slot_ms}")
    if budget is not None and not budget > 0:
        raise pytest.UsageError(f"--pk-group-s: expected a number > 0, got {budget}")
    slot_s = slot_ms / 1e3 if slot_ms else (suite.QUICK_SLOT_S if q else suite.SLOT_S)
    return rounds, slot_s, budget or (suite.QUICK_GROUP_BUDGET_S if q else suite.GROUP_BUDGET_S)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    marker = metafunc.definition.get_closest_marker("pk_kernels")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a benchmark taking `case` needs @pytest.mark.pk_kernels")
    # Each kernel at every structural value asked for (an env without that keyword: the kernel alone).
    kernels = [v for k in marker.args for v in kernel_names.structural_variants(k, _structure(config))]
    only = {s for s in config.getoption("--pk-backend").split(",") if s} or None
    params = []
    for t in suite.targets(only, config.getoption("--pk-device") or None):
        if not t.available:
            # Kept as a skipped case so the run records why this backend was not measured here.
            params.append(pytest.param(Case(t, 0, None), id=t.id, marks=pytest.mark.skip(reason=t.reason)))
            continue
        if t.simulator and (config.getoption("--pk-no-simulators") or kernels == ["copy"]):
            continue
        steps = _rollout_steps(config, t)
        for size in sorted({s for k in kernels for s in _sizes(config, t, k)}):
            for kernel in kernels:
                if size not in _sizes(config, t, kernel):
                    continue
                repeats = suite.quick_left_out(t.backend, kernel, t.simulator) if _quick_cases(config) else None
                if repeats is not None:  # left out in the open: the JSON lists it with the case it repeats
                    config.stash[_LEFT_OUT][Case(t, size, None, kernel, steps).id] = {
                        "kernel": kernel, "backend": t.backend, "device": t.device, "size": size, "repeats": repeats}
                    continue
                configs: list[dict[str, Any] | None] = [None]
                if config.getoption("--pk-tune") and not t.simulator:
                    configs = suite.all_configs(kernel, suite.open_backend(t), steps) or [None]
                for cfg in configs:
                    case = Case(t, size, cfg, kernel, steps)
                    params.append(pytest.param(case, id=case.id))
    metafunc.parametrize("case", params)


def _kernel_match(name: str, kernel: str) -> bool:
    """Whether ``--pk-kernels`` entry ``name`` selects ``kernel``: the kernel itself or a family of it, where a
    name without structural values selects the kernel at every value the run times (step:Chain-v0 selects
    step:Chain-v0/links=10 too)."""
    if kernel == name or kernel.startswith(name + ":"):
        return True
    try:
        base = kernel_names.base_kernel(kernel)
    except ValueError:
        return False
    return base != kernel and (base == name or base.startswith(name + ":"))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """``--pk-kernels``: only the cases of those kernels (a target's unavailability record goes with them)."""
    names = [k for k in config.getoption("--pk-kernels").split(",") if k]
    if not names:
        return
    known: set[str] = set()
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("pk_kernels")
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if marker is None or not isinstance(case, Case):
            keep.append(item)
            continue
        known.update(marker.args)
        if case.kernel:
            known.add(case.kernel)
        measured = [case.kernel] if case.kernel else list(marker.args)
        (keep if any(_kernel_match(n, k) for n in names for k in measured) else drop).append(item)
    unknown = [n for n in names if not any(_kernel_match(n, k) for k in known)]
    if unknown:
        families = sorted({k.split(":")[0] for k in known} | known)
        raise pytest.UsageError(f"--pk-kernels: no kernel {', '.join(unknown)}; expected some of "
                                f"{', '.join(families)}")  # fmt: skip
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# ---- groups: parity first, then interleaved rounds in visits spread over the run ---------------
@dataclass
class Outcome:
    """What one case's test reports: its record fields, and its rounds once its group has been timed."""

    rec: dict[str, Any]
    timeable: bool = False  # built, ran, and its target is timed
    round_s: list[float] = field(default_factory=list)
    round_reps: list[int] = field(default_factory=list)
    prep: suite.Prepared | None = None
    record: dict[str, Any] | None = None  # the test's case record, once its test has run
    benchmark: Any = None
    fed: bool = False


@dataclass
class Group:
    gid: str
    members: list[tuple[str, Case]]  # (nodeid, case), in collection order
    visit_at: dict[str, int] = field(default_factory=dict)  # nodeid -> the visit its test triggers
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    checked: bool = False
    visits_done: int = 0

    @property
    def visits(self) -> int:
        return len(self.visit_at)

    @property
    def done(self) -> bool:
        return self.checked and self.visits_done >= self.visits


def _timed_target(config: pytest.Config, t: suite.Target) -> bool:
    if not t.available or t.simulator:
        return False
    try:
        return _device(config, t)["kind"] != "simulator"
    except Exception:  # noqa: BLE001 - a target that does not open is reported by its own test
        return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Form the groups from the cases that will run (after -k/-m deselection), and their visits.

    A group's rounds are split into visits, one at the first test of each of its targets (tests
    run target by target, so the visits are spread over the whole run and sample its changing
    load, not just one window of it); ``--pk-visits`` caps their number.
    """
    config = session.config
    groups: dict[tuple[Any, ...], Group] = {}
    for item in session.items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")
        if not isinstance(case, Case) or not case.kernel or not _timed_target(config, case.target):
            continue
        hw = _device(config, case.target)["hardware_key"]
        key = (suite.comparison_kernel(case.kernel), case.size, hw)
        if key not in groups:
            groups[key] = Group(f"{key[0]}@{hw}-n{case.size}", [])
        groups[key].members.append((item.nodeid, case))
    cap = _visits(config)
    for g in groups.values():
        seen: list[suite.Target] = []
        for nodeid, case in g.members:
            if case.target not in seen and len(seen) < cap:
                seen.append(case.target)
                g.visit_at[nodeid] = len(seen) - 1
    config.stash[_GROUPS] = {nodeid: g for g in groups.values() for nodeid, _ in g.members}
    journal = config.stash.get(_JOURNAL, None)
    if journal is not None and not journal.check_plan([item.nodeid for item in session.items]):
        pytest.exit(journal.error or "the journal's plan differs", returncode=pytest.ExitCode.USAGE_ERROR)


def _check(config: pytest.Config, case: Case, shared: dict[tuple[Any, ...], suite.Prepared]) -> Outcome:
    """Prepare one case and check its parity under its knobs (preparation shared between knob configs)."""
    t, kernel, steps = case.target, case.kernel, case.steps
    rec: dict[str, Any] = {}
    try:
        b = suite.open_backend(t)
    except BackendUnavailable as exc:
        return Outcome({"status": "unsupported", "reason": str(exc)})
    default = suite.current_config(kernel, b, steps=steps, size=case.size)
    with suite.applied(b, case.config):
        # The values that run (the tuned default of the case's size class, never its sentinel), and their origins.
        rec["config"] = suite.current_config(kernel, b, case.config, steps, case.size)
        rec["config_origin"] = suite.config_origin(kernel, b, case.config, steps, case.size)
        prep = None
        try:
            prep = _prepared(b, case, shared)
            parity = prep.check()
        except NotImplementedError as exc:  # Unsupported and every other NotImplementedError
            parity = suite.Parity("unsupported", None, f"{type(exc).__name__}: {exc}".splitlines()[0])
        except Exception as exc:  # noqa: BLE001 - a kernel that does not build or run fails, it is not "missing"
            status = "invalid-config" if rec["config"] != default else "fail"
            parity = suite.Parity(status, None, f"{type(exc).__name__}: {exc}".splitlines()[0])
    rec.update(status=parity.status, max_error=parity.max_error, reason=parity.reason)
    ran = prep is not None and (parity.status == "pass" or (parity.status == "fail" and parity.max_error is not None))
    if prep is None or not ran:
        shared.pop(_prep_key(case), None)  # a preparation that failed is not reused
        return Outcome(rec)
    rec.update(items=prep.items, bytes=prep.bytes, unit=prep.unit, shape=list(prep.shape), **prep.info)
    return Outcome(rec, timeable=_timed_target(config, t), prep=prep)


def _prep_key(case: Case) -> tuple[Any, ...]:
    # Knobs that are backend attributes are read at launch, so one preparation serves them all;
    # case knobs (steps_per_launch) are baked into it.
    return (case.target, case.kernel, case.size, case.steps,
            tuple((k, (case.config or {}).get(k)) for k in suite.CASE_KNOBS))  # fmt: skip


def _prepared(b: Any, case: Case, shared: dict[tuple[Any, ...], suite.Prepared]) -> suite.Prepared:
    key = _prep_key(case)
    if key not in shared:
        shared[key] = suite.prepare(b, case.kernel, case.size, case.config, case.steps)
    return shared[key]


def _check_all(config: pytest.Config, group: Group) -> None:
    """Parity of every member first (its preparation kept for the first visit)."""
    journal = config.stash.get(_JOURNAL, None)
    first = journal.visit(group.gid, 0) if journal is not None else None
    if first is not None:  # a resumed run: the members' outcomes as journaled; a visit still due prepares again
        for nodeid, _ in group.members:
            group.outcomes[nodeid] = Outcome(dict(first[nodeid]["rec"]), timeable=first[nodeid]["timeable"])
        group.checked = True
        return
    shared: dict[tuple[Any, ...], suite.Prepared] = {}
    for nodeid, case in group.members:
        group.outcomes[nodeid] = _check(config, case, shared)
    group.checked = True


def _visit(config: pytest.Config, group: Group) -> None:
    """One visit: this share of the group's rounds, every timed member interleaved."""
    disabled = bool(getattr(getattr(config, "_benchmarksession", None), "disabled", False))
    rounds, slot_s, budget = _timing(config)
    v, n = group.visits_done, group.visits
    journal = config.stash.get(_JOURNAL, None)
    kept = journal.visit(group.gid, v) if journal is not None else None
    if kept is not None:
        _replay(group, kept)
        journal.replayed["visits"] += 1
        return
    start = {nodeid: len(out.round_s) for nodeid, out in group.outcomes.items()}
    timed = [(nodeid, case) for nodeid, case in group.members if group.outcomes[nodeid].timeable and not disabled]
    shared: dict[tuple[Any, ...], suite.Prepared] = {}
    slots, reps, live = [], [], []
    estimate = 0.0 if _quick(config) else None  # a quick run: the round's time from calibration, no untimed round
    for nodeid, case in timed:
        out = group.outcomes[nodeid]
        b = suite.open_backend(case.target)
        try:
            checked = out.prep is not None  # its parity check just ran it: built, compiled and warm
            if not checked:  # released after the previous visit: the same inputs, made again
                with suite.applied(b, case.config):
                    out.prep = _prepared(b, case, shared)
            slot = suite.make_slot(b, out.prep, case.config)
            # Warm-up launches build and cache programs (a quick run's checked cases are warm already).
            r, launch_s = suite.calibrate_launch(slot, slot_s, warm=checked and estimate is not None)
            if estimate is not None:
                estimate += r * launch_s
        except Exception as exc:  # noqa: BLE001 - passed parity, then broke: a failure of this case, not of the group
            out.rec.update(status="fail", reason=f"{type(exc).__name__} while timing: {exc}".splitlines()[0])
            out.timeable = False
            continue
        slots.append(slot)
        reps.append(r)
        live.append(out)
    share = -(-rounds // n)  # this visit's rounds
    min_rounds = -(-suite.MIN_ROUNDS // n)
    # Timed again, once, if a burst of steal took one CPU from them (suite.STEAL_RETIME, against the run's own
    # steal so far); each attempt's worst one-CPU steal share is recorded with the members, retimed or not.
    background = suite.worst_cpu_steal(config.stash[_LOAD]["cpu_each"], suite.cpu_ticks_each(), suite.STEAL_MIN_TICKS)
    rounds_s, steals = suite.timed_undisturbed(
        lambda attempt: suite.interleave(slots, reps, share, budget / n, min_rounds, seed=v + 1000 * attempt,
                                         estimate_s=estimate or None), background=background)  # fmt: skip
    for out, r, secs in zip(live, reps, rounds_s):
        out.round_s += secs
        out.round_reps += [r] * len(secs)
        out.rec.setdefault("visit_steal", []).append(steals)
    for out in group.outcomes.values():
        out.prep = None  # the group's buffers go now, before the next group allocates its own
    if journal is not None:  # durable before the run moves on: a kill from here on keeps this visit
        journal.record_visit(group.gid, v, {
            nodeid: {"rec": out.rec, "timeable": out.timeable, "round_s": out.round_s[start[nodeid]:],
                     "round_reps": out.round_reps[start[nodeid]:]} for nodeid, out in group.outcomes.items()})  # fmt: skip
    _visit_done(group)


def _visit_done(group: Group) -> None:
    group.visits_done += 1
    if group.done:
        for out in group.outcomes.values():
            _feed(out, group)


def _replay(group: Group, kept: dict[str, Any]) -> None:
    """A visit an earlier, interrupted invocation finished: its rounds and its members' records as journaled."""
    for nodeid, m in kept.items():
        out = group.outcomes[nodeid]
        out.rec.clear()
        out.rec.update(m["rec"])
        out.timeable = m["timeable"]
        out.round_s += m["round_s"]
        out.round_reps += m["round_reps"]
        out.prep = None
    _visit_done(group)


def _feed(out: Outcome, group: Group) -> None:
    """Put a finished group's rounds into one member's case record and its pytest-benchmark record."""
    if out.fed or out.record is None or not group.done:
        return
    out.fed = True
    rec = out.record
    rec.update({k: v for k, v in out.rec.items() if k in ("status", "reason")})
    if not out.round_s:
        return
    summary = suite.round_summary(out.round_s, rec["items"])
    rec.update(round_group=group.gid, rounds=summary["rounds"], visits=group.visits, round_reps=out.round_reps,
               round_s=out.round_s, items_per_s_rounds=summary)  # fmt: skip
    rec.update(suite.rates(rec["items"], rec["bytes"], rec["items"] / summary["median"], rollout=bool(rec.get("path"))))
    bench = out.benchmark
    if bench is None:
        return
    bench.extra_info.update(rec)
    # pytest-benchmark times one function per test; a group's rounds are timed together, so its
    # per-round figures (seconds per launch) go into the test's statistics object instead.
    make_stats = getattr(bench, "_make_stats", None)
    if make_stats is not None and not bench.disabled:
        stats = make_stats(1)
        for s in out.round_s:
            stats.update(s)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    """Visits still due (a run stopped early, -x) happen before pytest-benchmark writes its JSON.

    A journaled run stopped by Ctrl-C or refused by its journal writes no JSON at all: a results file must
    hold a whole run, and the journal keeps what finished for ``--resume``."""
    journal = session.config.stash.get(_JOURNAL, None)
    if journal is not None and (journal.interrupted or journal.error):
        bench = getattr(session.config, "_benchmarksession", None)
        if bench is not None:
            bench.json = None
        yield
        return
    for group in {id(g): g for g in session.config.stash.get(_GROUPS, {}).values()}.values():
        if group.checked:
            while not group.done:
                _visit(session.config, group)
    yield


@pytest.fixture
def measure(request: pytest.FixtureRequest, benchmark: Any, case: Case) -> Callable[[str], None]:
    """``measure(kernel)``: report this case's parity outcome; its rounds are recorded with its group's."""
    config = request.config

    def run(kernel: str) -> None:
        if kernel != case.kernel:
            raise ValueError(f"measure({kernel!r}): this case measures {case.kernel!r}")
        t = case.target
        nodeid = request.node.nodeid
        rec: dict[str, Any] = {"case_id": nodeid, "kernel": kernel, "backend": t.backend, "device": t.device,
                               "size": case.size, "simulator": t.simulator}  # fmt: skip
        config.stash[_CASES].append(rec)
        try:
            info = _device(config, t)
        except BackendUnavailable as exc:
            rec.update(status="unsupported", reason=str(exc))
            pytest.skip(str(exc))
        rec.update({k: info[k] for k in ("device_key", "hardware_key", "device_label", "kind", "vendor", "machine",
                                         "platform", "timed")})  # fmt: skip
        rec["simulator"] = info["kind"] == "simulator"
        rec["stack_class"] = suite.case_stack_class(info["stack_class"], kernel)
        group = config.stash[_GROUPS].get(nodeid)
        journal = config.stash.get(_JOURNAL, None)
        if group is None:  # functional only (simulator, harness): its own check, never timed
            kept = journal.case(nodeid) if journal is not None else None
            if kept is not None:
                out = Outcome(dict(kept["rec"]), timeable=kept["timeable"])
                journal.replayed["cases"] += 1
            else:
                out = _check(config, case, {})
                if journal is not None:
                    journal.record_case(nodeid, {"rec": out.rec, "timeable": out.timeable})
        else:
            if not group.checked:
                _check_all(config, group)
            out = group.outcomes[nodeid]
            if nodeid in group.visit_at:
                while group.visits_done <= group.visit_at[nodeid]:
                    _visit(config, group)
        rec.update(out.rec)
        status, reason = rec["status"], rec.get("reason", "")
        if status in ("unsupported", "invalid-config"):
            pytest.skip(f"{status}: {reason}")
        if status == "fail" and not out.timeable:
            pytest.fail(f"{kernel} on {t.backend}/{t.device}: {reason}")
        if rec["simulator"]:
            pytest.skip("simulator or correctness harness: functional only, not timed")
        benchmark.group = kernel
        benchmark._mode = "portkern interleaved rounds"  # used: its rounds come with its group's (_feed)
        out.record, out.benchmark = rec, benchmark
        _feed(out, group)  # now if the group is done, else at its last visit
        if status == "fail":
            pytest.fail(f"{kernel} on {t.backend}/{t.device} fails parity: {reason}")

    return run


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    devices = [dict(i, sizes=i.get("sizes")) for i in config.stash[_DEVICES].values()]
    machine_info["portkern"] = {
        **suite.run_info(),
        "machine": _machine(config),
        "cpu_model": suite.cpu_model(),
        "os": platform.platform(),
        "devices": devices,  # device name, vendor, driver, backend and library versions
        "backends": [{"name": r.name, "available": r.available, "reason": r.reason, "devices": list(r.devices),
                      "simulator": r.simulator} for r in backends()],  # fmt: skip
    }


def _retimed_visits(config: pytest.Config) -> int:
    """Visits of this run's groups whose rounds were timed again for a burst of steal (two attempts recorded)."""
    steals = {g.gid: next((o.rec["visit_steal"] for o in g.outcomes.values() if o.rec.get("visit_steal")), [])
              for g in config.stash[_GROUPS].values()}  # fmt: skip
    return sum(len(attempts) > 1 for visits in steals.values() for attempts in visits)


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict[str, Any]) -> None:
    # Every case, timed or not: unsupported and failing kernels must reach the functional matrix.
    rounds, slot_s, budget = _timing(config)
    output_json["portkern"] = {
        **suite.run_info(),
        "machine": _machine(config),
        "sizes": config.getoption("--pk-sizes"),
        "tune": bool(config.getoption("--pk-tune")),
        "structure": {k: list(v) for k, v in _structure(config).items()},  # --pk-links: {} at the defaults
        "timing": {"method": "interleaved rounds, order shuffled per round, in visits spread over the run",
                   "rounds": rounds, "visits_max": _visits(config), "slot_s": slot_s,
                   "group_budget_s": budget, "min_rounds": suite.MIN_ROUNDS, "rate_basis": suite.RATE_BASIS,
                   "min_run": suite.MIN_RUN, "steal_retime": {"share": suite.STEAL_RETIME, "min_ticks":
                   suite.STEAL_MIN_TICKS, "burst": suite.STEAL_BURST}},
        # A shared machine: how busy it was, how much CPU the hypervisor took, how long the suite ran.
        "loadavg": {"start": config.stash[_LOAD]["start"], "end": _loadavg()},
        "cpu_steal": suite.cpu_steal(config.stash[_LOAD]["cpu"], suite.cpu_ticks()),
        "retimed_visits": _retimed_visits(config),  # visits timed again for a burst of steal (suite.STEAL_RETIME)
        "wall_s": round(time.perf_counter() - config.stash[_LOAD]["t0"], 1),
        "jax_compilation_cache": config.stash[_LOAD]["jax_cache"],  # on disk, as Inductor's always is
        "code_end": suite.code_fingerprint(),  # differs from "code" when a backend was edited during the run
        **({} if config.stash.get(_JOURNAL, None) is None else
           {"resumed": config.stash[_JOURNAL].resumed()}),  # visits/cases replayed from an interrupted run's journal
        "left_out": _left_out(config),
        "cases": config.stash[_CASES],
    }


def _left_out(config: pytest.Config) -> dict[str, Any]:
    """The case selection: "all", or "quick" with every case left out and the case it repeats (only those of
    the kernels this run selected), so a quick run's report can say that it ran a subset and which."""
    names = [k for k in config.getoption("--pk-kernels").split(",") if k]
    cases = [c for c in config.stash[_LEFT_OUT].values()
             if not names or any(_kernel_match(n, c["kernel"]) for n in names)]  # fmt: skip
    if not _quick_cases(config):
        return {"cases": "all", "left_out": []}
    return {"cases": "quick", "rule": "a case that repeats another (the same code at the same size) is left out",
            "left_out": cases}
