"""Shared pieces of the fuzz suites (tests/test_fuzz_*.py): the backends they run on, arrays in every form a
user may hand over (non-contiguous, read-only, Fortran order, a list, another backend's or device's array), and
the one rule every fuzzed call obeys: the right answer, or a ValueError/TypeError naming the argument."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import pytest
from hypothesis import strategies as st

from portkern.backends import get_backend, probe

#: (backend, device) pairs cheap enough to fuzz with valid inputs in every run (kernels built once and cached).
CHEAP = [("numpy", None), ("opencl", "pocl"), ("opencl", "intel"), ("numba", None), ("cuda_host", None), ("torch", None)]
#: Backends whose every new env or shape compiles first (seconds to a minute): their validation runs always (it
#: happens before any compile), their valid inputs under the ``long`` profile only (tests/_hypothesis_profiles.py).
COMPILING = [("jax", None), ("torch_compile", None)]


def _id(pair: tuple[str, str | None]) -> str:
    return pair[0] if pair[1] is None else f"{pair[0]}-{pair[1]}"


def _available(pair: tuple[str, str | None]) -> str:
    """'' when the pair runs here, else why not."""
    name, device = pair
    p = probe(name)
    if not p.available:
        return f"{name}: {p.reason}"
    if name == "opencl" and device is not None:
        from portkern.backends.opencl import device_ids

        if device not in device_ids():
            return f"opencl: no {device} device here"
    return ""


def backend_params(pairs: list[tuple[str, str | None]]) -> list[Any]:
    out = []
    for pair in pairs:
        why = _available(pair)
        out.append(pytest.param(pair, id=_id(pair), marks=[pytest.mark.skip(reason=why)] if why else []))
    return out


def open_backend(pair: tuple[str, str | None]):
    return get_backend(*pair)


def long_profile() -> bool:
    from hypothesis import settings

    return settings.get_current_profile_name() == "long"


# ---- the rule ------------------------------------------------------------------------------------------
class Rejected(Exception):
    """Raised by ``allowed`` for a ValueError/TypeError that named one of the arguments (the test then checks
    that nothing changed)."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(str(exc))
        self.exc = exc


def named(exc: BaseException, names: tuple[str, ...] | list[str]) -> bool:
    msg = str(exc)
    # "name: ...", "name[...]: ...", or Python's own wording, "f() got an unexpected keyword argument 'name'"
    return any(msg.startswith(f"{n}:") or msg.startswith(f"{n}[") or msg.startswith(f"{n}.") or f" {n}:" in msg[:80]
               or f"keyword argument '{n}'" in msg for n in names)  # fmt: skip


@contextmanager
def allowed(*names: str) -> Iterator[None]:
    """The body either returns (the caller then checks the answer) or raises ValueError/TypeError whose
    message names one of ``names`` (re-raised as Rejected, for the caller's state check); anything else fails."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        if not named(exc, names):
            raise AssertionError(f"{type(exc).__name__} names none of {names}: {exc}") from exc
        raise Rejected(exc) from exc


def outcome(fn: Callable[[], Any], *names: str) -> tuple[bool, Any]:
    """(True, result) or (False, the ValueError/TypeError naming one of ``names``); anything else propagates."""
    try:
        with allowed(*names):
            return True, fn()
    except Rejected as r:
        return False, r.exc


# ---- arrays in every form ------------------------------------------------------------------------------
FORMS = ("plain", "strided", "readonly", "fortran", "list", "torch", "opencl-pocl", "opencl-intel", "jax")


def form_available(form: str) -> bool:
    if form == "torch":
        return probe("torch").available
    if form == "jax":
        return probe("jax").available and os.environ.get("PORTKERN_FUZZ_JAX", "1") == "1"
    if form.startswith("opencl-"):
        return not _available(("opencl", form.split("-", 1)[1]))
    return True


def as_form(a: np.ndarray, form: str) -> Any:
    """``a``'s values in ``form``: a strided view, a read-only array, Fortran order, a nested list, or another
    backend's array (torch on the CPU, pyopencl on PoCL or Intel, jax)."""
    if form == "plain":
        return a
    if form == "strided":  # the same values, every other element of a twice-as-long array
        big = np.repeat(a, 2, axis=-1) if a.ndim else a
        return big[..., ::2] if a.ndim else big
    if form == "readonly":
        b = a.copy()
        b.flags.writeable = False
        return b
    if form == "fortran":
        return np.asfortranarray(a)
    if form == "list":
        return a.tolist()
    try:  # another backend's array; a dtype that library has no type for stays a NumPy array
        if form == "torch":
            import torch

            return torch.from_numpy(np.ascontiguousarray(a).copy())
        if form.startswith("opencl-"):
            return get_backend("opencl", form.split("-", 1)[1]).from_host(np.ascontiguousarray(a))
        if form == "jax" and a.dtype.itemsize <= 4 and a.dtype.kind != "c":  # no silent 64 -> 32-bit cast
            return get_backend("jax").from_host(np.ascontiguousarray(a))
    except (TypeError, ValueError, RuntimeError):
        pass
    return a


forms = st.sampled_from([f for f in FORMS if form_available(f)])

#: dtypes users hand over, the wrong ones included.
ANY_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.uint32, np.uint64,
              np.bool_, np.complex64]  # fmt: skip

#: Floats with the values that break arithmetic.
wild_floats = st.one_of(
    st.floats(-1e3, 1e3, allow_nan=False, width=32),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e30, -1e30, 3.4e38, 1e-45]),
)


def host(a: Any) -> np.ndarray:
    """Any array's values as NumPy (a list too)."""
    if isinstance(a, (list, tuple, np.ndarray)):
        return np.asarray(a)
    if type(a).__module__.startswith("torch"):
        return a.detach().cpu().numpy()
    if type(a).__module__.startswith("pyopencl"):
        return a.get()
    import portkern

    try:
        return np.asarray(portkern.to_numpy(a))
    except (TypeError, ValueError):
        return np.asarray(a)
