"""The identity of the device behind a backend: the keys bench runs and training runs group and compare by.

A target is one backend on one device as the registry lists it. :func:`device_info` names the hardware, the
driver layer over it (an OpenCL platform) and the machine the same way for ``portkern bench`` and ``portkern
train``, so a report can put a training run beside the kernels measured on its device.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from typing import Any

from .backends import Backend, backends, get_backend, probe

#: Device names of OpenCL platforms that interpret kernels (they pass parity but are not timed).
SIMULATOR_MARKERS = ("oclgrind", "simulator")


@dataclass(frozen=True)
class BenchClass:
    """How the benchmark classifies a backend: benchmark facts, not part of the backend contract.

    * ``stack_class``: where the backend stands on the spectrum of how deep a stack's kernels go
      (docs/ARCHITECTURE.md, "stack class"): "framework eager", "framework compiled" or "custom kernels".
      Fused rollouts of a custom-kernel backend are "fused custom" (the suite says so per case).
    * ``timed``: False for a correctness harness (cuda_host): it runs the parity suite, never a timed target.
    * ``exact_paths``: whether every data path (fused, device, host) runs the same arithmetic, so a
      random-policy rollout is bit-identical across them; False where each path is a separately
      compiled graph (torch.compile fuses each path's ops differently).
    """

    stack_class: str = "custom kernels"
    timed: bool = True
    exact_paths: bool = True


#: The benchmark's class of each backend it knows; any other (a new kernel backend) is a timed
#: custom-kernel backend with exact paths until it is listed here.
BENCH_CLASSES: dict[str, BenchClass] = {
    "numpy": BenchClass("framework eager"),  # NumPy: the CPU framework, one array op at a time
    "torch": BenchClass("framework eager"),
    # The fused rollout and the single step are different graphs, which Inductor may vectorise
    # differently (e.g. sin/cos): they agree to float rounding (2.4e-7 seen on CartPole), not bitwise.
    "torch_compile": BenchClass("framework compiled", exact_paths=False),
    # XLA compiles the single step and the rollout scan as separate programs from the same ops, and may
    # contract multiply-adds into FMAs differently in each on a CPU that has them: they agree bitwise only
    # without FMA (the tests cap XLA:CPU at AVX), to rounding otherwise (the bench's quick run on a Zen 4:
    # MountainCar's fused and host paths differ in 11 % of obs values bitwise, all within the drift bound).
    "jax": BenchClass("framework compiled", exact_paths=False),
    "cuda_host": BenchClass(timed=False),
}


def bench_class(backend: str) -> BenchClass:
    """The benchmark's class of the backend named ``backend`` (:data:`BENCH_CLASSES`)."""
    return BENCH_CLASSES.get(backend, BenchClass())


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


def device_matches(backend: str, label: str, want: str) -> bool:
    """Whether ``--device want`` picks ``backend``'s device ``label``: an OpenCL implementation's short id
    ("pocl", "intel", "nvidia") names that OpenCL platform only, as ``device=`` does (PoCL's
    "pthread-Intel(R) Xeon" is not Intel's runtime); anything else is a case-insensitive substring."""
    from .backends._opencl_devices import known_platform_ids, platform_id  # imports pyopencl: when asked

    w = want.strip().lower()
    if backend == "opencl" and w in known_platform_ids():
        return ": " in label and platform_id(label.split(": ", 1)[0]) == w
    return bool(w) and w in label.lower()


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
            if device_filter and not device_matches(rec.name, dev, device_filter):
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
      its name; a simulator or a correctness harness (``bench_class(...).timed`` False) is "simulator":
      parity only.
    * ``hardware_key`` names the physical device: ``<machine>/cpu`` for the host processor (every CPU
      backend of one machine runs on it), ``<machine>/<device name>`` otherwise.
    * ``device_key`` is the hardware plus the driver layer (an OpenCL platform): one CPU under PoCL
      and under Intel's runtime is two devices ("same hardware, different driver"). Without a driver
      layer it is the hardware key, and the report compares such backends on every driver-device of
      that hardware.
    """
    cls = bench_class(t.backend)
    desc = {k: str(v) for k, v in b.describe().items()}
    name = _tail(b.device_name)
    timed = cls.timed
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
        "stack_class": cls.stack_class, "versions": versions,
    }  # fmt: skip
