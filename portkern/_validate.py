"""Argument checks shared by the public API: each names the argument, what was expected and what was given."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

FLOAT_DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def dtype_arg(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in FLOAT_DTYPES:
        raise ValueError(f"dtype: expected 'float32' or 'float64', got {dtype!r}")
    return FLOAT_DTYPES[dt.name]  # native byte order: ">f4" names float32, and kernels read native floats


def int_arg(name: str, value: Any, lo: int, hi: int) -> int:
    """An integer (not a bool) in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int in [{lo}, {hi}], got {type(value).__name__} {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name}: expected an int in [{lo}, {hi}], got {value}")
    return int(value)


def unit_float_arg(name: str, value: Any) -> float:
    """A real number in [0, 1] (discount factors, GAE lambda)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a float in [0, 1], got {type(value).__name__} {value!r}")
    v = float(value)
    if not 0.0 <= v <= 1.0:  # also rejects NaN
        raise ValueError(f"{name}: expected a float in [0, 1], got {value!r}")
    return v


def nonneg_float_arg(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a finite float >= 0, got {type(value).__name__} {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v >= 0.0):
        raise ValueError(f"{name}: expected a finite float >= 0, got {value!r}")
    return v


def dtype_of(a: Any) -> np.dtype | None:
    """The NumPy dtype of an array of any library, or None if it has none NumPy knows.

    NumPy, CuPy, pyopencl and Numba arrays carry NumPy dtypes; PyTorch's (``torch.float32``) are
    not, and are mapped by their name, which NumPy spells the same way (``bfloat16`` has no NumPy
    dtype: None).
    """
    dt = getattr(a, "dtype", None)
    if dt is None:
        return None
    try:  # every buffer op asks this several times per call: a dict hit, not np.dtype's raise for torch's
        return _DTYPES[dt]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype object, looked up every time
        pass
    try:
        found = np.dtype(dt)
    except TypeError:
        try:
            found = np.dtype(str(dt).rpartition(".")[2])
        except TypeError:
            found = None
    if len(_DTYPES) < 256:  # a few dtype objects per library; bounded all the same
        try:
            _DTYPES[dt] = found
        except TypeError:
            pass
    return found


#: dtype_of's answers per dtype object seen (torch.float32 -> float32; a NumPy dtype -> itself).
_DTYPES: dict[Any, np.dtype | None] = {}


def describe(a: Any) -> str:
    """'shape (3, 4) float32' for error messages."""
    shape = getattr(a, "shape", None)
    dtype = getattr(a, "dtype", None)
    if shape is None:
        return type(a).__name__
    return f"shape {tuple(shape)} {dtype}"
