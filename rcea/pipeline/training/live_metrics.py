"""RCEA numbers of one training step's rollout batch, logged live under ``rcea/``
(docs/training-live.md).

The offline estimators of ``rcea/audits/`` applied to the completions of one optimizer step,
each prompt's completions a group (a "question" of docs/estimators.md):

* ``rcea/token_entropy``: Ĥ_tok(x) macro-averaged over groups (docs/estimators.md item 3,
  every completion), ``rcea/token_entropy_success`` / ``rcea/token_entropy_failure``:
  Ĥ_tok,±(x) within group first, then averaged over the groups that have both outcomes
  (K₊ ≥ ``k_min`` and K₋ ≥ ``k_min``); ``rcea/token_entropy_ratio`` = failure / success;
  ``rcea/groups_both_outcomes`` the number of such groups. Fewer than ``min_groups`` of
  them: the split and the ratio are undefined (NaN), never 0.
* ``rcea/outcome_entropy``: h_b(p̂₊) averaged over groups (item 1; 0 is a real value here:
  a group with one outcome has no outcome uncertainty), ``rcea/zero_variance_share`` the
  share of groups with one outcome only, ``rcea/success_rate`` the share of successes.
* ``rcea/cov_tail_share_success`` / ``rcea/cov_tail_share_failure``: the q99 share of the
  reward-stratified covariance tail of the chosen-token log-probs (item 7),
  ``rcea/cov_tail_gap_pp`` failure − success in percentage points; undefined (NaN) when
  a stratum has no positive covariance mass (a batch with one outcome only).
* ``rcea/clip_cov_frac`` / ``rcea/kl_cov_frac``: the fraction of valid tokens Clip-Cov's
  and KL-Cov's masks (:func:`~rcea.pipeline.training.objectives.clip_cov_select`,
  :func:`~rcea.pipeline.training.objectives.kl_cov_select`) select on the step's micro-batches.

* ``rcea/entropy_law_ceiling`` (logged by the callback, not per batch): the ceiling b − a
  of the entropy–performance law R = −a·exp(H) + b (docs/estimators.md item 18) fitted on
  the run so far, once :data:`LAW_MIN_POINTS` points exist: a **prediction** of the
  accuracy the run reaches when its entropy is spent (:func:`law_ceiling`).

Everything is computed from numbers the trainer already has (per-token entropies and
chosen-token log-probs of the loss pass, rewards, advantages): no extra forward pass and no
full-vocabulary tensor. :func:`verl_batch_metrics` is the same dict from a verl
``DataProto`` batch (a drop-in for a verl metrics hook).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rcea.audits.entropy import outcome_report, per_question_token_entropy
from rcea.audits.entropy_law import fit_entropy_law, pair_trace
from rcea.audits.tail import reward_stratified_tail
from rcea.pipeline.training.objectives import (
    ClipCovParams,
    KLCovParams,
    clip_cov_select,
    kl_cov_select,
)

PREFIX = "rcea/"
#: Every tag this module logs, in display order.
METRICS: tuple[str, ...] = (
    "rcea/token_entropy",
    "rcea/token_entropy_success",
    "rcea/token_entropy_failure",
    "rcea/token_entropy_ratio",
    "rcea/groups_both_outcomes",
    "rcea/outcome_entropy",
    "rcea/zero_variance_share",
    "rcea/success_rate",
    "rcea/cov_tail_share_success",
    "rcea/cov_tail_share_failure",
    "rcea/cov_tail_gap_pp",
    "rcea/clip_cov_frac",
    "rcea/kl_cov_frac",
)
NAN = float("nan")


@dataclass(frozen=True)
class LiveSettings:
    """How the live numbers are gated and which covariance masks are measured.

    ``k_min``: completions of each outcome a group needs to enter the success/failure split;
    ``min_groups``: groups with both outcomes needed before the split is reported;
    ``success_threshold``: a completion succeeds when its verifier reward exceeds it (used
    where no verifier outcome is recorded: a plain TRL trainer, verl's scores);
    ``clip_cov`` / ``kl_cov``: the masks' parameters (the trainer's own objective's when it
    is Clip-Cov or KL-Cov, the supplement's defaults otherwise)."""

    k_min: int = 1
    min_groups: int = 1
    success_threshold: float = 0.5
    quantile: float = 0.99
    clip_cov: ClipCovParams = field(default_factory=ClipCovParams)
    kl_cov: KLCovParams = field(default_factory=KLCovParams)

    def __post_init__(self) -> None:
        for name in ("k_min", "min_groups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _num(value: float | None) -> float:
    return NAN if value is None else float(value)


def step_metrics(
    group: Sequence[Any] | np.ndarray[Any, Any],
    success: Sequence[int] | np.ndarray[Any, Any],
    token_trajectory: Sequence[int] | np.ndarray[Any, Any],
    token_entropy: Sequence[float] | np.ndarray[Any, Any],
    token_logprob: Sequence[float] | np.ndarray[Any, Any],
    settings: LiveSettings = LiveSettings(),
) -> dict[str, float]:
    """The ``rcea/`` numbers (module docstring) of one batch, without the mask fractions.

    Per completion: ``group`` (its prompt) and ``success`` (0/1); per valid completion
    token: ``token_trajectory`` (index of its completion), its entropy and its chosen-token
    log-prob. Undefined values are NaN."""
    grp = np.asarray(group, dtype=object)
    ok = np.asarray(success, dtype=np.int8)
    traj = np.asarray(token_trajectory, dtype=np.int64)
    ent = np.asarray(token_entropy, dtype=np.float64)
    logp = np.asarray(token_logprob, dtype=np.float64)
    if not (traj.size == ent.size == logp.size):
        raise ValueError(
            f"token arrays differ in length: token_trajectory {traj.size}, "
            f"token_entropy {ent.size}, token_logprob {logp.size}"
        )
    out = dict.fromkeys(METRICS[:-2], NAN)
    if grp.size == 0:
        return out
    outcome = outcome_report(grp, ok, k_min=1)
    out["rcea/outcome_entropy"] = outcome.mean_outcome_entropy
    out["rcea/zero_variance_share"] = 1.0 - outcome.share_mixed
    out["rcea/success_rate"] = outcome.accuracy
    counts = np.bincount(traj, minlength=grp.size)
    has_tokens = counts > 0
    if has_tokens.any():
        # h̄_i, the mean token entropy of each completion with tokens (docs/estimators.md item 3)
        mean_ent = np.bincount(traj, weights=ent, minlength=grp.size)[has_tokens]
        mean_ent = mean_ent / counts[has_tokens]  # type: ignore[assignment]  # the name is reused: integer counts above, the float means here
        rows = per_question_token_entropy(grp[has_tokens], ok[has_tokens], mean_ent)
        out["rcea/token_entropy"] = float(np.mean([r.token_entropy for r in rows]))
        both = [
            r
            for r in rows
            if r.k_success >= settings.k_min
            and r.k_failure >= settings.k_min
            and r.token_entropy_success is not None
            and r.token_entropy_failure is not None
        ]
        out["rcea/groups_both_outcomes"] = float(len(both))
        if len(both) >= settings.min_groups:
            h_s = float(np.mean([r.token_entropy_success for r in both]))
            h_f = float(np.mean([r.token_entropy_failure for r in both]))
            out["rcea/token_entropy_success"] = h_s
            out["rcea/token_entropy_failure"] = h_f
            out["rcea/token_entropy_ratio"] = h_f / h_s if h_s > 0 else NAN
        tail = reward_stratified_tail(grp, ok, traj, logp, quantile=settings.quantile)  # type: ignore[arg-type]  # reward_stratified_tail takes any sequence-like, numpy arrays included (as_float_array)
        out["rcea/cov_tail_share_success"] = _num(tail.success.share)
        out["rcea/cov_tail_share_failure"] = _num(tail.failure.share)
        out["rcea/cov_tail_gap_pp"] = _num(tail.gap_failure_minus_success_pp)
    else:
        out["rcea/groups_both_outcomes"] = 0.0
    return out


def mask_counts(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    settings: LiveSettings = LiveSettings(),
) -> tuple[int, int, int]:
    """(tokens Clip-Cov selects, tokens KL-Cov selects, valid tokens) on one micro-batch,
    by the objectives' own selection rules (docs/objectives.md)."""
    logp, old_logp = logp.detach().float(), old_logp.detach().float()
    fmask = mask.detach().float()
    cc = settings.clip_cov
    # a private generator: the choice among Clip-Cov's candidates is random, their count is not
    clip, _ = clip_cov_select(
        logp,
        old_logp,
        advantages.detach().float(),
        fmask,
        clip_ratio=cc.clip_ratio,
        lb=cc.lb,
        ub=cc.ub,
        eps_low=cc.epsilon,
        eps_high=cc.epsilon_high,
        generator=torch.Generator().manual_seed(0),
    )
    kl = kl_cov_select(logp, advantages.detach().float(), fmask, settings.kl_cov.k_ratio)
    valid = fmask > 0
    return int((clip & valid).sum()), int((kl & valid).sum()), int(valid.sum())


def mask_fractions(counts: Sequence[tuple[int, int, int]]) -> dict[str, float]:
    """``rcea/clip_cov_frac`` and ``rcea/kl_cov_frac`` over the micro-batches' counts."""
    n = sum(c[2] for c in counts)
    if n == 0:
        return {"rcea/clip_cov_frac": NAN, "rcea/kl_cov_frac": NAN}
    return {
        "rcea/clip_cov_frac": sum(c[0] for c in counts) / n,
        "rcea/kl_cov_frac": sum(c[1] for c in counts) / n,
    }


@dataclass
class RolloutRows:
    """One micro-batch's rows as the loss pass saw them (2-D tensors are (B, T))."""

    group: np.ndarray[Any, Any]  # (B,) prompt of each completion
    success: np.ndarray[Any, Any]  # (B,) 0/1
    mask: torch.Tensor
    entropy: torch.Tensor
    logp: torch.Tensor
    old_logp: torch.Tensor
    advantages: torch.Tensor


def batch_metrics(parts: Sequence[RolloutRows], settings: LiveSettings) -> dict[str, float]:
    """Every ``rcea/`` number of the micro-batches of one step (rows of a group may be spread
    over several micro-batches)."""
    groups: list[Any] = []
    ok: list[np.ndarray[Any, Any]] = []
    traj: list[np.ndarray[Any, Any]] = []
    ent: list[np.ndarray[Any, Any]] = []
    logp: list[np.ndarray[Any, Any]] = []
    counts = []
    offset = 0
    for p in parts:
        valid = p.mask.detach() > 0
        rows, _ = torch.nonzero(valid, as_tuple=True)  # row-major: tokens in order
        traj.append(rows.cpu().numpy() + offset)
        ent.append(p.entropy.detach()[valid].double().cpu().numpy())
        logp.append(p.logp.detach()[valid].double().cpu().numpy())
        groups.extend(p.group.tolist())
        ok.append(np.asarray(p.success, dtype=np.int8))
        counts.append(mask_counts(p.logp, p.old_logp, p.advantages, p.mask, settings))
        offset += len(p.group)
    if not parts:
        return dict.fromkeys(METRICS, NAN)
    out = step_metrics(
        np.asarray(groups, dtype=object),
        np.concatenate(ok),
        np.concatenate(traj),
        np.concatenate(ent),
        np.concatenate(logp),
        settings,
    )
    return {**out, **mask_fractions(counts)}


#: The tensors :func:`verl_batch_metrics` reads from ``DataProto.batch`` (verl's names).
VERL_TENSORS = (
    "responses",
    "response_mask",
    "token_level_scores",
    "old_log_probs",
    "entropys",
    "advantages",
)


def verl_batch_metrics(batch: Any, settings: LiveSettings = LiveSettings()) -> dict[str, float]:
    """The ``rcea/`` dict of one verl training batch (a ``verl.DataProto``): a drop-in for a
    verl metrics hook, e.g. ``metrics.update(verl_batch_metrics(batch))`` next to
    ``compute_data_metrics`` in ``RayPPOTrainer.fit`` (docs/training-live.md).

    Reads ``batch.batch[name]`` for :data:`VERL_TENSORS` and the prompt ids
    ``batch.non_tensor_batch["uid"]``; a completion succeeds when its sequence score (the sum
    of ``token_level_scores``) exceeds ``settings.success_threshold``. The whole batch is one
    micro-batch for the covariance masks."""
    tensors: Mapping[str, Any] = batch.batch
    present = set(tensors.keys())
    missing = [n for n in VERL_TENSORS if n not in present]
    if missing:
        raise ValueError(
            f"DataProto.batch lacks {', '.join(missing)} (needs {', '.join(VERL_TENSORS)}); "
            "entropys: keep the actor's entropies (calculate_entropy) on the batch"
        )
    non_tensor = getattr(batch, "non_tensor_batch", {}) or {}
    if "uid" not in non_tensor:
        raise ValueError("DataProto.non_tensor_batch lacks 'uid' (the prompt id of each row)")
    mask = tensors["response_mask"]
    scores = tensors["token_level_scores"].float().sum(-1)
    rows = RolloutRows(
        group=np.asarray(non_tensor["uid"], dtype=object),
        success=(scores > settings.success_threshold).to(torch.int8).cpu().numpy(),
        mask=mask,
        entropy=tensors["entropys"],
        logp=tensors["old_log_probs"],
        old_logp=tensors["old_log_probs"],
        advantages=tensors["advantages"],
    )
    if len(rows.group) != mask.size(0):
        raise ValueError(
            f"non_tensor_batch['uid'] has {len(rows.group)} rows, response_mask {mask.size(0)}"
        )
    return batch_metrics([rows], settings)


def nan_mean(values: Sequence[float]) -> float:
    """Mean of the defined values; NaN when none is (a logging window of undefined steps)."""
    ok = [v for v in values if not math.isnan(v)]
    return sum(ok) / len(ok) if ok else NAN


#: The running entropy-law ceiling (docs/estimators.md item 18): a prediction, not a
#: measurement — logged once :data:`LAW_MIN_POINTS` (H, R) pairs exist.
LAW_CEILING = "rcea/entropy_law_ceiling"
LAW_MIN_POINTS = 5


def law_ceiling(
    entropy: Sequence[tuple[int, float]],
    accuracy: Sequence[tuple[int, float]],
    *,
    min_points: int = LAW_MIN_POINTS,
) -> float | None:
    """b − a of R = −a·exp(H) + b fitted on the points so far (each accuracy paired with
    the latest defined entropy at or before its step, :func:`rcea.audits.entropy_law.
    run_law`'s pairing); None below ``min_points`` pairs or when the fit is undefined."""
    latest = dict(accuracy)  # one R per step: the last logged
    if len(latest) < min_points or any(not 0.0 <= r <= 1.0 for r in latest.values()):
        return None  # too few points, or not an accuracy (a reward outside [0, 1])
    paired = pair_trace(
        [s for s, _ in entropy], [h for _, h in entropy], list(latest), list(latest.values())
    )
    fit = fit_entropy_law(paired.entropy, paired.accuracy, min_points=min_points)
    return fit.ceiling
