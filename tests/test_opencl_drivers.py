"""PyPI OpenCL drivers are registered with the ICD loader without hiding any system driver."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from portkern.backends import _opencl_drivers as drivers
from portkern.backends import probe

#: OpenCL implementations the test extra installs here: CI fails, never skips, without one. Intel's
#: CPU runtime has PyPI wheels for Linux x86-64 only. PORTKERN_REQUIRE_OPENCL overrides ("" for none).
REQUIRED_OPENCL = tuple(
    n.strip() for n in os.environ.get(
        "PORTKERN_REQUIRE_OPENCL",
        "pocl,intel" if sys.platform == "linux" and platform.machine() == "x86_64" else "pocl",
    ).split(",") if n.strip()
)  # fmt: skip
_HINTS = {"pocl": "pip install 'portkern[opencl]'", "intel": "pip install 'portkern[opencl-intel]'"}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A prefix with Intel's wheel layout (placeholder .icd paths) and a system vendor folder."""
    prefix = tmp_path / "venv"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libintelocl.so").write_bytes(b"")
    vendors = prefix / "etc" / "OpenCL" / "vendors"
    vendors.mkdir(parents=True)
    (vendors / "intel-cpu.icd").write_text("/opt/anaconda1anaconda2anaconda3/lib/libintelocl.so\n")
    (vendors / "intel-fpga_emu.icd").write_text("/opt/anaconda1anaconda2anaconda3/lib/libintelocl_emu.so\n")
    system = tmp_path / "etc-vendors"
    system.mkdir()
    (system / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    monkeypatch.setattr(drivers, "_prefixes", lambda: [prefix])
    monkeypatch.setattr(drivers, "SYSTEM_VENDORS", system)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.delenv("PORTKERN_NO_PIP_OPENCL", raising=False)
    monkeypatch.setattr(drivers, "REPORT", [])  # the real registration's report stays as it was
    monkeypatch.setattr(drivers, "_REGISTERED", None)  # register() runs once per process: run it afresh
    return prefix, system


def _registered(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text().strip() for p in folder.glob("*.icd")}


def test_pip_driver_gets_its_real_path_and_system_drivers_stay(fake, monkeypatch):
    prefix, _ = fake
    folder = drivers.register()
    assert folder is not None and str(folder) == drivers.os.environ["OCL_ICD_VENDORS"]
    icds = _registered(folder)
    assert icds["nvidia.icd"] == "libnvidia-opencl.so.1"  # the system's driver is still there
    assert icds["portkern-pip-intel-cpu.icd"] == str((prefix / "lib" / "libintelocl.so").resolve())
    assert not any("emu" in v for v in icds.values())  # its library is not installed: left out, said why
    assert any("libintelocl_emu.so is not there" in line for line in drivers.REPORT)


def test_a_user_vendor_folder_is_kept_instead_of_the_systems(fake, tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "amd.icd").write_text("libamdocl64.so\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(mine))
    icds = _registered(drivers.register())
    assert icds["amd.icd"] == "libamdocl64.so" and "nvidia.icd" not in icds
    assert "portkern-pip-intel-cpu.icd" in icds


def test_nothing_to_add_leaves_the_environment_alone(fake, monkeypatch):
    monkeypatch.setattr(drivers, "_prefixes", lambda: [])
    assert drivers.register() is None
    assert "OCL_ICD_VENDORS" not in drivers.os.environ


def test_it_can_be_turned_off(fake, monkeypatch):
    monkeypatch.setenv("PORTKERN_NO_PIP_OPENCL", "1")
    assert drivers.register() is None
    assert "OCL_ICD_VENDORS" not in drivers.os.environ


@pytest.mark.parametrize("implementation", REQUIRED_OPENCL)
def test_the_opencl_implementations_the_test_extra_installs_are_found(implementation):
    p = probe("opencl")
    assert p.available, f"opencl: {p.reason}"
    from portkern.backends.opencl import device_ids

    found = device_ids()
    assert implementation in found, (
        f"OpenCL implementation {implementation!r} not found (found: {', '.join(found) or 'none'}); "
        f"{_HINTS.get(implementation, '')}. Driver registration: {'; '.join(drivers.REPORT) or 'nothing to add'}. "
        f"{' '.join(drivers.load_errors())} (PORTKERN_REQUIRE_OPENCL overrides the list)"
    )


_LIST_PLATFORMS = """
import json
from portkern.backends import opencl as ocl
print(json.dumps([p.name for p, _ in ocl._all_devices()]))
"""


def test_system_drivers_stay_listed_beside_the_pypi_ones(tmp_path):
    # A "system" vendor folder (OCL_ICD_VENDORS, as a user might have) naming a second copy of PoCL:
    # after portkern registers Intel's driver, that system driver must still be listed.
    if not drivers.pip_drivers():
        pytest.skip("no OpenCL driver from PyPI installed (test_the_opencl_implementations... says if one should be)")
    import pyopencl

    libs = sorted((Path(pyopencl.__file__).parent / ".libs").glob("libpocl*.so*"))
    if not libs:
        pytest.skip("pyopencl's bundled PoCL library not found")
    system = tmp_path / "vendors"
    system.mkdir()
    (system / "system-pocl.icd").write_text(f"{libs[0]}\n")
    env = dict(os.environ, OCL_ICD_VENDORS=str(system), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("PORTKERN_NO_PIP_OPENCL", None)
    out = subprocess.run([sys.executable, "-c", _LIST_PLATFORMS], env=env, capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    names = json.loads(out.stdout.strip().splitlines()[-1])
    assert names.count("Portable Computing Language") == 2, names  # pyopencl's own PoCL and the "system" one
    assert "Intel(R) OpenCL" in names, names


@pytest.mark.skipif("intel" not in REQUIRED_OPENCL, reason="Intel's CPU runtime has PyPI wheels for Linux x86-64 only")
def test_import_portkern_registers_before_pyopencl_lists_platforms():
    """`import portkern` alone registers the PyPI drivers: a user who lists platforms right after it
    (before any portkern backend is imported) sees Intel's runtime in that process."""
    code = (
        "import portkern, sys, pyopencl as cl\n"
        "assert 'portkern.backends.opencl' not in sys.modules\n"
        "print('|'.join(p.name for p in cl.get_platforms()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    names = out.stdout.strip().splitlines()[-1].lower()
    assert "intel" in names and "portable computing language" in names, names
