"""Rollout-buffer ops on time-major [T, N] arrays: GAE, discounted returns, normalisation, minibatch gather.

Every op validates its arguments here, once, the same way on every backend (shape, dtype, which
backend and device an array belongs to, ranges) before anything is launched; the backends' ops do
the launch only.

Outputs, and how long they live: each op takes ``out=`` (written in place and returned, no
allocation). Without it, the result is the backend's own output buffer for that op, shape and dtype,
reused by the next call of the same op with the same shape and dtype, as an env's obs buffer is
reused by the next ``step``: copy what you keep (``.copy()``, ``clone()``, ``to_host``). Allocating
per call costs more than the kernel on CPU OpenCL drivers (first-touch page faults of two 33 MB
outputs: 85 ms against a 35 ms GAE on PoCL at 128 x 65,536 float32).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._validate import describe, dtype_of, nonneg_float_arg, unit_float_arg
from .backends import Backend, backend_of, get_backend

__all__ = ["discounted_returns", "gae", "gather", "normalize"]

#: The float types the ops take, by the dtype's scalar type (its ``.name`` is built on each access: ~10 us).
_FLOATS = (np.float32, np.float64)


def _resolve(backend: str | Backend | None, first: Any) -> Backend:
    if isinstance(backend, Backend):
        return backend
    if backend is not None:
        return get_backend(backend)
    return backend_of(first)


def _on(b: Backend, name: str, a: Any) -> Any:
    """``a`` as a native array of ``b``: NumPy inputs are uploaded, other backends' arrays rejected."""
    if b.owns(a):
        if not b.holds(a):
            raise TypeError(f"{name}: this {b.name} array lives on another device or context than {b.device_name}")
        if not b._contiguous(a):
            if isinstance(a, np.ndarray):  # host memory (the numpy backend's own): a contiguous copy, as on upload
                return _c_order(a)
            raise ValueError(f"{name}: expected a C-contiguous array")
        return a
    if isinstance(a, np.ndarray):
        return b.from_host(_c_order(a))
    if isinstance(a, (list, tuple)):
        try:
            host = np.asarray(a)
        except ValueError as exc:  # a ragged list
            raise ValueError(f"{name}: expected a rectangular array, got a ragged {type(a).__name__} ({exc})") from None
        if host.dtype == object:
            raise TypeError(f"{name}: expected an array of numbers, got a {type(a).__name__} of Python objects")
        return b.from_host(_c_order(host))
    raise TypeError(
        f"{name}: expected a NumPy array or a {b.name} array, got {type(a).__module__}.{type(a).__name__}"
    )


def _c_order(a: np.ndarray) -> np.ndarray:
    """``a`` C-contiguous, its shape kept (np.ascontiguousarray turns a 0-d array into shape (1,))."""
    return a if a.flags.c_contiguous else np.array(a, order="C")


def _float_tn(name: str, a: Any, shape: tuple[int, ...] | None, dtype: np.dtype | None) -> None:
    dt = dtype_of(a)
    if dt is None or dt.type not in _FLOATS:
        raise TypeError(f"{name}: expected a float32 or float64 array, got {describe(a)}")
    if dtype is not None and dt != dtype:
        raise TypeError(f"{name}: expected dtype {dtype} (as rewards), got {describe(a)}")
    if shape is None:
        if len(a.shape) != 2 or 0 in a.shape:
            raise ValueError(f"{name}: expected a non-empty [T, N] array (time-major), got {describe(a)}")
    elif tuple(a.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape} (as rewards, [T, N]), got {describe(a)}")


def _flags(name: str, a: Any, shape: tuple[int, ...]) -> None:
    if dtype_of(a) != np.bool_:
        raise TypeError(f"{name}: expected a bool array of shape {shape}, got {describe(a)}")
    if tuple(a.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape} (as rewards, [T, N]), got {describe(a)}")


def _out(b: Backend, name: str, a: Any, shape: tuple[int, ...], dtype: np.dtype, inputs: dict[str, Any]) -> Any:
    """Check a caller's output array: this backend's (never uploaded: it is written in place), of the
    result's shape and dtype, C-contiguous, and sharing no memory with an input the kernel reads."""
    if b.immutable_arrays:
        raise TypeError(f"{name}: the {b.name} backend's arrays are immutable; omit out= and use the result")
    if not b.owns(a):
        raise TypeError(
            f"{name}: expected a {b.name} array (outputs are written in place, not copied), got "
            f"{type(a).__module__}.{type(a).__name__}"
        )
    if not b.holds(a):
        raise TypeError(f"{name}: this {b.name} array lives on another device or context than {b.device_name}")
    if dtype_of(a) != dtype:
        raise TypeError(f"{name}: expected dtype {dtype} (the result's), got {describe(a)}")
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)} (the result's), got {describe(a)}")
    if not b._contiguous(a):
        raise ValueError(f"{name}: expected a C-contiguous array")
    if isinstance(a, np.ndarray) and not a.flags.writeable:  # the numpy backend's arrays (torch's have no flag)
        raise ValueError(f"{name}: expected a writable array, got a read-only one")
    for other, x in inputs.items():
        if b.shares_memory(a, x):
            raise ValueError(f"{name}: shares memory with {other}, which the kernel still reads; pass a separate array")
    return a


def _result(b: Backend, slot: str, shape: tuple[int, ...], dtype: np.dtype, inputs: dict[str, Any]) -> Any:
    """The output ``slot`` ("gae.advantages", ...) without ``out=``: the backend's cached buffer of that
    shape and dtype (see the lifetime rule above), never filled, since the kernel writes every element.
    Where the cached buffer is one of this call's inputs (a previous result passed back in), a new one."""
    buf = b.output_buffer(slot, shape, dtype)
    if any(b.shares_memory(buf, x) for x in inputs.values()):
        return b.empty(shape, dtype)
    return buf


def gae(
    rewards: Any,
    values: Any,
    next_values: Any,
    terminated: Any,
    truncated: Any,
    *,
    gamma: float,
    lam: float,
    backend: str | Backend | None = None,
    out: tuple[Any, Any] | None = None,
) -> tuple[Any, Any]:
    """Generalised advantage estimation (Schulman et al. 2016) over [T, N]: ``(advantages, returns)``.

    ``delta_t = r_t + gamma * next_values_t * (1 - terminated_t) - values_t`` and
    ``A_t = delta_t + gamma * lam * (1 - (terminated_t | truncated_t)) * A_{t+1}``; returns = A + values.
    ``next_values_t`` is V of the observation step t reached (the final obs when it truncated), so
    truncation bootstraps and termination does not.

    ``out=(advantages, returns)``: two arrays of this backend, of rewards' shape and dtype, written in
    place and returned (no allocation per call); neither may share memory with an input.
    """
    b = _resolve(backend, rewards)
    gamma = unit_float_arg("gamma", gamma)
    lam = unit_float_arg("lam", lam)
    arrays = [_on(b, n, a) for n, a in (("rewards", rewards), ("values", values),
              ("next_values", next_values), ("terminated", terminated), ("truncated", truncated))]  # fmt: skip
    r, v, nv, term, trunc = arrays
    _float_tn("rewards", r, None, None)
    shape, dtype = tuple(r.shape), dtype_of(r)
    _float_tn("values", v, shape, dtype)
    _float_tn("next_values", nv, shape, dtype)
    _flags("terminated", term, shape)
    _flags("truncated", trunc, shape)
    inputs = {"rewards": r, "values": v, "next_values": nv, "terminated": term, "truncated": trunc}
    if out is None:
        adv = _result(b, "gae.advantages", shape, dtype, inputs)
        ret = _result(b, "gae.returns", shape, dtype, inputs)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"out: expected a pair (advantages, returns), got {type(out).__name__}")
        adv = _out(b, "out[0]", out[0], shape, dtype, inputs)
        ret = _out(b, "out[1]", out[1], shape, dtype, {**inputs, "out[0]": adv})
    # A backend with immutable arrays (jax) returns its results instead of writing adv and ret.
    adv, ret = b.gae(r, v, nv, term, trunc, adv, ret, gamma, lam) or (adv, ret)
    return adv, ret


def discounted_returns(
    rewards: Any,
    terminated: Any,
    truncated: Any,
    bootstrap: Any,
    *,
    gamma: float,
    backend: str | Backend | None = None,
    out: Any = None,
) -> Any:
    """Discounted returns over [T, N], cut at termination.

    ``bootstrap`` is either [N], the value of the observation after the last step (a step that
    truncates mid-rollout then ends the return with no bootstrap), or [T, N], the value of each
    step's final observation, used wherever a step truncated and after the last step.

    ``out``: an array of this backend, of rewards' shape and dtype, written in place and returned;
    it may not share memory with an input.
    """
    b = _resolve(backend, rewards)
    gamma = unit_float_arg("gamma", gamma)
    r = _on(b, "rewards", rewards)
    term = _on(b, "terminated", terminated)
    trunc = _on(b, "truncated", truncated)
    boot = _on(b, "bootstrap", bootstrap)
    _float_tn("rewards", r, None, None)
    shape, dtype = tuple(r.shape), dtype_of(r)
    _flags("terminated", term, shape)
    _flags("truncated", trunc, shape)
    if tuple(boot.shape) not in ((shape[1],), shape):
        raise ValueError(
            f"bootstrap: expected shape ({shape[1]},) or {shape} (rewards are [T, N] = {shape}), "
            f"got {describe(boot)}"
        )
    if dtype_of(boot) != dtype:
        raise TypeError(f"bootstrap: expected dtype {dtype} (as rewards), got {describe(boot)}")
    inputs = {"rewards": r, "terminated": term, "truncated": trunc, "bootstrap": boot}
    if out is None:
        out = _result(b, "discounted_returns", shape, dtype, inputs)
    else:
        out = _out(b, "out", out, shape, dtype, inputs)
    got = b.discounted_returns(r, term, trunc, boot, out, gamma)
    return out if got is None else got


def normalize(x: Any, eps: float = 1e-8, *, backend: str | Backend | None = None, out: Any = None) -> Any:
    """``(x - mean) / (std + eps)`` with the mean and population std over all elements.

    ``out``: an array of this backend, of x's shape and dtype, written in place and returned; it may
    be ``x`` itself (the statistics are computed before any element is written).
    """
    b = _resolve(backend, x)
    eps = nonneg_float_arg("eps", eps)
    x = _on(b, "x", x)
    dt = dtype_of(x)
    if dt is None or dt.type not in _FLOATS:
        raise TypeError(f"x: expected a float32 or float64 array, got {describe(x)}")
    if math.prod(x.shape) == 0:  # Python ints: np.prod of a torch.Size builds an array first (~30 us)
        raise ValueError(f"x: expected at least one element, got {describe(x)}")
    if out is None:
        out = _result(b, "normalize", tuple(x.shape), dt, {"x": x})
    else:  # out=x is fine: every backend reduces over x before it writes
        out = _out(b, "out", out, tuple(x.shape), dt, {} if out is x else {"x": x})
    got = b.normalize(x, out, eps)
    return out if got is None else got


def gather(x: Any, indices: Any, *, backend: str | Backend | None = None, out: Any = None) -> Any:
    """Rows of ``x`` ([M, ...], e.g. a flattened [T*N, ...] rollout) at ``indices`` ([B], ints in [0, M)).

    ``out``: an array of this backend of shape ``(B, *x.shape[1:])`` and x's dtype, written in place
    and returned; it may not share memory with ``x`` or ``indices``.

    An index outside ``[0, M)`` raises ``ValueError`` (naming the range found) and leaves ``x`` and
    ``indices`` as they were. Where the backend's gather checks the indices itself as it copies (torch on a
    CPU, OpenCL), ``out`` (or, without one, the cached result of the last gather of this shape) may have been partly
    written by then.
    """
    b = _resolve(backend, x)
    x = _on(b, "x", x)
    idx = _on(b, "indices", indices)
    if len(x.shape) < 1 or x.shape[0] == 0:
        raise ValueError(f"x: expected an array with at least one row, got {describe(x)}")
    if getattr(dtype_of(x), "type", None) not in _FLOATS:
        raise TypeError(f"x: expected a float32 or float64 array (cast other data first), got {describe(x)}")
    if dtype_of(idx) not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"indices: expected an int32 or int64 array of shape (B,), got {describe(idx)}")
    if len(idx.shape) != 1:
        raise ValueError(f"indices: expected shape (B,), got {describe(idx)}")
    m = int(x.shape[0])
    checked_by_gather = bool(idx.shape[0]) and b.gather_checks_indices()
    if idx.shape[0] and not checked_by_gather:
        _check_index_range(b, idx, m)
    shape = (int(idx.shape[0]),) + tuple(x.shape[1:])
    if out is None:
        out = _result(b, "gather", shape, dtype_of(x), {"x": x, "indices": idx})
    else:
        out = _out(b, "out", out, shape, dtype_of(x), {"x": x, "indices": idx})
    if not idx.shape[0]:
        return out
    try:
        got = b.gather(x, idx, out)
    except IndexError:
        if not checked_by_gather:
            raise
        _check_index_range(b, idx, m)  # words the error: the same ValueError as a checked-first backend's
        raise
    return out if got is None else got


def _check_index_range(b: Backend, idx: Any, m: int) -> None:
    lo, hi = b.index_range(idx)
    if lo < 0 or hi >= m:
        raise ValueError(f"indices: expected values in [0, {m - 1}] (rows of x), got values in [{lo}, {hi}]")
