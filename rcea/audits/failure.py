"""Training-failure detector on a dense accuracy trace (docs/estimators.md items 9 and 14).

For an accuracy trace a(s) at strictly increasing steps s_1 < … < s_T:

    peak      = max_s a(s)   (peak_step = the EARLIEST step attaining it,
                              last_peak_step = the LAST step attaining it)
    endpoint  = a(s_T)
    drop      = peak − endpoint
    failed    ⇔ peak ≥ peak_min  and  endpoint ≤ endpoint_max  and  drop ≥ drop_min
              (defaults 0.30, 0.05, 0.30; all three configurable).

``collapse_step`` (only for a failed run) is the first step after the peak whose accuracy
is ≤ endpoint_max. Checkpoint policy (item 14): a failed (run, model) is reported at its
last pre-failure milestone = the latest milestone at or before ``last_peak_step``, the
last step attaining the peak (on the supplement's Clip-Cov-7B trace, peak 76.6 % at steps
1,000 and 2,400 with milestones every 2,000 → step 2,000).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import as_float_array, check_probability, check_same_length
from rcea.audits._common import dataclass_dict

__all__ = ["FailureCheck", "detect_training_failure", "last_milestone_before_failure"]


@dataclass(frozen=True)
class FailureCheck:
    """Result of :func:`detect_training_failure`; ``*_ok`` say which criterion holds and
    ``failed`` is their conjunction."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    peak: float = field(metadata={"description": "peak accuracy"})
    peak_step: int = field(metadata={"description": "step of the peak"})
    last_peak_step: int = field(metadata={"description": "last step at the peak"})
    endpoint: float = field(metadata={"description": "accuracy at the endpoint"})
    endpoint_step: int = field(metadata={"description": "endpoint step"})
    drop: float = field(metadata={"description": "peak - endpoint"})
    peak_ok: bool = field(metadata={"description": "peak >= peak_min"})
    endpoint_ok: bool = field(metadata={"description": "endpoint <= endpoint_max"})
    drop_ok: bool = field(metadata={"description": "drop >= drop_min"})
    failed: bool = field(metadata={"description": "all three"})
    collapse_step: int | None = field(metadata={"description": "first step of the collapse"})
    peak_min: float = field(metadata={"description": "threshold"})
    endpoint_max: float = field(metadata={"description": "threshold"})
    drop_min: float = field(metadata={"description": "threshold"})
    n_points: int = field(metadata={"description": "trace points"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _steps(steps: Any, name: str = "steps") -> np.ndarray[Any, Any]:
    arr = as_float_array(steps, name)
    if np.any(arr != np.round(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative integers")
    return arr.astype(np.int64)


def detect_training_failure(
    steps: Sequence[int] | np.ndarray[Any, Any],
    accuracies: Sequence[float] | np.ndarray[Any, Any],
    *,
    peak_min: float = 0.30,
    endpoint_max: float = 0.05,
    drop_min: float = 0.30,
) -> FailureCheck:
    """Flag a collapsed run: peak ≥ peak_min, endpoint ≤ endpoint_max and
    peak − endpoint ≥ drop_min (see the module docstring). ``steps`` must be strictly
    increasing integers and ``accuracies`` lie in [0, 1]."""
    s = _steps(steps)
    a = as_float_array(accuracies, "accuracies")
    check_same_length(steps=s, accuracies=a)
    if np.any(np.diff(s) <= 0):
        raise ValueError("steps must be strictly increasing")
    if np.any((a < 0) | (a > 1)):
        raise ValueError("accuracies must lie in [0, 1]")
    peak_min = check_probability(peak_min, "peak_min")
    endpoint_max = check_probability(endpoint_max, "endpoint_max")
    drop_min = check_probability(drop_min, "drop_min")
    i_peak = int(np.argmax(a))  # first maximum
    i_last_peak = int(a.size - 1 - np.argmax(a[::-1]))  # last maximum
    peak, endpoint = float(a[i_peak]), float(a[-1])
    drop = peak - endpoint
    peak_ok, end_ok, drop_ok = peak >= peak_min, endpoint <= endpoint_max, drop >= drop_min
    failed = peak_ok and end_ok and drop_ok
    collapse = None
    if failed:
        after = np.flatnonzero(a[i_peak:] <= endpoint_max)
        collapse = int(s[i_peak + int(after[0])])
    return FailureCheck(
        peak=peak,
        peak_step=int(s[i_peak]),
        last_peak_step=int(s[i_last_peak]),
        endpoint=endpoint,
        endpoint_step=int(s[-1]),
        drop=drop,
        peak_ok=peak_ok,
        endpoint_ok=end_ok,
        drop_ok=drop_ok,
        failed=failed,
        collapse_step=collapse,
        peak_min=peak_min,
        endpoint_max=endpoint_max,
        drop_min=drop_min,
        n_points=int(s.size),
    )


def last_milestone_before_failure(milestones: Iterable[int], failure: FailureCheck) -> int | None:
    """The latest milestone step ≤ ``failure.last_peak_step`` (the last step attaining
    the peak) of a failed run (``None`` if no milestone is that early). Raises
    ``ValueError`` for a run that did not fail: such a run is reported at its final
    checkpoint instead."""
    if not failure.failed:
        raise ValueError("the run did not fail; report it at its final checkpoint")
    ms = _steps(list(milestones), "milestones")
    ok = ms[ms <= failure.last_peak_step]
    return int(ok.max()) if ok.size else None
