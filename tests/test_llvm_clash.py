"""Issue 48: an LLVM already in the process (Mesa's, after a window was opened) must never let an OpenCL driver
probe abort Python. Every scenario runs in a subprocess: on code without the guard it dies with SIGABRT
("LLVM ERROR: inconsistency in registered CommandLine options"), which must fail the test, not pytest.

How the LLVM gets in, without an X server: Mesa's EGL on its surfaceless platform (eglInitialize opens
swrast_dri.so with RTLD_GLOBAL, and with it Debian's libLLVM-15.so.1), pygame's display under SDL's
offscreen driver (SDL initialises EGL the same way), or the library itself loaded with RTLD_GLOBAL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portkern.backends import _opencl_drivers as drivers

_REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF, Mesa and /proc: Linux only")

# Loads an LLVM into the global symbol scope the way named in argv[1], says which, then runs the body.
_PRELUDE = r"""
import ctypes, glob, os, sys
how = sys.argv[1]
if how == "egl":
    os.environ["EGL_PLATFORM"] = "surfaceless"
    egl = ctypes.CDLL("libEGL.so.1")
    egl.eglGetDisplay.restype = ctypes.c_void_p
    egl.eglGetDisplay.argtypes = [ctypes.c_void_p]
    egl.eglInitialize.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    assert egl.eglInitialize(egl.eglGetDisplay(None), None, None), "eglInitialize failed"
elif how == "pygame":
    import pygame
    pygame.display.init()
    pygame.display.set_mode((32, 32))
elif how.startswith("dlopen"):
    libs = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libLLVM-1*.so.1") + glob.glob("/usr/lib64/libLLVM-1*.so"))
    ctypes.CDLL(libs[-1], mode=ctypes.RTLD_LOCAL if how == "dlopen-local" else ctypes.RTLD_GLOBAL)
from portkern.backends import _opencl_drivers
print("GLOBAL_LLVM", _opencl_drivers.global_llvm(), flush=True)
"""

_ISSUE_SNIPPET = r"""
import gymnasium as gym, portkern
from portkern import step
g = gym.make("CartPole-v1", render_mode="human"); g.reset(); g.render()
env = step.make("CartPole-v1", 8, backend="opencl", device="intel")
env.reset(seed=1)
print("MADE", env.backend.device_name, flush=True)
"""

_MAKE_AND_STEP = r"""
import numpy as np, warnings
from portkern import step
from portkern.backends.opencl import device_ids
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    env = step.make("CartPole-v1", 8, backend="opencl", device=sys.argv[2])
env.reset(seed=3)
obs, *_ = env.step(np.zeros(8, np.int32))
print("MADE", env.backend.device_name, flush=True)
print("IDS", sorted(device_ids(include_simulators=True)), flush=True)
for w in caught:
    print("WARNING", w.category.__name__, str(w.message).replace("\n", " "), flush=True)
try:
    step.make("CartPole-v1", 8, backend="opencl", device="oclgrind")
    print("OCLGRIND made", flush=True)
except RuntimeError as exc:
    print("OCLGRIND RuntimeError", str(exc).replace("\n", " "), flush=True)
"""


#: What CI installs for these tests (Debian): Mesa's EGL and its software DRI driver, which needs libLLVM-15.
APT_LINE = "apt-get install -y --no-install-recommends libegl1 libegl-mesa0 libgl1-mesa-dri"
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64")


def _require_mesa() -> None:
    """Fail (not skip) where Mesa's EGL, its DRI driver or an LLVM library is missing: without them these tests
    could not put an LLVM into the process, and would pass without proving anything."""
    missing = [name for name, pattern in (("libEGL.so.1", "libEGL.so.1"), ("Mesa's EGL", "libEGL_mesa.so.0"),
                                          ("Mesa's DRI driver", "dri/swrast_dri.so"), ("libLLVM", "libLLVM-1*.so.1"))
               if not any(Path(d).glob(pattern) for d in _LIB_DIRS)]  # fmt: skip
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: these tests load Mesa's LLVM into a process; install them ({APT_LINE})")


def _run(code: str, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "SDL_VIDEODRIVER": "offscreen", "SDL_AUDIODRIVER": "dummy", **(extra_env or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
    env.pop("PORTKERN_DEVICE", None)
    return subprocess.run([sys.executable, "-c", _PRELUDE + code, *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False, cwd=str(_REPO))  # fmt: skip


def _lines(out: str, tag: str) -> list[str]:
    return [line[len(tag) + 1:] for line in out.splitlines() if line.startswith(tag + " ")]


def _oclgrind_installed() -> bool:
    return any(drivers.driver_name(icd, lib) == "oclgrind" and lib is not None for icd, _, lib in _loader_drivers())


def _loader_drivers():
    import pyopencl  # noqa: F401  (sets PYOPENCL_HOME, where the bundled loader finds PoCL and Oclgrind)

    return drivers.loader_drivers()


def _check_survived(proc: subprocess.CompletedProcess, how: str) -> str:
    """The subprocess exited 0 with an LLVM in the global scope (else the scenario proved nothing)."""
    out = proc.stdout
    assert proc.returncode == 0, (
        f"the process died ({proc.returncode}) making an OpenCL env after loading an LLVM via {how}:\n"
        f"{out[-3000:]}\n{proc.stderr[-3000:]}"
    )
    owner = _lines(out, "GLOBAL_LLVM")
    assert owner and owner[0] != "None", f"{how} put no LLVM into the global scope here:\n{out}\n{proc.stderr[-2000:]}"
    assert "LLVM ERROR" not in proc.stderr
    return out


@pytest.mark.parametrize("how", ["egl", "dlopen-global"])
def test_an_opencl_env_after_mesas_llvm_is_made_and_the_clashing_driver_left_out(how):
    _require_mesa()
    proc = _run(_MAKE_AND_STEP, how, "pocl")
    out = _check_survived(proc, how)
    assert _lines(out, "MADE") == ["Portable Computing Language: " + _lines(out, "MADE")[0].split(": ", 1)[1]], out
    assert "pocl" in _lines(out, "IDS")[0]
    if _oclgrind_installed():
        assert "oclgrind" not in _lines(out, "IDS")[0], out
        warnings = [w for w in _lines(out, "WARNING") if "oclgrind OpenCL driver is left out" in w]
        assert len(warnings) == 1, out
        assert warnings[0].startswith("RuntimeWarning") and "libLLVM" in warnings[0] and "before opening a window" in warnings[0]
        refused = _lines(out, "OCLGRIND")
        assert refused and refused[0].startswith("RuntimeError") and "left out of this process" in refused[0], out
        assert "libLLVM" in refused[0] and "before opening a window" in refused[0]


def test_the_issue_snippet_gymnasium_human_render_then_an_intel_env():
    pytest.importorskip("gymnasium")
    pytest.importorskip("pygame")
    from portkern.backends.opencl import device_ids

    if "intel" not in device_ids():
        pytest.skip("Intel's CPU runtime is not listed here (test_opencl_drivers says whether it should be)")
    _require_mesa()
    proc = _run(_ISSUE_SNIPPET, "none")
    assert proc.returncode == 0, f"died ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert _lines(proc.stdout, "MADE") and _lines(proc.stdout, "MADE")[0].startswith("Intel(R) OpenCL"), proc.stdout
    assert "LLVM ERROR" not in proc.stderr
    if _oclgrind_installed():  # pygame's window did load Mesa's LLVM: the clash was real and was avoided
        assert "oclgrind OpenCL driver is left out" in proc.stderr, proc.stderr[-3000:]


def test_pygame_display_then_portkern_devices_lists_the_other_drivers():
    pytest.importorskip("pygame")
    _require_mesa()
    code = "from portkern.backends import probe\np = probe('opencl')\nprint('PROBE', p.available, '|'.join(p.devices))\n"
    proc = _run(code, "pygame")
    out = _check_survived(proc, "pygame")
    available, devices = _lines(out, "PROBE")[0].split(" ", 1)
    assert available == "True" and "Portable Computing Language" in devices, out
    if _oclgrind_installed():
        assert "Oclgrind" not in devices, out


def test_an_llvm_loaded_locally_clashes_with_nothing_and_nothing_is_left_out():
    code = (
        "from portkern.backends.opencl import device_ids\n"
        "print('IDS', sorted(device_ids(include_simulators=True)), flush=True)\n"
        "print('LEFT', sorted(_opencl_drivers.left_out()), flush=True)\n"
    )
    _require_mesa()
    proc = _run(code, "dlopen-local")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _lines(proc.stdout, "GLOBAL_LLVM") == ["None"], proc.stdout
    assert _lines(proc.stdout, "LEFT") == ["[]"]
    if _oclgrind_installed():
        assert "oclgrind" in _lines(proc.stdout, "IDS")[0]


def test_the_reverse_order_keeps_every_driver():
    # OpenCL first, then the window: the driver's LLVM is loaded first and keeps its own registry.
    code = (
        "from portkern.backends.opencl import device_ids\n"
        "ids = sorted(device_ids(include_simulators=True))\n"
        "import pygame\npygame.display.init()\npygame.display.set_mode((32, 32))\n"
        "print('GLOBAL_AFTER', _opencl_drivers.global_llvm(), flush=True)\n"
        "print('IDS', ids, flush=True)\n"
    )
    pytest.importorskip("pygame")
    proc = _run(code, "none")
    assert proc.returncode == 0, proc.stderr[-3000:]
    if _oclgrind_installed():
        assert "oclgrind" in _lines(proc.stdout, "IDS")[0], proc.stdout


def test_the_elf_check_names_the_driver_whose_llvm_is_exported():
    found = {drivers.driver_name(icd, lib): drivers.clashing_library(lib) for icd, _, lib in _loader_drivers() if lib}
    assert found, "the ICD loader would open no driver here"
    for name, hit in found.items():
        if name == "oclgrind":  # LLVM 14 statically linked into liboclgrind, every symbol exported unversioned
            assert hit is not None and "liboclgrind" in hit.name, found
        elif name in ("pocl", "intel"):  # both hide their LLVM
            assert hit is None, found
    system_llvm = sorted(Path("/usr/lib/x86_64-linux-gnu").glob("libLLVM-1*.so.1"))
    if system_llvm:  # Debian versions its LLVM's symbols (@@LLVM_15): a library linking it binds to its own
        assert drivers.clashing_library(system_llvm[0]) is None
    assert drivers.clashing_library(Path(sys.executable)) is None
