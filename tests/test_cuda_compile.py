"""Every CUDA kernel source compiles with nvcc: cubin for sm_90 and PTX for compute_75, float and double, and
the files with the in-kernel MLP also in its builds (-DPK_MLP_HIDDEN=H, -DPK_MLP_RUNTIME_WIDTH=1).

nvcc comes from NVIDIA's PyPI wheel (``cuda-toolkit[nvcc,...]`` in the test extra), else from PATH.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from portkern._kernels import kernel_dir, load_source
from portkern.backends import _cuda_tools
from portkern.backends._cuda_tools import find_nvcc

pytestmark = pytest.mark.slow  # every CUDA kernel through nvcc

SOURCES = sorted(p.name for p in kernel_dir("cuda").glob("*.cu"))
TARGETS = {"sm90": ("-cubin", "-arch=sm_90"), "compute75": ("--ptx", "-arch=compute_75")}
DTYPES = {"float": ("-DREAL=float",), "double": ("-DREAL=double", "-DPK_DOUBLE=1")}
#: The flags the backends build with (contraction off, subnormals kept), warnings as errors.
FLAGS = ("--fmad=false", "-ftz=false", "--std=c++17", "-Werror", "all-warnings")

CASES = [
    pytest.param(src, target, dtype, id=f"{Path(src).stem}-{target}-{dtype}")
    for src in SOURCES
    for target in TARGETS
    for dtype in DTYPES
]


def _policy_builds() -> list:
    """The builds of the files with the in-kernel MLP (every env's rollout, mlp.cu) that the backends make for an
    MLP policy (portkern._kernels.mlp_width_option): its width fixed (64; 7, an odd width, streams its second
    layer a unit at a time) or read at run time. CASES above has their random-policy builds (no define)."""
    from portkern.envs import KERNEL_OWNERS

    files = {f"{stem}.cu": spec.define_options for stem, spec in KERNEL_OWNERS.items()
             if (kernel_dir("cuda") / f"{stem}.cu").is_file()}  # fmt: skip
    files["mlp.cu"] = ()
    widths = {"mlp64": ("-DPK_MLP_HIDDEN=64",), "mlp7": ("-DPK_MLP_HIDDEN=7",),
              "runtime": ("-DPK_MLP_RUNTIME_WIDTH=1",)}  # fmt: skip
    return [
        pytest.param(src, (*defines, *width, *DTYPES[dtype]), id=f"{Path(src).stem}-{name}-{dtype}")
        for src, defines in sorted(files.items())
        for name, width in widths.items()
        for dtype in (DTYPES if name == "mlp64" else ("float",))
    ]


@pytest.fixture(scope="module")
def nvcc() -> str:
    found = find_nvcc()
    if not found:
        pytest.fail(found.how)
    # nvcc runs the host preprocessor even for -cubin and --ptx.
    if shutil.which("g++") is None:
        pytest.fail(f"nvcc ({found.how}) needs a host C++ compiler; no g++ on PATH: apt-get install g++")
    return found.path


def _fake_nvcc(directory: Path) -> Path:
    fake = directory / "nvcc"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    return fake


def test_nvcc_wheel_comes_before_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(_fake_nvcc(tmp_path).parent))
    found = find_nvcc()
    assert found.how.startswith("PyPI wheel nvidia-cuda-nvcc"), f"{found} (is portkern[test] installed?)"
    assert Path(found.path).parent.name == "bin"


def test_nvcc_from_path_without_the_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_cuda_tools, "_NVCC_WHEELS", ())
    monkeypatch.setenv("PATH", str(_fake_nvcc(tmp_path).parent))
    assert find_nvcc() == _cuda_tools.Found(str(tmp_path / "nvcc"), "PATH")


def test_no_nvcc_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_cuda_tools, "_NVCC_WHEELS", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    found = find_nvcc()
    assert not found and "pip install" in found.how


def test_all_kernel_files_present() -> None:
    # One .cu per registered env (tests/test_env_sources.py checks each is complete) and per buffer op.
    from portkern.envs import ENVS

    from .test_env_sources import PENDING_KERNELS

    stems = {Path(s).stem for s in SOURCES}
    assert {spec.kernel for spec in ENVS.values() if "cuda" not in PENDING_KERNELS.get(spec.id, ())} <= stems
    assert {"gae", "discounted_returns", "normalize", "gather", "mlp"} <= stems  # the buffer ops and the policy


@pytest.mark.parametrize(("src", "target", "dtype"), CASES)
def test_compiles(nvcc: str, tmp_path: Path, src: str, target: str, dtype: str) -> None:
    cu = tmp_path / src
    cu.write_text(load_source("cuda", src))  # includes inlined, exactly as the backends build it
    cmd = [nvcc, *TARGETS[target], *DTYPES[dtype], *FLAGS, "-o", str(tmp_path / "out"), str(cu)]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout}{res.stderr}"
    assert res.stderr.strip() == "", res.stderr  # no warnings either


@pytest.mark.parametrize(("src", "options"), _policy_builds())
def test_policy_builds_compile(nvcc: str, tmp_path: Path, src: str, options: tuple[str, ...]) -> None:
    cu = tmp_path / src
    cu.write_text(load_source("cuda", src))
    cmd = [nvcc, "-cubin", "-arch=sm_90", *options, *FLAGS, "-o", str(tmp_path / "out"), str(cu)]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout}{res.stderr}"
    assert res.stderr.strip() == "", res.stderr  # no warnings either


@pytest.mark.parametrize("real", ["uchar", "float", "double"])
def test_gather_compiles_for_every_copy_unit(nvcc: str, tmp_path: Path, real: str) -> None:
    # The backends build gather with REAL set to a type of the element's size (it only copies bits).
    cu = tmp_path / "gather.cu"
    cu.write_text(load_source("cuda", "gather.cu"))
    cmd = [nvcc, "-cubin", "-arch=sm_90", f"-DREAL={real}", *FLAGS, "-o", str(tmp_path / "out"), str(cu)]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout}{res.stderr}"
