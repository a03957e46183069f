"""The entropy–performance law and the ordering test (docs/estimators.md item 18).

**Trace and pairing.** A training trace of one (run, model, training seed) logs the mean
token entropy H of the training batch at some steps and the validation accuracy R
(pass@1) at others. Each validation point (s, R) is paired with the latest *defined*
entropy logged at or before s, H(s′) with s′ = max{t ≤ s : H(t) logged and finite};
a validation point with no entropy at or before it is dropped and counted
(``n_unpaired``), and the pair keeps s′ (``entropy_steps``) so a stale entropy is visible.

**The law.** R = −a·exp(H) + b, fitted by ordinary least squares of R on x = exp(H):

    slope = Σ (x−x̄)(R−R̄) / Σ (x−x̄)²,   a = −slope,   b = R̄ − slope·x̄,
    R² = 1 − SS_res / SS_tot,   RMSE = sqrt(SS_res / n),   ceiling = b − a (R at H = 0).

a ≤ 0 (accuracy not falling as entropy rises) is reported as it is, never hidden. The fit
needs ``min_points`` (default 3) pairs and a non-constant exp(H); R² is undefined (None)
when R is constant. The 95 % prediction band at H is the OLS prediction interval
ŷ ± t_{n−2} · s · sqrt(1 + 1/n + (x − x̄)² / Sxx), s² = SS_res / (n − 2).

**Predictability.** Fit on the pairs whose step is at most f × (the trace's last
validation step), f = ``fit_fraction`` (default 0.15; steps count from the start of
training), predict R on the later pairs from their logged H and report that RMSE
(``early_fit_rmse``). Undefined when the early window has fewer than ``min_points`` pairs
or nothing comes after it.

**Across scales.** With at least 3 distinct sizes N (non-embedding parameters): OLS of a
and of b on log N, and the largest size's a, b and ceiling predicted from the fit on the
other sizes (with 3 sizes that is the line through the other two).

**RCEA's comparison.** The same fit and predictability with H replaced by the success-
and failure-conditioned token entropies; :func:`compare_entropies` ranks the entropies by
their mean early-fit RMSE over the runs where every compared entropy has one (R² breaks a
tie and is reported beside it) and says so in one sentence.

**Ordering (RQ1).** Per model scale, over the non-failed runs' endpoints, Kendall's τ-b
between endpoint global entropy and each performance metric:

    τ_b = (n_c − n_d) / sqrt((n₀ − n₁)(n₀ − n₂)),  n₀ = n(n−1)/2,

n₁, n₂ the tied pairs in x and in y. The two-sided permutation p-value is the share of
the n! orderings of y against x whose |n_c − n_d| is at least the observed one (the
denominator is the same for every ordering); exact up to ``max_exact`` = 9 runs
(9! = 362,880 orderings), above that estimated from ``n_random`` random orderings with
a recorded seed (``p_method``). Undefined (None) with fewer than 3 runs or a constant
variable. The rank table ranks every variable in descending order (1 = highest; ties
share their mean rank).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rcea.audits._checks import as_float_array, check_same_length
from rcea.audits._common import check_seed, dataclass_dict, jsonable

__all__ = [
    "DEFAULT_FIT_FRACTION",
    "ENTROPY_KINDS",
    "EntropyComparison",
    "LawFit",
    "LawFitSummary",
    "LawScaling",
    "OrderingTest",
    "PairedTrace",
    "RunLaw",
    "compare_entropies",
    "entropy_order",
    "fit_entropy_law",
    "kendall_permutation_test",
    "kendall_tau_b",
    "law_scaling",
    "pair_trace",
    "run_law",
]

DEFAULT_FIT_FRACTION = 0.15
#: The entropies a trace may carry, in display order: the global one and RCEA's split.
ENTROPY_KINDS: tuple[str, ...] = ("global", "success", "failure")
MIN_POINTS = 3
MAX_EXACT = 9
# |S| ≥ |S_obs| up to float noise: S is an integer count, so half a unit is safe
_TIE_EPS = 0.5


# --------------------------------------------------------------------------- pairing


@dataclass(frozen=True)
class PairedTrace:
    """Validation points with the entropy they are paired with (module docstring)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    steps: tuple[int, ...] = field(metadata={"description": "validation steps"})
    entropy_steps: tuple[int, ...] = field(
        metadata={"description": "the step of the entropy each is paired with"}
    )
    entropy: tuple[float, ...] = field(metadata={"description": "H"})
    accuracy: tuple[float, ...] = field(metadata={"description": "R"})
    n_unpaired: int = field(
        metadata={"description": "validation points before any entropy (dropped)"}
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _step_array(values: Any, name: str) -> np.ndarray[Any, Any]:
    arr = as_float_array(values, name, allow_empty=True)
    if np.any(arr != np.round(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative integers")
    return arr.astype(np.int64)


def pair_trace(
    entropy_steps: Sequence[int] | np.ndarray[Any, Any],
    entropies: Sequence[float | None] | np.ndarray[Any, Any],
    accuracy_steps: Sequence[int] | np.ndarray[Any, Any],
    accuracies: Sequence[float] | np.ndarray[Any, Any],
) -> PairedTrace:
    """Pair each validation point with the latest defined entropy at or before its step.

    ``entropies`` may hold None/NaN (a step whose entropy was undefined): such steps are
    skipped. Steps need not be sorted; repeated entropy steps keep the last value given.
    ``accuracies`` must lie in [0, 1] and their steps be unique."""
    es = _step_array(entropy_steps, "entropy_steps")
    ev = np.asarray(
        [math.nan if v is None else float(v) for v in list(entropies)], dtype=np.float64
    )
    check_same_length(entropy_steps=es, entropies=ev)
    as_ = _step_array(accuracy_steps, "accuracy_steps")
    av = as_float_array(accuracies, "accuracies", allow_empty=True)
    check_same_length(accuracy_steps=as_, accuracies=av)
    if np.any(~np.isfinite(av)) or np.any((av < 0) | (av > 1)):
        raise ValueError("accuracies must be finite and lie in [0, 1]")
    if len(set(as_.tolist())) != as_.size:
        raise ValueError("accuracy_steps must be unique (one validation point per step)")
    if np.any(np.isinf(ev)):
        raise ValueError("entropies must be finite (or None/NaN for an undefined step)")
    latest: dict[int, float] = {}
    for s, v in zip(es.tolist(), ev.tolist(), strict=True):
        if math.isfinite(v):
            latest[s] = v
    defined = np.asarray(sorted(latest), dtype=np.int64)
    steps, e_steps, hs, rs = [], [], [], []
    unpaired = 0
    for i in np.argsort(as_, kind="stable"):
        s = int(as_[i])
        j = int(np.searchsorted(defined, s, side="right")) - 1
        if j < 0:
            unpaired += 1
            continue
        e_step = int(defined[j])
        steps.append(s)
        e_steps.append(e_step)
        hs.append(latest[e_step])
        rs.append(float(av[i]))
    return PairedTrace(tuple(steps), tuple(e_steps), tuple(hs), tuple(rs), unpaired)


# --------------------------------------------------------------------------- the fit


@dataclass(frozen=True, kw_only=True)
class LawFitSummary:
    """OLS of R on exp(H): R = −a·exp(H) + b (module docstring). Undefined values are None
    and ``reason`` says why. The report's keys of a fit; :class:`LawFit` adds what the
    prediction band needs."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    a: float | None = field(
        metadata={"description": "a (minus the slope on exp(H)); a <= 0 is reported"}
    )
    b: float | None = field(metadata={"description": "b (the intercept)"})
    r2: float | None = field(metadata={"description": "R² of the fit (None when R is constant)"})
    rmse: float | None = field(metadata={"description": "root mean squared residual"})
    n: int = field(metadata={"description": "paired points"})
    ceiling: float | None = field(metadata={"description": "b − a: R at H = 0"})
    reason: str | None = field(metadata={"description": "why the fit is undefined, when it is"})

    def to_dict(self) -> dict[str, Any]:
        """The summary's keys (a subclass's own fields are not reported)."""
        return {f.name: jsonable(getattr(self, f.name)) for f in fields(LawFitSummary)}


@dataclass(frozen=True, kw_only=True)
class LawFit(LawFitSummary):
    """The fit with the spread of exp(H) and the residual SD its prediction band uses."""

    x_mean: float | None = field(default=None, repr=False)
    sxx: float | None = field(default=None, repr=False)
    resid_sd: float | None = field(default=None, repr=False)

    @property
    def defined(self) -> bool:
        return self.a is not None

    def predict(self, entropy: Any) -> np.ndarray[Any, Any]:
        """R̂ = −a·exp(H) + b at each H."""
        if self.a is None or self.b is None:
            raise ValueError(f"the law is undefined: {self.reason}")
        x = np.exp(as_float_array(entropy, "entropy", allow_empty=True))
        prediction: np.ndarray[Any, Any] = -self.a * x + self.b
        return prediction

    def band(
        self, entropy: Any, confidence: float = 0.95
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The OLS prediction interval at each H (module docstring); NaN with n ≤ 2."""
        # scipy: ≈ 1 s to import, paid only where it computes (rcea/audits/__init__.py)
        from scipy import stats

        mean = self.predict(entropy)
        x = np.exp(as_float_array(entropy, "entropy", allow_empty=True))
        if self.n <= 2 or self.resid_sd is None or not self.sxx:
            nan = np.full_like(mean, np.nan)
            return nan, nan
        t = float(stats.t.ppf(0.5 + confidence / 2.0, self.n - 2))
        half = t * self.resid_sd * np.sqrt(1.0 + 1.0 / self.n + (x - self.x_mean) ** 2 / self.sxx)
        return mean - half, mean + half


def _undefined(n: int, reason: str) -> LawFit:
    return LawFit(a=None, b=None, r2=None, rmse=None, n=n, ceiling=None, reason=reason)


def fit_entropy_law(
    entropy: Sequence[float] | np.ndarray[Any, Any],
    accuracy: Sequence[float] | np.ndarray[Any, Any],
    *,
    min_points: int = MIN_POINTS,
) -> LawFit:
    """Fit R = −a·exp(H) + b by OLS of R on exp(H) (module docstring)."""
    h = as_float_array(entropy, "entropy", allow_empty=True)
    r = as_float_array(accuracy, "accuracy", allow_empty=True)
    n = check_same_length(entropy=h, accuracy=r)
    if np.any(~np.isfinite(h)) or np.any(~np.isfinite(r)):
        raise ValueError("entropy and accuracy must be finite")
    if n < min_points:
        return _undefined(n, f"{n} point(s), the fit needs {min_points}")
    x = np.exp(h)
    x_mean = float(x.mean())
    xc = x - x_mean
    sxx = float(np.dot(xc, xc))
    if sxx <= 1e-15 * max(1.0, x_mean * x_mean) * n:
        return _undefined(n, "the entropy is constant: exp(H) has no spread")
    r_mean = float(r.mean())
    slope = float(np.dot(xc, r - r_mean)) / sxx
    b = r_mean - slope * x_mean
    resid = r - (slope * x + b)
    ss_res = float(np.dot(resid, resid))
    rc = r - r_mean
    ss_tot = float(np.dot(rc, rc))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 and not np.all(r == r[0]) else None
    resid_sd = math.sqrt(ss_res / (n - 2)) if n > 2 else None
    return LawFit(
        a=-slope,
        b=b,
        r2=r2,
        rmse=math.sqrt(ss_res / n),
        n=n,
        ceiling=b + slope,  # b − a with a = −slope
        reason=None,
        x_mean=x_mean,
        sxx=sxx,
        resid_sd=resid_sd,
    )


@dataclass(frozen=True, kw_only=True)
class RunLaw(LawFitSummary):
    """The law of one trace: the full fit's numbers, the early fit and its prediction's RMSE
    on the rest (the report's ``entropy_law.runs[].entropies`` values)."""

    early_fit_rmse: float | None = field(
        metadata={
            "description": "RMSE on the later points of the fit on the first fit_fraction of steps"
        }
    )
    fit_fraction: float = field(metadata={"description": "f of the early window"})
    cutoff_step: float | None = field(metadata={"description": "f × the last validation step"})
    n_early: int = field(metadata={"description": "points in the early window"})
    n_rest: int = field(metadata={"description": "points after it (the prediction's)"})
    early: LawFitSummary = field(metadata={"description": "the early fit"})
    points: PairedTrace | None = field(
        default=None, repr=False, metadata={"description": "the paired points"}
    )

    def to_dict(self, *, include_points: bool = True) -> dict[str, Any]:
        out = dataclass_dict(self, skip=("early", "points"))
        out["early"] = self.early.to_dict()
        if include_points and self.points is not None:
            out["points"] = self.points.to_dict()
        return out


def run_law(
    entropy_steps: Sequence[int] | np.ndarray[Any, Any],
    entropies: Sequence[float | None] | np.ndarray[Any, Any],
    accuracy_steps: Sequence[int] | np.ndarray[Any, Any],
    accuracies: Sequence[float] | np.ndarray[Any, Any],
    *,
    fit_fraction: float = DEFAULT_FIT_FRACTION,
    min_points: int = MIN_POINTS,
) -> RunLaw:
    """Pair the trace (:func:`pair_trace`), fit the law on every pair and on the early
    window (step ≤ ``fit_fraction`` × last validation step), and score the early fit's
    RMSE on the later pairs."""
    f = float(fit_fraction)
    if not 0.0 < f < 1.0:
        raise ValueError(f"fit_fraction must lie in (0, 1), got {fit_fraction!r}")
    paired = pair_trace(entropy_steps, entropies, accuracy_steps, accuracies)
    h = np.asarray(paired.entropy, dtype=np.float64)
    r = np.asarray(paired.accuracy, dtype=np.float64)
    s = np.asarray(paired.steps, dtype=np.float64)
    fit = fit_entropy_law(h, r, min_points=min_points)
    cutoff = f * float(s.max()) if s.size else None
    early_mask = s <= cutoff if cutoff is not None else np.zeros(0, dtype=bool)
    n_early, n_rest = int(early_mask.sum()), int((~early_mask).sum())
    early = fit_entropy_law(h[early_mask], r[early_mask], min_points=min_points)
    early_rmse, reason = None, None
    if not early.defined:
        reason = f"early fit: {early.reason}"
    elif n_rest == 0:
        reason = "no validation point after the early window"
    else:
        err = early.predict(h[~early_mask]) - r[~early_mask]
        early_rmse = math.sqrt(float(np.mean(err * err)))
    if not fit.defined:
        reason = f"fit: {fit.reason}"
    return RunLaw(
        a=fit.a,
        b=fit.b,
        r2=fit.r2,
        rmse=fit.rmse,
        n=fit.n,
        ceiling=fit.ceiling,
        early_fit_rmse=early_rmse,
        fit_fraction=f,
        cutoff_step=cutoff,
        n_early=n_early,
        n_rest=n_rest,
        early=early,
        points=paired,
        reason=reason,
    )


# --------------------------------------------------------------------------- scaling


@dataclass(frozen=True)
class LineFit:
    """OLS y = intercept + slope · log N."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    slope: float | None = field(metadata={"description": "slope on log N"})
    intercept: float | None = field(metadata={"description": "intercept"})
    r2: float | None = field(metadata={"description": "R² (None with 2 sizes)"})
    n: int = field(metadata={"description": "sizes"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class LawScaling:
    """a and b against log N across sizes, and the largest size predicted from the others."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    labels: tuple[str, ...] = field(metadata={"description": "models with a fitted law"})
    n_params: tuple[float, ...] = field(metadata={"description": "their N_params"})
    a_fit: LineFit = field(metadata={"description": "OLS of a on log N"})
    b_fit: LineFit = field(metadata={"description": "OLS of b on log N"})
    largest: str | None = field(metadata={"description": "the largest size"})
    predicted_a: float | None = field(
        metadata={"description": "its a predicted from the other sizes"}
    )
    predicted_b: float | None = field(
        metadata={"description": "its b predicted from the other sizes"}
    )
    predicted_ceiling: float | None = field(metadata={"description": "predicted b − a"})
    fitted_a: float | None = field(metadata={"description": "its own fitted a"})
    fitted_b: float | None = field(metadata={"description": "its own fitted b"})
    fitted_ceiling: float | None = field(metadata={"description": "its own fitted b − a"})
    ceiling_error: float | None = field(metadata={"description": "predicted − fitted ceiling"})
    reason: str | None = field(
        default=None, metadata={"description": "why undefined (fewer than 3 sizes)"}
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _line(x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]) -> LineFit:
    n = int(x.size)
    if n < 2 or np.all(x == x[0]):
        return LineFit(None, None, None, n)
    xc = x - x.mean()
    slope = float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))
    intercept = float(y.mean() - slope * x.mean())
    resid = y - (intercept + slope * x)
    ss_tot = float(np.dot(y - y.mean(), y - y.mean()))
    r2 = 1.0 - float(np.dot(resid, resid)) / ss_tot if ss_tot > 0 and n > 2 else None
    return LineFit(slope, intercept, r2, n)


def law_scaling(
    labels: Sequence[str],
    n_params: Sequence[float],
    a: Sequence[float],
    b: Sequence[float],
) -> LawScaling:
    """OLS of a and of b on log N over the sizes given (one row each, distinct N > 0),
    and the largest N's a, b and ceiling predicted from the other sizes. Needs ≥ 3 sizes
    (fewer: every number None, ``reason`` says so)."""
    n = check_same_length(labels=labels, n_params=n_params, a=a, b=b)
    logn = np.log(as_float_array(n_params, "n_params", allow_empty=True))
    if n and np.any(~np.isfinite(logn)):
        raise ValueError("n_params must be positive and finite")
    av = as_float_array(a, "a", allow_empty=True)
    bv = as_float_array(b, "b", allow_empty=True)
    if len(set(np.asarray(n_params, dtype=float).tolist())) != n:
        raise ValueError("n_params must be distinct: one row per model size")
    empty = LineFit(None, None, None, n)
    none = dict.fromkeys(
        (
            "predicted_a",
            "predicted_b",
            "predicted_ceiling",
            "fitted_a",
            "fitted_b",
            "fitted_ceiling",
            "ceiling_error",
        )
    )
    if n < 3:
        return LawScaling(
            tuple(labels),
            tuple(float(v) for v in n_params),
            empty,
            empty,
            None,
            **none,
            reason=f"{n} model size(s) with a fitted law; the scaling fit needs 3",
        )
    order = np.argsort(logn)
    top, rest = int(order[-1]), order[:-1]
    a_rest, b_rest = _line(logn[rest], av[rest]), _line(logn[rest], bv[rest])
    assert a_rest.slope is not None and a_rest.intercept is not None
    assert b_rest.slope is not None and b_rest.intercept is not None
    pa = a_rest.intercept + a_rest.slope * float(logn[top])
    pb = b_rest.intercept + b_rest.slope * float(logn[top])
    fitted_ceiling = float(bv[top] - av[top])
    return LawScaling(
        labels=tuple(str(x) for x in labels),
        n_params=tuple(float(v) for v in n_params),
        a_fit=_line(logn, av),
        b_fit=_line(logn, bv),
        largest=str(labels[top]),
        predicted_a=pa,
        predicted_b=pb,
        predicted_ceiling=pb - pa,
        fitted_a=float(av[top]),
        fitted_b=float(bv[top]),
        fitted_ceiling=fitted_ceiling,
        ceiling_error=(pb - pa) - fitted_ceiling,
    )


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class EntropyComparison:
    """Which entropy's law predicted R best over the runs where all compared ones fit."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    kinds: tuple[str, ...] = field(metadata={"description": "entropies compared"})
    runs: tuple[str, ...] = field(
        metadata={"description": "runs where every compared entropy has an early fit"}
    )
    mean_early_fit_rmse: dict[str, float | None] = field(
        metadata={"description": "kind -> mean over runs"}
    )
    mean_r2: dict[str, float | None] = field(
        metadata={"description": "kind -> mean R² over the same runs"}
    )
    best: str | None = field(metadata={"description": "lowest mean early-fit RMSE"})
    sentence: str = field(metadata={"description": "the finding in words"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


_NAMES = {
    "global": "global entropy",
    "success": "success-conditioned token entropy",
    "failure": "failure-conditioned token entropy",
}


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def compare_entropies(laws: Mapping[str, Mapping[str, RunLaw | None]]) -> EntropyComparison:
    """Rank the entropies (``laws``: kind → run label → its :class:`RunLaw`, None when the
    trace lacks that entropy) by mean early-fit RMSE over the runs where every kind
    present has one; mean R² over the same runs breaks a tie and is reported beside it."""
    kinds = tuple(k for k in laws if any(v is not None for v in laws[k].values()))
    run_sets = [
        {run for run, law in laws[k].items() if law is not None and law.early_fit_rmse is not None}
        for k in kinds
    ]
    common = sorted(set.intersection(*run_sets)) if run_sets else []
    # every kind has a law with an early-fit RMSE on every common run (run_sets above)
    fitted = {k: [law for run in common if (law := laws[k][run]) is not None] for k in kinds}
    rmse = {
        k: _mean([v for law in fitted[k] if (v := law.early_fit_rmse) is not None]) for k in kinds
    }
    r2 = {k: _mean([v for law in fitted[k] if (v := law.r2) is not None]) for k in kinds}
    if len(kinds) < 2 or not common:
        why = (
            "only one entropy was logged"
            if len(kinds) < 2
            else "no run has an early-fit RMSE for every entropy"
        )
        return EntropyComparison(kinds, tuple(common), rmse, r2, None, f"No comparison: {why}.")
    # with a common run every kind has a mean early-fit RMSE
    mean_rmse = {k: v for k, v in rmse.items() if v is not None}

    def rank_key(k: str) -> tuple[float, float]:
        kind_r2 = r2[k]
        return mean_rmse[k], -(kind_r2 if kind_r2 is not None else -math.inf)

    ranked = sorted(kinds, key=rank_key)
    best, second = ranked[0], ranked[1]
    others = ", ".join(f"{mean_rmse[k]:.4f} ({_NAMES.get(k, k)})" for k in ranked[1:])
    if mean_rmse[best] == mean_rmse[second]:
        lead = f"{_NAMES.get(best, best)} and {_NAMES.get(second, second)} tied"
    else:
        ratio = mean_rmse[second] / mean_rmse[best] if mean_rmse[best] else math.inf
        lead = (
            f"{_NAMES.get(best, best)} predicted performance best "
            f"({ratio:.2f}x lower early-fit RMSE than the next)"
        )
    r2_text = ", ".join(
        f"{_NAMES.get(k, k)} {r2[k]:.3f}" if r2[k] is not None else f"{_NAMES.get(k, k)} n/a"
        for k in ranked
    )
    sentence = (
        f"In this study the {lead}: mean early-fit RMSE {mean_rmse[best]:.4f} against {others}, "
        f"over {len(common)} run(s) with every entropy; mean R² {r2_text}."
    )
    return EntropyComparison(kinds, tuple(common), rmse, r2, best, sentence)


# --------------------------------------------------------------------------- ordering


def _pair_signs(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    i, j = np.triu_indices(v.size, k=1)
    signs: np.ndarray[Any, Any] = np.sign(v[j] - v[i])
    return signs


def _tau_denominator(sx: np.ndarray[Any, Any], sy: np.ndarray[Any, Any]) -> float:
    return math.sqrt(float(np.count_nonzero(sx)) * float(np.count_nonzero(sy)))


def kendall_tau_b(x: Any, y: Any) -> float | None:
    """Kendall's τ-b of ``x`` and ``y`` (module docstring); None with n < 2 or a
    constant variable."""
    xa = as_float_array(x, "x", allow_empty=True)
    ya = as_float_array(y, "y", allow_empty=True)
    check_same_length(x=xa, y=ya)
    if xa.size < 2:
        return None
    sx, sy = _pair_signs(xa), _pair_signs(ya)
    den = _tau_denominator(sx, sy)
    return float(np.dot(sx, sy)) / den if den else None


def kendall_permutation_test(
    x: Any, y: Any, *, max_exact: int = MAX_EXACT, n_random: int = 100_000, seed: int = 0
) -> tuple[float | None, float | None, str]:
    """(τ-b, two-sided permutation p-value, ``exact`` | ``monte_carlo``): the share of
    orderings of ``y`` against ``x`` with |n_c − n_d| ≥ the observed (module docstring)."""
    xa = as_float_array(x, "x", allow_empty=True)
    ya = as_float_array(y, "y", allow_empty=True)
    n = check_same_length(x=xa, y=ya)
    tau = kendall_tau_b(xa, ya)
    method = "exact" if n <= max_exact else "monte_carlo"
    if tau is None or n < 3:
        return tau, None, method
    sx = _pair_signs(xa)
    i, j = np.triu_indices(n, k=1)
    observed = abs(float(np.dot(sx, _pair_signs(ya))))
    hits = total = 0
    if method == "exact":
        # every ordering, in chunks of 200,000 so that memory stays bounded at any n
        perms = itertools.permutations(range(n))
        while True:
            chunk = np.fromiter(
                itertools.chain.from_iterable(itertools.islice(perms, 200_000)), dtype=np.int8
            ).reshape(-1, n)
            if chunk.size == 0:
                break
            yp = ya[chunk]
            s = np.abs(np.sign(yp[:, j] - yp[:, i]) @ sx)
            hits += int(np.count_nonzero(s >= observed - _TIE_EPS))
            total += chunk.shape[0]
    else:
        rng = np.random.default_rng(check_seed(seed))
        for start in range(0, n_random, 20_000):
            m = min(20_000, n_random - start)
            yp = ya[rng.permuted(np.tile(np.arange(n), (m, 1)), axis=1)]
            s = np.abs(np.sign(yp[:, j] - yp[:, i]) @ sx)
            hits += int(np.count_nonzero(s >= observed - _TIE_EPS))
            total += m
    return tau, hits / total, method


def _desc_ranks(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    # scipy: ≈ 1 s to import, paid only where it computes (rcea/audits/__init__.py)
    from scipy import stats

    ranks: np.ndarray[Any, Any] = stats.rankdata(-v, method="average")
    return ranks


@dataclass(frozen=True)
class MetricOrder:
    """τ-b of endpoint entropy against one metric, over the runs that have both."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    metric: str = field(metadata={"description": "greedy_accuracy, macro_accuracy or pass_at_k"})
    kendall_tau: float | None = field(
        metadata={"description": "Kendall τ-b of endpoint entropy and it"}
    )
    p_value: float | None = field(metadata={"description": "two-sided permutation p-value"})
    p_method: str = field(metadata={"description": "exact or monte_carlo"})
    n: int = field(metadata={"description": "runs in the test"})
    runs: tuple[str, ...] = field(metadata={"description": "them"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class OrderingTest:
    """RQ1 at one model scale: does endpoint global entropy order the runs' performance?"""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    model: str = field(metadata={"description": "model scale"})
    metrics: tuple[MetricOrder, ...] = field(metadata={"description": "one test per metric"})
    rank_table: tuple[dict[str, str | float | None], ...] = field(
        metadata={
            "description": "per run: entropy, each metric and their descending ranks (1 = highest)"
        }
    )
    excluded: tuple[str, ...] = field(metadata={"description": "failed runs left out"})
    seed: int = field(metadata={"description": "seed of random orderings (above 9 runs)"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def entropy_order(
    model: str,
    runs: Sequence[str],
    entropy: Sequence[float],
    metrics: Mapping[str, Sequence[float | None]],
    *,
    excluded: Sequence[str] = (),
    max_exact: int = MAX_EXACT,
    n_random: int = 100_000,
    seed: int = 0,
) -> OrderingTest:
    """Kendall τ-b of endpoint ``entropy`` against each metric (None/NaN: the run lacks
    it and is left out of that metric's test), with the permutation p-value and the rank
    table (module docstring). Runs named in ``excluded`` (failed) are dropped and listed."""
    n = check_same_length(runs=runs, entropy=entropy)
    names = [str(r) for r in runs]
    if len(set(names)) != n:
        raise ValueError(f"runs must be unique at one model scale; got {names}")
    for name, values in metrics.items():
        if len(values) != n:
            raise ValueError(f"metric {name!r} has {len(values)} values for {n} runs")
    drop = {str(e) for e in excluded}
    keep = [i for i in range(n) if names[i] not in drop]
    h = as_float_array([entropy[i] for i in keep], "entropy", allow_empty=True)
    if np.any(~np.isfinite(h)):
        raise ValueError("endpoint entropy must be finite")
    kept = [names[i] for i in keep]

    def column(values: Sequence[float | None]) -> np.ndarray[Any, Any]:
        picked = [values[i] for i in keep]
        return np.asarray(
            [math.nan if v is None else float(v) for v in picked],
            dtype=np.float64,
        )

    table: list[dict[str, Any]] = [
        {"run": r, "entropy": float(v)} for r, v in zip(kept, h.tolist(), strict=True)
    ]
    for row, rank in zip(table, _desc_ranks(h).tolist() if h.size else [], strict=True):
        row["entropy_rank"] = rank
    results = []
    for name, values in metrics.items():
        col = column(values)
        ok = np.isfinite(col)
        ranks = np.full(col.size, math.nan)
        if ok.any():
            ranks[ok] = _desc_ranks(col[ok])
        for k, row in enumerate(table):
            row[name] = float(col[k]) if ok[k] else None
            row[f"{name}_rank"] = float(ranks[k]) if ok[k] else None
        tau, p, method = kendall_permutation_test(
            h[ok], col[ok], max_exact=max_exact, n_random=n_random, seed=seed
        )
        results.append(
            MetricOrder(
                metric=name,
                kendall_tau=tau,
                p_value=p,
                p_method=method,
                n=int(ok.sum()),
                runs=tuple(r for r, good in zip(kept, ok.tolist(), strict=True) if good),
            )
        )
    return OrderingTest(
        model=str(model),
        metrics=tuple(results),
        rank_table=tuple(table),
        excluded=tuple(sorted(drop & set(names))),
        seed=check_seed(seed),
    )
