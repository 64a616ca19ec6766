"""The env list is honest: every registered env has its kernels in every API and declares its facts.

Adding an env is its reference module (params, spaces, dynamics, parity facts), one .cl, one .cu
and one Numba module, or, for a variant of an env, a few lines reusing its kernels (docs/extending.md,
"Adding an env"); this test names what is missing.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from portkern import envs
from portkern._kernels import kernel_dir, load_source
from portkern.envs.base import Param

ENV_IDS = list(envs.ENVS)
#: One env per kernel: the env whose module owns the kernel files (variants reuse them).
KERNEL_ENV_IDS = [spec.id for spec in envs.KERNEL_OWNERS.values()]
#: Envs registered before their kernels are written, and the kernel APIs they still lack: make() on one of those
#: backends raises EnvKernelMissing, the shared tests skip it with that reason, and the tests below skip it here.
#: None now (Chain-v0 was one until its OpenCL, CUDA and Numba kernels came).
PENDING_KERNELS: dict[str, tuple[str, ...]] = {}
#: Where each API keeps an env's kernels, by the env's kernel stem.
KERNEL_FILES = {"opencl": lambda stem: kernel_dir("opencl") / f"{stem}.cl",
                "cuda": lambda stem: kernel_dir("cuda") / f"{stem}.cu",
                "numba": lambda stem: Path(importlib.import_module("portkern.backends._numba").__file__).parent
                / f"{stem}.py"}  # fmt: skip


def skip_pending(env_id: str, api: str) -> None:
    if api in PENDING_KERNELS.get(env_id, ()):
        pytest.skip(f"{env_id} has no {api} kernels yet (PENDING_KERNELS)")


#: Every params struct a kernel source names (pk_<stem>_params).
STRUCT_REF = re.compile(r"\bpk_(\w+?)_params\b")
#: A param read by position: p[3], kp[10], params[2] (what the redesign removed everywhere).
POSITIONAL = re.compile(r"\b(?:k?p|params)\s*\[\s*\d+\s*\]")


def foreign_structs(text: str, spec) -> list[str]:
    """The params structs other than ``spec``'s that a kernel source of ``spec``'s names.

    Every env's struct is a packed array of ``REAL``, so an env function typed with a sibling's
    struct (``const pk_mountain_car_params *p`` in mountain_car_continuous.cl) compiles, and runs
    wherever the field offsets it reads happen to agree: only the name gives the mistake away.
    """
    return sorted({m.group(0) for m in STRUCT_REF.finditer(text) if m.group(0) != spec.struct_name})


def test_every_env_module_loads():
    # A broken env module takes only its own env out of the registry (portkern still imports);
    # here it fails the suite, by name and reason, instead of vanishing from every parametrisation.
    assert not envs.UNAVAILABLE, "env modules that failed to load: " + "; ".join(
        f"{k}: {v}" for k, v in envs.UNAVAILABLE.items()
    )


@pytest.mark.parametrize("api", list(KERNEL_FILES))
def test_an_env_lacks_kernels_exactly_where_it_is_pending(api):
    # A forgotten kernel fails here by name; a pending list left behind once the kernels exist fails too.
    missing = {env_id for env_id in KERNEL_ENV_IDS if not KERNEL_FILES[api](envs.get(env_id).kernel).is_file()}
    pending = {env_id for env_id, apis in PENDING_KERNELS.items() if api in apis}
    assert missing == pending, f"{api}: kernels missing for {sorted(missing - pending)}; " \
                               f"pending but present: {sorted(pending - missing)}"


@pytest.mark.parametrize("env_id", KERNEL_ENV_IDS)
@pytest.mark.parametrize("api", ["opencl", "cuda"])
def test_kernel_source_reads_its_own_params_struct(env_id, api):
    skip_pending(env_id, api)
    spec = envs.get(env_id)
    path = kernel_dir(api) / f"{spec.kernel}.{'cl' if api == 'opencl' else 'cu'}"
    text = path.read_text()
    assert spec.struct_name in text, f"{path.name} does not read its generated params struct {spec.struct_name}"
    wrong = foreign_structs(text, spec)
    assert not wrong, f"{path.name} reads {', '.join(wrong)}, not {spec.struct_name} (the struct of {env_id})"


def test_the_struct_check_catches_a_sibling_struct():
    # mountain_car_continuous.cl with one env function typed with MountainCar-v0's struct: the
    # mistake that compiles and passes parity at the defaults.
    spec = envs.get("MountainCarContinuous-v0")
    text = (kernel_dir("opencl") / "mountain_car_continuous.cl").read_text()
    assert not foreign_structs(text, spec)
    sibling = text.replace("__global const pk_mountain_car_continuous_params *p", "__global const pk_mountain_car_params *p", 1)
    assert sibling != text
    assert foreign_structs(sibling, spec) == ["pk_mountain_car_params"]
    cuda = (kernel_dir("cuda") / "mountain_car_continuous.cu").read_text()
    # (the struct's Params come from its generated base, pk_mountain_car_continuous_shape; its functions name it)
    assert foreign_structs(cuda.replace("const pk_mountain_car_continuous_params *", "const pk_cartpole_params *", 1),
                           spec) == ["pk_cartpole_params"]  # fmt: skip


def _env_source(backend: str, env_id: str, suffix: str) -> tuple:
    """The env's kernel source file of ``backend`` (kernels/<backend>/<kernel><suffix>): (spec, path, text),
    checked to exist and to read the env's generated params struct, as every backend's source must."""
    spec = envs.get(env_id)
    path = kernel_dir(backend) / f"{spec.kernel}{suffix}"
    assert path.is_file(), f"{env_id}: no kernels/{backend}/{spec.kernel}{suffix}"
    text = path.read_text()
    assert f"pk_{spec.kernel}_params" in text, f"{path.name} does not read its generated params struct"
    return spec, path, text


@pytest.mark.parametrize("env_id", KERNEL_ENV_IDS)
def test_opencl_source_generates_the_three_entry_points(env_id):
    skip_pending(env_id, "opencl")
    spec, path, text = _env_source("opencl", env_id, ".cl")
    assert re.search(rf"#define\s+ENV_NAME\s+{spec.kernel}\b", text), f"{path.name}: ENV_NAME is not {spec.kernel}"
    assert '#include "pk_env.h"' in text, f"{path.name} does not include the entry-point template pk_env.h"
    assert spec.struct_name in load_source("opencl", path.name)


@pytest.mark.parametrize("env_id", KERNEL_ENV_IDS)
def test_cuda_source_generates_the_three_entry_points(env_id):
    skip_pending(env_id, "cuda")
    spec, path, text = _env_source("cuda", env_id, ".cu")
    assert re.search(rf"PK_ENV_KERNELS\(\s*{spec.kernel}\s*,", text), f"{path.name}: no PK_ENV_KERNELS({spec.kernel}, ...)"


@pytest.mark.parametrize("env_id", KERNEL_ENV_IDS)
def test_numba_module_exists(env_id):
    skip_pending(env_id, "numba")
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
