"""Mode entropy and rarefied effective-mode retention (docs/estimators.md item 5).

Inputs are the mode labels (from a frozen codebook) of the verifier-successful,
judge-accepted trajectories of one question. Labels listed in ``exclude`` (default
``("uncertain",)``) are dropped before anything is computed and counted against coverage.

    q̂(z|x) = count(z) / m,   Ĥ(Z|C_x) = −Σ_z q̂ log q̂ (nats),   N_eff(x) = exp(Ĥ).

Rarefied retention for one pair (checkpoint t, base 0):
    m_c(x) = included count at checkpoint c;  n(x) = min(m_0(x), m_t(x));
    x is eligible iff n(x) ≥ n_min;
    at each checkpoint draw D subsamples of size n(x) without replacement (seeded);
    N̄_eff,c(x) = (1/D) Σ_d exp(Ĥ_d);   Ret_t(x) = N̄_eff,t(x) / N̄_eff,0(x);
    Ret_t = arithmetic mean of Ret_t(x) over eligible x;
    percentile CI from a question bootstrap (resample eligible questions, draws held fixed).
When m_c(x) = n(x) the "draw" is the whole set, so that side is deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import check_positive_int
from rcea.audits._common import (
    QuestionId,
    bootstrap_health,
    check_confidence,
    check_seed,
    dataclass_dict,
    jsonable,
    percentile_interval,
    question_seed_words,
    sorted_question_ids,
)

__all__ = [
    "ModeEntropy",
    "QuestionRetention",
    "RarefiedRetention",
    "RarefiedRetentionSummary",
    "mode_entropy",
    "rarefied_retention",
]

DEFAULT_EXCLUDE: tuple[str, ...] = ("uncertain",)


def _check_label(label: Any, where: str) -> Hashable:
    if isinstance(label, np.generic):
        label = label.item()
    if label is None or isinstance(label, bool) or not isinstance(label, str | int):
        raise ValueError(
            f"{where}: a mode label must be a str or an int (use 'uncertain' for unassigned), "
            f"got {label!r}"
        )
    return label


def _included(
    labels: Any, exclude: frozenset[Any], where: str
) -> tuple[list[Hashable], list[int], int]:
    """Return (included labels, their positions in the list as given, list length)."""
    if isinstance(labels, str | bytes) or not isinstance(labels, Iterable):
        raise ValueError(f"{where} must be a list of mode labels, got {type(labels).__name__}")
    raw = labels.tolist() if isinstance(labels, np.ndarray) else list(labels)
    kept, pos = [], []
    for i, z in enumerate(raw):
        z = _check_label(z, f"{where}[{i}]")
        if z not in exclude:
            kept.append(z)
            pos.append(i)
    return kept, pos, len(raw)


def _entropy_from_counts(counts: np.ndarray[Any, Any]) -> float:
    q = counts[counts > 0] / counts.sum()
    return float(-(q * np.log(q)).sum())


@dataclass(frozen=True)
class ModeEntropy:
    """Ĥ(Z|C) = −Σ q̂ log q̂ and N_eff = exp(Ĥ) of one question's included labels; both
    ``None`` when every label was excluded. ``counts`` maps each mode to its count."""

    n: int
    n_excluded: int
    n_modes: int
    entropy: float | None
    n_eff: float | None
    counts: dict[Hashable, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def mode_entropy(
    modes: Sequence[Hashable] | np.ndarray[Any, Any],
    *,
    exclude: Iterable[Hashable] = DEFAULT_EXCLUDE,
) -> ModeEntropy:
    """Mode entropy of one question: q̂(z) = count(z)/m over labels not in ``exclude``;
    Ĥ = −Σ q̂ log q̂; N_eff = exp(Ĥ). An empty list is an error; a list whose labels are
    all excluded gives ``entropy = n_eff = None``."""
    excl = frozenset(exclude)
    raw = modes.tolist() if isinstance(modes, np.ndarray) else list(modes)
    if not raw:
        raise ValueError("modes is empty")
    kept, _, _ = _included(raw, excl, "modes")
    counts: dict[Hashable, int] = {}
    for z in kept:
        counts[z] = counts.get(z, 0) + 1
    ordered = dict(sorted(counts.items(), key=lambda kv: (isinstance(kv[0], str), kv[0])))
    if not kept:
        return ModeEntropy(n=0, n_excluded=len(raw), n_modes=0, entropy=None, n_eff=None)
    h = _entropy_from_counts(np.array(list(ordered.values()), dtype=np.float64))
    return ModeEntropy(
        n=len(kept),
        n_excluded=len(raw) - len(kept),
        n_modes=len(ordered),
        entropy=h,
        n_eff=math.exp(h),
        counts=ordered,
    )


@dataclass(frozen=True)
class QuestionRetention:
    """Rarefaction of one question present at both checkpoints.

    ``m_base``/``m_checkpoint`` count included labels, ``n`` = min of the two.
    ``base_draws``/``checkpoint_draws`` are (D, n) integer arrays of positions in the
    label lists AS GIVEN (excluded labels are never drawn), sorted within each draw; they
    are ``None`` for ineligible questions. ``n_eff_*`` = N̄_eff at each checkpoint,
    ``retention`` = N̄_eff,t / N̄_eff,0 (``None`` unless eligible)."""

    question_id: QuestionId
    m_base: int
    m_checkpoint: int
    n_excluded_base: int
    n_excluded_checkpoint: int
    n: int
    eligible: bool
    deterministic: bool
    n_eff_base: float | None
    n_eff_checkpoint: float | None
    retention: float | None
    base_draws: np.ndarray[Any, Any] | None = field(default=None, compare=False, repr=False)
    checkpoint_draws: np.ndarray[Any, Any] | None = field(default=None, compare=False, repr=False)

    def to_dict(self, *, include_draws: bool = True) -> dict[str, Any]:
        skip = () if include_draws else ("base_draws", "checkpoint_draws")
        return dataclass_dict(self, skip=skip)


@dataclass(frozen=True)
class RarefiedRetentionSummary:
    """Ret_t = mean of Ret_t(x) over the ``n_eligible`` eligible questions, out of
    ``n_denominator`` questions present at both checkpoints (``eligible_share`` =
    n_eligible / n_denominator). ``ci_low``/``ci_high``: question-bootstrap percentile
    interval with the draws held fixed. Everything undefined (no eligible question, or no
    common question) is ``None``. ``mean_n_eff_*`` are macro means of N̄_eff over eligible
    questions. The base of the report's ``checkpoints[].retention``
    (``rcea.study.report.sections.RetentionSection``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    retention: float | None = field(metadata={"description": "the value: rarefied mode retention"})
    ci_low: float | None = field(
        metadata={"description": "lower bound of its question-bootstrap CI"}
    )
    ci_high: float | None = field(metadata={"description": "upper bound of its CI"})
    confidence: float = field(metadata={"description": "confidence level of the CI"})
    n_eligible: int = field(
        metadata={"description": "eligible questions: min(m_0, m_t) >= n_min (its n)"}
    )
    n_denominator: int = field(metadata={"description": "questions it could have used"})
    eligible_share: float | None = field(
        metadata={"description": "n_eligible / n_denominator (coverage)"}
    )
    n_base_only: int = field(metadata={"description": "questions labelled at the base only"})
    n_checkpoint_only: int = field(
        metadata={"description": "questions labelled at the checkpoint only"}
    )
    mean_n_eff_base: float | None = field(metadata={"description": "macro N_eff at the base"})
    mean_n_eff_checkpoint: float | None = field(
        metadata={"description": "macro N_eff at the checkpoint"}
    )
    n_min: int = field(metadata={"description": "eligibility threshold"})
    n_draws: int = field(metadata={"description": "rarefaction draws"})
    n_boot: int = field(metadata={"description": "bootstrap resamples"})
    seed: int = field(metadata={"description": "seed of draws and bootstrap"})
    # mode labels are str or int (_check_label)
    exclude: tuple[str | int, ...] = field(metadata={"description": "labels left out (uncertain)"})


@dataclass(frozen=True)
class RarefiedRetention(RarefiedRetentionSummary):
    """:class:`RarefiedRetentionSummary` with the per-question rows (and their draws)."""

    questions: tuple[QuestionRetention, ...]

    def to_dict(self, *, include_draws: bool = True) -> dict[str, Any]:
        d = dataclass_dict(self, skip=("questions",))
        # the question bootstrap of a mean of finite ratios has no degenerate replicate
        d.update(
            bootstrap_health(
                0,
                self.n_boot,
                n_units=self.n_eligible if self.retention is not None else None,
                what="retention",
            )
        )
        d["questions"] = [q.to_dict(include_draws=include_draws) for q in self.questions]
        return d

    def draws(self) -> dict[QuestionId, dict[str, list[list[int]]]]:
        """The stored draws, in the form accepted by ``rarefied_retention(stored_draws=…)``."""
        return {
            q.question_id: {
                "base_draws": jsonable(q.base_draws),
                "checkpoint_draws": jsonable(q.checkpoint_draws),
            }
            for q in self.questions
            if q.eligible
        }


def _draw(rng: np.random.Generator, m: int, n: int, n_draws: int) -> np.ndarray[Any, Any]:
    """``n_draws`` uniformly random size-n subsets of range(m), one per row, sorted;
    the whole set (and no random numbers used) when m == n."""
    if m == n:
        return np.tile(np.arange(n, dtype=np.int64), (n_draws, 1))
    keys = rng.random((n_draws, m))
    idx = np.argpartition(keys, n - 1, axis=1)[:, :n]
    return np.sort(idx, axis=1).astype(np.int64)


def _mean_n_eff(codes: np.ndarray[Any, Any], idx: np.ndarray[Any, Any], n_labels: int) -> float:
    """(1/D) Σ_d exp(−Σ_z q̂_d(z) log q̂_d(z)) for label codes ``codes[idx[d]]``."""
    d, n = idx.shape
    lab = codes[idx] + n_labels * np.arange(d)[:, None]
    counts = np.bincount(lab.ravel(), minlength=d * n_labels).reshape(d, n_labels)
    q = counts / n
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(q > 0, q * np.log(q), 0.0)
    return float(np.exp(-terms.sum(axis=1)).mean())


def _stored(
    stored: Mapping[Any, Any], q: QuestionId, key: str, positions: list[int], n: int, n_draws: int
) -> np.ndarray[Any, Any]:
    """Validate stored draws for question q (positions in the list as given) and return
    them as indices into the included labels."""
    try:
        raw = stored[q][key]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"stored_draws lacks {key!r} for question {q!r}") from exc
    arr = np.asarray(raw)
    if arr.shape != (n_draws, n) or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"stored_draws[{q!r}][{key!r}] must be an integer array of shape "
            f"({n_draws}, {n}), got shape {arr.shape}"
        )
    lookup = {p: i for i, p in enumerate(positions)}
    out = np.empty_like(arr, dtype=np.int64)
    for d in range(n_draws):
        row = arr[d].tolist()
        if len(set(row)) != n:
            raise ValueError(f"stored_draws[{q!r}][{key!r}] draw {d} repeats a position")
        for k, p in enumerate(row):
            if p not in lookup:
                raise ValueError(
                    f"stored_draws[{q!r}][{key!r}] draw {d} uses position {p}, which is not "
                    "an included label"
                )
            out[d, k] = lookup[p]
    return out


def rarefied_retention(
    base: Mapping[QuestionId, Sequence[Hashable]],
    checkpoint: Mapping[QuestionId, Sequence[Hashable]],
    *,
    seed: int,
    n_min: int = 8,
    n_draws: int = 20,
    n_boot: int = 10_000,
    confidence: float = 0.95,
    exclude: Iterable[str | int] = DEFAULT_EXCLUDE,
    stored_draws: Mapping[QuestionId, Mapping[str, Any]] | None = None,
) -> RarefiedRetention:
    """Rarefied effective-mode retention of ``checkpoint`` relative to ``base`` (see the
    module docstring for the formulas).

    ``base``/``checkpoint`` map question id → mode labels of its included trajectories.
    Draws are seeded per question from (seed, SHA-256 of the question id), so they do not
    depend on dict order or on which other questions are present; they are returned in the
    result (``.draws()``) and can be fed back through ``stored_draws`` to recompute
    exactly from stored draws. The question bootstrap (B = ``n_boot``) resamples eligible
    questions with replacement in canonical question order, vectorised in blocks.
    """
    seed = check_seed(seed)
    n_min = check_positive_int(n_min, "n_min")
    n_draws = check_positive_int(n_draws, "n_draws")
    n_boot = check_positive_int(n_boot, "n_boot")
    confidence = check_confidence(confidence)
    excl = frozenset(exclude)
    for name, mapping in (("base", base), ("checkpoint", checkpoint)):
        if not isinstance(mapping, Mapping):
            raise ValueError(f"{name} must be a mapping of question id to mode labels")
    if not base and not checkpoint:
        raise ValueError("base and checkpoint are both empty")
    base_ids = sorted_question_ids(base.keys(), "base")
    ckpt_ids = sorted_question_ids(checkpoint.keys(), "checkpoint")
    common = sorted_question_ids(set(base_ids) & set(ckpt_ids))

    rows: list[QuestionRetention] = []
    for q in common:
        lab0, pos0, len0 = _included(base[q], excl, f"base[{q!r}]")
        lab1, pos1, len1 = _included(checkpoint[q], excl, f"checkpoint[{q!r}]")
        m0, m1 = len(lab0), len(lab1)
        n = min(m0, m1)
        eligible = n >= n_min
        if not eligible:
            rows.append(
                QuestionRetention(
                    question_id=q,
                    m_base=m0,
                    m_checkpoint=m1,
                    n_excluded_base=len0 - m0,
                    n_excluded_checkpoint=len1 - m1,
                    n=n,
                    eligible=False,
                    deterministic=m0 == m1,
                    n_eff_base=None,
                    n_eff_checkpoint=None,
                    retention=None,
                )
            )
            continue
        if stored_draws is not None:
            idx0 = _stored(stored_draws, q, "base_draws", pos0, n, n_draws)
            idx1 = _stored(stored_draws, q, "checkpoint_draws", pos1, n, n_draws)
        else:
            ss = np.random.SeedSequence([seed, 1, *question_seed_words(q)])
            rng0, rng1 = (np.random.default_rng(c) for c in ss.spawn(2))
            idx0 = _draw(rng0, m0, n, n_draws)
            idx1 = _draw(rng1, m1, n, n_draws)
        n_eff = []
        for labels, idx in ((lab0, idx0), (lab1, idx1)):
            codebook = {z: i for i, z in enumerate(dict.fromkeys(labels))}
            codes = np.fromiter((codebook[z] for z in labels), dtype=np.int64, count=len(labels))
            n_eff.append(_mean_n_eff(codes, idx, len(codebook)))
        draws0 = np.asarray(pos0, dtype=np.int64)[idx0]
        draws1 = np.asarray(pos1, dtype=np.int64)[idx1]
        draws0.flags.writeable = False
        draws1.flags.writeable = False
        rows.append(
            QuestionRetention(
                question_id=q,
                m_base=m0,
                m_checkpoint=m1,
                n_excluded_base=len0 - m0,
                n_excluded_checkpoint=len1 - m1,
                n=n,
                eligible=True,
                deterministic=m0 == m1,
                n_eff_base=n_eff[0],
                n_eff_checkpoint=n_eff[1],
                retention=n_eff[1] / n_eff[0],
                base_draws=draws0,
                checkpoint_draws=draws1,
            )
        )

    elig = [r for r in rows if r.eligible]
    ret = ci_low = ci_high = None
    if elig:
        values = np.array([r.retention for r in elig], dtype=np.float64)
        ret = float(values.mean())
        reps = _question_bootstrap(values, n_boot, seed)
        ci_low, ci_high = percentile_interval(reps, confidence)
    return RarefiedRetention(
        retention=ret,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=confidence,
        n_eligible=len(elig),
        n_denominator=len(common),
        eligible_share=len(elig) / len(common) if common else None,
        n_base_only=len(base_ids) - len(common),
        n_checkpoint_only=len(ckpt_ids) - len(common),
        mean_n_eff_base=float(np.mean([r.n_eff_base for r in elig])) if elig else None,
        mean_n_eff_checkpoint=(
            float(np.mean([r.n_eff_checkpoint for r in elig])) if elig else None
        ),
        n_min=n_min,
        n_draws=n_draws,
        n_boot=n_boot,
        seed=seed,
        exclude=tuple(sorted(excl, key=repr)),
        questions=tuple(rows),
    )


def _question_bootstrap(
    values: np.ndarray[Any, Any], n_boot: int, seed: int, *, block_elements: int = 1 << 21
) -> np.ndarray[Any, Any]:
    """B replicates of mean(values[idx]) with idx drawn with replacement (vectorised in
    blocks of at most ``block_elements`` indices); stream SeedSequence([seed, 0])."""
    e = values.size
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))
    out = np.empty(n_boot)
    block = max(1, min(n_boot, block_elements // e))
    for start in range(0, n_boot, block):
        bb = min(block, n_boot - start)
        idx = rng.integers(0, e, size=(bb, e))
        out[start : start + bb] = values[idx].mean(axis=1)
    return out
