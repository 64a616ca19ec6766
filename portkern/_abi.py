"""The kernel ABI, declared once: every entry point's name, argument order and argument types.

The host-side argument lists of every kernel backend (OpenCL, the CUDA C launches shared by cupy and
cuda_host, Numba's env kernels) are built from these declarations by :func:`pack`, and
tests/test_abi.py parses each kernel source's entry points (the generated ones in ``pk_env.h`` and
``pk_common.cuh`` included) and fails where one disagrees with them; kernels/README.md's ABI blocks
are checked against :func:`signature` by the same test. A change to an argument list is one edit
here, then the sources the test names.

Types are written as the kernels spell them, language-neutrally:

* ``REAL`` is the build's float type (``-DREAL=float|double``); ``ACT`` the env's action element
  (int32 for a discrete space, float32 for a Box); ``PARAMS`` the env's generated params struct
  ``pk_<env>_params``; ``long`` / ``ulong`` 64-bit integers (OpenCL C's spelling; ``long long`` in
  CUDA C++); ``ACC`` normalize's partial moments (``REAL`` in OpenCL, ``double`` in CUDA).
* A pointer is ``"T*"`` (``"const T*"`` when the kernel only reads it); anything else is a scalar
  passed by value, sent as a sized NumPy scalar (``int`` -> int32, ``uint`` -> uint32, ``long`` -> int64, ``REAL`` ->
  the build's dtype), never a Python int whose width a driver would have to guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np


@dataclass(frozen=True)
class Arg:
    """One kernel argument: its name (the kernels' and the host's) and its type (see the module doc)."""

    name: str
    type: str

    @property
    def pointer(self) -> bool:
        return self.type.endswith("*")


def _args(text: str) -> tuple[Arg, ...]:
    """``"REAL* state, int n"`` -> Args: declarations read like the kernels' own lists."""
    out = []
    for part in text.split(","):
        words = part.split()
        out.append(Arg(words[-1], " ".join(words[:-1])))
    return tuple(out)


#: The env entry points, ``pk_<env>_<what>`` for every env (``EnvSpec.kernel`` is ``<env>``); the
#: state is [D, N] variable-major, obs and final_obs [N, obs_dim], the rollout's out_* time-major.
ENV_ENTRIES: dict[str, tuple[Arg, ...]] = {
    "reset": _args(
        "REAL* state, int* steps, uint* episodes, uchar* needs_reset, REAL* obs, const PARAMS* params, "
        "uint seed, int fresh, int n"
    ),
    "step": _args(
        "REAL* state, int* steps, uint* episodes, uchar* needs_reset, const ACT* actions, REAL* obs, "
        "REAL* final_obs, REAL* reward, uchar* terminated, uchar* truncated, const PARAMS* params, "
        "uint seed, int max_steps, int autoreset_mode, int n"
    ),
    "rollout": _args(
        "REAL* state, int* steps, uint* episodes, uchar* needs_reset, REAL* obs, REAL* final_obs, "
        "REAL* reward, uchar* terminated, uchar* truncated, const PARAMS* params, const float* policy, "
        "int policy_kind, int hidden, REAL* out_obs, ACT* out_actions, REAL* out_rewards, "
        "uchar* out_terminated, uchar* out_truncated, REAL* out_final_obs, uint seed, int max_steps, "
        "int autoreset_mode, int t0, int t_count, int n"
    ),
}

#: The entry points of the env-independent files, by kernel name (the same in every API).
ENTRIES: dict[str, tuple[Arg, ...]] = {
    "pk_gae": _args(
        "const REAL* rewards, const REAL* values, const REAL* next_values, const uchar* terminated, "
        "const uchar* truncated, REAL* advantages, REAL* returns, REAL gamma, REAL gamma_lam, int T, int N"
    ),
    "pk_discounted_returns": _args(
        "const REAL* rewards, const uchar* terminated, const uchar* truncated, const REAL* bootstrap, "
        "REAL* out, REAL gamma, int per_step_bootstrap, int T, int N"
    ),
    "pk_gather": _args("const REAL* x, const long* indices, REAL* out, int row_len, int B"),
    "pk_gather_i32": _args("const REAL* x, const int* indices, REAL* out, int row_len, int B"),
    # gather.cl's gathers (OpenCL only: the index check inside the copy; CUDA's twins are pk_gather[_i32])
    "pk_gather_checked": _args(
        "const REAL* x, const long* indices, REAL* out, int row_len, int B, long M, uint stamp, uint* bad"
    ),
    "pk_gather_checked_i32": _args(
        "const REAL* x, const int* indices, REAL* out, int row_len, int B, long M, uint stamp, uint* bad"
    ),
    "pk_normalize_partial": _args("const REAL* x, uint* pcount, ACC* pmean, ACC* pm2, int n"),
    "pk_normalize_finalize": _args(
        "const uint* pcount, const ACC* pmean, const ACC* pm2, REAL* stats, int groups"
    ),
    "pk_normalize_apply": _args("const REAL* x, REAL* out, const REAL* stats, REAL eps, int n"),
    # normalize.cl's chunk layout (OpenCL only): the apply pass combining the chunks' partials itself
    "pk_normalize_apply_partials": _args(
        "const REAL* x, REAL* out, const uint* pcount, const ACC* pmean, const ACC* pm2, REAL eps, int n, int groups"
    ),
    "pk_mlp_forward": _args(
        "const float* policy, int hidden, int obs_dim, int out_dim, const REAL* obs, float* out, int n"
    ),
    # validate.cl (OpenCL only: CuPy's reductions and Numba's atomics do these checks elsewhere)
    "pk_index_range": _args("const long* idx, long* glo, long* ghi, int n"),
    "pk_index_range_i32": _args("const int* idx, long* glo, long* ghi, int n"),
    "pk_count_nonfinite_f32": _args("const uint* x, uint* gcount, int n"),
    "pk_count_nonfinite_f64": _args("const ulong* x, uint* gcount, int n"),
}

#: OpenCL-only entry points with the argument list of another (the CPU layouts of gather.cl).
SAME_AS: dict[str, str] = {"pk_gather_rows_checked": "pk_gather_checked",
                            "pk_gather_rows_checked_i32": "pk_gather_checked_i32",
                            "pk_normalize_chunks": "pk_normalize_partial"}

#: The env's own buffers (portkern.backends.base.EnvBuffers, whose fields carry these names): an env
#: entry point's arguments of these names are read from the EnvBuffers given to :class:`Packer`.
ENV_BUFFERS = ("state", "steps", "episodes", "needs_reset", "obs", "final_obs", "reward", "terminated", "truncated")

#: Sized NumPy type of each scalar type (``REAL`` is the build's dtype, given to :func:`pack`).
_SCALARS: dict[str, Any] = {"int": np.int32, "uint": np.uint32, "long": np.int64}


def env_entry(kernel_stem: str, what: str) -> str:
    """The name of an env entry point: ``pk_<env>_<what>``, ``what`` one of :data:`ENV_ENTRIES`."""
    if what not in ENV_ENTRIES:
        raise ValueError(f"what: expected one of {', '.join(ENV_ENTRIES)}, got {what!r}")
    return f"pk_{kernel_stem}_{what}"


def declaration(name: str) -> tuple[Arg, ...]:
    """The argument list of entry point ``name`` (an env's ``pk_<env>_step`` included)."""
    name = SAME_AS.get(name, name)
    if name in ENTRIES:
        return ENTRIES[name]
    what = name.rpartition("_")[2]
    if name.startswith("pk_") and what in ENV_ENTRIES:
        return ENV_ENTRIES[what]
    raise KeyError(f"kernel: {name!r} is not an entry point of the kernel ABI (portkern/_abi.py)")


def signature(name: str) -> str:
    """``pk_gae(const REAL* rewards, ...)``: the declaration as kernels/README.md shows it."""
    return f"{name}({', '.join(f'{a.type} {a.name}' for a in declaration(name))})"


class Packer:
    """Builds the host-side argument tuple of one entry point from named values, in the ABI's order.

    ``pointer`` maps a device array to what the API's launch takes (pyopencl: ``a.data``; CuPy, the
    host harness and Numba: the array itself); scalars become sized NumPy scalars. The plan is
    computed once per entry point, so a launch pays one pass over its arguments.
    """

    def __init__(self, name: str, pointer: Callable[[Any], Any], dtype: Any = np.float32) -> None:
        real = np.dtype(dtype).type
        self.name = name
        self.args = declaration(name)
        self.plan = tuple((a.name, pointer if a.pointer else (real if a.type == "REAL" else _SCALARS[a.type]),
                           a.name in ENV_BUFFERS) for a in self.args)  # fmt: skip

    def __call__(self, values: Mapping[str, Any], env: Any = None) -> tuple[Any, ...]:
        """The arguments from ``values`` by name; with ``env`` (an EnvBuffers), the env's own buffers
        are read from it, so the per-step hot path builds no dict of them."""
        try:
            if env is None:
                return tuple([conv(values[n]) for n, conv, _ in self.plan])
            return tuple([conv(getattr(env, n) if own else values[n]) for n, conv, own in self.plan])
        except KeyError:
            have = set(values) | (set(ENV_BUFFERS) if env is not None else set())
            missing = [n for n, _, _ in self.plan if n not in have]
            if not missing:
                raise
            raise TypeError(f"{self.name}: no value for argument(s) {', '.join(missing)}") from None

    def index(self, arg: str) -> int:
        """Position of argument ``arg`` (for a launch that changes one argument between calls)."""
        return next(i for i, a in enumerate(self.args) if a.name == arg)


_PACKERS: dict[tuple[str, Any, Any], Packer] = {}


def packer(name: str, pointer: Callable[[Any], Any], dtype: Any = np.float32) -> Packer:
    """The :class:`Packer` of entry point ``name`` for one API's ``pointer`` and ``REAL`` dtype, made once."""
    key = (name, pointer, dtype)
    got = _PACKERS.get(key)
    if got is None:
        if len(_PACKERS) >= 1024:  # bounded (dtype spellings vary): rebuilding one is cheap
            _PACKERS.clear()
        got = _PACKERS[key] = Packer(name, pointer, dtype)
    return got


def pack(name: str, values: Mapping[str, Any], pointer: Callable[[Any], Any], dtype: Any = np.float32,
         env: Any = None) -> tuple:  # fmt: skip
    """The argument tuple of entry point ``name`` (see :class:`Packer`)."""
    return packer(name, pointer, dtype)(values, env)


def rollout_values(out: Any) -> dict[str, Any]:
    """A RolloutBuffer's arrays by argument name (``out_<field>``)."""
    return {f"out_{f}": getattr(out, f) for f in ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")}
