"""The env list is honest: every registered env has its kernels in every API and declares its facts.

Adding an env is its reference module (params, spaces, dynamics, parity facts), one .cl, one .cu
and one Numba module (kernels/README.md, "Adding an env"); this test names what is missing.
"""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

from portkern import envs
from portkern._kernels import kernel_dir, load_source
from portkern.envs.base import Param

ENV_IDS = list(envs.ENVS)
#: A param read by position: p[3], kp[10], params[2] (what the redesign removed everywhere).
POSITIONAL = re.compile(r"\b(?:k?p|params)\s*\[\s*\d+\s*\]")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_opencl_source_generates_the_three_entry_points(env_id):
    spec = envs.get(env_id)
    path = kernel_dir("opencl") / f"{spec.kernel}.cl"
    assert path.is_file(), f"{env_id}: no kernels/opencl/{spec.kernel}.cl"
    text = path.read_text()
    assert re.search(rf"#define\s+ENV_NAME\s+{spec.kernel}\b", text), f"{path.name}: ENV_NAME is not {spec.kernel}"
    assert '#include "pk_env.h"' in text, f"{path.name} does not include the entry-point template pk_env.h"
    assert f"pk_{spec.kernel}_params" in text, f"{path.name} does not read its generated params struct"
    assert spec.struct_name in load_source("opencl", path.name)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_cuda_source_generates_the_three_entry_points(env_id):
    spec = envs.get(env_id)
    path = kernel_dir("cuda") / f"{spec.kernel}.cu"
    assert path.is_file(), f"{env_id}: no kernels/cuda/{spec.kernel}.cu"
    text = path.read_text()
    assert re.search(rf"PK_ENV_KERNELS\(\s*{spec.kernel}\s*,", text), f"{path.name}: no PK_ENV_KERNELS({spec.kernel}, ...)"
    assert f"pk_{spec.kernel}_params" in text, f"{path.name} does not read its generated params struct"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_numba_module_exists(env_id):
    spec = envs.get(env_id)
    importlib.import_module(f"portkern.backends._numba.{spec.kernel}")


def test_no_param_is_read_by_position():
    files = [*kernel_dir("opencl").glob("*.cl"), *kernel_dir("opencl").glob("*.h"),
             *kernel_dir("cuda").glob("*.cu"), *kernel_dir("cuda").glob("*.cuh")]  # fmt: skip
    for pkg in ("portkern.envs", "portkern.backends._numba"):
        mod = importlib.import_module(pkg)
        files += [p for p in __import__("pathlib").Path(mod.__file__).parent.glob("*.py")]
    hits = [f"{f.name}: {m.group(0)}" for f in files for m in POSITIONAL.finditer(f.read_text())]
    assert not hits, f"params read by position: {hits}"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_declares_its_parity_facts(env_id):
    spec = envs.get(env_id)
    lo, hi = (np.asarray(b, float) for b in spec.test_state_box)
    assert lo.shape == hi.shape == (spec.state_dim,) and (lo < hi).all()
    states = spec.parity_states(np.random.default_rng(0), 60)
    assert states.shape == (60, spec.state_dim) and np.isfinite(states).all()
    assert all(tol > 0 for tol in spec.parity_tolerance.values())
    assert spec.user_params and all(isinstance(p, Param) for p in spec.user_params)
    # The struct C code reads is the declaration: same names, same order.
    struct = spec.c_struct()
    assert re.findall(r"REAL (\w+);", struct) == list(spec.field_names)
