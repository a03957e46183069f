"""Reward-stratified covariance tail at one endpoint (docs/estimators.md item 7).

Pooled over questions (an explicit exception to macro-averaging). Inputs are
per-trajectory ``group_ids`` (question) and 0/1 ``rewards``, and per eligible completion
token the index of its trajectory and its chosen-token log-probability log π(y_{i,t}|s).

* Advantage per trajectory: A_i = (R_i − mean_g R) / (std_g R + ε), population std
  (ddof = 0), ε = 1e-6, over *all* trajectories of group g (also those without eligible
  tokens); zero-variance groups are kept with A = 0.
* Per token: c_{i,t} = (log π_{i,t} − L̄)(A_i − Ā), with L̄ and Ā token-weighted means
  over all eligible tokens of the endpoint (both strata).
* Per stratum (tokens of successful, R = 1, / of failed, R = 0, trajectories):
  cutoff = ``np.quantile(c, 0.99, method="inverted_cdf")`` (the ⌈0.99·N⌉-th smallest c),
  tail = {c ≥ cutoff} (ties kept, so the selected fraction can exceed 1 %; it is
  reported), share = Σ_{tail, c>0} c / Σ_{stratum, c>0} c, undefined (``None``) when the
  denominator is 0 (no positive c) or the stratum is empty.
* Gap, in percentage points: ``gap_failure_minus_success_pp`` = 100 · (failure share −
  success share) — the supplement's Table A8 convention: positive means the failed
  stratum concentrates more of its positive covariance mass in its tail.
* Sensitivity: equal-count budgets, the top k = ⌈q·N⌉ tokens by c for q = 1 %, 2.5 %,
  5 % (⌈·⌉ computed exactly on the decimal q), ties broken by stable index (a stable
  sort of −c in input token order: among equal c the earlier token is taken). The share
  of a budget does not depend on how ties are broken (tied tokens have equal c).
* ``direction_counts`` counts, across endpoints, those whose failed stratum has the
  larger share (per quantile tail and per budget) and the macro-averaged shares.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from rcea.audits._checks import (
    as_binary_array,
    as_float_array,
    check_probability,
    check_same_length,
)
from rcea.audits._common import dataclass_dict

__all__ = [
    "DEFAULT_BUDGETS",
    "BudgetTail",
    "DirectionCount",
    "StratumTail",
    "TailDirectionSummary",
    "TailResult",
    "budget_count",
    "direction_counts",
    "reward_stratified_tail",
    "TokenCovariance",
    "token_covariances",
    "trajectory_advantages",
]

DEFAULT_BUDGETS: tuple[float, ...] = (0.01, 0.025, 0.05)
ADVANTAGE_EPS = 1e-6


@dataclass(frozen=True)
class StratumTail:
    """Quantile tail of one reward stratum (the report's ``tail.endpoints[].report.success``
    / ``.failure``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    n_tokens: int = field(metadata={"description": "tokens of the stratum"})
    cutoff: float | None = field(metadata={"description": "the tail cutoff"})
    n_selected: int = field(metadata={"description": "tokens selected (ties kept)"})
    selected_fraction: float | None = field(metadata={"description": "n_selected / n_tokens"})
    # None only in a report read back whose sums were not finite (JSON has no NaN)
    positive_mass: float | None = field(
        metadata={"description": "positive covariance mass of the stratum"}
    )
    tail_positive_mass: float | None = field(metadata={"description": "of it, in the tail"})
    share: float | None = field(metadata={"description": "tail_positive_mass / positive_mass"})

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_tokens": self.n_tokens,
            "cutoff": self.cutoff,
            "n_selected": self.n_selected,
            "selected_fraction": self.selected_fraction,
            "positive_mass": self.positive_mass,
            "tail_positive_mass": self.tail_positive_mass,
            "share": self.share,
        }


@dataclass(frozen=True)
class BudgetTail:
    """Equal-count budget: the top ⌈q·N⌉ tokens of each stratum by c."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    budget: float = field(metadata={"description": "equal-count budget (share of tokens)"})
    success_k: int = field(metadata={"description": "success tokens selected"})
    failure_k: int = field(metadata={"description": "failure tokens selected"})
    success_share: float | None = field(metadata={"description": "share of success positive mass"})
    failure_share: float | None = field(metadata={"description": "share of failure positive mass"})
    gap_failure_minus_success_pp: float | None = field(
        metadata={"description": "gap in percentage points"}
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "success_k": self.success_k,
            "failure_k": self.failure_k,
            "success_share": self.success_share,
            "failure_share": self.failure_share,
            "gap_failure_minus_success_pp": self.gap_failure_minus_success_pp,
        }


@dataclass(frozen=True)
class TailResult:
    """Reward-stratified tail concentration at one endpoint: the report's
    ``tail.endpoints[].report`` is this result, its fields (with these descriptions) the
    section's keys (``rcea.study.report.schema``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    endpoint: str | None = field(
        metadata={"description": "endpoint label, when the producer named one"}
    )
    quantile: float = field(metadata={"description": "the tail quantile (q99)"})
    n_tokens: int = field(metadata={"description": "tokens"})
    n_trajectories: int = field(metadata={"description": "trajectories"})
    n_groups: int = field(metadata={"description": "GRPO groups"})
    n_zero_variance_groups: int = field(
        metadata={"description": "groups with zero reward variance"}
    )
    # None only in a report read back whose means were not finite (JSON has no NaN)
    mean_logprob: float | None = field(metadata={"description": "mean token log-probability"})
    mean_advantage: float | None = field(metadata={"description": "mean advantage"})
    success: StratumTail = field(metadata={"description": "the R = 1 stratum"})
    failure: StratumTail = field(metadata={"description": "the R = 0 stratum"})
    gap_failure_minus_success_pp: float | None = field(
        metadata={"description": "gap in percentage points"}
    )
    budgets: tuple[BudgetTail, ...] = field(
        metadata={"description": "equal-count budget sensitivity"}
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "quantile": self.quantile,
            "n_tokens": self.n_tokens,
            "n_trajectories": self.n_trajectories,
            "n_groups": self.n_groups,
            "n_zero_variance_groups": self.n_zero_variance_groups,
            "mean_logprob": self.mean_logprob,
            "mean_advantage": self.mean_advantage,
            "success": self.success.to_dict(),
            "failure": self.failure.to_dict(),
            "gap_failure_minus_success_pp": self.gap_failure_minus_success_pp,
            "budgets": [b.to_dict() for b in self.budgets],
        }


def _advantages(
    group_ids: Sequence[Any], rewards: Any, eps: float
) -> tuple[np.ndarray[Any, Any], int, int]:
    r = as_float_array(rewards, "rewards")
    check_same_length(group_ids=group_ids, rewards=r)
    if not np.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a positive number, got {eps}")
    labels = np.asarray([str(g) for g in group_ids], dtype=object)
    _, codes = np.unique(labels, return_inverse=True)
    codes = codes.astype(np.int64).ravel()
    counts = np.bincount(codes).astype(np.float64)
    mean = np.bincount(codes, weights=r) / counts
    var = np.bincount(codes, weights=(r - mean[codes]) ** 2) / counts
    std = np.sqrt(var)
    adv = (r - mean[codes]) / (std[codes] + eps)
    adv[std[codes] == 0.0] = 0.0
    return adv, int(counts.size), int(np.sum(std == 0.0))


def trajectory_advantages(
    group_ids: Sequence[Any], rewards: Any, eps: float = ADVANTAGE_EPS
) -> np.ndarray[Any, Any]:
    """A_i = (R_i − mean_g R)/(std_g R + eps), population std; A = 0 in zero-variance groups."""
    return _advantages(group_ids, rewards, eps)[0]


def _share(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _gap(success: float | None, failure: float | None) -> float | None:
    if success is None or failure is None:
        return None
    return 100.0 * (failure - success)


def _stratum_tail(c: np.ndarray[Any, Any], quantile: float) -> StratumTail:
    n = int(c.size)
    positive_mass = float(c[c > 0].sum())
    if n == 0:
        return StratumTail(0, None, 0, None, 0.0, 0.0, None)
    cutoff = float(np.quantile(c, quantile, method="inverted_cdf"))
    tail = c >= cutoff
    tail_mass = float(c[tail & (c > 0)].sum())
    n_sel = int(tail.sum())
    return StratumTail(
        n_tokens=n,
        cutoff=cutoff,
        n_selected=n_sel,
        selected_fraction=n_sel / n,
        positive_mass=positive_mass,
        tail_positive_mass=tail_mass,
        share=_share(tail_mass, positive_mass),
    )


def budget_count(budget: float, n: int) -> int:
    """k = ⌈q·N⌉ computed exactly on the decimal value of q (so ⌈0.01·300⌉ = 3)."""
    return math.ceil(Fraction(repr(float(budget))) * n)


def _budget_share(c: np.ndarray[Any, Any], k: int) -> float | None:
    positive_mass = float(c[c > 0].sum())
    order = np.argsort(-c, kind="stable")
    top = c[order[:k]]
    return _share(float(top[top > 0].sum()), positive_mass)


@dataclass(frozen=True)
class TokenCovariance:
    """Item 7's per-token centred products at one endpoint: ``c[j]`` of token j of
    trajectory ``trajectory[j]``, with the token-weighted means they are centred on."""

    c: np.ndarray[Any, Any]
    trajectory: np.ndarray[Any, Any]
    rewards: np.ndarray[Any, Any]
    mean_logprob: float
    mean_advantage: float
    n_groups: int
    n_zero_variance_groups: int


def token_covariances(
    group_ids: Sequence[Any],
    rewards: Any,
    token_trajectory: Any,
    token_logprob: Any,
    *,
    eps: float = ADVANTAGE_EPS,
) -> TokenCovariance:
    """c_{i,t} = (log π_{i,t} − L̄)(A_i − Ā) for every eligible token (module docstring);
    the one computation item 7 and item 16 (:mod:`rcea.audits.mode_tail`) share."""
    r = as_binary_array(rewards, "rewards")
    n_traj = check_same_length(group_ids=group_ids, rewards=r)
    logp = as_float_array(token_logprob, "token_logprob")
    traj_f = as_float_array(token_trajectory, "token_trajectory")
    check_same_length(token_trajectory=traj_f, token_logprob=logp)
    if np.any(traj_f != np.floor(traj_f)) or traj_f.min() < 0 or traj_f.max() >= n_traj:
        raise ValueError(
            f"token_trajectory must hold integer trajectory indices in [0, {n_traj - 1}]"
        )
    traj = traj_f.astype(np.int64)
    adv, n_groups, n_zero_var = _advantages(group_ids, r, eps)
    a_tok = adv[traj]
    # Exactly rounded sums (math.fsum): the means, hence every c, do not depend on the
    # order of the tokens, so neither do the tail's ties at the cutoff.
    mean_logp = math.fsum(logp.tolist()) / logp.size
    mean_adv = math.fsum(a_tok.tolist()) / a_tok.size
    c = (logp - mean_logp) * (a_tok - mean_adv)
    return TokenCovariance(c, traj, r, mean_logp, mean_adv, n_groups, n_zero_var)


def reward_stratified_tail(
    group_ids: Sequence[Any],
    rewards: Any,
    token_trajectory: Any,
    token_logprob: Any,
    *,
    quantile: float = 0.99,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    endpoint: str | None = None,
    eps: float = ADVANTAGE_EPS,
) -> TailResult:
    """Pooled reward-stratified tail for one endpoint (formulas in the module docstring).

    ``group_ids`` and ``rewards`` (0/1) are per trajectory; ``token_trajectory`` (index
    into them) and ``token_logprob`` are per eligible completion token.
    """
    quantile = check_probability(quantile, "quantile")
    for q in budgets:
        if not 0.0 < float(q) <= 1.0:
            raise ValueError(f"budgets must be in (0, 1], got {q}")
    tc = token_covariances(group_ids, rewards, token_trajectory, token_logprob, eps=eps)
    c, traj, r = tc.c, tc.trajectory, tc.rewards
    n_traj, n_groups, n_zero_var = r.size, tc.n_groups, tc.n_zero_variance_groups
    mean_logp, mean_adv = tc.mean_logprob, tc.mean_advantage
    success_mask = r[traj] == 1
    c_s = c[success_mask]
    c_f = c[~success_mask]

    s_tail = _stratum_tail(c_s, quantile)
    f_tail = _stratum_tail(c_f, quantile)

    budget_rows = []
    for q in budgets:
        ks = budget_count(q, c_s.size)
        kf = budget_count(q, c_f.size)
        ss = _budget_share(c_s, ks) if c_s.size else None
        fs = _budget_share(c_f, kf) if c_f.size else None
        budget_rows.append(BudgetTail(float(q), ks, kf, ss, fs, _gap(ss, fs)))

    return TailResult(
        endpoint=endpoint,
        quantile=quantile,
        n_tokens=int(c.size),
        n_trajectories=n_traj,
        n_groups=n_groups,
        n_zero_variance_groups=n_zero_var,
        mean_logprob=mean_logp,
        mean_advantage=mean_adv,
        success=s_tail,
        failure=f_tail,
        gap_failure_minus_success_pp=_gap(s_tail.share, f_tail.share),
        budgets=tuple(budget_rows),
    )


@dataclass(frozen=True)
class DirectionCount:
    """Across endpoints: how many have the larger share in the failed stratum (the
    report's ``tail.direction_counts`` entries are this result)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    selection: str = field(metadata={"description": "q99 tail or the budget"})
    n_endpoints: int = field(metadata={"description": "endpoints counted"})
    failure_greater: int = field(
        metadata={"description": "endpoints with failure share > success share"}
    )
    success_greater: int = field(metadata={"description": "the reverse"})
    equal: int = field(metadata={"description": "ties"})
    undefined: int = field(metadata={"description": "endpoints with an undefined share"})
    mean_success_share: float | None = field(metadata={"description": "mean success share"})
    mean_failure_share: float | None = field(metadata={"description": "mean failure share"})
    mean_gap_failure_minus_success_pp: float | None = field(
        metadata={"description": "mean gap (pp)"}
    )
    undefined_endpoints: tuple[str, ...] = field(
        metadata={"description": "which endpoints were undefined"}
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class TailDirectionSummary:
    """Direction counts for the quantile tail and each equal-count budget (the report's
    ``tail.direction_counts``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    quantile_tail: DirectionCount = field(metadata={"description": "over the q99 tails"})
    budgets: tuple[DirectionCount, ...] = field(
        metadata={"description": "one per equal-count budget"}
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _count(selection: str, rows: list[tuple[str, float | None, float | None]]) -> DirectionCount:
    fg = sg = eq = 0
    undefined: list[str] = []
    defined: list[tuple[float, float]] = []
    for name, s, f in rows:
        if s is None or f is None:
            undefined.append(name)
            continue
        defined.append((s, f))
        if f > s:
            fg += 1
        elif s > f:
            sg += 1
        else:
            eq += 1
    ms = float(np.mean([s for s, _ in defined])) if defined else None
    mf = float(np.mean([f for _, f in defined])) if defined else None
    mg = float(np.mean([100.0 * (f - s) for s, f in defined])) if defined else None
    return DirectionCount(
        selection, len(rows), fg, sg, eq, len(undefined), ms, mf, mg, tuple(undefined)
    )


def direction_counts(results: Sequence[TailResult]) -> TailDirectionSummary:
    """Count endpoints with failure share > success share (and <, =, undefined).

    Means are unweighted (macro) over endpoints where both shares are defined; the gap is
    failure − success in percentage points. All results must use the same quantile and
    budgets. Endpoints without a name are called ``endpoint_<index>``.
    """
    if not results:
        raise ValueError("results is empty")
    first = results[0]
    budgets = [b.budget for b in first.budgets]
    for i, res in enumerate(results):
        if res.quantile != first.quantile or [b.budget for b in res.budgets] != budgets:
            raise ValueError(f"results[{i}] uses a different quantile or budgets than results[0]")
    names = [res.endpoint or f"endpoint_{i}" for i, res in enumerate(results)]
    q_rows = [
        (n, res.success.share, res.failure.share) for n, res in zip(names, results, strict=True)
    ]
    quantile_tail = _count(f"quantile_{first.quantile:g}", q_rows)
    budget_counts = []
    for j, b in enumerate(budgets):
        rows = [
            (n, res.budgets[j].success_share, res.budgets[j].failure_share)
            for n, res in zip(names, results, strict=True)
        ]
        budget_counts.append(_count(f"top_{b:g}", rows))
    return TailDirectionSummary(quantile_tail=quantile_tail, budgets=tuple(budget_counts))
