"""Outcome, sequence and reward-conditioned token entropy (docs/estimators.md items 1–3).

Natural logs throughout. For one question x at one checkpoint there are K samples with
rewards R_i ∈ {0, 1}, mean token entropies h̄_i and sequence log-probabilities ℓ_i.
K_r = #{i : R_i = r}; p̂_r = K_r / K. Every metric is computed within question first and
then macro-averaged over questions; a conditional quantity is only reported for outcomes
with K_r ≥ k_min (default 8), and the coverage (share of questions meeting k_min) is
always reported. Rare outcomes are omitted (``None``), never given zero entropy.

1. Outcome entropy  H(R|x) = h_b(p̂₊),  h_b(p) = −p log p − (1−p) log(1−p),  h_b(0)=h_b(1)=0.
2. Sequence decomposition (Prop. 1), plug-in Monte Carlo estimates:
   Ĥ(Y|x) = −mean_i ℓ_i;   Ĥ(Y|R=r,x) = −mean_{i:R_i=r} ℓ_i + log p̂_r;
   residual = Ĥ(Y|x) − [h_b(p̂₊) + Σ_{r:K_r>0} p̂_r Ĥ(Y|R=r,x)]  (≡ 0 up to rounding).
   Token mixture identity (Eq. 5):  Ĥ_tok(x) = p̂₊ Ĥ_tok,+(x) + p̂₋ Ĥ_tok,−(x).
3. Reward-conditioned token entropy  Ĥ_tok,r(x) = mean_{i:R_i=r} h̄_i.
   Broad:  H_tok,r = mean of Ĥ_tok,r(x) over questions with K_r ≥ k_min (each outcome its
   own set);  ρ_H = H_tok,− / H_tok,+.
   Paired: E = {x : K₊ ≥ k_min and K₋ ≥ k_min};  ρ(x) = Ĥ_tok,−(x) / Ĥ_tok,+(x);
   estimate = exp(mean_{x∈E} log ρ(x));  percentile CI from a hierarchical paired bootstrap;
   direction share = #{x∈E : Ĥ_tok,− > Ĥ_tok,+} / |E|;  one-sided exact sign test
   p = P(Bin(n, ½) ≥ n_higher), n = |E| − #exact ties.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import (
    as_binary_array,
    as_float_array,
    check_positive_int,
    check_probability,
    check_same_length,
)
from rcea.audits._common import (
    QuestionId,
    bootstrap_health,
    check_confidence,
    check_seed,
    dataclass_dict,
    group_questions,
    jsonable,
    percentile_interval,
)

__all__ = [
    "BroadTokenEntropyRatio",
    "EntropyReport",
    "EntropySummary",
    "PairedRatioSummary",
    "PairedTokenEntropyRatio",
    "QuestionEntropy",
    "QuestionTokenEntropy",
    "SequenceDecomposition",
    "binary_entropy",
    "broad_token_entropy_ratio",
    "entropy_report",
    "outcome_entropy",
    "paired_token_entropy_ratio",
    "per_question_token_entropy",
    "sequence_decomposition",
    "sign_test_greater",
]

#: Largest accepted sequence log-probability: log π(y|x) ≤ 0, with slack for the rounding
#: of a sum of per-token log-softmax values.
LOGPROB_TOLERANCE = 1e-6


# --------------------------------------------------------------------------- item 1


def binary_entropy(p: float) -> float:
    """h_b(p) = −p log p − (1−p) log(1−p) in nats, with 0 log 0 = 0 (so h_b(0)=h_b(1)=0)."""
    p = check_probability(float(p), "p")
    return -sum(q * math.log(q) for q in (p, 1.0 - p) if q > 0.0)


def outcome_entropy(rewards: Sequence[int] | np.ndarray[Any, Any]) -> float:
    """H(R|x) = h_b(p̂₊) with p̂₊ = K₊/K, for the rewards of one question."""
    r = as_binary_array(rewards, "rewards")
    return binary_entropy(float(r.mean()))


@dataclass(frozen=True)
class OutcomeReport:
    """The numbers of one checkpoint that need only rewards (docs/estimators.md item 1):
    macro averages over questions of H(R|x) and p̂₊(x), and the outcome coverages.

    ``mean_outcome_entropy`` is also the outcome term of the sequence decomposition
    Ĥ(Y|x) = H(R|x) + Σ_r p̂_r Ĥ(Y|R=r,x) (``sequence_outcome_term``, the same number);
    ``coverage_success`` / ``coverage_failure`` are the shares of questions with
    K₊ ≥ k_min / K₋ ≥ k_min (those the conditional entropies can be reported on),
    ``share_solved`` those with K₊ ≥ 1 and ``share_mixed`` those with both outcomes
    (H(R|x) > 0). The report's ``checkpoints[].outcome`` is this result: its fields,
    with these descriptions, are the section's keys (``rcea.study.report.schema``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    n_questions: int = field(metadata={"description": "questions"})
    n_trajectories: int = field(metadata={"description": "trajectories"})
    k_min: int = field(metadata={"description": "K_r a conditional needs (coverage)"})
    accuracy: float = field(metadata={"description": "share of R = 1 over trajectories"})
    mean_accuracy: float = field(metadata={"description": "mean over questions of p̂₊(x)"})
    mean_outcome_entropy: float = field(
        metadata={"description": "mean over questions of H(R|x), nats"}
    )
    sequence_outcome_term: float = field(
        metadata={
            "description": "the H(R|x) term of Ĥ(Y|x) = H(R|x) + Σ_r p̂_r Ĥ(Y|R=r,x), mean "
            "over questions"
        }
    )
    coverage_success: float | None = field(
        metadata={"description": "share of questions with K₊ ≥ k_min"}
    )
    coverage_failure: float | None = field(
        metadata={"description": "share of questions with K₋ ≥ k_min"}
    )
    share_solved: float = field(metadata={"description": "share of questions with K₊ ≥ 1"})
    share_mixed: float = field(metadata={"description": "share of questions with both outcomes"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def outcome_report(
    question_ids: Sequence[QuestionId] | np.ndarray[Any, Any],
    rewards: Sequence[int] | np.ndarray[Any, Any],
    *,
    k_min: int = 8,
) -> OutcomeReport:
    """:class:`OutcomeReport` for the trajectories of one checkpoint."""
    r = as_binary_array(rewards, "rewards")
    check_same_length(question_ids=question_ids, rewards=r)
    if isinstance(k_min, bool) or not isinstance(k_min, int) or k_min < 1:
        raise ValueError(f"k_min must be an integer >= 1, got {k_min!r}")
    ids, inv = group_questions(question_ids)
    nq = len(ids)
    k = np.bincount(inv, minlength=nq)
    k_plus = np.bincount(inv, weights=r, minlength=nq)
    k_minus = k - k_plus
    p = k_plus / k
    h = np.array([binary_entropy(float(x)) for x in p])
    mean_h = float(h.mean())
    return OutcomeReport(
        n_questions=nq,
        n_trajectories=int(k.sum()),
        k_min=k_min,
        accuracy=float(r.mean()),
        mean_accuracy=float(p.mean()),
        mean_outcome_entropy=mean_h,
        sequence_outcome_term=mean_h,
        coverage_success=float(np.mean(k_plus >= k_min)),
        coverage_failure=float(np.mean(k_minus >= k_min)),
        share_solved=float(np.mean(k_plus >= 1)),
        share_mixed=float(np.mean((k_plus >= 1) & (k_minus >= 1))),
    )


# --------------------------------------------------------------------------- item 2


@dataclass(frozen=True)
class SequenceDecomposition:
    """Prop. 1 decomposition for one question.

    ``sequence_entropy`` is Ĥ(Y|x) = −mean ℓ (labelled ``quantity="cross_entropy"`` when
    the samples were not drawn from the distribution ℓ is computed under);
    ``conditional_entropy_*`` are Ĥ(Y|R=r,x) = −mean_{R=r} ℓ + log p̂_r, ``None`` when K_r = 0;
    ``*_reportable`` says whether K_r ≥ k_min (small-K_r conditionals are biased and must
    not be reported). ``residual`` is the reconstruction residual (a software check,
    ~1e-12). The ``token_*`` fields are filled only when mean token entropies were given.
    """

    k: int
    k_success: int
    k_failure: int
    p_success: float
    k_min: int
    quantity: str
    outcome_entropy: float
    sequence_entropy: float
    conditional_entropy_success: float | None
    conditional_entropy_failure: float | None
    success_reportable: bool
    failure_reportable: bool
    residual: float
    n_truncated: int | None = None
    token_entropy: float | None = None
    token_entropy_success: float | None = None
    token_entropy_failure: float | None = None
    token_mixture: float | None = None
    token_mixture_residual: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _check_logprobs(seq_logprobs: Any, name: str = "seq_logprobs") -> np.ndarray[Any, Any]:
    ell = as_float_array(seq_logprobs, name)
    too_big = ell > LOGPROB_TOLERANCE
    if too_big.any():
        i = int(np.flatnonzero(too_big)[0])
        raise ValueError(f"{name} must be log-probabilities (<= 0), got {ell[i]} at index {i}")
    return np.minimum(ell, 0.0)  # type: ignore[no-any-return]  # numpy's stubs type the ufunc's result as Any


def _check_token_entropies(values: Any, name: str = "mean_token_entropy") -> np.ndarray[Any, Any]:
    h = as_float_array(values, name)
    neg = h < 0
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise ValueError(f"{name} must be non-negative entropies, got {h[i]} at index {i}")
    return h


def sequence_decomposition(
    seq_logprobs: Sequence[float] | np.ndarray[Any, Any],
    rewards: Sequence[int] | np.ndarray[Any, Any],
    *,
    mean_token_entropy: Sequence[float] | np.ndarray[Any, Any] | None = None,
    truncated: Sequence[bool] | np.ndarray[Any, Any] | None = None,
    k_min: int = 8,
    cross_entropy: bool = False,
) -> SequenceDecomposition:
    """Monte Carlo sequence-entropy decomposition for the samples of ONE question.

    Ĥ(Y|x) = −(1/K) Σ_i ℓ_i;  Ĥ(Y|R=r,x) = −(1/K_r) Σ_{i:R_i=r} ℓ_i + log p̂_r (K_r > 0);
    residual = Ĥ(Y|x) − [h_b(p̂₊) + Σ_{r:K_r>0} p̂_r Ĥ(Y|R=r,x)].

    ``seq_logprobs`` are log π(y_i|x) including the EOS token (values > 1e-6 are rejected;
    tiny positive rounding is clipped to 0). ``truncated`` (optional booleans) only counts
    samples cut at the length limit so they can be flagged. ``cross_entropy=True`` labels
    the result a cross-entropy (sampling temperature/top-p differed from the scoring
    distribution). With ``mean_token_entropy`` the Eq. 5 mixture identity
    Ĥ_tok = p̂₊ Ĥ_tok,+ + p̂₋ Ĥ_tok,− is also evaluated (its residual is reported).
    """
    ell = _check_logprobs(seq_logprobs)
    r = as_binary_array(rewards, "rewards")
    check_same_length(seq_logprobs=ell, rewards=r)
    k_min = check_positive_int(k_min, "k_min")
    k = r.size
    succ = r == 1
    k_plus = int(succ.sum())
    k_minus = k - k_plus
    p_plus = k_plus / k
    h_r = binary_entropy(p_plus)
    h_y = float(-ell.mean())

    def conditional(mask: np.ndarray[Any, Any], k_r: int) -> float | None:
        if k_r == 0:
            return None
        return float(-ell[mask].mean() + math.log(k_r / k))

    h_plus = conditional(succ, k_plus)
    h_minus = conditional(~succ, k_minus)
    recon = h_r
    for k_r, h in ((k_plus, h_plus), (k_minus, h_minus)):
        if h is not None:
            recon += (k_r / k) * h
    residual = h_y - recon

    n_truncated = None
    if truncated is not None:
        t = as_binary_array(np.asarray(truncated, dtype=float), "truncated")
        check_same_length(truncated=t, rewards=r)
        n_truncated = int(t.sum())

    tok = tok_p = tok_m = mix = mix_res = None
    if mean_token_entropy is not None:
        h_tok = _check_token_entropies(mean_token_entropy)
        check_same_length(mean_token_entropy=h_tok, rewards=r)
        tok = float(h_tok.mean())
        tok_p = float(h_tok[succ].mean()) if k_plus else None
        tok_m = float(h_tok[~succ].mean()) if k_minus else None
        mix = sum((k_r / k) * v for k_r, v in ((k_plus, tok_p), (k_minus, tok_m)) if v is not None)
        mix_res = tok - mix

    return SequenceDecomposition(
        k=k,
        k_success=k_plus,
        k_failure=k_minus,
        p_success=p_plus,
        k_min=k_min,
        quantity="cross_entropy" if cross_entropy else "entropy",
        outcome_entropy=h_r,
        sequence_entropy=h_y,
        conditional_entropy_success=h_plus,
        conditional_entropy_failure=h_minus,
        success_reportable=k_plus >= k_min,
        failure_reportable=k_minus >= k_min,
        residual=float(residual),
        n_truncated=n_truncated,
        token_entropy=tok,
        token_entropy_success=tok_p,
        token_entropy_failure=tok_m,
        token_mixture=None if mix is None else float(mix),
        token_mixture_residual=None if mix_res is None else float(mix_res),
    )


# --------------------------------------------------------------------------- item 3


@dataclass(frozen=True)
class QuestionTokenEntropy:
    """Per-question token entropies: Ĥ_tok(x) over all samples and Ĥ_tok,r(x) over the
    samples with R = r (``None`` when K_r = 0; apply the k_min gate before reporting)."""

    question_id: QuestionId
    k: int
    k_success: int
    k_failure: int
    token_entropy: float
    token_entropy_success: float | None
    token_entropy_failure: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class _Cells:
    """Rows grouped by question (canonical order) and outcome; values sorted per cell."""

    ids: list[QuestionId]
    success: list[np.ndarray[Any, Any]]
    failure: list[np.ndarray[Any, Any]]
    all_means: np.ndarray[Any, Any]


def _cells(question_ids: Any, rewards: Any, mean_token_entropy: Any) -> _Cells:
    r = as_binary_array(rewards, "rewards")
    h = _check_token_entropies(mean_token_entropy)
    n = check_same_length(question_ids=question_ids, rewards=r, mean_token_entropy=h)
    if n == 0:
        raise ValueError("question_ids is empty")
    ids, inv = group_questions(question_ids)
    order = np.lexsort((h, r, inv))  # by question, then reward, then value
    inv_s, r_s, h_s = inv[order], r[order], h[order]
    nq = len(ids)
    k_plus = np.bincount(inv_s, weights=r_s, minlength=nq).astype(np.intp)
    k_all = np.bincount(inv_s, minlength=nq)
    starts = np.concatenate(([0], np.cumsum(k_all)))
    success, failure = [], []
    for j in range(nq):
        a, b = int(starts[j]), int(starts[j + 1])
        split = b - int(k_plus[j])  # failures (R=0) sort first
        failure.append(h_s[a:split])
        success.append(h_s[split:b])
    all_means = np.bincount(inv, weights=h, minlength=nq) / k_all
    return _Cells(ids=ids, success=success, failure=failure, all_means=all_means)


def per_question_token_entropy(
    question_ids: Sequence[QuestionId] | np.ndarray[Any, Any],
    rewards: Sequence[int] | np.ndarray[Any, Any],
    mean_token_entropy: Sequence[float] | np.ndarray[Any, Any],
) -> list[QuestionTokenEntropy]:
    """Ĥ_tok,r(x) = mean_{i:R_i=r} h̄_i per question (canonical question order).

    Inputs are per-trajectory arrays for one checkpoint. K_r = 0 gives ``None``."""
    cells = _cells(question_ids, rewards, mean_token_entropy)
    return _question_rows(cells)


def _question_rows(cells: _Cells) -> list[QuestionTokenEntropy]:
    rows = []
    for j, q in enumerate(cells.ids):
        s, f = cells.success[j], cells.failure[j]
        rows.append(
            QuestionTokenEntropy(
                question_id=q,
                k=s.size + f.size,
                k_success=s.size,
                k_failure=f.size,
                token_entropy=float(cells.all_means[j]),
                token_entropy_success=float(s.mean()) if s.size else None,
                token_entropy_failure=float(f.mean()) if f.size else None,
            )
        )
    return rows


@dataclass(frozen=True)
class BroadTokenEntropyRatio:
    """Broad estimate ρ_H = H_tok,− / H_tok,+, each H_tok,r the mean of Ĥ_tok,r(x) over
    questions with K_r ≥ k_min. Coverage = share of questions meeting k_min per outcome.
    Undefined values (empty set, H_tok,+ = 0) are ``None`` (the coverages too, in a report
    read back whose checkpoint had no question). The report's ``checkpoints[].entropy.broad``
    is this result."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    k_min: int = field(metadata={"description": "K_min of each outcome stratum"})
    n_questions: int = field(metadata={"description": "questions"})
    n_success_eligible: int = field(metadata={"description": "questions with K+ >= k_min"})
    n_failure_eligible: int = field(metadata={"description": "questions with K- >= k_min"})
    coverage_success: float = field(metadata={"description": "n_success_eligible / n_questions"})
    coverage_failure: float = field(metadata={"description": "n_failure_eligible / n_questions"})
    token_entropy_success: float | None = field(
        metadata={"description": "macro H_tok of successes"}
    )
    token_entropy_failure: float | None = field(metadata={"description": "macro H_tok of failures"})
    ratio: float | None = field(
        metadata={"description": "token_entropy_failure / token_entropy_success"}
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _broad(cells: _Cells, k_min: int) -> BroadTokenEntropyRatio:
    nq = len(cells.ids)
    ok_s = [j for j in range(nq) if cells.success[j].size >= k_min]
    ok_f = [j for j in range(nq) if cells.failure[j].size >= k_min]
    h_s = float(np.mean([cells.success[j].mean() for j in ok_s])) if ok_s else None
    h_f = float(np.mean([cells.failure[j].mean() for j in ok_f])) if ok_f else None
    ratio = h_f / h_s if h_s is not None and h_f is not None and h_s > 0 else None
    return BroadTokenEntropyRatio(
        k_min=k_min,
        n_questions=nq,
        n_success_eligible=len(ok_s),
        n_failure_eligible=len(ok_f),
        coverage_success=len(ok_s) / nq,
        coverage_failure=len(ok_f) / nq,
        token_entropy_success=h_s,
        token_entropy_failure=h_f,
        ratio=ratio,
    )


def broad_token_entropy_ratio(
    question_ids: Sequence[QuestionId] | np.ndarray[Any, Any],
    rewards: Sequence[int] | np.ndarray[Any, Any],
    mean_token_entropy: Sequence[float] | np.ndarray[Any, Any],
    *,
    k_min: int = 8,
) -> BroadTokenEntropyRatio:
    """Broad reward-conditioned token-entropy ratio with both coverages (see class)."""
    k_min = check_positive_int(k_min, "k_min")
    return _broad(_cells(question_ids, rewards, mean_token_entropy), k_min)


def sign_test_greater(n_higher: int, n: int) -> float:
    """One-sided exact sign test p = P(Bin(n, ½) ≥ n_higher) = Σ_{j≥n_higher} C(n,j) / 2ⁿ,
    computed in exact integer arithmetic (21 of 42 → 0.5612)."""
    if n < 0 or not 0 <= n_higher <= n:
        raise ValueError(f"need 0 <= n_higher <= n, got n_higher={n_higher}, n={n}")
    tail = sum(math.comb(n, j) for j in range(n_higher, n + 1))
    return tail / 2**n  # type: ignore[no-any-return]  # numpy's stubs type the array arithmetic as Any


@dataclass(frozen=True)
class PairedRatioSummary:
    """Paired (question-matched) failed-to-successful token-entropy ratio.

    E = questions with K₊ ≥ k_min and K₋ ≥ k_min (``paired_question_ids``, |E| =
    ``n_paired_questions``). Questions of E whose Ĥ_tok,+ (or Ĥ_tok,−) is ≤
    ``min_success_entropy`` would make log ρ(x) infinite or unstable: they are listed in
    ``excluded_question_ids`` and left out of the ratio and bootstrap (``n_ratio_questions``
    remain), but they still vote in the direction check, which needs no division.
    ``ratio`` = exp(mean log ρ(x)); ``ci_low``/``ci_high`` = percentile interval of the
    hierarchical paired bootstrap; ``n_boot_nonfinite`` counts replicates dropped because a
    resampled mean fell to ≤ ``min_success_entropy``. ``direction_share`` =
    n_higher / |E|; ``sign_test_p`` = P(Bin(sign_test_n, ½) ≥ n_higher) with
    sign_test_n = |E| − n_ties. Undefined values are ``None``. Without the per-question
    ratios, the base of the report's ``checkpoints[].entropy.paired``
    (``rcea.study.report.sections.PairedRatio``).
    """

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    k_min: int = field(metadata={"description": "K_min of both strata"})
    n_questions: int = field(metadata={"description": "questions"})
    n_paired_questions: int = field(
        metadata={"description": "questions with both strata eligible (|E|)"}
    )
    # None only in a report read back whose checkpoint had no question (JSON has no NaN)
    coverage_paired: float | None = field(
        metadata={"description": "n_paired_questions / n_questions"}
    )
    paired_question_ids: tuple[QuestionId, ...] = field(
        metadata={"description": "the questions of E"}
    )
    excluded_question_ids: tuple[QuestionId, ...] = field(
        metadata={"description": "questions of E left out of the ratio"}
    )
    n_ratio_questions: int = field(metadata={"description": "questions the ratio is computed over"})
    ratio: float | None = field(metadata={"description": "geometric-mean failed/successful ratio"})
    ci_low: float | None = field(
        metadata={"description": "lower bound of its question-bootstrap CI"}
    )
    ci_high: float | None = field(metadata={"description": "upper bound of its CI"})
    confidence: float = field(metadata={"description": "confidence level of the CI"})
    n_boot: int = field(metadata={"description": "bootstrap resamples"})
    n_boot_nonfinite: int = field(metadata={"description": "resamples with a non-finite ratio"})
    seed: int = field(metadata={"description": "bootstrap seed"})
    min_success_entropy: float = field(metadata={"description": "floor on the success entropy"})
    direction_share: float | None = field(
        metadata={"description": "share of E with failed > successful"}
    )
    n_higher: int = field(metadata={"description": "questions with failed > successful"})
    n_lower: int = field(metadata={"description": "questions with failed < successful"})
    n_ties: int = field(metadata={"description": "ties"})
    sign_test_n: int = field(metadata={"description": "questions in the sign test (ties dropped)"})
    sign_test_p: float | None = field(metadata={"description": "two-sided exact sign-test p"})


@dataclass(frozen=True)
class PairedTokenEntropyRatio(PairedRatioSummary):
    """:class:`PairedRatioSummary` with the per-question ratios (question id → ρ(x))."""

    question_ratios: dict[QuestionId, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dataclass_dict(self, skip=("question_ratios",))
        d["question_ratios"] = [
            {"question_id": jsonable(q), "ratio": jsonable(v)}
            for q, v in self.question_ratios.items()
        ]
        return d


#: Below this many within-question index draws the bootstrap runs in one thread.
_MIN_THREADED_WORK = 1 << 21


def _default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _within_log_ratios(
    rng: np.random.Generator,
    success: np.ndarray[Any, Any],
    failure: np.ndarray[Any, Any],
    count: int,
    floor: float,
    chunk: int,
) -> np.ndarray[Any, Any]:
    """``count`` independent within-question replicates of log(mean f*) − log(mean s*), where
    s* (f*) resamples the K₊ successes (K₋ failures) with replacement; NaN when a resampled
    mean is ≤ ``floor``."""
    ks, kf = success.size, failure.size
    out = np.empty(count)
    ones_s, ones_f = np.full(ks, 1.0 / ks), np.full(kf, 1.0 / kf)
    per = max(1, chunk // (ks + kf))
    for a in range(0, count, per):
        m = min(per, count - a)
        ms = np.take(success, rng.integers(0, ks, size=(m, ks), dtype=np.intp)) @ ones_s
        mf = np.take(failure, rng.integers(0, kf, size=(m, kf), dtype=np.intp)) @ ones_f
        bad = (ms <= floor) | (mf <= floor)
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(mf) - np.log(ms)
        lr[bad] = np.nan
        out[a : a + m] = lr
    return out


def _paired_bootstrap(
    successes: Sequence[np.ndarray[Any, Any]],
    failures: Sequence[np.ndarray[Any, Any]],
    n_boot: int,
    seed: int,
    *,
    floor: float = 0.0,
    n_threads: int | None = None,
    block_elements: int = 1 << 21,
    chunk: int = 1 << 18,
) -> np.ndarray[Any, Any]:
    """Vectorised hierarchical paired bootstrap of exp(mean_x log ρ(x)).

    Replicate b: draw |E| questions of E with replacement; for every drawn slot resample
    that question's successes and, separately, its failures with replacement (K₊ and K₋
    fixed); statistic = exp(mean over slots of log(mean f*/mean s*)).

    Vectorisation: the question draws of a block of replicates are made at once; each
    question q then generates, in one array operation, as many independent within-question
    replicates as it has slots in the block, and these are scattered back to their
    replicates with a stable counting sort. Memory per block is O(block_elements) for the
    question draws plus O(chunk) per worker for the within-question index arrays. Random
    streams: SeedSequence(seed) spawns one stream for the question draws and one per
    question, so results do not depend on ``n_threads`` (they do depend on the internal
    ``block_elements``/``chunk`` constants, which are fixed). Returns the B replicates (NaN
    where a within-question mean fell to ≤ ``floor``).
    """
    n = len(successes)
    children = np.random.SeedSequence(seed).spawn(n + 1)
    outer = np.random.default_rng(children[0])
    q_rngs = [np.random.default_rng(c) for c in children[1:]]
    threads = (
        _default_threads() if n_threads is None else check_positive_int(n_threads, "n_threads")
    )
    work_size = n_boot * sum(s.size + f.size for s, f in zip(successes, failures, strict=True))
    if work_size < _MIN_THREADED_WORK:
        threads = 1  # not worth a thread pool; results are the same either way
    block = max(1, min(n_boot, block_elements // n))
    qdtype = np.int16 if n <= np.iinfo(np.int16).max else np.int64  # int16 → radix sort
    sums = np.empty(n_boot)
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    try:
        for start in range(0, n_boot, block):
            bb = min(block, n_boot - start)
            drawn = outer.integers(0, n, size=bb * n, dtype=qdtype)
            counts = np.bincount(drawn, minlength=n)
            order = np.argsort(drawn, kind="stable")
            offsets = np.concatenate(([0], np.cumsum(counts)))
            values = np.empty(bb * n)

            def work(
                q: int,
                offsets: np.ndarray[Any, Any] = offsets,
                values: np.ndarray[Any, Any] = values,
            ) -> None:
                a, b = int(offsets[q]), int(offsets[q + 1])
                if b > a:
                    values[a:b] = _within_log_ratios(
                        q_rngs[q], successes[q], failures[q], b - a, floor, chunk
                    )

            if pool is None:
                for q in range(n):
                    work(q)
            else:
                list(pool.map(work, range(n)))
            sums[start : start + bb] = np.bincount(order // n, weights=values, minlength=bb)
    finally:
        if pool is not None:
            pool.shutdown()
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(sums / n)


def _paired_bootstrap_loop(
    successes: Sequence[np.ndarray[Any, Any]],
    failures: Sequence[np.ndarray[Any, Any]],
    n_boot: int,
    seed: int,
    *,
    floor: float = 0.0,
) -> np.ndarray[Any, Any]:
    """Reference implementation of :func:`_paired_bootstrap` as plain Python loops over
    replicates and drawn questions (same statistic and resampling scheme, different random
    streams). Used as the benchmark baseline and as an independent check in tests."""
    rng = np.random.default_rng(seed)
    n = len(successes)
    out = np.empty(n_boot)
    for b in range(n_boot):
        total = 0.0
        for _ in range(n):
            q = int(rng.integers(n))
            s, f = successes[q], failures[q]
            ms = float(rng.choice(s, size=s.size, replace=True).mean())
            mf = float(rng.choice(f, size=f.size, replace=True).mean())
            if ms <= floor or mf <= floor:
                total = math.nan
            else:
                total += math.log(mf) - math.log(ms)
        out[b] = math.exp(total / n) if math.isfinite(total) else math.nan
    return out


def _paired(
    cells: _Cells,
    *,
    k_min: int,
    n_boot: int,
    confidence: float,
    seed: int,
    min_success_entropy: float,
    n_threads: int | None,
) -> PairedTokenEntropyRatio:
    nq = len(cells.ids)
    e = [j for j in range(nq) if cells.success[j].size >= k_min and cells.failure[j].size >= k_min]
    means_s = {j: float(cells.success[j].mean()) for j in e}
    means_f = {j: float(cells.failure[j].mean()) for j in e}
    floor = min_success_entropy
    excluded = [j for j in e if means_s[j] <= floor or means_f[j] <= floor]
    used = [j for j in e if j not in set(excluded)]

    ratio = ci_low = ci_high = None
    n_nonfinite = 0
    question_ratios: dict[QuestionId, float] = {}
    if used:
        logs = np.array([math.log(means_f[j]) - math.log(means_s[j]) for j in used])
        question_ratios = {
            cells.ids[j]: float(np.exp(lr)) for j, lr in zip(used, logs, strict=True)
        }
        ratio = float(np.exp(logs.mean()))
        reps = _paired_bootstrap(
            [cells.success[j] for j in used],
            [cells.failure[j] for j in used],
            n_boot,
            seed,
            floor=min_success_entropy,
            n_threads=n_threads,
        )
        n_nonfinite = int((~np.isfinite(reps)).sum())
        ci_low, ci_high = percentile_interval(reps, confidence)

    n_higher = sum(1 for j in e if means_f[j] > means_s[j])
    n_ties = sum(1 for j in e if means_f[j] == means_s[j])
    n_lower = len(e) - n_higher - n_ties
    sign_n = len(e) - n_ties
    return PairedTokenEntropyRatio(
        k_min=k_min,
        n_questions=nq,
        n_paired_questions=len(e),
        coverage_paired=len(e) / nq,
        paired_question_ids=tuple(cells.ids[j] for j in e),
        excluded_question_ids=tuple(cells.ids[j] for j in excluded),
        n_ratio_questions=len(used),
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=confidence,
        n_boot=n_boot,
        n_boot_nonfinite=n_nonfinite,
        seed=seed,
        min_success_entropy=min_success_entropy,
        direction_share=n_higher / len(e) if e else None,
        n_higher=n_higher,
        n_lower=n_lower,
        n_ties=n_ties,
        sign_test_n=sign_n,
        sign_test_p=sign_test_greater(n_higher, sign_n) if sign_n > 0 else None,
        question_ratios=question_ratios,
    )


def _check_paired_args(
    k_min: int, n_boot: int, confidence: float, seed: int, min_success_entropy: float
) -> tuple[int, int, float, int, float]:
    k_min = check_positive_int(k_min, "k_min")
    n_boot = check_positive_int(n_boot, "n_boot")
    confidence = check_confidence(confidence)
    seed = check_seed(seed)
    if not math.isfinite(min_success_entropy) or min_success_entropy < 0:
        raise ValueError(
            f"min_success_entropy must be a finite number >= 0, got {min_success_entropy!r}"
        )
    return k_min, n_boot, confidence, seed, float(min_success_entropy)


def paired_token_entropy_ratio(
    question_ids: Sequence[QuestionId] | np.ndarray[Any, Any],
    rewards: Sequence[int] | np.ndarray[Any, Any],
    mean_token_entropy: Sequence[float] | np.ndarray[Any, Any],
    *,
    seed: int,
    k_min: int = 8,
    n_boot: int = 10_000,
    confidence: float = 0.95,
    min_success_entropy: float = 1e-12,
    n_threads: int | None = None,
) -> PairedTokenEntropyRatio:
    """Paired ratio exp(mean_{x∈E} log(Ĥ_tok,−(x)/Ĥ_tok,+(x))) with a hierarchical paired
    bootstrap percentile CI, the direction share and the one-sided exact sign test.

    Bootstrap (B = ``n_boot``, seeded): resample the questions of E with replacement, then
    within each resampled question resample its successes and its failures separately with
    replacement (K₊, K₋ fixed); statistic exp(mean log ρ). Rows are grouped in canonical
    question order and sorted within each cell, so the result does not depend on the row
    order; ``n_threads`` (default min(4, CPUs)) only changes speed, never the numbers.
    """
    k_min, n_boot, confidence, seed, floor = _check_paired_args(
        k_min, n_boot, confidence, seed, min_success_entropy
    )
    cells = _cells(question_ids, rewards, mean_token_entropy)
    return _paired(
        cells,
        k_min=k_min,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
        min_success_entropy=floor,
        n_threads=n_threads,
    )


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class QuestionEntropy:
    """Everything computed for one question: outcome entropy, token entropies and (when
    sequence log-probs were given) the Prop. 1 decomposition."""

    question_id: QuestionId
    outcome_entropy: float
    tokens: QuestionTokenEntropy
    sequence: SequenceDecomposition | None

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class EntropySummary:
    """Items 1–3 for one checkpoint, macro-averaged over questions: the fields of the
    report's ``checkpoints[].entropy`` (``rcea.study.report.sections.EntropySection``) that
    are not the item-3 ratios.

    ``mean_outcome_entropy``, ``mean_token_entropy`` and ``mean_sequence_entropy`` average
    over all questions; ``mean_conditional_entropy_success``/``_failure`` average
    Ĥ(Y|R=r,x) over the questions with K_r ≥ k_min only (``None`` if there are none);
    ``max_abs_residual`` / ``max_abs_token_mixture_residual`` are software consistency
    checks.
    """

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    n_questions: int = field(metadata={"description": "questions"})
    n_trajectories: int = field(metadata={"description": "trajectories"})
    k_min: int = field(metadata={"description": "K_min of every conditional quantity"})
    n_boot: int = field(metadata={"description": "bootstrap resamples"})
    seed: int = field(metadata={"description": "bootstrap seed"})
    confidence: float = field(metadata={"description": "confidence level"})
    quantity: str | None = field(
        metadata={"description": "what -mean l estimates: entropy | cross_entropy"}
    )
    mean_outcome_entropy: float = field(metadata={"description": "macro H(R|x)"})
    mean_token_entropy: float = field(metadata={"description": "macro mean token entropy H_tok"})
    mean_sequence_entropy: float | None = field(metadata={"description": "macro H(Y|x)"})
    mean_conditional_entropy_success: float | None = field(
        metadata={"description": "macro H(Y|R=1,x)"}
    )
    mean_conditional_entropy_failure: float | None = field(
        metadata={"description": "macro H(Y|R=0,x)"}
    )
    max_abs_residual: float | None = field(
        metadata={"description": "max |Prop. 1 residual| (software check)"}
    )
    max_abs_token_mixture_residual: float = field(
        metadata={"description": "max |Eq. 5 mixture residual|"}
    )
    n_truncated: int | None = field(
        metadata={"description": "truncated trajectories, when recorded"}
    )


@dataclass(frozen=True)
class EntropyReport(EntropySummary):
    """:class:`EntropySummary` with ``broad`` and ``paired``, the item-3 estimates (coverage
    always present), and the per-question rows."""

    broad: BroadTokenEntropyRatio
    paired: PairedTokenEntropyRatio
    questions: tuple[QuestionEntropy, ...]

    def to_dict(self, *, include_questions: bool = True) -> dict[str, Any]:
        d = dataclass_dict(self, skip=("broad", "paired", "questions"))
        d.update(
            bootstrap_health(
                self.paired.n_boot_nonfinite,
                self.paired.n_boot,
                n_units=self.paired.n_ratio_questions if self.paired.ratio is not None else None,
                what="paired-ratio",
            )
        )
        d.update(
            paired_ratio=jsonable(self.paired.ratio),
            paired_ci_low=jsonable(self.paired.ci_low),
            paired_ci_high=jsonable(self.paired.ci_high),
            n_paired_questions=self.paired.n_paired_questions,
            coverage_paired=jsonable(self.paired.coverage_paired),
            direction_share=jsonable(self.paired.direction_share),
            sign_test_p=jsonable(self.paired.sign_test_p),
            broad_ratio=jsonable(self.broad.ratio),
            coverage_success=jsonable(self.broad.coverage_success),
            coverage_failure=jsonable(self.broad.coverage_failure),
            broad=self.broad.to_dict(),
            paired=self.paired.to_dict(),
        )
        if include_questions:
            d["questions"] = [q.to_dict() for q in self.questions]
        return d


def _mixture_residual(row: QuestionTokenEntropy) -> float:
    """|Ĥ_tok(x) − (p̂₊ Ĥ_tok,+(x) + p̂₋ Ĥ_tok,−(x))| over the outcomes present (Eq. 5)."""
    mix = sum(
        (k_r / row.k) * h
        for k_r, h in (
            (row.k_success, row.token_entropy_success),
            (row.k_failure, row.token_entropy_failure),
        )
        if h is not None
    )
    return abs(row.token_entropy - mix)


def _mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def entropy_report(
    question_ids: Sequence[QuestionId] | np.ndarray[Any, Any],
    rewards: Sequence[int] | np.ndarray[Any, Any],
    mean_token_entropy: Sequence[float] | np.ndarray[Any, Any],
    seq_logprobs: Sequence[float] | np.ndarray[Any, Any] | None = None,
    *,
    seed: int,
    k_min: int = 8,
    n_boot: int = 10_000,
    confidence: float = 0.95,
    min_success_entropy: float = 1e-12,
    cross_entropy: bool = False,
    n_threads: int | None = None,
    truncated: Sequence[bool] | np.ndarray[Any, Any] | None = None,
) -> EntropyReport:
    """Items 1–3 for the trajectories of one checkpoint (per-trajectory arrays).

    Per question: H(R|x) = h_b(p̂₊), Ĥ_tok,r(x), and with ``seq_logprobs`` the Prop. 1
    decomposition (Ĥ(Y|x), Ĥ(Y|R=r,x), residual). Then macro averages over questions
    (within question first), the broad ratio with coverages and the paired ratio with its
    bootstrap CI, direction share and sign test (see :func:`paired_token_entropy_ratio`).
    ``cross_entropy=True`` labels the ℓ-based quantities a cross-entropy (sampling
    differed from the distribution ℓ is computed under); ``truncated`` (optional
    booleans, one per trajectory) is counted as ``n_truncated``. The top-level
    ``n_boot_degenerate`` counts paired-bootstrap replicates left out of the interval
    and ``warnings`` says when they exceed 1 % or one question makes the CI zero-width.
    """
    k_min, n_boot, confidence, seed, floor = _check_paired_args(
        k_min, n_boot, confidence, seed, min_success_entropy
    )
    cells = _cells(question_ids, rewards, mean_token_entropy)
    rows = _question_rows(cells)
    ell = None
    inv = None
    if seq_logprobs is not None:
        ell = _check_logprobs(seq_logprobs)
        check_same_length(seq_logprobs=ell, question_ids=question_ids)
        _, inv = group_questions(question_ids)
        r_all = as_binary_array(rewards, "rewards")
        h_all = np.asarray(mean_token_entropy, dtype=np.float64)

    questions: list[QuestionEntropy] = []
    for j, row in enumerate(rows):
        seq = None
        if ell is not None and inv is not None:
            mask = inv == j
            seq = sequence_decomposition(
                ell[mask],
                r_all[mask],
                mean_token_entropy=h_all[mask],
                k_min=k_min,
                cross_entropy=cross_entropy,
            )
        questions.append(
            QuestionEntropy(
                question_id=row.question_id,
                outcome_entropy=binary_entropy(row.k_success / row.k),
                tokens=row,
                sequence=seq,
            )
        )

    seqs = [q.sequence for q in questions if q.sequence is not None]
    return EntropyReport(
        n_questions=len(rows),
        n_trajectories=sum(r.k for r in rows),
        k_min=k_min,
        n_boot=n_boot,
        seed=seed,
        confidence=confidence,
        quantity=("cross_entropy" if cross_entropy else "entropy") if seqs else None,
        mean_outcome_entropy=float(np.mean([q.outcome_entropy for q in questions])),
        mean_token_entropy=float(np.mean([r.token_entropy for r in rows])),
        mean_sequence_entropy=_mean_or_none([s.sequence_entropy for s in seqs]),
        mean_conditional_entropy_success=_mean_or_none(
            [s.conditional_entropy_success for s in seqs if s.success_reportable]  # type: ignore[misc]  # a reportable stratum has its conditional entropy
        ),
        mean_conditional_entropy_failure=_mean_or_none(
            [s.conditional_entropy_failure for s in seqs if s.failure_reportable]  # type: ignore[misc]  # a reportable stratum has its conditional entropy
        ),
        max_abs_residual=max((abs(s.residual) for s in seqs), default=None),
        max_abs_token_mixture_residual=max(_mixture_residual(r) for r in rows),
        broad=_broad(cells, k_min),
        paired=_paired(
            cells,
            k_min=k_min,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
            min_success_entropy=floor,
            n_threads=n_threads,
        ),
        questions=tuple(questions),
        n_truncated=_count_truncated(truncated, len(question_ids)),
    )


def _count_truncated(truncated: Sequence[bool] | np.ndarray[Any, Any] | None, n: int) -> int | None:
    if truncated is None:
        return None
    t = as_binary_array(np.asarray(truncated, dtype=float), "truncated")
    if t.size != n:
        raise ValueError(f"truncated has {t.size} values for {n} trajectories")
    return int(t.sum())
