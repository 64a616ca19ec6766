"""Benchmark cases: targets (backend x device), kernels, sizes, parity against the reference, knobs and the copy ceiling."""

from __future__ import annotations

import itertools
import math
import os
import platform
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from .. import __version__
from ..backends import Backend, backends, get_backend, probe
from ..envs import ENVS
from ..step import make

SCHEMA = "portkern-bench/1"
KERNELS: tuple[str, ...] = tuple(f"step:{e}" for e in ENVS) + ("gae", "discounted_returns", "normalize", "gather")
SEED = 0
PARITY_STEPS = 3  # from a seeded reset: far from every termination threshold, so flags are exact
BUFFER_T = 128  # rollout length of the [T, N] buffer cases; their size is T*N elements
GATHER_FEATURES = 4  # row length of the gathered [M, F] array (CartPole's observation)
GAMMA, LAM, EPS = 0.99, 0.95, 1e-8
RTOL, ATOL = 1e-4, 1e-5  # float32 parity: libm ulp differences and reduction order, nothing more
#: Device names of OpenCL platforms that interpret kernels (they pass parity but are not timed).
SIMULATOR_MARKERS = ("oclgrind", "simulator")

#: Tuning knobs: kernel family -> backend attribute -> legal values (the first is not special).
#: A backend without the attribute has no such knob; None means "the driver chooses".
KNOBS: dict[str, dict[str, tuple[Any, ...]]] = {
    "step": {"local_size": (None, 32, 64, 128, 256), "block_size": (64, 128, 256, 512, 1024)},
    "gae": {"local_size": (None, 32, 64, 128, 256), "block_size": (64, 128, 256, 512, 1024)},
    "discounted_returns": {"local_size": (None, 32, 64, 128, 256), "block_size": (64, 128, 256, 512, 1024)},
    "gather": {"local_size": (None, 64, 128, 256), "block_size": (128, 256, 512)},
    # The reduction's work-group must be a power of two (PK_WG); the apply pass uses local_size.
    "normalize": {"reduce_wg": (64, 128, 256), "local_size": (None, 128), "block_size": (128, 256, 512)},
}

#: Sizes (items) per kernel family and mode; "full" is replaced by a ladder scaled to the device.
QUICK_SIZES = {"step": (1024, 16384), "buffer": (8192, 65536), "copy": (32 << 20,)}
SIM_SIZES = {"step": (64,), "buffer": (1024,)}


def family(kernel: str) -> str:
    return "step" if kernel.startswith("step:") else kernel


def size_family(kernel: str) -> str:
    return "step" if kernel.startswith("step:") else "copy" if kernel == "copy" else "buffer"


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


def device_info(b: Backend, t: Target, machine: str) -> dict[str, Any]:
    """Identity of the physical device behind a backend: the key reports group and compare by."""
    desc = {k: str(v) for k, v in b.describe().items()}
    name = _tail(b.device_name)
    is_cpu = t.backend == "numpy" or bool(re.search(r"\bcpu\b|pthread|cpu-", name.lower()))
    kind = "simulator" if t.simulator else "cpu" if is_cpu else "gpu"
    if kind == "cpu":  # every CPU backend of one machine runs on the same host processor
        key, label, vendor = f"{machine}/cpu", cpu_model(), canonical_vendor(cpu_model())
    else:
        key, label = f"{machine}/{slug(name, 6)}", name
        vendor = canonical_vendor(desc.get("vendor", "") or ("NVIDIA" if t.backend in ("cupy", "numba") else ""))
    versions = dict(probe(t.backend).versions)
    versions.update({k: v for k, v in desc.items() if k not in ("backend", "device", "vendor", "driver")})
    return {
        "backend": t.backend, "device": b.device_name, "device_key": key, "device_label": label,
        "kind": kind, "vendor": vendor, "driver": desc.get("driver", ""), "machine": machine,
        "versions": versions,
    }  # fmt: skip


# ---- knobs ------------------------------------------------------------------------------------
def knobs(kernel: str, b: Backend) -> dict[str, tuple[Any, ...]]:
    """The knobs this backend instance has for ``kernel`` (declared in KNOBS, present as attributes)."""
    return {k: v for k, v in KNOBS.get(family(kernel), {}).items() if hasattr(b, k)}


def current_config(kernel: str, b: Backend) -> dict[str, Any]:
    return {k: getattr(b, k) for k in knobs(kernel, b)}


def all_configs(kernel: str, b: Backend) -> list[dict[str, Any]]:
    space = knobs(kernel, b)
    return [dict(zip(space, values)) for values in itertools.product(*space.values())]


def config_id(config: dict[str, Any] | None) -> str:
    if not config:
        return "default"
    return ",".join(f"{k}={'auto' if v is None else v}" for k, v in config.items())


@contextmanager
def applied(b: Backend, config: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Set knobs on the (shared, cached) backend instance for one case, and restore them after."""
    config = config or {}
    saved = {k: getattr(b, k) for k in config}
    try:
        for k, v in config.items():
            setattr(b, k, v)
        yield config
    finally:
        for k, v in saved.items():
            setattr(b, k, v)


# ---- cases ------------------------------------------------------------------------------------
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


def _compare(parts: list[tuple[str, np.ndarray, np.ndarray]]) -> Parity:
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
            over = ~(err <= ATOL + RTOL * np.abs(w))  # NaN counts as over
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


def prepare(b: Backend, kernel: str, size: int) -> Prepared:
    """Inputs made and uploaded beforehand; ``run`` is one launch of the kernel under test."""
    if kernel.startswith("step:"):
        return _prepare_step(b, kernel.split(":", 1)[1], size)
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
    return {"step": (step >> 8, step >> 4, step), "buffer": (buf >> 8, buf >> 4, buf), "copy": (copy,)}


def run_info() -> dict[str, Any]:
    return {"schema": SCHEMA, "portkern": __version__}
