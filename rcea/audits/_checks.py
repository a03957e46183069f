"""Input validation shared by the estimators: every bad input raises ``ValueError``
with a message that says what is wrong (and which argument)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def as_float_array(values: Any, name: str, *, allow_empty: bool = False) -> np.ndarray[Any, Any]:
    """Return ``values`` as a 1-D float64 array of finite numbers."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} is empty")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} contains a non-finite value ({arr[i]}) at index {i}")
    return arr


def as_binary_array(values: Any, name: str, *, allow_empty: bool = False) -> np.ndarray[Any, Any]:
    """Return ``values`` as a 1-D int8 array whose entries are all 0 or 1."""
    arr = as_float_array(values, name, allow_empty=allow_empty)
    bad = (arr != 0) & (arr != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must contain only 0 and 1, got {arr[i]} at index {i}")
    return arr.astype(np.int8)


def check_same_length(**arrays: Sequence[Any] | np.ndarray[Any, Any]) -> int:
    """Raise unless all arguments have the same length; return that length."""
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise ValueError(f"length mismatch: {desc}")
    return next(iter(lengths.values()), 0)


def check_probability(value: float, name: str) -> float:
    """Raise unless ``value`` is a finite number in [0, 1]."""
    if not np.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return float(value)


def check_positive_int(value: int, name: str) -> int:
    """Raise unless ``value`` is an integer >= 1."""
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
