"""pytest-benchmark plumbing for the portability suite: options, case parametrisation, parity-then-time, metadata."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from portkern.backends import BackendUnavailable, backends
from portkern.portability import suite

_CASES = pytest.StashKey[list]()
_DEVICES = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("portkern", "portkern portability benchmark")
    g.addoption("--pk-sizes", default="full",
                help="quick | full (a ladder scaled to each device's copy bandwidth) | N[,N...] items")
    g.addoption("--pk-backend", default="", help="comma-separated backends (default: all the registry knows)")
    g.addoption("--pk-device", default="", help="only devices whose name contains this substring")
    g.addoption("--pk-tune", action="store_true",
                help="time every legal knob configuration (largest size only) instead of the default one")
    g.addoption("--pk-machine", default="", help="label of this machine in reports (default: hostname)")
    g.addoption("--pk-no-simulators", action="store_true", help="leave simulator devices out entirely")  # fmt: skip
    g.addoption("--pk-rollout-steps", type=int, default=None,
                help=f"T of the rollout cases (default {suite.ROLLOUT_T}; {suite.QUICK_ROLLOUT_T} with --pk-sizes=quick)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_CASES] = []
    config.stash[_DEVICES] = {}
    config.addinivalue_line("markers", "pk_kernels(*names): the kernels a benchmark function measures, one "
                                       "case each (the function reads case.kernel)")  # fmt: skip


@dataclass(frozen=True)
class Case:
    target: suite.Target
    size: int
    config: dict[str, Any] | None  # None: whatever the backend instance has (its defaults)
    kernel: str = ""  # set for functions marked pk_kernels
    steps: int = suite.ROLLOUT_T  # a rollout's T

    @property
    def id(self) -> str:
        cfg = "" if self.config is None else f"-{suite.config_id(self.config)}"
        name = self.kernel.removeprefix("rollout:").replace(":", "-") + "-" if self.kernel else ""
        return f"{name}{self.target.id}-n{self.size}{cfg}"


def _machine(config: pytest.Config) -> str:
    return suite.machine_label(config.getoption("--pk-machine") or None)


def _device(config: pytest.Config, t: suite.Target) -> dict[str, Any]:
    """Device info of an available target (opened once), with the full-mode size ladder of its device."""
    cache = config.stash[_DEVICES]
    if t not in cache:
        b = suite.open_backend(t)
        info = suite.device_info(b, t, _machine(config))
        cache[t] = info
        if config.getoption("--pk-sizes") == "full" and not t.simulator:
            # Every backend on one physical device gets the same ladder, so they can be compared.
            same = [i for i in cache.values() if i["device_key"] == info["device_key"] and "sizes" in i]
            info["sizes"] = same[0]["sizes"] if same else suite.full_sizes(suite.copy_bandwidth(b))
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
        try:
            sizes = tuple(int(s) for s in mode.split(",")) if fam != "copy" else suite.QUICK_SIZES["copy"]
        except ValueError:
            raise pytest.UsageError(f"--pk-sizes: expected quick, full or N[,N...], got {mode!r}") from None
    return sizes[-1:] if config.getoption("--pk-tune") else sizes


def _rollout_steps(config: pytest.Config, t: suite.Target) -> int:
    steps = config.getoption("--pk-rollout-steps")
    if steps is None:
        steps = suite.QUICK_ROLLOUT_T if config.getoption("--pk-sizes") == "quick" else suite.ROLLOUT_T
    if steps < 1:
        raise pytest.UsageError(f"--pk-rollout-steps: expected an int >= 1, got {steps}")
    return min(steps, suite.SIM_ROLLOUT_T) if t.simulator else steps  # simulators: parity only


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    marker = metafunc.definition.get_closest_marker("pk_kernels")
    if marker is not None:
        kernels, named = list(marker.args), True
    else:
        kernel = metafunc.function.__name__.removeprefix("test_")
        # knob and size family only: the function picks its kernel (e.g. per env)
        kernels, named = [{"env_step": "step:CartPole-v1", "copy_bandwidth": "copy"}.get(kernel, kernel)], False
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
        # Sizes outside kernels: the paths of one (env, policy, N) run one after another, so the
        # host path's buffer, their parity reference, is made once.
        for size in sorted({s for k in kernels for s in _sizes(config, t, k)}):
            for kernel in kernels:
                if size not in _sizes(config, t, kernel):
                    continue
                configs: list[dict[str, Any] | None] = [None]
                if config.getoption("--pk-tune") and not t.simulator:
                    configs = suite.all_configs(kernel, suite.open_backend(t), steps) or [None]
                for cfg in configs:
                    case = Case(t, size, cfg, kernel if named else "", steps)
                    params.append(pytest.param(case, id=case.id))
    metafunc.parametrize("case", params)


@pytest.fixture
def measure(request: pytest.FixtureRequest, benchmark: Any, case: Case) -> Callable[[str], None]:
    """``measure(kernel)``: check parity against the reference, record the outcome, then time one launch."""
    config = request.config

    def run(kernel: str) -> None:
        t = case.target
        rec: dict[str, Any] = {"case_id": request.node.nodeid, "kernel": kernel, "backend": t.backend,
                               "device": t.device, "size": case.size, "simulator": t.simulator}  # fmt: skip
        steps = case.steps
        config.stash[_CASES].append(rec)
        try:
            b = suite.open_backend(t)
        except BackendUnavailable as exc:
            rec.update(status="unsupported", reason=str(exc))
            pytest.skip(str(exc))
        info = _device(config, t)
        rec.update({k: info[k] for k in ("device_key", "device_label", "kind", "vendor", "machine")})
        default = suite.current_config(kernel, b, steps=steps)
        with suite.applied(b, case.config):
            rec["config"] = suite.current_config(kernel, b, case.config, steps)
            try:
                prep = suite.prepare(b, kernel, case.size, case.config, steps)
                parity = prep.check()
            except NotImplementedError as exc:
                parity = suite.Parity("unsupported", None, f"NotImplementedError: {exc}")
            except Exception as exc:  # a kernel that does not build or run fails, it is not "missing"
                status = "invalid-config" if rec["config"] != default else "fail"
                parity = suite.Parity(status, None, f"{type(exc).__name__}: {exc}".splitlines()[0])
            rec.update(status=parity.status, max_error=parity.max_error, reason=parity.reason)
            if parity.status in ("unsupported", "invalid-config"):
                pytest.skip(f"{parity.status}: {parity.reason}")
            if parity.status == "fail" and parity.max_error is None:
                pytest.fail(f"{kernel} on {t.backend}/{t.device}: {parity.reason}")
            if t.simulator:
                pytest.skip("simulator device: functional-only, not timed")
            rec.update(items=prep.items, bytes=prep.bytes, unit=prep.unit, shape=list(prep.shape), **prep.info)
            benchmark.group = kernel
            benchmark.extra_info.update(rec)

            def launch() -> None:
                prep.run()
                b.synchronize()  # inside the timed function: the kernel's time, not the enqueue's

            launch()  # warm-up outside the timing: first launches build and cache programs
            benchmark(launch)
        stats = getattr(benchmark.stats, "stats", None)
        if stats is not None:
            rates = prep.rates(stats.min)
            benchmark.extra_info.update(rates)
            rec.update(rates, min_s=stats.min, median_s=stats.median)
        if parity.status == "fail":
            pytest.fail(f"{kernel} on {t.backend}/{t.device} fails parity: {parity.reason}")

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


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list, output_json: dict[str, Any]) -> None:
    # Every case, timed or not: unsupported and failing kernels must reach the functional matrix.
    output_json["portkern"] = {
        **suite.run_info(),
        "machine": _machine(config),
        "sizes": config.getoption("--pk-sizes"),
        "tune": bool(config.getoption("--pk-tune")),
        "cases": config.stash[_CASES],
    }
