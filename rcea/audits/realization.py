"""Within-mode realization entropy (docs/estimators.md item 15).

For one checkpoint and question x: K = every sample of x, C_x = its accepted, assigned
successes (R = 1, judge-accepted, a mode that is not ``uncertain``), K_C = |C_x|, K_z = the
members of mode z, q̂(z) = K_z / K_C, ℓ_i = log π(y_i|x) (the sequence log-probability) and
h̄_i = the trajectory's mean token entropy. The plug-in estimators

    Ĥ(Y|C,x)     = −mean_{i∈C} ℓ_i + log(K_C / K)
    Ĥ(Y|Z=z,C,x) = −mean_{i∈z} ℓ_i + log(K_z / K)
    Ĥ(Z|C,x)     = −Σ_z q̂(z) log q̂(z)
    W(x)         = Σ_z q̂(z) Ĥ(Y|Z=z,C,x)      (the within-mode realization entropy)

satisfy the chain rule Ĥ(Y|C,x) = Ĥ(Z|C,x) + W(x) exactly; its residual (≈ 1e-12) is a
software check, as item 2's. Token level: Ĥ_tok,z(x) = mean_{i∈z} h̄_i and the mixture
identity mean_{i∈C} h̄_i = Σ_z q̂(z) Ĥ_tok,z(x) (its residual likewise).

Gate: x is eligible when K_C ≥ K_min; coverage = eligible / questions with K_C ≥ 1.
Reported with it: the share of C (over eligible questions) in modes with K_z ≥ 2 — a
mode with one member has no wording to vary. Macro averages are over eligible questions
(within question first). Realization retention of checkpoint t against the base 0 of the
same model: the mean over questions eligible at both of W_t(x) / W_0(x); questions with
|W_0(x)| ≤ ``w_floor`` are listed and left out (the ratio is undefined).

W(x) splits the accepted successes' sequence entropy into *which strategy* (Ĥ(Z|C,x), the
mode entropy of item 5 in nats) and *how it is worded within the strategy* (W): RLVR that
removes redundant wording lowers W; RLVR that removes strategies lowers Ĥ(Z|C,x). Like
item 2 the sequence quantities are cross-entropies when ℓ was scored at another
temperature than the samples were drawn at. The numbers depend on the mode partition:
they are audited only when the partition passed its gate.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import as_binary_array, as_float_array, check_positive_int
from rcea.audits._common import QuestionId, dataclass_dict, group_questions
from rcea.audits.modes import DEFAULT_EXCLUDE, _check_label

__all__ = [
    "QuestionRealization",
    "RealizationReport",
    "RealizationRetention",
    "realization_retention",
    "within_mode_entropy",
]


@dataclass(frozen=True)
class ModeRealization:
    """One mode z of one question: K_z, q̂(z), Ĥ(Y|Z=z,C,x) and Ĥ_tok,z(x)."""

    k: int
    share: float
    entropy: float
    token_entropy: float


@dataclass(frozen=True)
class QuestionRealization:
    """Item 15 for one question; the entropies are ``None`` when K_C = 0."""

    question_id: QuestionId
    k: int
    k_c: int
    n_modes: int
    eligible: bool
    mode_entropy: float | None
    sequence_entropy: float | None
    within_mode_entropy: float | None
    token_entropy: float | None
    within_mode_token_entropy: float | None
    decomposition_residual: float | None
    token_mixture_residual: float | None
    k_in_repeated_modes: int
    modes: dict[Hashable, ModeRealization] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class RealizationSummary:
    """Item 15 for one checkpoint: macro averages over eligible questions (K_C >= k_min),
    nats, the gate's coverage and the largest chain-rule and mixture residuals: the
    report's ``realization[].report``, its fields (with these descriptions) the section's
    keys (``rcea.study.report.schema``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    k_min: int = field(
        metadata={"description": "K_min on K_C (accepted, assigned successes) per question"}
    )
    n_questions: int = field(metadata={"description": "questions"})
    n_with_successes: int = field(metadata={"description": "questions with K_C >= 1"})
    n_eligible: int = field(metadata={"description": "questions with K_C >= k_min (its n)"})
    coverage: float | None = field(metadata={"description": "n_eligible / n_with_successes"})
    mode_entropy: float | None = field(
        metadata={"description": "macro Ĥ(Z|C,x): between-mode entropy"}
    )
    sequence_entropy: float | None = field(metadata={"description": "macro Ĥ(Y|C,x)"})
    within_mode_entropy: float | None = field(
        metadata={
            "description": "macro W(x) = Σ_z q̂(z) Ĥ(Y|Z=z,C,x): within-mode realization entropy"
        }
    )
    within_mode_token_entropy: float | None = field(
        metadata={"description": "macro token-level mixture Σ_z q̂(z) Ĥ_tok,z(x)"}
    )
    decomposition_residual: float | None = field(
        metadata={"description": "largest |Ĥ(Y|C,x) − Ĥ(Z|C,x) − W(x)| (a software check, ~1e-12)"}
    )
    token_mixture_residual: float | None = field(
        metadata={"description": "largest |mean_C h̄ − Σ_z q̂(z) Ĥ_tok,z(x)| (a software check)"}
    )
    share_in_repeated_modes: float | None = field(
        metadata={"description": "share of C (eligible questions) in modes with K_z >= 2"}
    )


@dataclass(frozen=True)
class RealizationReport(RealizationSummary):
    """:class:`RealizationSummary` with the per-question rows."""

    questions: list[QuestionRealization] = field(default_factory=list)

    def to_dict(self, *, questions: bool = True) -> dict[str, Any]:
        out = dataclass_dict(self)
        if not questions:
            out.pop("questions")
        return out


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def within_mode_entropy(
    question_ids: Sequence[QuestionId] | np.ndarray[Any, Any],
    in_c: Sequence[int] | np.ndarray[Any, Any],
    modes: Sequence[Hashable | None],
    seq_logprobs: Sequence[float] | np.ndarray[Any, Any],
    mean_token_entropy: Sequence[float] | np.ndarray[Any, Any],
    *,
    k_min: int = 8,
    exclude: Iterable[Hashable] = DEFAULT_EXCLUDE,
) -> RealizationReport:
    """Item 15 for the trajectories of one checkpoint (one row per sample of every
    question: K counts them all). ``in_c`` is 1 for an accepted success (R = 1,
    judge-accepted); its ``modes`` entry is its mode label (a label in ``exclude`` — by
    default ``uncertain`` — leaves it out of C). ``modes`` of rows outside C are ignored."""
    k_min = check_positive_int(k_min, "k_min")
    excl = frozenset(exclude)
    unique, inverse = group_questions(question_ids)
    n = len(inverse)
    c = as_binary_array(in_c, "in_c")
    ell = as_float_array(seq_logprobs, "seq_logprobs")
    h = as_float_array(mean_token_entropy, "mean_token_entropy")
    labels = list(modes)
    lengths = {len(c), len(ell), len(h), len(labels)}
    if lengths != {n}:
        raise ValueError(
            f"length mismatch: question_ids={n}, in_c={len(c)}, modes={len(labels)}, "
            f"seq_logprobs={len(ell)}, mean_token_entropy={len(h)}"
        )
    if (ell > 0).any():
        i = int(np.flatnonzero(ell > 0)[0])
        raise ValueError(f"seq_logprobs must be ≤ 0 (log-probabilities), got {ell[i]} at {i}")

    members: list[dict[Hashable, list[int]]] = [{} for _ in unique]
    k_all = np.bincount(inverse, minlength=len(unique))
    for i in range(n):
        if not c[i]:
            continue
        z = _check_label(labels[i], f"modes[{i}]")
        if z in excl:
            continue
        members[inverse[i]].setdefault(z, []).append(i)

    rows = [_question(q, int(k_all[j]), members[j], ell, h, k_min) for j, q in enumerate(unique)]
    with_c = [r for r in rows if r.k_c > 0]
    eligible = [r for r in rows if r.eligible]
    repeated = sum(r.k_in_repeated_modes for r in eligible)
    total_c = sum(r.k_c for r in eligible)

    def macro(attr: str) -> float | None:
        return _mean([getattr(r, attr) for r in eligible])

    def worst(attr: str) -> float | None:
        vals = [abs(getattr(r, attr)) for r in with_c]
        return max(vals) if vals else None

    return RealizationReport(
        k_min=k_min,
        n_questions=len(rows),
        n_with_successes=len(with_c),
        n_eligible=len(eligible),
        coverage=len(eligible) / len(with_c) if with_c else None,
        mode_entropy=macro("mode_entropy"),
        sequence_entropy=macro("sequence_entropy"),
        within_mode_entropy=macro("within_mode_entropy"),
        within_mode_token_entropy=macro("within_mode_token_entropy"),
        decomposition_residual=worst("decomposition_residual"),
        token_mixture_residual=worst("token_mixture_residual"),
        share_in_repeated_modes=repeated / total_c if total_c else None,
        questions=rows,
    )


def _question(
    qid: QuestionId,
    k: int,
    by_mode: dict[Hashable, list[int]],
    ell: np.ndarray[Any, Any],
    h: np.ndarray[Any, Any],
    k_min: int,
) -> QuestionRealization:
    k_c = sum(len(v) for v in by_mode.values())
    if k_c == 0:
        return QuestionRealization(
            qid, k, 0, 0, False, None, None, None, None, None, None, None, 0, {}
        )
    idx_c = np.array(sorted(i for v in by_mode.values() for i in v))
    seq = float(-ell[idx_c].mean() + math.log(k_c / k))
    tok = float(h[idx_c].mean())
    modes: dict[Hashable, ModeRealization] = {}
    for z in sorted(by_mode, key=lambda z: (isinstance(z, str), z)):
        idx = np.array(by_mode[z])
        modes[z] = ModeRealization(
            k=len(idx),
            share=len(idx) / k_c,
            entropy=float(-ell[idx].mean() + math.log(len(idx) / k)),
            token_entropy=float(h[idx].mean()),
        )
    shares = np.array([m.share for m in modes.values()])
    mode_h = float(-(shares * np.log(shares)).sum())
    within = float(sum(m.share * m.entropy for m in modes.values()))
    within_tok = float(sum(m.share * m.token_entropy for m in modes.values()))
    return QuestionRealization(
        question_id=qid,
        k=k,
        k_c=k_c,
        n_modes=len(modes),
        eligible=k_c >= k_min,
        mode_entropy=mode_h,
        sequence_entropy=seq,
        within_mode_entropy=within,
        token_entropy=tok,
        within_mode_token_entropy=within_tok,
        decomposition_residual=seq - mode_h - within,
        token_mixture_residual=tok - within_tok,
        k_in_repeated_modes=sum(m.k for m in modes.values() if m.k >= 2),
        modes=modes,
    )


@dataclass(frozen=True)
class RealizationRetentionSummary:
    """Mean over questions eligible at both checkpoints of W_t(x) / W_0(x): the report's
    ``realization[].retention``."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    retention: float | None = field(
        metadata={"description": "mean over questions eligible at both of W_t(x) / W_0(x)"}
    )
    n_eligible: int = field(metadata={"description": "questions in the mean (its n)"})
    n_both: int = field(metadata={"description": "questions eligible at both checkpoints"})
    excluded_zero_base: list[QuestionId] = field(
        metadata={"description": "questions left out because W_0(x) ≈ 0 (the ratio is undefined)"}
    )


@dataclass(frozen=True)
class RealizationRetention(RealizationRetentionSummary):
    """:class:`RealizationRetentionSummary` with the per-question ratios."""

    ratios: dict[QuestionId, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def realization_retention(
    checkpoint: RealizationReport | Mapping[QuestionId, float],
    base: RealizationReport | Mapping[QuestionId, float],
    *,
    w_floor: float = 1e-9,
) -> RealizationRetention:
    """Realization retention of ``checkpoint`` against ``base`` (the same model's base):
    reports or ``{question: W(x)}`` of the eligible questions."""
    now, then = _eligible_w(checkpoint), _eligible_w(base)
    both = sorted(set(now) & set(then), key=lambda q: (isinstance(q, str), q))
    zero = [q for q in both if abs(then[q]) <= w_floor]
    ratios = {q: now[q] / then[q] for q in both if abs(then[q]) > w_floor}
    return RealizationRetention(
        retention=_mean(list(ratios.values())),
        n_eligible=len(ratios),
        n_both=len(both),
        excluded_zero_base=zero,
        ratios=ratios,
    )


def _eligible_w(source: RealizationReport | Mapping[QuestionId, float]) -> dict[QuestionId, float]:
    if isinstance(source, RealizationReport):
        return {
            r.question_id: r.within_mode_entropy
            for r in source.questions
            if r.eligible and r.within_mode_entropy is not None
        }
    return dict(source)
