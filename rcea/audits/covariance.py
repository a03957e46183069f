"""Exact full-vocabulary covariance fit between adjacent checkpoints (docs/estimators.md item 6).

For one prefix s with old logits z and new logits z′ (both over the full vocabulary):

* π = softmax(z), log π(v) = z(v) − max z − log Σ_u exp(z(u) − max z)   (stable log-softmax)
* Δz = z′ − z
* predicted Δh(s) = −Cov_{v∼π}(log π(v), Δz(v))
                  = −Σ_v π(v) (log π(v) − E_π[log π]) (Δz(v) − E_π[Δz])
  (first-order change of H(softmax(z + εΔz)) at ε = 0, Lemma 1 of the entropy-mechanism
  notes; E_π[log π] = −H(π))
* observed Δh(s) = H(softmax z′) − H(softmax z), H(p) = −Σ_v p(v) log p(v)

All arithmetic is float64 whatever the input dtype. The kernels process positions
(rows) in chunks: each working buffer holds at most ``chunk_rows × vocab`` float64
values, with ``chunk_rows = max(1, max_chunk_bytes // (8 × vocab))`` unless
``chunk_size`` is given. ``entropy_change_pair`` uses 4 such buffers,
``predicted_entropy_change`` 3 and ``observed_entropy_change`` 2, so the peak extra
memory is at most ``N_WORK_BUFFERS × max_chunk_bytes`` (256 MB at the 64 MB default)
plus O(positions) for the outputs, independent of the number of positions (a single row
is the minimum chunk, so for ``max_chunk_bytes < 8 × vocab`` the bound is one row per
buffer). Buffer rows are padded to a multiple of 64 bytes and start on 64-byte
boundaries, so every position is computed with the same memory alignment whatever the
chunk size: results are bit-identical for any chunk size (tested).

Inputs are 2-D ``[positions × vocab]`` numpy arrays (any real float or integer dtype) or
torch tensors (any device; rows are copied chunk by chunk straight into the float64
buffers, torch is imported only when a tensor is passed). Non-finite logits (NaN, ±inf)
raise ``ValueError`` naming the first offending position.

Across transitions (one row per checkpoint transition θ→θ′, usually the mean over its
sampled positions, see ``aggregate_transitions``) ``covariance_fit`` reports sign
agreement, Spearman and Pearson correlations, the OLS fit of observed on predicted and
median absolute / relative errors; ``covariance_fit_by_group`` does so pooled and per
group (e.g. model). Failed runs are excluded from the fit and listed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from rcea.audits._checks import as_float_array, check_positive_int, check_same_length
from rcea.audits._common import dataclass_dict
from rcea.audits.association import pearson_correlation, spearman_correlation

__all__ = [
    "DEFAULT_MAX_CHUNK_BYTES",
    "N_WORK_BUFFERS",
    "CovarianceFit",
    "CovarianceFitByGroup",
    "EntropyChange",
    "TransitionTable",
    "aggregate_transitions",
    "covariance_fit",
    "covariance_fit_by_group",
    "entropy_change_pair",
    "observed_entropy_change",
    "plan_chunk_rows",
    "predicted_entropy_change",
]

DEFAULT_MAX_CHUNK_BYTES = 64 * 1024 * 1024
"""Default size of one float64 working buffer (64 MiB)."""

N_WORK_BUFFERS = 4
"""Most float64 working buffers any kernel holds at once (``entropy_change_pair``)."""

_ALIGN_VALUES = 8  # 8 float64 = 64 bytes

F = TypeVar("F", bound=Callable[..., Any])


# --------------------------------------------------------------------------- inputs


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach")


class _Rows:
    """Row-chunk reader for a 2-D numpy array or torch tensor."""

    def __init__(self, x: Any, name: str) -> None:
        self.name = name
        if _is_torch(x):
            if x.is_complex() or str(x.dtype) == "torch.bool":
                raise ValueError(f"{name} must hold real numbers, got dtype {x.dtype}")
            self.kind = "torch"
            self.x = x.detach()
            self.shape = tuple(int(s) for s in self.x.shape)
        else:
            arr = np.asarray(x)
            if arr.dtype == np.bool_ or not (
                np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
            ):
                raise ValueError(f"{name} must hold real numbers, got dtype {arr.dtype}")
            self.kind = "numpy"
            self.x = arr
            self.shape = tuple(arr.shape)
        if len(self.shape) != 2:
            raise ValueError(f"{name} must be 2-D [positions x vocab], got shape {self.shape}")
        if self.shape[0] < 1 or self.shape[1] < 1:
            raise ValueError(f"{name} must have at least one position and one vocab entry")

    def load(self, out: np.ndarray[Any, Any], start: int, stop: int) -> None:
        """Copy rows ``start:stop`` into the float64 buffer ``out`` (shape matches)."""
        if self.kind == "numpy":
            np.copyto(out, self.x[start:stop], casting="unsafe")
        else:
            import torch  # the `train` extra: only a torch tensor comes here

            torch.from_numpy(out).copy_(self.x[start:stop])


def _pair_inputs(logits_old: Any, logits_new: Any) -> tuple[_Rows, _Rows]:
    old = _Rows(logits_old, "logits_old")
    new = _Rows(logits_new, "logits_new")
    if old.shape != new.shape:
        raise ValueError(
            f"logits_old and logits_new must have the same shape, got {old.shape} and {new.shape}"
        )
    return old, new


def plan_chunk_rows(
    vocab: int, max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, chunk_size: int | None = None
) -> int:
    """Rows per chunk: ``chunk_size``, else ``max(1, max_chunk_bytes // (8·vocab_padded))``.

    ``vocab_padded`` is ``vocab`` rounded up to a multiple of 8 (64-byte rows), so one
    working buffer never exceeds ``max_chunk_bytes`` unless a single row already does.
    """
    vocab = check_positive_int(vocab, "vocab")
    if chunk_size is not None:
        return check_positive_int(chunk_size, "chunk_size")
    max_chunk_bytes = check_positive_int(max_chunk_bytes, "max_chunk_bytes")
    return max(1, max_chunk_bytes // (8 * _padded(vocab)))


def _padded(vocab: int) -> int:
    return -(-vocab // _ALIGN_VALUES) * _ALIGN_VALUES


class _Buffers:
    """Float64 work buffers whose rows all start on a 64-byte boundary."""

    def __init__(self, count: int, rows: int, vocab: int) -> None:
        self.vocab = vocab
        width = _padded(vocab)
        self.full = []
        for _ in range(count):
            flat = np.empty(rows * width + _ALIGN_VALUES, dtype=np.float64)
            skip = (-flat.ctypes.data % (8 * _ALIGN_VALUES)) // 8
            self.full.append(flat[skip : skip + rows * width].reshape(rows, width))

    def views(self, rows: int) -> list[np.ndarray[Any, Any]]:
        return [b[:rows, : self.vocab] for b in self.full]


def _log_softmax_inplace(z: np.ndarray[Any, Any], p_out: np.ndarray[Any, Any]) -> None:
    """Turn logits ``z`` into log π in place and write π into ``p_out``."""
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=p_out)
    total = p_out.sum(axis=1, keepdims=True)
    z -= np.log(total)
    p_out /= total


def _quiet_fp(func: F) -> F:
    """Run a kernel with floating-point warnings off: non-finite inputs are detected from
    the results and reported as ``ValueError`` instead."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(all="ignore"):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]  # functools.wraps keeps F's signature; mypy types the wrapper as _Wrapped


def _check_finite(values: np.ndarray[Any, Any], start: int, what: str) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        pos = start + int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what} contain a non-finite value (NaN or inf) at position {pos}")


# --------------------------------------------------------------------------- kernels


@dataclass(frozen=True, eq=False)
class EntropyChange:
    """Per-position predicted and observed entropy change, plus the old/new entropies.

    The arrays are float64 ``[positions]`` and read-only.
    """

    predicted: np.ndarray[Any, Any]
    observed: np.ndarray[Any, Any]
    entropy_old: np.ndarray[Any, Any]
    entropy_new: np.ndarray[Any, Any]
    chunk_rows: int

    def __post_init__(self) -> None:
        for arr in (self.predicted, self.observed, self.entropy_old, self.entropy_new):
            arr.flags.writeable = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "predicted": self.predicted.tolist(),
            "observed": self.observed.tolist(),
            "entropy_old": self.entropy_old.tolist(),
            "entropy_new": self.entropy_new.tolist(),
            "chunk_rows": self.chunk_rows,
        }


@_quiet_fp
def entropy_change_pair(
    logits_old: Any,
    logits_new: Any,
    *,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> EntropyChange:
    """Predicted (−Cov_π(log π, Δz)) and observed (H(softmax z′) − H(π)) Δh in one pass.

    See the module docstring for the formulas and the memory bound (4 working buffers of
    ``chunk_rows × vocab`` float64).
    """
    old, new = _pair_inputs(logits_old, logits_new)
    n, vocab = old.shape
    rows = min(plan_chunk_rows(vocab, max_chunk_bytes, chunk_size), n)
    buffers = _Buffers(4, rows, vocab)
    pred = np.empty(n, dtype=np.float64)
    h_old = np.empty(n, dtype=np.float64)
    h_new = np.empty(n, dtype=np.float64)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        a, b, c, d = buffers.views(stop - start)
        old.load(a, start, stop)  # a: z
        new.load(d, start, stop)  # d: z'
        np.subtract(d, a, out=c)  # c: dz
        _log_softmax_inplace(a, b)  # a: log pi, b: pi
        ho = -np.vecdot(b, a)
        e_dz = np.vecdot(b, c)
        a += ho[:, None]  # a: log pi - E[log pi]
        c -= e_dz[:, None]  # c: dz - E[dz]
        c *= a
        pr = -np.vecdot(b, c)
        _log_softmax_inplace(d, a)  # d: log pi', a: pi'
        hn = -np.vecdot(a, d)
        _check_finite(ho + hn + pr, start, "logits_old or logits_new")
        pred[start:stop] = pr
        h_old[start:stop] = ho
        h_new[start:stop] = hn
    return EntropyChange(
        predicted=pred,
        observed=h_new - h_old,
        entropy_old=h_old,
        entropy_new=h_new,
        chunk_rows=rows,
    )


@_quiet_fp
def predicted_entropy_change(
    logits_old: Any,
    logits_new: Any,
    *,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> np.ndarray[Any, Any]:
    """Per-position predicted Δh = −Σ_v π(v)(log π(v) − E_π log π)(Δz(v) − E_π Δz).

    π = softmax(logits_old), Δz = logits_new − logits_old; float64, chunked over positions
    (3 working buffers of ``chunk_rows × vocab`` float64). Returns shape ``[positions]``.
    """
    old, new = _pair_inputs(logits_old, logits_new)
    n, vocab = old.shape
    rows = min(plan_chunk_rows(vocab, max_chunk_bytes, chunk_size), n)
    buffers = _Buffers(3, rows, vocab)
    pred = np.empty(n, dtype=np.float64)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        a, b, c = buffers.views(stop - start)
        old.load(a, start, stop)
        new.load(c, start, stop)
        c -= a  # c: dz
        _log_softmax_inplace(a, b)
        ho = -np.vecdot(b, a)
        e_dz = np.vecdot(b, c)
        a += ho[:, None]
        c -= e_dz[:, None]
        c *= a
        pr = -np.vecdot(b, c)
        _check_finite(pr, start, "logits_old or logits_new")
        pred[start:stop] = pr
    return pred


@_quiet_fp
def observed_entropy_change(
    logits_old: Any,
    logits_new: Any,
    *,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> np.ndarray[Any, Any]:
    """Per-position observed Δh = H(softmax(logits_new)) − H(softmax(logits_old)).

    H(p) = −Σ_v p(v) log p(v) with a stable log-softmax; float64, chunked over positions
    (2 working buffers of ``chunk_rows × vocab`` float64). Returns shape ``[positions]``.
    """
    old, new = _pair_inputs(logits_old, logits_new)
    n, vocab = old.shape
    rows = min(plan_chunk_rows(vocab, max_chunk_bytes, chunk_size), n)
    buffers = _Buffers(2, rows, vocab)
    out = np.empty(n, dtype=np.float64)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        a, b = buffers.views(stop - start)
        old.load(a, start, stop)
        _log_softmax_inplace(a, b)
        ho = -np.vecdot(b, a)
        new.load(a, start, stop)
        _log_softmax_inplace(a, b)
        hn = -np.vecdot(b, a)
        _check_finite(ho + hn, start, "logits_old or logits_new")
        out[start:stop] = hn - ho
    return out


# --------------------------------------------------------------------------- fit


@dataclass(frozen=True)
class TransitionTable:
    """Per-transition means of per-position predicted and observed Δh."""

    transitions: tuple[str, ...]
    predicted: tuple[float, ...]
    observed: tuple[float, ...]
    n_positions: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "transitions": list(self.transitions),
            "predicted": list(self.predicted),
            "observed": list(self.observed),
            "n_positions": list(self.n_positions),
        }


def aggregate_transitions(
    transition_labels: Sequence[Any], predicted: Any, observed: Any
) -> TransitionTable:
    """Average per-position predicted and observed Δh within each transition label.

    predicted_T = mean_{positions s of T} predicted(s), likewise observed. Transitions are
    returned in order of first appearance; labels are converted to ``str``.
    """
    pred = as_float_array(predicted, "predicted")
    obs = as_float_array(observed, "observed")
    check_same_length(transition_labels=transition_labels, predicted=pred, observed=obs)
    labels = [str(t) for t in transition_labels]
    order: dict[str, int] = {}
    codes = np.empty(len(labels), dtype=np.int64)
    for i, t in enumerate(labels):
        codes[i] = order.setdefault(t, len(order))
    counts = np.bincount(codes, minlength=len(order))
    mean_pred = np.bincount(codes, weights=pred, minlength=len(order)) / counts
    mean_obs = np.bincount(codes, weights=obs, minlength=len(order)) / counts
    return TransitionTable(
        transitions=tuple(order),
        predicted=tuple(float(v) for v in mean_pred),
        observed=tuple(float(v) for v in mean_obs),
        n_positions=tuple(int(v) for v in counts),
    )


@dataclass(frozen=True)
class CovarianceFit:
    """Agreement of predicted and observed per-transition Δh (one scope).

    sign_agreement: share of transitions with sign(predicted) == sign(observed) (numpy
    sign, so 0 matches only 0). slope/intercept/r_squared: OLS of observed on predicted,
    observed ≈ intercept + slope · predicted, R² = 1 − SS_res/SS_tot. median_abs_error:
    median |pred − obs|. median_relative_error: median |pred − obs| / |obs| over
    transitions with obs ≠ 0 (``n_relative_error`` used, ``n_zero_observed`` skipped).
    Spearman/Pearson p-values are two-sided (``rcea.audits.association``). ``excluded_runs``:
    the failed runs passed in; ``excluded_transitions``: the transitions of this scope
    dropped because they belong to one. Undefined statistics are ``None``. The
    report's ``covariance.pooled`` and ``covariance.groups`` values are this result.
    """

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    n: int = field(metadata={"description": "transitions in the fit"})
    transitions: tuple[str, ...] = field(metadata={"description": "their labels"})
    sign_agreement: float | None = field(metadata={"description": "share with the same sign"})
    spearman_rho: float | None = field(metadata={"description": "Spearman rho"})
    spearman_p: float | None = field(metadata={"description": "its p"})
    pearson_r: float | None = field(metadata={"description": "Pearson r"})
    pearson_p: float | None = field(metadata={"description": "its p"})
    slope: float | None = field(metadata={"description": "OLS slope"})
    intercept: float | None = field(metadata={"description": "OLS intercept"})
    r_squared: float | None = field(metadata={"description": "R^2"})
    median_abs_error: float | None = field(
        metadata={"description": "median |observed - predicted|"}
    )
    median_relative_error: float | None = field(metadata={"description": "median relative error"})
    n_relative_error: int = field(metadata={"description": "transitions with a relative error"})
    n_zero_observed: int = field(metadata={"description": "transitions with observed = 0"})
    excluded_runs: tuple[str, ...] = field(metadata={"description": "failed runs left out"})
    excluded_transitions: tuple[str, ...] = field(metadata={"description": "their transitions"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


#: The fit's summary statistics, in the order the report's quantities (``covfit_<name>``),
#: its HTML page and ``rcea stats covfit`` show them (docs/estimators.md item 14).
FIT_SUMMARY = (
    "sign_agreement",
    "spearman_rho",
    "pearson_r",
    "slope",
    "intercept",
    "r_squared",
    "median_abs_error",
    "median_relative_error",
)


def _ols(
    x: np.ndarray[Any, Any], y: np.ndarray[Any, Any]
) -> tuple[float | None, float | None, float | None]:
    """slope = Σ(x−x̄)(y−ȳ)/Σ(x−x̄)², intercept = ȳ − slope·x̄, R² = 1 − SS_res/SS_tot."""
    if x.size < 2 or np.all(x == x[0]):
        return None, None, None
    xc = x - x.mean()
    yc = y - y.mean()
    sx = float(np.max(np.abs(xc)))  # rescale so tiny values cannot underflow
    sy = float(np.max(np.abs(yc)))
    if sx == 0.0:
        return None, None, None
    xs = xc / sx
    slope = float(np.dot(xs, yc) / np.dot(xs, xs)) / sx
    intercept = float(y.mean() - slope * x.mean())
    if sy == 0.0:
        return slope, intercept, None
    resid = (y - (intercept + slope * x)) / sy
    ys = yc / sy
    return slope, intercept, float(1.0 - np.dot(resid, resid) / np.dot(ys, ys))


def _fit_rows(
    labels: list[str],
    pred: np.ndarray[Any, Any],
    obs: np.ndarray[Any, Any],
    excluded_runs: tuple[str, ...],
    excluded_transitions: tuple[str, ...],
) -> CovarianceFit:
    n = int(pred.size)
    spear = spearman_correlation(pred, obs)
    pear = pearson_correlation(pred, obs)
    slope, intercept, r2 = _ols(pred, obs)
    abs_err = np.abs(pred - obs)
    nonzero = obs != 0
    n_rel = int(nonzero.sum())
    return CovarianceFit(
        n=n,
        transitions=tuple(labels),
        sign_agreement=float(np.mean(np.sign(pred) == np.sign(obs))) if n else None,
        spearman_rho=spear.estimate,
        spearman_p=spear.p_value,
        pearson_r=pear.estimate,
        pearson_p=pear.p_value,
        slope=slope,
        intercept=intercept,
        r_squared=r2,
        median_abs_error=float(np.median(abs_err)) if n else None,
        median_relative_error=(
            float(np.median(abs_err[nonzero] / np.abs(obs[nonzero]))) if n_rel else None
        ),
        n_relative_error=n_rel,
        n_zero_observed=n - n_rel,
        excluded_runs=excluded_runs,
        excluded_transitions=excluded_transitions,
    )


def _prepare(
    transitions: Sequence[Any],
    predicted: Any,
    observed: Any,
    runs: Sequence[Any] | None,
    excluded_runs: Sequence[Any],
    extra: dict[str, Sequence[Any]] | None = None,
) -> tuple[
    list[str], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], tuple[str, ...]
]:
    pred = as_float_array(predicted, "predicted")
    obs = as_float_array(observed, "observed")
    lengths: dict[str, Any] = {"transitions": transitions, "predicted": pred, "observed": obs}
    if runs is not None:
        lengths["runs"] = runs
    lengths.update(extra or {})
    check_same_length(**lengths)
    labels = [str(t) for t in transitions]
    if len(set(labels)) != len(labels):
        dup = sorted({t for t in labels if labels.count(t) > 1})
        raise ValueError(
            f"transitions must be unique (one row per transition; use aggregate_transitions "
            f"for per-position rows); duplicated: {dup}"
        )
    excl = tuple(sorted({str(r) for r in excluded_runs}))
    if excl and runs is None:
        raise ValueError("excluded_runs given but runs is None: pass the run of each transition")
    keep: np.ndarray[Any, Any]
    if runs is None:
        keep = np.ones(len(labels), dtype=bool)
    else:
        known = {str(r) for r in runs}
        unknown = [r for r in excl if r not in known]
        if unknown:  # listed as excluded while nothing was left out: refused
            raise ValueError(
                f"excluded run(s) {', '.join(unknown)} are not among the runs "
                f"({', '.join(sorted(known))}); check the spelling"
            )
        keep = np.array([str(r) not in excl for r in runs], dtype=bool)
    return labels, pred, obs, keep, excl


def covariance_fit(
    transitions: Sequence[Any],
    predicted: Any,
    observed: Any,
    *,
    runs: Sequence[Any] | None = None,
    excluded_runs: Sequence[Any] = (),
) -> CovarianceFit:
    """Fit of observed on predicted Δh across transitions (one row per transition).

    ``runs`` gives the run of each transition; transitions of runs named in
    ``excluded_runs`` (failed runs, docs/estimators.md item 9) are left out and listed. See
    ``CovarianceFit`` for the statistics; they are ``None`` where undefined (e.g. n < 2,
    constant predicted values, or nothing left after exclusion).
    """
    labels, pred, obs, keep, excl = _prepare(transitions, predicted, observed, runs, excluded_runs)
    dropped = tuple(t for t, k in zip(labels, keep, strict=True) if not k)
    kept = [t for t, k in zip(labels, keep, strict=True) if k]
    return _fit_rows(kept, pred[keep], obs[keep], excl, dropped)


@dataclass(frozen=True)
class CovarianceFitByGroup:
    """The covariance fit pooled over all groups and per group (e.g. per model); the
    report's ``covariance`` section adds the transitions (``rcea.study.report.sections``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    pooled: CovarianceFit = field(metadata={"description": "fit over every non-failed transition"})
    groups: dict[str, CovarianceFit] = field(metadata={"description": "model group -> its fit"})

    def to_dict(self) -> dict[str, Any]:
        return {
            "pooled": self.pooled.to_dict(),
            "groups": {g: fit.to_dict() for g, fit in self.groups.items()},
        }


def covariance_fit_by_group(
    groups: Sequence[Any],
    transitions: Sequence[Any],
    predicted: Any,
    observed: Any,
    *,
    runs: Sequence[Any] | None = None,
    excluded_runs: Sequence[Any] = (),
) -> CovarianceFitByGroup:
    """``covariance_fit`` pooled over all rows and separately for each ``groups`` label.

    Groups appear in order of first appearance; exclusion applies to every scope.
    """
    labels, pred, obs, keep, excl = _prepare(
        transitions, predicted, observed, runs, excluded_runs, {"groups": groups}
    )
    group_labels = np.array([str(g) for g in groups], dtype=object)

    def fit(mask: np.ndarray[Any, Any]) -> CovarianceFit:
        idx = np.flatnonzero(mask)
        kept = [labels[i] for i in idx if keep[i]]
        dropped = tuple(labels[i] for i in idx if not keep[i])
        sel = idx[keep[idx]]
        return _fit_rows(kept, pred[sel], obs[sel], excl, dropped)

    pooled = fit(np.ones(len(labels), dtype=bool))
    per_group = {g: fit(group_labels == g) for g in dict.fromkeys(group_labels.tolist())}
    return CovarianceFitByGroup(pooled=pooled, groups=per_group)
