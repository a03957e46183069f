"""Several training seeds of one checkpoint (docs/estimators.md item 17).

A training seed (a replicate of the training run; not the per-record decoding ``seed``)
is part of a checkpoint's identity: (run, model, training seed, step). Across the seeds
s = 1..S of one (run, model, step), each seed contributes per-question values v_s(x) of
one quantity and the quantity's seed-level estimate θ̂_s = f(v_s) (f the quantity's own
pooling over questions). Reported:

    mean            θ̄ = (1/S) Σ_s θ̂_s
    between-seed SD sd = sqrt(Σ_s (θ̂_s − θ̄)² / (S − 1))          (S ≥ 2)
    95% CI          percentile interval of a hierarchical bootstrap: each replicate draws
                    S seeds with replacement, then, for each drawn seed, its questions
                    with replacement (n_s of them), applies f to the drawn questions and
                    averages the S results; B = 10,000 replicates by default.

With one seed there is no between-seed spread and no interval (``single_seed``): the
report says "single seed". The draw order is fixed so the interval is reproducible from
the recorded seed: ``rng = numpy.random.default_rng(seed)``; ``J = rng.integers(0, S,
size=(B, S))`` (the seeds of every replicate, seeds in ascending id order); then for each
seed s in that order, the slots (b, k) with J[b,k] = s in row-major order, CHUNK (256) at a
time: ``rng.integers(0, n_s, size=(m, n_s))`` gives the questions of those m slots, one row
each. Replicates whose value is not finite (a ratio over a resample with
a zero denominator) are left out and counted (``n_boot_nonfinite``).

The poolings f (``STATISTICS``), per question x:

* ``macro_mean``: mean_x v(x) — W (item 15), retention and realization retention (per
  question ratios against the same model's base), pass@k (item 8).
* ``geometric_mean``: exp(mean_x log v(x)) for v(x) > 0 — the paired ρ_H (item 3), v(x) =
  Ĥ_tok,−(x)/Ĥ_tok,+(x).
* ``median``: the median of v(x) (``numpy.median``) — item 16's per-question ratios M_x/T_x.
* ``ratio_of_sums``: Σ_x a(x) / Σ_x b(x) — item 16's M and T and its tail share (a, b the
  question's sums in the majority mode and in C / in the tail), item 7's success-stratum
  tail share (a, b the question's positive mass in the tail and in the stratum).
* ``ratio_of_ratios``: (Σ a / Σ b) / (Σ c / Σ d) — the concentration ratio M/T (item 16).

A ratio of sums is pooled over questions, so its bootstrap resamples each question's sums
and re-forms the ratio from the resampled sums (never a mean of per-question ratios).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rcea.audits._checks import check_positive_int
from rcea.audits._common import (
    check_confidence,
    check_seed,
    dataclass_dict,
    jsonable,
    percentile_interval,
)

__all__ = ["STATISTICS", "AcrossSeeds", "SeedEstimate", "across_seeds"]

Array = np.ndarray[Any, Any]

#: replicates evaluated together (bounds memory: CHUNK × questions × columns floats)
CHUNK = 256


def _macro_mean(v: Array) -> Array:
    return np.asarray(v[..., 0].mean(axis=-1))


def _geometric_mean(v: Array) -> Array:
    return np.asarray(np.exp(np.log(v[..., 0]).mean(axis=-1)))


def _median(v: Array) -> Array:
    return np.asarray(np.median(v[..., 0], axis=-1))


def _ratio(num: Array, den: Array) -> Array:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(num / den)


def _ratio_of_sums(v: Array) -> Array:
    s = v.sum(axis=-2)
    return _ratio(s[..., 0], s[..., 1])


def _ratio_of_ratios(v: Array) -> Array:
    s = v.sum(axis=-2)
    return _ratio(_ratio(s[..., 0], s[..., 1]), _ratio(s[..., 2], s[..., 3]))


#: pooling name → (columns per question, f over the question axis of (..., n, columns))
STATISTICS: dict[str, tuple[int, Callable[[Array], Array]]] = {
    "macro_mean": (1, _macro_mean),
    "geometric_mean": (1, _geometric_mean),
    "median": (1, _median),
    "ratio_of_sums": (2, _ratio_of_sums),
    "ratio_of_ratios": (4, _ratio_of_ratios),
}


@dataclass(frozen=True)
class SeedEstimate:
    """One training seed's estimate θ̂_s over its ``n_questions`` questions (``None``
    when it has none, or the pooling is undefined on them: left out of the aggregate)."""

    train_seed: int
    value: float | None
    n_questions: int

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class AcrossSeeds:
    """The across-seed aggregate of one quantity at one (run, model, step).

    ``n_seeds`` counts the seeds with an estimate (``seeds`` lists every seed given);
    ``single_seed`` is true when fewer than two have one — then ``between_seed_sd`` and
    the interval are ``None``. ``seed`` is the bootstrap's seed, ``n_boot`` its B."""

    statistic: str
    seeds: tuple[SeedEstimate, ...]
    n_seeds: int
    single_seed: bool
    mean: float | None
    between_seed_sd: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    n_boot: int
    seed: int
    n_boot_nonfinite: int

    def to_dict(self) -> dict[str, Any]:
        d = dataclass_dict(self, skip=("seeds",))
        d["seeds"] = [s.to_dict() for s in self.seeds]
        return d


def _rows(values: Any, columns: int, train_seed: int) -> Array:
    arr = np.asarray(values, dtype=float)
    if (arr.ndim == 1 and columns == 1) or arr.shape == (0,):
        arr = arr.reshape(-1, columns)  # a seed without questions: (0, columns)
    if arr.ndim != 2 or arr.shape[1] != columns:
        raise ValueError(
            f"training seed {train_seed}: expected {columns} value(s) per question, "
            f"got an array of shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"training seed {train_seed}: per-question values must be finite")
    return arr


def across_seeds(
    per_seed: Mapping[int, Any],
    *,
    statistic: str = "macro_mean",
    n_boot: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> AcrossSeeds:
    """Mean, between-seed SD and hierarchical bootstrap interval (module docstring) of
    one quantity from ``per_seed``: training seed → per-question values (shape (n,) or
    (n, columns) as the pooling ``statistic`` needs; the questions of different seeds need
    not be the same). Raises ``ValueError`` on an unknown pooling, a wrong shape, a
    non-finite value, a non-positive value under ``geometric_mean`` or no seed at all."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {sorted(STATISTICS)}, got {statistic!r}")
    check_positive_int(n_boot, "n_boot")
    confidence = check_confidence(confidence)
    seed = check_seed(seed)
    if not per_seed:
        raise ValueError("across_seeds needs at least one training seed")
    columns, f = STATISTICS[statistic]
    estimates: list[SeedEstimate] = []
    data: list[Array] = []
    for train_seed in sorted(per_seed):
        arr = _rows(per_seed[train_seed], columns, train_seed)
        if statistic == "geometric_mean" and (arr <= 0).any():
            raise ValueError(
                f"training seed {train_seed}: geometric_mean needs positive per-question values"
            )
        value = float(f(arr[None])[0]) if len(arr) else math.nan
        finite = math.isfinite(value)
        estimates.append(SeedEstimate(int(train_seed), value if finite else None, len(arr)))
        if finite:
            data.append(arr)
    thetas = np.array([e.value for e in estimates if e.value is not None], dtype=float)
    n = len(thetas)
    mean = float(thetas.mean()) if n else None
    sd = float(thetas.std(ddof=1)) if n >= 2 else None
    lo = hi = None
    nonfinite = 0
    if n >= 2:
        reps = _hierarchical_replicates(data, f, n_boot=n_boot, seed=seed)
        nonfinite = int((~np.isfinite(reps)).sum())
        lo, hi = percentile_interval(reps, confidence)
    return AcrossSeeds(
        statistic=statistic,
        seeds=tuple(estimates),
        n_seeds=n,
        single_seed=n < 2,
        mean=jsonable(mean),
        between_seed_sd=jsonable(sd),
        ci_low=lo,
        ci_high=hi,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        n_boot_nonfinite=nonfinite,
    )


def _hierarchical_replicates(
    data: list[Array], f: Callable[[Array], Array], *, n_boot: int, seed: int
) -> Array:
    """The B replicate means of the hierarchical bootstrap, in the documented draw order
    (module docstring): the seeds of every replicate, then per seed its slots' questions,
    CHUNK slots per draw."""
    rng = np.random.default_rng(seed)
    n_seeds = len(data)
    drawn = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
    values = np.empty((n_boot, n_seeds))
    for s in range(n_seeds):
        rows, cols = np.nonzero(drawn == s)  # the slots that drew seed s, in (b, k) order
        n_q = len(data[s])
        for start in range(0, len(rows), CHUNK):
            stop = min(start + CHUNK, len(rows))
            idx = rng.integers(0, n_q, size=(stop - start, n_q))
            values[rows[start:stop], cols[start:stop]] = f(data[s][idx])
    return np.asarray(values.mean(axis=1))
