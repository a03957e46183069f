"""Correlation helpers and the exploratory retention–pass@k association
(docs/estimators.md items 6 and 14).

Pearson's r = Σ (x−x̄)(y−ȳ) / sqrt(Σ (x−x̄)² · Σ (y−ȳ)²); Spearman's ρ is Pearson's r of
the average ranks (ties share the mean of their ranks). Both two-sided p-values use
t = r·sqrt((n−2)/(1−r²)) with n−2 degrees of freedom (p = 0 when |r| = 1); for Pearson
this equals the exact null distribution of r under bivariate normality, for Spearman it
is the usual large-sample approximation (the same as ``scipy.stats.spearmanr``).

Undefined values are ``None``, never NaN: the estimate when n < 2 or either variable is
constant, the p-value additionally when n < 3.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import as_float_array, check_same_length

__all__ = [
    "Correlation",
    "RetentionPasskAssociation",
    "pearson_correlation",
    "retention_passk_spearman",
    "spearman_correlation",
]


@dataclass(frozen=True)
class Correlation:
    """A correlation coefficient with its two-sided p-value and sample size."""

    method: str
    estimate: float | None
    p_value: float | None
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "estimate": self.estimate,
            "p_value": self.p_value,
            "n": self.n,
        }


def _pearson_core(
    x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
) -> tuple[float | None, float | None]:
    # scipy: ≈ 1 s to import, paid only where it computes (rcea/audits/__init__.py)
    from scipy import stats

    n = x.size
    if n < 2:
        return None, None
    if np.all(x == x[0]) or np.all(y == y[0]):
        return None, None  # a constant variable has no correlation
    xc = x - x.mean()
    yc = y - y.mean()
    sx = float(np.max(np.abs(xc)))  # rescale so tiny values cannot underflow
    sy = float(np.max(np.abs(yc)))
    if sx == 0.0 or sy == 0.0:
        return None, None
    xc /= sx
    yc /= sy
    r = float(np.dot(xc, yc)) / math.sqrt(float(np.dot(xc, xc)) * float(np.dot(yc, yc)))
    r = max(-1.0, min(1.0, r))
    if n < 3:
        return r, None
    if abs(r) == 1.0:
        return r, 0.0
    df = n - 2
    t = r * math.sqrt(df / ((1.0 - r) * (1.0 + r)))
    p = float(2.0 * stats.t.sf(abs(t), df))
    return r, min(1.0, p)


def _pair_arrays(x: Any, y: Any) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    xa = as_float_array(x, "x", allow_empty=True)
    ya = as_float_array(y, "y", allow_empty=True)
    check_same_length(x=xa, y=ya)
    return xa, ya


def pearson_correlation(x: Any, y: Any) -> Correlation:
    """Pearson's r of ``x`` and ``y`` with the two-sided t-test p-value (df = n − 2)."""
    xa, ya = _pair_arrays(x, y)
    r, p = _pearson_core(xa, ya)
    return Correlation(method="pearson", estimate=r, p_value=p, n=int(xa.size))


def spearman_correlation(x: Any, y: Any) -> Correlation:
    """Spearman's ρ = Pearson's r of the average ranks; two-sided t-approximation p-value."""
    # scipy: ≈ 1 s to import, paid only where it computes (rcea/audits/__init__.py)
    from scipy import stats

    xa, ya = _pair_arrays(x, y)
    if xa.size == 0:
        return Correlation(method="spearman", estimate=None, p_value=None, n=0)
    rho, p = _pearson_core(stats.rankdata(xa), stats.rankdata(ya))
    return Correlation(method="spearman", estimate=rho, p_value=p, n=int(xa.size))


@dataclass(frozen=True)
class RetentionPasskAssociation:
    """Exploratory method-level Spearman association of mode retention with pass@k: the
    report's ``association.by_model`` fits are this result, its fields (with these
    descriptions) the section's keys (``rcea.study.report.schema``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    rho: float | None = field(metadata={"description": "Spearman rho"})
    p_value: float | None = field(metadata={"description": "its p"})
    n: int = field(metadata={"description": "methods in the fit"})
    methods: tuple[str, ...] = field(metadata={"description": "them"})
    excluded: tuple[str, ...] = field(metadata={"description": "failed methods left out"})
    missing: tuple[str, ...] = field(metadata={"description": "methods without both numbers"})

    def to_dict(self) -> dict[str, Any]:
        return {
            "rho": self.rho,
            "p_value": self.p_value,
            "n": self.n,
            "methods": list(self.methods),
            "excluded": list(self.excluded),
            "missing": list(self.missing),
        }


def _optional_value(value: Any, name: str, method: str) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} for method {method!r} is not a number: {value!r}") from None
    if math.isnan(v):
        return None
    if not math.isfinite(v):
        raise ValueError(f"{name} for method {method!r} is not finite: {value!r}")
    return v


def retention_passk_spearman(
    methods: Sequence[str],
    retention: Sequence[float | None],
    passk: Sequence[float | None],
    excluded: Sequence[str] = (),
) -> RetentionPasskAssociation:
    """Spearman's ρ between per-method mode retention and pass@k (docs/estimators.md item 14).

    ``methods`` label the rows (unique). Methods named in ``excluded`` (runs flagged by
    the failure detector) are dropped and listed; rows whose retention or pass@k is
    ``None``/NaN (not run) are dropped and listed as ``missing``. ρ and p are ``None``
    when fewer than 3 methods remain or either variable is constant.
    """
    n_rows = check_same_length(methods=methods, retention=retention, passk=passk)
    names = [str(m) for m in methods]
    if len(set(names)) != len(names):
        dup = sorted({m for m in names if names.count(m) > 1})
        raise ValueError(f"methods must be unique; duplicated: {dup}")
    excluded_set = {str(e) for e in excluded}
    used: list[str] = []
    missing: list[str] = []
    xs: list[float] = []
    ys: list[float] = []
    for i in range(n_rows):
        name = names[i]
        if name in excluded_set:
            continue
        r = _optional_value(retention[i], "retention", name)
        p = _optional_value(passk[i], "passk", name)
        if r is None or p is None:
            missing.append(name)
            continue
        used.append(name)
        xs.append(r)
        ys.append(p)
    corr = spearman_correlation(xs, ys)
    rho, p_value = (corr.estimate, corr.p_value) if len(used) >= 3 else (None, None)
    return RetentionPasskAssociation(
        rho=rho,
        p_value=p_value,
        n=len(used),
        methods=tuple(used),
        excluded=tuple(sorted(excluded_set)),
        missing=tuple(missing),
    )
