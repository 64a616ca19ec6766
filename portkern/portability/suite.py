"""Benchmark cases: targets (backend x device), kernels, sizes, parity against the reference, knobs and the copy ceiling."""

from __future__ import annotations

import gc
import itertools
import math
import os
import platform
import re
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from .. import __version__
from ..backends import Backend, backends, get_backend, probe
from ..envs import ENVS
from ..policy import MLPPolicy, Policy, RandomPolicy, RolloutBuffer
from ..step import make
from .metrics import device_hours_per_billion_steps

SCHEMA = "portkern-bench/2"  # 2: per-round timings of interleaved groups, device identity, stack class
KERNELS: tuple[str, ...] = tuple(f"step:{e}" for e in ENVS) + ("gae", "discounted_returns", "normalize", "gather")
#: The three data paths of a rollout (VectorEnv.rollout): host round-trip, one launch per step, fused.
PATHS = ("host", "device", "fused")
#: Envs with an ``:mlp`` variant of their rollout cases (the random policy runs for every env): the
#: host path runs the MLP in NumPy, about 1 us per env step, so CartPole alone carries the policy's cost.
MLP_ENVS = ("CartPole-v1",)
#: Rollout cases ``rollout:<env>:<path>[:mlp]``: T steps of N envs with a policy choosing actions.
ROLLOUT_KERNELS: tuple[str, ...] = tuple(
    f"rollout:{e}:{p}{m}" for m in ("", ":mlp") for e in ENVS for p in PATHS if not m or e in MLP_ENVS
)
ROLLOUT_T, QUICK_ROLLOUT_T, SIM_ROLLOUT_T = 128, 32, 8  # steps per rollout: full, quick, simulator devices
MLP_HIDDEN = 64
MLP_FLIP_SHARE = 1e-3  # most envs whose sampled MLP action may flip within float rounding (see _compare_paths)
SEED = 0
PARITY_STEPS = 3  # from a seeded reset: far from every termination threshold, so flags are exact
BUFFER_T = 128  # rollout length of the [T, N] buffer cases; their size is T*N elements
GATHER_FEATURES = 4  # row length of the gathered [M, F] array (CartPole's observation)
GAMMA, LAM, EPS = 0.99, 0.95, 1e-8
RTOL, ATOL = 1e-4, 1e-5  # float32 parity: libm ulp differences and reduction order, nothing more
#: Backends whose data paths agree to rounding, not bitwise (Backend.exact_paths False: torch.compile fuses
#: each path's ops differently): a rollout's floats match the host path's at RTOL/ATOL for PARITY_STEPS steps,
#: then within this drift bound, which the rounding of T chaotic steps stays under (torch_compile's Pendulum,
#: T = 32: 2.8e-5) and a wrong step, reset or path does not (errors of the size of the state).
DRIFT_RTOL, DRIFT_ATOL = 1e-3, 1e-3
#: Device names of OpenCL platforms that interpret kernels (they pass parity but are not timed).
SIMULATOR_MARKERS = ("oclgrind", "simulator")

#: Tuning knobs: kernel family -> backend attribute -> legal values (the first is not special).
#: A backend without the attribute has no such knob; None means "the driver chooses".
KNOBS: dict[str, dict[str, tuple[Any, ...]]] = {
    "step": {"local_size": (None, 32, 64, 128, 256), "block_size": (64, 128, 256, 512, 1024)},
    # OpenCL's scans also take a layout: PK_VW x PK_NV consecutive envs per work-item (1 x 1 is the
    # GPU shape). The work-group size is searched more coarsely so the product stays small.
    "gae": {"local_size": (None, 64, 256), "scan_vector_width": (1, 8, 16), "scan_vectors_per_item": (1, 32, 128, 512),
            "block_size": (64, 128, 256, 512, 1024)},
    "discounted_returns": {"local_size": (None, 64, 256), "scan_vector_width": (1, 8, 16),
                           "scan_vectors_per_item": (1, 32, 128, 512), "block_size": (64, 128, 256, 512, 1024)},
    # OpenCL's row layout: rows per work-item (0: one element per work-item, the GPU shape), vector width.
    "gather": {"local_size": (None, 256), "gather_rows_per_item": (0, 16, 64, 256), "gather_vector_width": (1, 2, 4),
               "block_size": (128, 256, 512)},
    # The reduction's work-group must be a power of two (PK_WG); the apply pass uses local_size.
    # OpenCL's chunk layout: elements per work-item (0: the work-group tree), vector width.
    "normalize": {"reduce_wg": (64, 256), "local_size": (None, 128), "reduce_chunk": (0, 4096, 16384, 65536),
                  "reduce_vector_width": (1, 8, 16), "block_size": (128, 256, 512)},
    # Host round-trip and per-step rollouts: envs per work-item and block size. The work-group size
    # is left to the driver here (the step family searches it); the product would be 5x larger.
    "rollout": {"env_vector_width": (None, 1, 4, 8, 16), "block_size": (128, 256, 512)},
    # Fused rollouts, plus steps per launch: an argument of the rollout (CASE_KNOBS), not a backend
    # attribute; values above the rollout's T are left out and T itself (one launch) is always in.
    "fused": {"steps_per_launch": (1, 8, 32, 128), "env_vector_width": (None, 1, 4, 8, 16),
              "block_size": (128, 256, 512)},
}
# OpenCL PK_VW (a build option). Explicit widths only: "the driver's advertised width" runs the same
# kernel as one of them and is never a default (tuning.py), so it is not searched either.
KNOBS["step"]["env_vector_width"] = (1, 4, 8, 16)
for _fam in ("rollout", "fused"):
    KNOBS[_fam]["env_vector_width"] = (1, 4, 8, 16)
#: Knobs that are arguments of a case rather than attributes of the backend instance.
CASE_KNOBS = ("steps_per_launch",)

#: Sizes (items) per kernel family and mode; "full" is replaced by a ladder scaled to the device.
#: Rollout sizes are env counts N (a case runs N x T env steps); the MLP's host path is slow, so smaller.
QUICK_SIZES = {"step": (1024, 16384), "buffer": (8192, 65536), "copy": (32 << 20,), "rollout": (2048,),
               "rollout-mlp": (512,)}  # fmt: skip
SIM_SIZES = {"step": (64,), "buffer": (1024,), "rollout": (64,), "rollout-mlp": (16,)}  # an interpreter: tiny


@dataclass(frozen=True)
class RolloutKernel:
    env: str
    path: str
    policy: str  # "random" | "mlp"


def rollout_kernel(kernel: str) -> RolloutKernel | None:
    """``rollout:<env>:<path>[:mlp]`` split into its parts; None for any other kernel."""
    parts = kernel.split(":")
    if parts[0] != "rollout":
        return None
    if len(parts) not in (3, 4) or parts[1] not in ENVS or parts[2] not in PATHS or parts[3:] not in ([], ["mlp"]):
        raise ValueError(f"kernel: expected rollout:<env>:<path>[:mlp], got {kernel!r}; valid: {', '.join(ROLLOUT_KERNELS)}")
    return RolloutKernel(parts[1], parts[2], "mlp" if len(parts) == 4 else "random")


def family(kernel: str) -> str:
    """The KNOBS family of a kernel."""
    if kernel.startswith("step:"):
        return "step"
    rk = rollout_kernel(kernel)
    if rk is not None:
        return "fused" if rk.path == "fused" else "rollout"
    return kernel


def size_family(kernel: str) -> str:
    if kernel.startswith("step:"):
        return "step"
    rk = rollout_kernel(kernel)
    if rk is not None:
        return "rollout-mlp" if rk.policy == "mlp" else "rollout"
    return "copy" if kernel == "copy" else "buffer"


# ---- targets and devices ----------------------------------------------------------------------
def slug(text: str, words: int = 3) -> str:
    parts = re.findall(r"[a-z0-9.]+", re.sub(r"\((r|tm)\)", "", text.lower()))
    return "-".join(parts[:words]) or "device"


def _tail(label: str) -> str:
    return label.split(": ", 1)[-1]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "host CPU"


def machine_label(override: str | None = None) -> str:
    """Names the machine a run came from; devices of different machines are never compared by time."""
    return override or os.environ.get("PORTKERN_MACHINE") or platform.node() or "machine"


def canonical_vendor(text: str) -> str:
    t = text.lower()
    for key, name in (("nvidia", "NVIDIA"), ("amd", "AMD"), ("advanced micro", "AMD"), ("intel", "Intel"),
                      ("apple", "Apple"), ("arm", "Arm")):  # fmt: skip
        if key in t:
            return name
    return text.strip() or "unknown"


@dataclass(frozen=True)
class Target:
    """One backend on one device as the registry lists it (or an unavailable backend, with the reason)."""

    backend: str
    device: str
    available: bool = True
    simulator: bool = False
    reason: str = ""
    single: bool = True  # the backend lists one device: open it with device=None

    @property
    def id(self) -> str:
        return f"{self.backend}-{slug(_tail(self.device))}" if self.available else self.backend


def targets(only_backends: set[str] | None = None, device_filter: str | None = None) -> list[Target]:
    """Every (backend, device) the registry reports, unavailable backends included with their reason."""
    out = []
    for rec in backends():
        if only_backends and rec.name not in only_backends:
            continue
        if not rec.available:
            out.append(Target(rec.name, "-", available=False, reason=rec.reason))
            continue
        for dev in rec.devices:
            if device_filter and device_filter.lower() not in dev.lower():
                continue
            sim = rec.simulator or any(m in dev.lower() for m in SIMULATOR_MARKERS)
            out.append(Target(rec.name, dev, simulator=sim, single=len(rec.devices) == 1))
    return out


def open_backend(t: Target) -> Backend:
    if t.single:
        return get_backend(t.backend, None)
    b = get_backend(t.backend, _tail(t.device))
    if b.device_name != t.device:
        raise RuntimeError(f"{t.backend}: asked for {t.device!r}, got {b.device_name!r}")
    return b


def _platform(b: Backend) -> str:
    """The driver layer a backend reaches its device through (an OpenCL platform), or "" for none.

    From the backend itself: ``describe()["platform"]`` when it says so, else the name of its
    ``platform`` object (pyopencl's). Backends without one (NumPy, torch, CuPy, Numba) drive the
    hardware through its own stack and are compared on every driver-device of that hardware.
    """
    desc = b.describe()
    name = desc.get("platform") or getattr(getattr(b, "platform", None), "name", "") or ""
    return str(name).strip()


def device_info(b: Backend, t: Target, machine: str) -> dict[str, Any]:
    """Identity of the device behind a backend: the keys reports group and compare by.

    * ``kind`` comes from the backend (``Backend.device_kind()``: the API's device type), never from
      its name; a simulator or a correctness harness (``timed = False``) is "simulator": parity only.
    * ``hardware_key`` names the physical device: ``<machine>/cpu`` for the host processor (every CPU
      backend of one machine runs on it), ``<machine>/<device name>`` otherwise.
    * ``device_key`` is the hardware plus the driver layer (an OpenCL platform): one CPU under PoCL
      and under Intel's runtime is two devices ("same hardware, different driver"). Without a driver
      layer it is the hardware key, and the report compares such backends on every driver-device of
      that hardware.
    """
    cls = type(b)
    desc = {k: str(v) for k, v in b.describe().items()}
    name = _tail(b.device_name)
    timed = bool(getattr(cls, "timed", True))
    kind = "simulator" if t.simulator or not timed else str(b.device_kind())
    platform_name = _platform(b) if kind != "simulator" else ""
    if kind == "simulator":
        hw = key = f"{machine}/{slug(name if timed else b.device_name, 6)}"
        label, vendor = b.device_name if not timed else name, canonical_vendor(desc.get("vendor", ""))
    elif kind == "cpu":
        hw, label, vendor = f"{machine}/cpu", cpu_model(), canonical_vendor(cpu_model())
        key = f"{hw}/{slug(platform_name)}" if platform_name else hw
    else:
        hw, label = f"{machine}/{slug(name, 6)}", name
        vendor = canonical_vendor(desc.get("vendor", "") or name)
        key = f"{hw}/{slug(platform_name)}" if platform_name else hw
    versions = dict(probe(t.backend).versions)
    versions.update({k: v for k, v in desc.items() if k not in ("backend", "device", "vendor", "driver")})
    return {
        "backend": t.backend, "device": b.device_name, "device_key": key, "hardware_key": hw,
        "device_label": f"{label} ({platform_name})" if platform_name else label, "kind": kind, "vendor": vendor,
        "driver": desc.get("driver", ""), "platform": platform_name, "machine": machine, "timed": timed,
        "stack_class": str(getattr(cls, "stack_class", "custom kernels")), "versions": versions,
    }  # fmt: skip


def comparison_kernel(kernel: str) -> str:
    """The kernels timed together in one interleaved group: a kernel itself, or all three data paths of
    one rollout (``rollout:<env>[:mlp]``), so that path factors are paired as well as backends."""
    rk = rollout_kernel(kernel)
    if rk is None:
        return kernel
    return f"rollout:{rk.env}" + (":mlp" if rk.policy == "mlp" else "")


def case_stack_class(backend_class: str, kernel: str) -> str:
    """The stack class of one case: the backend's, except a fused rollout of custom kernels ("fused custom")."""
    rk = rollout_kernel(kernel)
    if rk is not None and rk.path == "fused" and backend_class == "custom kernels":
        return "fused custom"
    return backend_class


# ---- knobs ------------------------------------------------------------------------------------
def knobs(kernel: str, b: Backend, steps: int = ROLLOUT_T) -> dict[str, tuple[Any, ...]]:
    """The knobs this backend instance has for ``kernel`` (declared in KNOBS, present as attributes).

    ``steps`` is a rollout's T: ``steps_per_launch`` takes the declared values up to T, and T.
    """
    out = {}
    for k, values in KNOBS.get(family(kernel), {}).items():
        if k == "steps_per_launch":
            out[k] = tuple(sorted({v for v in values if v <= steps} | {steps}))
        elif hasattr(b, k):
            out[k] = values
    return out


def resolved_config(kernel: str, b: Backend, config: dict[str, Any] | None = None,
                    steps: int = ROLLOUT_T) -> dict[str, tuple[Any, str]]:  # fmt: skip
    """knob -> (value, origin) of the knobs a case runs with.

    Origins: "config" (set by the case's ``config``: a point of a tune search), "T" (a case knob
    left at the rollout's T), and for the backend's own values ``Backend.knob_in_force``:
    "attribute", or where a tuned default came from ("cache", "table <row>", "fallback", with the
    kernel or family entry in parentheses). The values are what runs, never a sentinel.
    """
    config = config or {}
    out: dict[str, tuple[Any, str]] = {}
    for k in knobs(kernel, b, steps):
        if k in config:
            out[k] = (config[k], "config")
        elif k in CASE_KNOBS:
            out[k] = (steps, "T")
        else:
            r = b.knob_in_force(k, kernel)
            out[k] = (r.value, f"{r.source} ({r.entry})" if r.entry else r.source)
    return out


def current_config(kernel: str, b: Backend, config: dict[str, Any] | None = None,
                   steps: int = ROLLOUT_T) -> dict[str, Any]:  # fmt: skip
    """Knob values a case runs with: ``config``'s, else the backend's values in force for ``kernel``
    (a tuned default resolved, not its sentinel), case knobs at T. The default case of a kernel is
    the one without a ``config``: :func:`config_origin` has no "config" in it."""
    return {k: v for k, (v, _) in resolved_config(kernel, b, config, steps).items()}


def config_origin(kernel: str, b: Backend, config: dict[str, Any] | None = None,
                  steps: int = ROLLOUT_T) -> dict[str, str]:  # fmt: skip
    """knob -> where the value :func:`current_config` records came from (see :func:`resolved_config`)."""
    return {k: origin for k, (_, origin) in resolved_config(kernel, b, config, steps).items()}


def all_configs(kernel: str, b: Backend, steps: int = ROLLOUT_T) -> list[dict[str, Any]]:
    space = knobs(kernel, b, steps)
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def config_id(config: dict[str, Any] | None) -> str:
    if not config:
        return "default"
    return ",".join(f"{k}={'auto' if v is None else v}" for k, v in config.items())


@contextmanager
def applied(b: Backend, config: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Set knobs on the (shared, cached) backend instance for one case, and restore them after."""
    config = {k: v for k, v in (config or {}).items() if k not in CASE_KNOBS}
    saved = {k: b.knob_setting(k) for k in config}  # the setting (tuning.TUNED too), not the value it reads as
    try:
        for k, v in config.items():
            setattr(b, k, v)
        yield config
    finally:
        for k, v in saved.items():
            setattr(b, k, v)


# ---- cases ------------------------------------------------------------------------------------
# ---- interleaved timing ----------------------------------------------------------------------
#: What a case's throughput is the time of (recorded per case as ``rate_basis``).
RATE_BASIS = "median of interleaved rounds"
#: Rounds per group, the shortest timed slot (back-to-back synchronised launches of one case) and the
#: most seconds one group's rounds may take (fewer rounds then, never under MIN_ROUNDS): full, quick.
ROUNDS, QUICK_ROUNDS, MIN_ROUNDS = 30, 15, 5
#: Slots of ~10 ms span several scheduler time slices, so one preemption does not decide a round.
SLOT_S, QUICK_SLOT_S = 20e-3, 10e-3
GROUP_BUDGET_S, QUICK_GROUP_BUDGET_S = 10.0, 1.5
MAX_REPS = 100_000


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
    slot(1)
    t = max(slot(1), 1e-9)
    return int(min(MAX_REPS, max(1, math.ceil(slot_s / t))))


def interleave(slots: list[Callable[[int], float]], reps: list[int], rounds: int, budget_s: float = math.inf,
               min_rounds: int = MIN_ROUNDS, seed: int = 0) -> list[list[float]]:  # fmt: skip
    """Time the cases of one group in interleaved rounds; per case, the seconds per launch of each round.

    Every round runs ``reps[j]`` launches of every case j, split into up to CHUNKS runs of
    back-to-back launches that are spread evenly over the round and merged with the other cases'
    (in an order shuffled afresh each round, seeded): a change of the machine's load during a
    round hits every case of the group alike, and round r of one case pairs with round r of every
    other. One untimed round first; then as many rounds as ``budget_s`` allows (estimated from
    that round, and stopping at a round boundary once past the budget), between ``min_rounds`` and
    ``rounds``. The garbage collector is paused while timing.
    """
    if len(slots) != len(reps):
        raise ValueError(f"interleave: {len(slots)} slots but {len(reps)} rep counts")
    if not slots:
        return []
    rng = np.random.default_rng(seed)
    warm = sum(s(r) for s, r in zip(slots, reps))
    n = rounds if warm <= 0 or math.isinf(budget_s) else int(min(rounds, max(min_rounds, budget_s // warm)))
    out: list[list[float]] = [[] for _ in slots]
    gc_was_on = gc.isenabled()
    gc.collect()
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


#: Most runs of back-to-back launches one case is split into per round (see interleave).
CHUNKS = 8


def _plan(reps: list[int], order: Any) -> list[tuple[int, int]]:
    """One round's schedule: (case, launches) runs, each case's runs evenly spaced over the round."""
    runs = []
    for rank, j in enumerate(order):
        c = min(reps[j], CHUNKS)
        base, extra = divmod(reps[j], c)
        runs += [((k + 0.5) / c, rank, j, base + (k < extra)) for k in range(c)]
    return [(j, launches) for _, _, j, launches in sorted(runs)]


def round_summary(seconds: list[float], items: int) -> dict[str, Any]:
    """Per-round throughput of one case: min, median and max items/s over its rounds."""
    rates = sorted(items / s for s in seconds)
    return {"rounds": len(rates), "min": rates[0], "median": float(np.median(rates)), "max": rates[-1]}


@dataclass
class Parity:
    status: str  # "pass" | "fail" | "unsupported"
    max_error: float | None = None
    reason: str = ""


@dataclass
class Prepared:
    run: Callable[[], None]  # one launch, not synchronised
    check: Callable[[], Parity]
    items: int  # env steps, elements or rows per launch
    bytes: int  # compulsory traffic per launch: each array read or written once
    unit: str
    shape: tuple[int, ...] = field(default=())
    info: dict[str, Any] = field(default_factory=dict)  # case facts for extra_info (a rollout's path, T, N...)

    def rates(self, seconds: float, basis: str = RATE_BASIS) -> dict[str, Any]:
        """Throughputs of one launch that took ``seconds``; rollouts add env-steps/s and device-hours per 1e9 steps."""
        return rates(self.items, self.bytes, seconds, rollout=bool(self.info.get("path")), basis=basis)


def rates(items: int, nbytes: int, seconds: float, rollout: bool = False, basis: str = RATE_BASIS) -> dict[str, Any]:
    """items/s and bytes/s of a launch that took ``seconds``; a rollout adds env-steps/s and device-hours per 1e9 steps."""
    out: dict[str, Any] = {"items_per_s": items / seconds, "bytes_per_s": nbytes / seconds, "rate_basis": basis}
    if rollout:
        out["env_steps_per_s"] = out["items_per_s"]
        out["device_hours_per_1e9_steps"] = device_hours_per_billion_steps(out["items_per_s"])
    return out


def _compare(parts: list[tuple[str, np.ndarray, np.ndarray]], rtol: float = RTOL, atol: float = ATOL) -> Parity:
    worst, problems = 0.0, []
    for name, got, want in parts:
        if got.shape != want.shape:
            problems.append(f"{name}: shape {got.shape} != {want.shape}")
        elif want.dtype == np.bool_:
            bad = int(np.count_nonzero(got != want))
            if bad:
                problems.append(f"{name}: {bad} of {want.size} flags differ")
        else:
            g, w = got.astype(np.float64), want.astype(np.float64)
            err = np.abs(g - w)
            worst = max(worst, float(np.nanmax(err)) if err.size else 0.0)
            over = ~(err <= atol + rtol * np.abs(w))  # NaN counts as over
            if over.any():
                problems.append(f"{name}: {int(over.sum())} of {w.size} values off (max abs error {np.nanmax(err):.3g})")
    if problems:
        return Parity("fail", worst, "; ".join(problems))
    return Parity("pass", worst)


def _step_bytes(env_id: str) -> int:
    spec = ENVS[env_id]
    # state read+write, steps read+write, action, obs + final_obs, reward, terminated + truncated
    return 2 * 4 * spec.state_dim + 2 * 4 + 4 + 2 * 4 * spec.obs_dim + 4 + 2


def _host_actions(env_id: str, n: int, rng: np.random.Generator) -> np.ndarray:
    spec = ENVS[env_id]
    if spec.is_discrete:
        return rng.integers(0, spec.discrete_actions, n).astype(np.int32)
    return rng.uniform(-spec.action_high, spec.action_high, n).astype(np.float32)


def _prepare_step(b: Backend, env_id: str, n: int) -> Prepared:
    spec = ENVS[env_id]
    env = make(env_id, n, backend=b, seed=SEED)
    rng = np.random.default_rng(SEED)
    acts = [_host_actions(env_id, n, rng) for _ in range(PARITY_STEPS)]
    dev_acts = b.from_host(acts[0])
    env.reset()
    # Timed: the backend's step kernel itself. VectorEnv.step also range-checks device actions
    # (a reduction and a host read per call), which is API overhead, not the kernel.
    bufs, params = env._bufs, env._param_vector

    def run() -> None:
        b.env_step(spec, bufs, dev_acts, params, env.seed, spec.max_episode_steps, env.autoreset)

    def check() -> Parity:
        ref = make(env_id, n, backend="numpy", seed=SEED)
        # Both envs return their own buffers, reused by the next call: copy before stepping on.
        parts = [("reset obs", b.to_host(env.reset(seed=SEED)), ref.reset().copy())]
        for t, a in enumerate(acts):
            got, want = env.step(b.from_host(a)), ref.step(a)
            for name, g, w in zip(("obs", "reward", "terminated", "truncated"), got, want):
                parts.append((f"step {t} {name}", b.to_host(g), w.copy()))
            parts.append((f"step {t} final_obs", b.to_host(env.final_obs), ref.final_obs.copy()))
        return _compare(parts)

    return Prepared(run, check, n, n * _step_bytes(env_id), "steps", (n,))


def _buffer_case(kernel: str, size: int, rng: np.random.Generator):
    """Host inputs, output (shape, dtype)s, the contract call, and the compulsory bytes of one buffer op."""
    f32 = np.float32
    if kernel == "gather":
        m = size
        x = rng.standard_normal((m, GATHER_FEATURES)).astype(f32)
        idx = rng.permutation(m).astype(np.int32)  # one epoch of minibatches: every row once
        return [x, idx], [((m, GATHER_FEATURES), f32)], lambda b, i, o: b.gather(i[0], i[1], o[0]), m * (
            4 + 2 * 4 * GATHER_FEATURES
        ), (m, GATHER_FEATURES)
    t, n = BUFFER_T, max(1, size // BUFFER_T)
    shape = (t, n)

    def flags(p: float) -> np.ndarray:
        return rng.random(shape) < p

    if kernel == "gae":
        ins = [rng.standard_normal(shape).astype(f32) for _ in range(3)] + [flags(0.02), flags(0.01)]
        call = lambda b, i, o: b.gae(*i, o[0], o[1], GAMMA, LAM)  # noqa: E731
        return ins, [(shape, f32)] * 2, call, t * n * 22, shape
    if kernel == "discounted_returns":
        ins = [rng.standard_normal(shape).astype(f32), flags(0.02), flags(0.01), rng.standard_normal(n).astype(f32)]
        call = lambda b, i, o: b.discounted_returns(*i, o[0], GAMMA)  # noqa: E731
        return ins, [(shape, f32)], call, t * n * 10 + 4 * n, shape
    if kernel == "normalize":
        ins = [(3.0 * rng.standard_normal(shape) + 1.5).astype(f32)]
        return ins, [(shape, f32)], lambda b, i, o: b.normalize(i[0], o[0], EPS), t * n * 8, shape
    raise ValueError(f"kernel: unknown kernel {kernel!r}; valid: {', '.join(KERNELS)}")


def _prepare_buffer(b: Backend, kernel: str, size: int) -> Prepared:
    ins, outs, call, nbytes, shape = _buffer_case(kernel, size, np.random.default_rng(SEED))
    dev_ins = [b.from_host(a) for a in ins]
    dev_outs = [b.zeros(s, np.dtype(d)) for s, d in outs]
    ref = get_backend("numpy")

    def run() -> None:
        call(b, dev_ins, dev_outs)

    def check() -> Parity:
        run()
        want = [np.zeros(s, d) for s, d in outs]
        call(ref, ins, want)
        return _compare([(f"out{j}", b.to_host(g), w) for j, (g, w) in enumerate(zip(dev_outs, want))])

    items = int(np.prod(shape[:1])) if kernel == "gather" else int(np.prod(shape))
    return Prepared(run, check, items, nbytes, "rows" if kernel == "gather" else "elements", shape)


# ---- rollouts: the three data paths ------------------------------------------------------------
FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")
_HOST_REFS: OrderedDict[tuple[Any, ...], dict[str, np.ndarray]] = OrderedDict()
_HOST_REFS_KEPT = 4  # device and fused cases of one (env, policy, N) share the host path's buffer


def _policy(name: str, env_id: str) -> Policy:
    return MLPPolicy.init(ENVS[env_id], hidden=MLP_HIDDEN, seed=SEED) if name == "mlp" else RandomPolicy()


def _host_copy(b: Backend, buf: RolloutBuffer) -> dict[str, np.ndarray]:
    return {f: np.array(a) if isinstance(a := getattr(buf, f), np.ndarray) else b.to_host(a) for f in FIELDS}


def _seeded_rollout(b: Backend | str, rk: RolloutKernel, n: int, steps: int, path: str,
                    spl: int | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    env = make(rk.env, n, backend=b, seed=SEED)
    env.reset()
    buf = env.rollout(steps, _policy(rk.policy, rk.env), path=path, steps_per_launch=spl)
    return _host_copy(env.backend, buf)


def _host_reference(b: Backend, rk: RolloutKernel, n: int, steps: int) -> dict[str, np.ndarray]:
    """The host path's buffer on ``b`` from a seeded reset, kept for the other paths of the same case."""
    key = (b.name, b.device_name, rk.env, rk.policy, n, steps, config_id(current_config(f"step:{rk.env}", b)))
    if key not in _HOST_REFS:
        _HOST_REFS[key] = _seeded_rollout(b, rk, n, steps, "host")
        while len(_HOST_REFS) > _HOST_REFS_KEPT:
            _HOST_REFS.popitem(last=False)
    _HOST_REFS.move_to_end(key)
    return _HOST_REFS[key]


def _compare_paths(got: dict[str, np.ndarray], want: dict[str, np.ndarray], discrete: bool, exact: bool,
                   drift: bool = False) -> Parity:  # fmt: skip
    """A rollout buffer against the host path's on the same device.

    ``exact`` (random policy): every field bit for bit. Otherwise (MLP: the host path runs the policy in
    NumPy, the kernel in-device, so tanh/exp may differ by an ulp): floats to RTOL/ATOL, flags exactly,
    and a discrete action that flips where the sampling threshold falls within rounding of a softmax
    boundary ends the comparison of that env (its trajectory legitimately diverges from there); at most
    MLP_FLIP_SHARE of the envs may flip. ``drift`` (a backend whose paths agree to rounding only): floats at
    RTOL/ATOL for the first PARITY_STEPS steps, then within DRIFT_RTOL/DRIFT_ATOL; flags exactly throughout.
    """
    if exact:
        problems = [f"{f}: {int(np.count_nonzero(got[f] != want[f]))} of {want[f].size} values differ"
                    for f in FIELDS if got[f].shape != want[f].shape or not np.array_equal(got[f], want[f])]  # fmt: skip
        worst = max((float(np.nanmax(np.abs(got[f].astype(np.float64) - want[f].astype(np.float64))))
                     for f in FIELDS if got[f].shape == want[f].shape and got[f].size), default=0.0)  # fmt: skip
        return Parity("fail", worst, "; ".join(problems)) if problems else Parity("pass", worst)
    steps, n = want["rewards"].shape
    if discrete:
        flipped = got["actions"] != want["actions"]  # [T, N]
        first = np.where(flipped.any(axis=0), flipped.argmax(axis=0), steps)  # first flipped step per env
    else:
        first = np.full(n, steps)
    t = np.arange(steps)[:, None]
    before, upto = t < first, t <= first  # the obs acted on at the flip must still agree
    parts, later = [], []
    for f in FIELDS:
        mask = upto if f == "obs" else before
        if drift and got[f].dtype != np.bool_:
            early = mask & (t < PARITY_STEPS).reshape((steps,) + (1,) * (mask.ndim - 1))
            parts.append((f, got[f][early], want[f][early]))
            later.append((f"{f} after step {PARITY_STEPS}", got[f][mask & ~early], want[f][mask & ~early]))
        else:
            parts.append((f, got[f][mask], want[f][mask]))
    parity = _compare(parts)
    if later:
        drifted = _compare(later, DRIFT_RTOL, DRIFT_ATOL)
        parity = Parity("fail" if "fail" in (parity.status, drifted.status) else "pass",
                        max(parity.max_error or 0.0, drifted.max_error or 0.0),
                        "; ".join(x for x in (parity.reason, drifted.reason) if x))  # fmt: skip
    share = float(np.mean(first < steps))
    if share > MLP_FLIP_SHARE:
        reason = f"discrete actions flip in {share:.2%} of the envs (more than rounding explains)"
        return Parity("fail", parity.max_error, "; ".join(x for x in (parity.reason, reason) if x))
    if share and parity.status == "pass":
        parity.reason = f"{int(np.sum(first < steps))} of {n} envs flip an action within rounding, compared up to it"
    return parity



def _rollout_bytes(env_id: str) -> int:
    """Compulsory bytes per env step: the buffer written once (obs, final obs, action, reward, two flags)."""
    spec = ENVS[env_id]
    return 2 * 4 * spec.obs_dim + 4 + 4 + 2


def _prepare_rollout(b: Backend, kernel: str, n: int, steps: int, config: dict[str, Any] | None) -> Prepared:
    rk = rollout_kernel(kernel)
    assert rk is not None
    spl = (config or {}).get("steps_per_launch") if rk.path == "fused" else None
    spl = {"fused": steps if spl is None else int(spl), "device": 1, "host": None}[rk.path]
    if spl is not None and not 1 <= spl <= steps:
        raise ValueError(f"steps_per_launch: expected an int in [1, {steps}], got {spl}")
    env = make(rk.env, n, backend=b, seed=SEED)
    policy = _policy(rk.policy, rk.env)
    buf = env.rollout_buffer(steps, host=rk.path == "host")  # preallocated: the timing is the rollout only
    env.reset()

    def run() -> None:  # continues from wherever the previous rollout left the envs (autoreset)
        env.rollout(steps, policy, buf, path=rk.path, steps_per_launch=spl)

    def check() -> Parity:
        if rk.path == "host":
            # The host loop against the NumPy reference from a seeded reset, for as long as float
            # rounding cannot move a trajectory across a threshold (the step kernels' parity rule).
            short = min(PARITY_STEPS, steps)
            got, want = (_seeded_rollout(x, rk, n, short, "host") for x in (b, "numpy"))
            return _compare([(f, got[f], want[f]) for f in FIELDS])
        env.reset(seed=SEED)
        run()
        got = _host_copy(b, buf)
        return _compare_paths(got, _host_reference(b, rk, n, steps), ENVS[rk.env].is_discrete,
                              exact=rk.policy == "random" and b.exact_paths, drift=not b.exact_paths)  # fmt: skip

    info = {"env": rk.env, "path": rk.path, "policy": rk.policy, "T": steps, "N": n, "steps_per_launch": spl}
    return Prepared(run, check, n * steps, n * steps * _rollout_bytes(rk.env), "env steps", (steps, n), info)


def prepare(b: Backend, kernel: str, size: int, config: dict[str, Any] | None = None,
            steps: int = ROLLOUT_T) -> Prepared:  # fmt: skip
    """Inputs made and uploaded beforehand; ``run`` is one launch of the kernel under test.

    ``config``'s case knobs (``steps_per_launch``) and ``steps`` (a rollout's T) concern rollouts only.
    """
    if kernel.startswith("step:"):
        return _prepare_step(b, kernel.split(":", 1)[1], size)
    if kernel.startswith("rollout:"):
        return _prepare_rollout(b, kernel, size, steps, config)
    if kernel == "copy":
        return prepare_copy(b, size)
    return _prepare_buffer(b, kernel, size)


def device_copy(dst: Any, src: Any) -> None:
    """Device-to-device copy of a native array (the contract has none; dispatch on the array's API)."""
    if hasattr(dst, "copy_to_device"):  # Numba DeviceNDArray: copy_to_device of a device array stays on it
        dst.copy_to_device(src)
    elif hasattr(dst, "queue") and hasattr(dst, "base_data"):  # pyopencl: an explicit buffer copy
        import pyopencl as cl

        cl.enqueue_copy(dst.queue, dst.base_data, src.base_data, byte_count=src.nbytes,
                        src_offset=src.offset, dst_offset=dst.offset)  # fmt: skip
    else:  # NumPy, CuPy
        dst[...] = src


def prepare_copy(b: Backend, nbytes: int) -> Prepared:
    n = nbytes // 4
    src, dst = b.from_host(np.arange(n, dtype=np.float32)), b.zeros((n,), np.dtype(np.float32))

    def check() -> Parity:
        device_copy(dst, src)
        return _compare([("copy", b.to_host(dst), np.arange(n, dtype=np.float32))])

    return Prepared(lambda: device_copy(dst, src), check, n, 2 * n * 4, "bytes", (n,))


def copy_bandwidth(b: Backend, nbytes: int = 64 << 20, reps: int = 3) -> float:
    """A quick copy-bandwidth estimate (read + write bytes/s, best of ``reps``) for sizing the full ladder."""
    case = prepare_copy(b, nbytes)
    case.run()
    b.synchronize()
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        case.run()
        b.synchronize()
        best = min(best, time.perf_counter() - t0)
    return case.bytes / best


def _pow2_floor(x: float) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(1.0, x)))))


def full_sizes(bandwidth: float) -> dict[str, tuple[int, ...]]:
    """A ladder per family whose largest launch moves about 4 ms of the device's copy bandwidth."""
    budget = bandwidth * 4e-3
    step = min(max(_pow2_floor(budget / 82), 1 << 16), 1 << 24)
    buf = min(max(_pow2_floor(budget / 22), 1 << 18), 1 << 27)
    copy = min(max(_pow2_floor(bandwidth * 2e-3 / 2), 64 << 20), 1 << 30)
    # Rollouts run T = 128 steps per case and keep a [T, N] buffer, twice for the host path (device
    # and host): N is capped so the host path's round trips stay within seconds per rollout.
    roll = min(max(step >> 4, 1 << 12), 1 << 16)
    mlp = min(roll, 1 << 12)  # the host path's NumPy MLP: about 1 us per env step on one core
    return {"step": (step >> 8, step >> 4, step), "buffer": (buf >> 8, buf >> 4, buf), "copy": (copy,),
            "rollout": (roll >> 4, roll), "rollout-mlp": (mlp >> 4, mlp)}  # fmt: skip


def code_fingerprint() -> dict[str, str]:
    """Short hashes of the code a run measured: every backend module, the kernel sources, the rest of
    the package. Two runs compared with different fingerprints measured different code (a backend
    edited in between), and the comparison says so."""
    import hashlib

    from .._kernels import kernel_dir

    pkg = Path(__file__).resolve().parent.parent

    def digest(paths: list[Path]) -> str:
        h = hashlib.sha256()
        for f in sorted(paths):
            h.update(str(f.relative_to(f.parents[1])).encode())
            h.update(f.read_bytes())
        return h.hexdigest()[:12]

    out = {f"backend:{f.stem}": digest([f]) for f in sorted((pkg / "backends").glob("*.py"))
           if not f.stem.startswith("_") and f.stem not in ("base", "registry")}  # fmt: skip
    kernels = []
    for api in ("opencl", "cuda"):
        try:
            kernels += [f for f in kernel_dir(api).glob("*") if f.is_file()]
        except FileNotFoundError:  # a wheel without one API's sources: nothing of it to fingerprint
            pass
    out["kernels"] = digest(kernels)
    out["backends (shared)"] = digest([f for f in (pkg / "backends").rglob("*.py")
                                       if f.stem.startswith("_") or f.stem in ("base", "registry")])  # fmt: skip
    # Reporting code (everything in portability/ but this module) changes no measurement.
    out["portkern (rest)"] = digest([f for f in pkg.rglob("*.py") if "backends" not in f.parts
                                     and ("portability" not in f.parts or f.name == "suite.py")])  # fmt: skip
    conftest = pkg.parent / "bench" / "conftest.py"
    if conftest.is_file():
        out["bench suite"] = digest([conftest])
    return out


_CODE_AT_START: dict[str, str] = {}


def run_info() -> dict[str, Any]:
    """Schema, version, and the code fingerprint taken the first time this is asked (the start of a run)."""
    if not _CODE_AT_START:
        _CODE_AT_START.update(code_fingerprint())
    return {"schema": SCHEMA, "portkern": __version__, "code": dict(_CODE_AT_START)}
