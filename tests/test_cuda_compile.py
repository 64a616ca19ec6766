"""Every CUDA kernel source compiles with nvcc: cubin for sm_90 and PTX for compute_75, float and double."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from portkern._kernels import kernel_dir, load_source

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


@pytest.fixture(scope="module")
def nvcc() -> str:
    path = shutil.which("nvcc")
    if path is None:
        if os.environ.get("PORTKERN_SKIP_NVCC") == "1":
            pytest.skip("nvcc not found and PORTKERN_SKIP_NVCC=1")
        pytest.fail("nvcc not found on PATH: install the CUDA toolkit, or set PORTKERN_SKIP_NVCC=1 to skip")
    return path


def test_all_kernel_files_present() -> None:
    expected = {"cartpole", "pendulum", "mountain_car", "mountain_car_continuous", "acrobot", "gae",
                "discounted_returns", "normalize", "gather", "mlp"}  # fmt: skip
    assert {Path(s).stem for s in SOURCES} == expected


@pytest.mark.parametrize(("src", "target", "dtype"), CASES)
def test_compiles(nvcc: str, tmp_path: Path, src: str, target: str, dtype: str) -> None:
    cu = tmp_path / src
    cu.write_text(load_source("cuda", src))  # includes inlined, exactly as the backends build it
    cmd = [nvcc, *TARGETS[target], *DTYPES[dtype], *FLAGS, "-o", str(tmp_path / "out"), str(cu)]
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
