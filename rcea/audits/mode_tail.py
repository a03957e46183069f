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
tokens to four numbers per trajectory (tokens, positive mass, positive mass and tokens in
the success-stratum tail) — the probe stores them, the partition is applied later — and
:func:`mode_tail_from_sums` gives the same result as :func:`mode_stratified_tail` from them
(up to the order of floating-point sums).
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
    "ModeTailResult",
    "TrajectorySums",
    "mode_stratified_tail",
    "mode_tail_from_sums",
    "trajectory_sums",
]


@dataclass(frozen=True)
class ModeTailResult:
    """Item 16 at one endpoint (module docstring)."""

    endpoint: str | None
    n_questions: int
    n_tokens_c: int
    majority_mass_share: float | None
    majority_token_share: float | None
    concentration_ratio: float | None
    success_tail_majority_share: float | None
    n_success_tail: int
    question_ratios: dict[str, float] = field(default_factory=dict)
    question_ratio_quartiles: tuple[float, float, float] | None = None
    majority_modes: dict[str, Hashable] = field(default_factory=dict)

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
    tok_c, tok_maj = is_c[traj], is_maj[traj]
    pos = c > 0
    # per token: its positive covariance mass and a count of one
    m_share, t_share, ratio, ratios, quartiles = _concentration(
        np.array(questions, dtype=object)[traj],
        counts,
        np.where(pos, c, 0.0),
        np.ones(c.size),
        tok_maj,
        tok_c,
    )

    # item 7's success-stratum tail: cutoff over every R = 1 token
    success = tc.rewards[traj] == 1
    tail_share, n_tail = None, 0
    if success.any():
        cutoff = float(np.quantile(c[success], quantile, method="inverted_cdf"))
        tail = success & (c >= cutoff)
        n_tail = int(tail.sum())
        tail_share = _share(float(c[tail & tok_maj & pos].sum()), float(c[tail & pos].sum()))

    return ModeTailResult(
        endpoint=endpoint,
        n_questions=len(counts),
        n_tokens_c=int(tok_c.sum()),
        majority_mass_share=m_share,
        majority_token_share=t_share,
        concentration_ratio=ratio,
        success_tail_majority_share=tail_share,
        n_success_tail=n_tail,
        question_ratios=ratios,
        question_ratio_quartiles=quartiles,
        majority_modes=dict(sorted(majority.items())),
    )


@dataclass(frozen=True)
class TrajectorySums:
    """Per trajectory (in input order): its eligible tokens, the positive mass Σ_{c>0} c of
    its tokens, and the positive mass and count of its tokens in item 7's success-stratum
    tail (c at or above the ``quantile`` cutoff over every R = 1 token; 0 off R = 1)."""

    quantile: float
    n_tokens: np.ndarray[Any, Any]
    positive_mass: np.ndarray[Any, Any]
    tail_positive_mass: np.ndarray[Any, Any]
    tail_tokens: np.ndarray[Any, Any]


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
    tail = np.zeros(c.size, dtype=bool)
    success = tc.rewards[traj] == 1
    if success.any():
        cutoff = float(np.quantile(c[success], quantile, method="inverted_cdf"))
        tail = success & (c >= cutoff)
    return TrajectorySums(
        quantile=quantile,
        n_tokens=np.bincount(traj, minlength=n),
        positive_mass=np.bincount(traj, weights=pos, minlength=n),
        tail_positive_mass=np.bincount(traj, weights=np.where(tail, pos, 0.0), minlength=n),
        tail_tokens=np.bincount(traj, weights=tail.astype(np.int64), minlength=n).astype(np.int64),
    )


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
    mass, toks = sums.positive_mass, sums.n_tokens
    m_share, t_share, ratio, ratios, quartiles = _concentration(
        np.array(questions, dtype=object), counts, mass, toks, is_maj, is_c
    )
    n_tail = int(sums.tail_tokens.sum())
    tail_share = (
        _share(float(sums.tail_positive_mass[is_maj].sum()), float(sums.tail_positive_mass.sum()))
        if n_tail
        else None
    )
    return ModeTailResult(
        endpoint=endpoint,
        n_questions=len(counts),
        n_tokens_c=int(toks[is_c].sum()),
        majority_mass_share=m_share,
        majority_token_share=t_share,
        concentration_ratio=ratio,
        success_tail_majority_share=tail_share,
        n_success_tail=n_tail,
        question_ratios=ratios,
        question_ratio_quartiles=quartiles,
        majority_modes=dict(sorted(majority.items())),
    )


def _concentration(
    questions: np.ndarray[Any, Any],
    counts: dict[str, Any],
    mass: np.ndarray[Any, Any],
    toks: np.ndarray[Any, Any],
    is_maj: np.ndarray[Any, Any],
    is_c: np.ndarray[Any, Any],
) -> tuple[
    float | None,
    float | None,
    float | None,
    dict[str, float],
    tuple[float, float, float] | None,
]:
    """M (the majority's share of C's positive mass), T (its share of C's tokens), M/T,
    and M/T per question with two or more modes with its quartiles, over units (tokens, or
    trajectories with their sums) carrying ``mass`` and ``toks``: the token and the
    per-trajectory-sums paths share this rule."""
    # mass sums over the units that carry some: no zero terms, so a mode holding all the
    # mass has M = 1 exactly (a sum's rounding depends on how many terms it adds)
    has = mass > 0
    m_share = _share(float(mass[is_maj & has].sum()), float(mass[is_c & has].sum()))
    t_share = _share(float(toks[is_maj].sum()), float(toks[is_c].sum()))
    ratio = m_share / t_share if m_share is not None and t_share else None
    ratios: dict[str, float] = {}
    for q, by_q in sorted(counts.items()):
        if len(by_q) < 2:
            continue  # one mode: its ratio is 1 by construction
        in_q = questions == q
        m_q = _share(float(mass[in_q & has & is_maj].sum()), float(mass[in_q & has & is_c].sum()))
        t_q = _share(float(toks[in_q & is_maj].sum()), float(toks[in_q & is_c].sum()))
        if m_q is not None and t_q:
            ratios[q] = m_q / t_q
    quartiles = None
    if ratios:
        qs = np.quantile(np.array(list(ratios.values())), [0.25, 0.5, 0.75])
        quartiles = (float(qs[0]), float(qs[1]), float(qs[2]))
    return m_share, t_share, ratio, ratios, quartiles


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
