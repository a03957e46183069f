"""Mode-stratified covariance at one endpoint (docs/estimators.md item 16).

Item 7's per-token centred products c_{i,t} = (log π_{i,t} − L̄)(A_i − Ā) — the same L̄ and
Ā over every eligible token of the endpoint, :func:`rcea.audits.tail.token_covariances` —
restricted to the tokens of C (accepted, assigned successes: R = 1, judge-accepted, a mode
that is not ``uncertain``). Modes are question-local, so the pooled split is by rank: the
majority mode maj(x) of question x is its mode with the most members in C at this
checkpoint (ties broken by ``mode_order``, else by the labels' sorted order).

    M = Σ_x Σ_{tokens of maj(x), c>0} c / Σ_x Σ_{tokens of C, c>0} c
    T = (tokens of C in maj(x)) / (tokens of C)
    concentration ratio = M / T        (> 1: the positive covariance mass — the updates
                                        that shrink entropy — concentrates on the
                                        dominant strategy)

Also: the share of item 7's success-stratum tail (tokens of R = 1 trajectories with c at or
above its ``quantile`` cutoff) whose positive mass falls in maj(x) tokens, and per question
the ratio M_x / T_x (questions whose C holds positive mass and more than one mode) with
its median and quartiles. M, T and the ratio are ``None`` when C holds no positive mass.
Mode-dependent: audited only when the partition passed its gate.

Every quantity above is a ratio of sums over trajectories, so the per-token arrays are not
needed once each trajectory's sums are known: :func:`trajectory_sums` reduces an endpoint's
tokens to five numbers per trajectory (tokens, positive mass, positive mass and tokens in
the success-stratum tail, positive mass in the failure-stratum tail for item 7's
failure share) — the probe stores them, the partition is applied later — and
:func:`mode_tail_from_sums` gives the same result as :func:`mode_stratified_tail` from them
(up to the order of floating-point sums).

Both reduce further to six sums per question (``question_sums``, columns
:data:`QUESTION_SUM_COLUMNS`), and every number is formed from those: Σ_x of a column over
Σ_x of another. Item 17 (:mod:`rcea.audits.replicates`) resamples these per-question sums
to bootstrap the numbers across training seeds; :func:`tail_question_sums` gives item 7's
share of each reward stratum per question likewise.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import as_binary_array, check_probability
from rcea.audits._common import dataclass_dict
from rcea.audits.modes import DEFAULT_EXCLUDE, _check_label
from rcea.audits.tail import ADVANTAGE_EPS, token_covariances

__all__ = [
    "QUESTION_SUM_COLUMNS",
    "ModeTailResult",
    "ModeTailSummary",
    "TrajectorySums",
    "mode_stratified_tail",
    "mode_tail_from_sums",
    "tail_question_sums",
    "trajectory_sums",
]


@dataclass(frozen=True)
class ModeTailSummary:
    """Item 16 at one endpoint without the per-question rows: the base of the report's
    ``mode_tail[]`` (``rcea.study.report.sections.ModeTailEndpoint``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    n_questions: int = field(metadata={"description": "questions with a trajectory in C"})
    n_tokens_c: int = field(metadata={"description": "tokens of C"})
    majority_mass_share: float | None = field(
        metadata={"description": "M: share of C's positive covariance mass on majority-mode tokens"}
    )
    majority_token_share: float | None = field(
        metadata={"description": "T: share of C's tokens in the majority mode"}
    )
    concentration_ratio: float | None = field(
        metadata={
            "description": "M / T (> 1: the updates that shrink entropy concentrate on the "
            "dominant strategy)"
        }
    )
    success_tail_majority_share: float | None = field(
        metadata={
            "description": "share of the success-stratum q99 tail's positive mass on majority "
            "tokens"
        }
    )
    n_success_tail: int = field(metadata={"description": "tokens in the success-stratum tail"})
    question_ratio_quartiles: tuple[float, float, float] | None = field(
        metadata={"description": "quartiles of the per-question M_x / T_x"}
    )


@dataclass(frozen=True)
class ModeTailResult(ModeTailSummary):
    """Item 16 at one endpoint (module docstring)."""

    endpoint: str | None
    question_ratios: dict[str, float] = field(default_factory=dict)
    majority_modes: dict[str, Hashable] = field(default_factory=dict)
    question_sums: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _share(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def mode_stratified_tail(
    group_ids: Sequence[Any],
    rewards: Any,
    in_c: Any,
    modes: Sequence[Hashable | None],
    token_trajectory: Any,
    token_logprob: Any,
    *,
    quantile: float = 0.99,
    mode_order: Iterable[Hashable] | None = None,
    exclude: Iterable[Hashable] = DEFAULT_EXCLUDE,
    endpoint: str | None = None,
    eps: float = ADVANTAGE_EPS,
) -> ModeTailResult:
    """Item 16 for one endpoint. Per trajectory: ``group_ids`` (question), 0/1
    ``rewards``, ``in_c`` (1: an accepted success) and ``modes`` (its mode label; ignored
    outside C); per eligible token: ``token_trajectory`` and ``token_logprob`` as for
    :func:`rcea.audits.tail.reward_stratified_tail`."""
    quantile = check_probability(quantile, "quantile")
    tc = token_covariances(group_ids, rewards, token_trajectory, token_logprob, eps=eps)
    c_flag = as_binary_array(in_c, "in_c")
    labels = list(modes)
    if not (len(c_flag) == len(labels) == tc.rewards.size):
        raise ValueError(
            f"length mismatch: group_ids={tc.rewards.size}, in_c={len(c_flag)}, modes={len(labels)}"
        )
    excl = frozenset(exclude)
    rank = {z: i for i, z in enumerate(mode_order or ())}
    questions = [str(g) for g in group_ids]

    for i, flag in enumerate(c_flag):
        if flag and tc.rewards[i] != 1:
            raise ValueError(f"in_c[{i}] is 1 but rewards[{i}] is 0: C holds successes only")
    counts, majority, is_c, is_maj = _majority_membership(
        questions, c_flag, labels, rank=rank, exclude=excl
    )
    c, traj = tc.c, tc.trajectory
    pos = np.where(c > 0, c, 0.0)
    tail = _stratum_tail(c, tc.rewards[traj] == 1, quantile)
    # per token: its positive covariance mass, a count of one, its positive tail mass
    return _result(
        endpoint,
        np.array(questions, dtype=object)[traj],
        counts,
        majority,
        pos,
        np.ones(c.size),
        np.where(tail, pos, 0.0),
        int(tail.sum()),
        is_maj[traj],
        is_c[traj],
    )


def _stratum_tail(
    c: np.ndarray[Any, Any], stratum: np.ndarray[Any, Any], quantile: float
) -> np.ndarray[Any, Any]:
    """Item 7's tail of one reward stratum: its tokens with c at or above the stratum's
    ``quantile`` cutoff (``inverted_cdf``); none when the stratum is empty."""
    if not stratum.any():
        return np.zeros(c.size, dtype=bool)
    cutoff = float(np.quantile(c[stratum], quantile, method="inverted_cdf"))
    return np.asarray(stratum & (c >= cutoff))


@dataclass(frozen=True)
class TrajectorySums:
    """Per trajectory (in input order): its eligible tokens, the positive mass Σ_{c>0} c of
    its tokens, the positive mass and count of its tokens in item 7's success-stratum tail
    (c at or above the ``quantile`` cutoff over every R = 1 token; 0 off R = 1), and the
    positive mass of its tokens in the failure-stratum tail (the cutoff over every R = 0
    token; 0 off R = 0; ``None`` in sums stored before it was recorded)."""

    quantile: float
    n_tokens: np.ndarray[Any, Any]
    positive_mass: np.ndarray[Any, Any]
    tail_positive_mass: np.ndarray[Any, Any]
    tail_tokens: np.ndarray[Any, Any]
    failure_tail_positive_mass: np.ndarray[Any, Any] | None = None


def trajectory_sums(
    group_ids: Sequence[Any],
    rewards: Any,
    token_trajectory: Any,
    token_logprob: Any,
    *,
    quantile: float = 0.99,
    eps: float = ADVANTAGE_EPS,
) -> TrajectorySums:
    """Reduce one endpoint's tokens to :class:`TrajectorySums` (arguments as for
    :func:`mode_stratified_tail`, without the modes: they are applied afterwards)."""
    quantile = check_probability(quantile, "quantile")
    tc = token_covariances(group_ids, rewards, token_trajectory, token_logprob, eps=eps)
    c, traj, n = tc.c, tc.trajectory, tc.rewards.size
    pos = np.where(c > 0, c, 0.0)
    tail = _stratum_tail(c, tc.rewards[traj] == 1, quantile)
    failure_tail = _stratum_tail(c, tc.rewards[traj] == 0, quantile)
    return TrajectorySums(
        quantile=quantile,
        n_tokens=np.bincount(traj, minlength=n),
        positive_mass=np.bincount(traj, weights=pos, minlength=n),
        tail_positive_mass=np.bincount(traj, weights=np.where(tail, pos, 0.0), minlength=n),
        tail_tokens=np.bincount(traj, weights=tail.astype(np.int64), minlength=n).astype(np.int64),
        failure_tail_positive_mass=np.bincount(
            traj, weights=np.where(failure_tail, pos, 0.0), minlength=n
        ),
    )


def tail_question_sums(
    group_ids: Sequence[Any], rewards: Any, sums: TrajectorySums, *, stratum: int = 1
) -> dict[str, tuple[float, float]]:
    """Item 7's tail share of one reward ``stratum`` (1: successes, 0: failures) per
    question, as the two sums it is a ratio of: question → (positive mass of its stratum
    tokens in the stratum's tail, positive mass of its stratum tokens), from
    :class:`TrajectorySums` (questions without a stratum token with positive mass left
    out). Σ_x of the first over Σ_x of the second is item 7's share of that stratum
    (:func:`rcea.audits.tail.reward_stratified_tail`, the tail's cutoff the endpoint's);
    item 17 resamples these pairs. ``ValueError`` for the failure stratum of sums without
    it."""
    r = as_binary_array(rewards, "rewards")
    if not (len(group_ids) == r.size == sums.n_tokens.size):
        raise ValueError(
            f"length mismatch: sums={sums.n_tokens.size}, group_ids={len(group_ids)}, "
            f"rewards={r.size}"
        )
    if stratum not in (0, 1):
        raise ValueError(f"stratum must be 1 (successes) or 0 (failures), got {stratum!r}")
    tails = sums.tail_positive_mass if stratum == 1 else sums.failure_tail_positive_mass
    if tails is None:
        raise ValueError("these sums carry no failure-stratum tail (recorded before it was)")
    out: dict[str, list[float]] = {}
    for q, ri, tail, mass in zip(group_ids, r, tails, sums.positive_mass, strict=True):
        if ri == stratum and mass > 0:
            acc = out.setdefault(str(q), [0.0, 0.0])
            acc[0] += float(tail)
            acc[1] += float(mass)
    return {q: (a, b) for q, (a, b) in sorted(out.items())}


def mode_tail_from_sums(
    group_ids: Sequence[Any],
    in_c: Any,
    modes: Sequence[Hashable | None],
    sums: TrajectorySums,
    *,
    mode_order: Iterable[Hashable] | None = None,
    exclude: Iterable[Hashable] = DEFAULT_EXCLUDE,
    endpoint: str | None = None,
) -> ModeTailResult:
    """Item 16 from per-trajectory :class:`TrajectorySums` (same trajectories, same order)
    and the partition's ``in_c`` / ``modes``: the result of :func:`mode_stratified_tail` on
    the tokens they were reduced from."""
    c_flag = as_binary_array(in_c, "in_c")
    labels = list(modes)
    n = sums.n_tokens.size
    if not (len(group_ids) == len(c_flag) == len(labels) == n):
        raise ValueError(
            f"length mismatch: sums={n}, group_ids={len(group_ids)}, in_c={len(c_flag)}, "
            f"modes={len(labels)}"
        )
    excl = frozenset(exclude)
    rank = {z: i for i, z in enumerate(mode_order or ())}
    questions = [str(g) for g in group_ids]
    counts, majority, is_c, is_maj = _majority_membership(
        questions, c_flag, labels, rank=rank, exclude=excl
    )
    return _result(
        endpoint,
        np.array(questions, dtype=object),
        counts,
        majority,
        sums.positive_mass,
        sums.n_tokens,
        sums.tail_positive_mass,
        int(sums.tail_tokens.sum()),
        is_maj,
        is_c,
    )


#: The per-question sums every item 16 number is a ratio of (``question_sums`` columns).
QUESTION_SUM_COLUMNS = (
    "mass_majority",
    "mass_c",
    "tokens_majority",
    "tokens_c",
    "tail_mass_majority",
    "tail_mass",
)


def _result(
    endpoint: str | None,
    questions: np.ndarray[Any, Any],
    counts: dict[str, Any],
    majority: dict[str, Hashable],
    mass: np.ndarray[Any, Any],
    toks: np.ndarray[Any, Any],
    tail_mass: np.ndarray[Any, Any],
    n_tail: int,
    is_maj: np.ndarray[Any, Any],
    is_c: np.ndarray[Any, Any],
) -> ModeTailResult:
    """Item 16 over units (tokens, or trajectories with their sums) carrying positive
    covariance ``mass``, ``toks`` tokens and positive success-tail ``tail_mass``: the token
    and the per-trajectory-sums paths share this rule. Each number is a ratio of sums of
    the per-question sums (``question_sums``, :data:`QUESTION_SUM_COLUMNS`), so that item
    17's question bootstrap re-forms it from resampled questions:

    M = Σ_x mass_majority / Σ_x mass_c, T = Σ_x tokens_majority / Σ_x tokens_c, M/T, the
    tail share Σ_x tail_mass_majority / Σ_x tail_mass (``None`` without a tail token), and
    per question with two or more modes M_x/T_x with its quartiles."""
    # mass sums over the units that carry some: no zero terms, so a mode holding all the
    # mass has M = 1 exactly (a sum's rounding depends on how many terms it adds)
    has = mass > 0
    labels, code = np.unique(questions.astype(str), return_inverse=True)
    code = code.reshape(-1)

    def by_q(weights: np.ndarray[Any, Any], where: np.ndarray[Any, Any]) -> list[float]:
        sel = where.astype(bool)
        out = np.bincount(code[sel], weights=np.asarray(weights, float)[sel], minlength=len(labels))
        return [float(v) for v in out]

    cols = [
        by_q(mass, has & is_maj),
        by_q(mass, has & is_c),
        by_q(toks, is_maj),
        by_q(toks, is_c),
        by_q(tail_mass, (tail_mass > 0) & is_maj),
        by_q(tail_mass, tail_mass > 0),
    ]
    sums = {str(q): tuple(col[i] for col in cols) for i, q in enumerate(labels)}
    total = [sum(col) for col in cols]
    m_share = _share(total[0], total[1])
    t_share = _share(total[2], total[3])
    ratio = m_share / t_share if m_share is not None and t_share else None
    ratios: dict[str, float] = {}
    for q, modes_q in sorted(counts.items()):
        if len(modes_q) < 2 or q not in sums:
            continue  # one mode: its ratio is 1 by construction (no unit: no sums)
        m_maj, m_c, t_maj, t_c = sums[q][:4]
        m_q, t_q = _share(m_maj, m_c), _share(t_maj, t_c)
        if m_q is not None and t_q:
            ratios[q] = m_q / t_q
    quartiles = None
    if ratios:
        qs = np.quantile(np.array(list(ratios.values())), [0.25, 0.5, 0.75])
        quartiles = (float(qs[0]), float(qs[1]), float(qs[2]))
    return ModeTailResult(
        endpoint=endpoint,
        n_questions=len(counts),
        n_tokens_c=int(total[3]),
        majority_mass_share=m_share,
        majority_token_share=t_share,
        concentration_ratio=ratio,
        success_tail_majority_share=_share(total[4], total[5]) if n_tail else None,
        n_success_tail=n_tail,
        question_ratios=ratios,
        question_ratio_quartiles=quartiles,
        majority_modes=dict(sorted(majority.items())),
        question_sums=sums,
    )


def _majority_membership(
    questions: list[str],
    c_flag: np.ndarray[Any, Any],
    labels: list[Hashable | None],
    *,
    rank: dict[Hashable, int],
    exclude: frozenset[Hashable],
) -> tuple[
    dict[str, dict[Hashable, int]], dict[str, Hashable], np.ndarray[Any, Any], np.ndarray[Any, Any]
]:
    """Per trajectory whether it is in C and in its question's majority mode, with the
    per-question mode counts and majority modes (ties: ``rank``, then the labels' order) —
    the one membership rule of the token and the per-trajectory-sums computations."""
    member: list[Hashable | None] = []
    counts: dict[str, dict[Hashable, int]] = {}
    for i, (flag, z) in enumerate(zip(c_flag, labels, strict=True)):
        if not flag:
            member.append(None)
            continue
        z = _check_label(z, f"modes[{i}]")
        if z in exclude:
            member.append(None)
            continue
        member.append(z)
        by_q = counts.setdefault(questions[i], {})
        by_q[z] = by_q.get(z, 0) + 1

    def order_key(item: tuple[Hashable, int]) -> tuple[Any, ...]:
        z, k = item
        return (-k, rank.get(z, len(rank)), isinstance(z, str), z)

    majority = {q: min(by_q.items(), key=order_key)[0] for q, by_q in counts.items()}
    is_c = np.array([z is not None for z in member], dtype=bool)
    is_maj = np.array(
        [z is not None and majority[questions[i]] == z for i, z in enumerate(member)], dtype=bool
    )
    return counts, majority, is_c, is_maj
