"""The six RLVR objectives as small losses on tensors.

Each objective is an :class:`Objective` with

* ``prepare(PrepBatch)`` — run once per generation batch, before TRL shuffles and splits it,
  with whole groups present (group-level quantities: DAPO's zero-variance removal, GTPO's
  conflict tokens, EP-GRPO's progress-aligned token advantages); returns per-sample
  tensors (``rcea_*`` keys) that travel with the batch, and metrics;
* ``loss(LossBatch)`` — the policy loss of one micro-batch, returning the scalar and metrics.

Both are pure functions of their tensors (plus, for GTPO, the entropy calibrated on the
first batch and, for Clip-Cov, a random generator), so every objective is tested on
hand-computed 2-sample batches. The shared trainer (:mod:`rcea.pipeline.training.trainer`)
only gathers the tensors and calls them.

Notation: ``logp``/``old_logp`` are log-probabilities of the sampled tokens under the
current and the sampling policy, ``A`` the group-normalised advantage (one per completion
unless an objective makes it token-level), ``mask`` the completion-token mask.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import torch

Tensor = torch.Tensor

SEQ_MEAN = "seq_mean_token_mean"  # TRL loss_type="grpo": mean over sequences of token means
TOKEN_MEAN = "token_mean"  # TRL loss_type="dapo": all tokens of the accumulation window
LOSS_AGGS = (SEQ_MEAN, TOKEN_MEAN)


# --------------------------------------------------------------------------- batches


@dataclass
class PrepBatch:
    """One generation batch, whole groups, in generation order (no grad)."""

    completion_ids: Tensor  # (B, T) long
    mask: Tensor  # (B, T) float
    advantages: Tensor  # (B,)
    correct: Tensor  # (B,) float, verifier outcome R
    group: Tensor  # (B,) long, prompt group index
    old_logp: Tensor | None = None  # (B, T) sampling-policy log-probs (needs_generation_stats)
    entropy: Tensor | None = None  # (B, T) sampling-policy token entropies (needs_generation_stats)
    ref_logp: Tensor | None = None  # (B, T) reference-policy log-probs (needs_reference)


@dataclass
class LossBatch:
    """One micro-batch for the loss."""

    logp: Tensor  # (B, T), differentiable
    old_logp: Tensor  # (B, T)
    entropy: Tensor  # (B, T), differentiable
    mask: Tensor  # (B, T) float
    advantages: Tensor  # (B,) or (B, T)
    extras: dict[str, Tensor] = field(default_factory=dict)
    token_normalizer: Tensor | float | None = None  # TOKEN_MEAN denominator (window tokens)
    seq_scale: float = 1.0  # SEQ_MEAN multiplier (1 / gradient accumulation steps)
    is_ratio: Tensor | None = None  # vLLM importance-sampling correction, multiplies the PG term
    generator: torch.Generator | None = None  # Clip-Cov's random selection
    # mean of a scalar over the data-parallel ranks (None: one process); GTPO's H0 uses it
    # so every rank filters against the same calibrated entropy
    all_mean: Callable[[Tensor], Tensor] | None = None


@dataclass
class LossOutput:
    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- shared pieces


def adv_2d(advantages: Tensor) -> Tensor:
    return advantages.unsqueeze(1) if advantages.dim() == 1 else advantages


def ppo_clip(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    eps_low: float,
    eps_high: float,
    clip_ratio_c: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token clipped surrogate ``-min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` and the
    low/high clip indicators (as TRL counts them).

    ``clip_ratio_c > 1`` adds verl's dual clip (Ye et al. 2020; verl
    ``compute_policy_loss_vanilla``, ``clip_ratio_c``): on tokens with ``A < 0`` the loss is
    capped at ``-c A``. ``0`` (the default) leaves it off, as TRL does."""
    adv = adv_2d(adv)
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    if clip_ratio_c:
        if clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (or 0: off), got {clip_ratio_c}")
        capped = torch.min(per_token, -adv * clip_ratio_c)
        per_token = torch.where(adv < 0, capped, per_token)
    low = (ratio < 1 - eps_low) & (adv < 0)
    high = (ratio > 1 + eps_high) & (adv > 0)
    return per_token, low, high


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    mode: str,
    *,
    token_normalizer: Tensor | float | None = None,
    seq_scale: float = 1.0,
) -> Tensor:
    """``SEQ_MEAN``: mean over sequences of the per-sequence token mean, times ``seq_scale``;
    ``TOKEN_MEAN``: sum over tokens / ``token_normalizer`` (default: the batch's tokens)."""
    if mode == SEQ_MEAN:
        per_seq = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.mean() * seq_scale
    if mode == TOKEN_MEAN:
        denom = mask.sum().clamp(min=1.0) if token_normalizer is None else token_normalizer
        return (per_token * mask).sum() / denom
    raise ValueError(f"unknown loss aggregation {mode!r} (choose from {LOSS_AGGS})")


TRL_ADVANTAGE_EPSILON = 1e-4


def group_advantages(rewards: Tensor, n_generations: int, epsilon: float) -> Tensor:
    """GRPO's advantages ``(R - mean) / (std + epsilon)`` per group of ``n_generations``
    consecutive completions, std unbiased (as TRL's ``nanstd`` and verl's
    ``compute_grpo_outcome_advantage``); NaN rewards (unscorable) are left out of the group
    statistics and get advantage 0, as in TRL."""
    grouped = rewards.view(-1, n_generations)
    valid = ~torch.isnan(grouped)
    count = valid.sum(1, keepdim=True)
    filled = torch.where(valid, grouped, torch.zeros_like(grouped))
    mean = filled.sum(1, keepdim=True) / count.clamp(min=1)
    dev = torch.where(valid, grouped - mean, torch.zeros_like(grouped))
    std = (dev.pow(2).sum(1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    adv = torch.where(valid, (grouped - mean) / (std + epsilon), torch.zeros_like(grouped))
    return adv.reshape(-1)


def masked_mean(x: Tensor, mask: Tensor) -> float:
    n = float(mask.sum())
    return float((x * mask).sum()) / n if n > 0 else 0.0


def token_covariance(logp: Tensor, adv: Tensor, mask: Tensor) -> Tensor:
    """Cui et al.'s token covariance ``(log pi - mean log pi)(A - mean A)``, means over the
    valid tokens of the batch (token-weighted), computed without gradient."""
    logp = logp.detach()
    adv = adv_2d(adv).expand_as(logp)
    n = mask.sum().clamp(min=1.0)
    lp_mean = (logp * mask).sum() / n
    a_mean = (adv * mask).sum() / n
    return (logp - lp_mean) * (adv - a_mean)


def _pg_metrics(low: Tensor, high: Tensor, mask: Tensor) -> dict[str, float]:
    return {
        "clip_ratio/low_mean": masked_mean(low.float(), mask),
        "clip_ratio/high_mean": masked_mean(high.float(), mask),
        "clip_ratio/region_mean": masked_mean((low | high).float(), mask),
    }


def _apply_is(per_token: Tensor, batch: LossBatch) -> Tensor:
    return per_token if batch.is_ratio is None else per_token * batch.is_ratio


# --------------------------------------------------------------------------- base class


@dataclass
class ObjectiveParams:
    epsilon: float = 0.2
    epsilon_high: float = 0.2
    loss_agg: str = SEQ_MEAN
    clip_ratio_c: float = 0.0  # verl's dual clip (3.0 in verl's config); 0: off (TRL)
    advantage_epsilon: float = 1e-4  # (R - mean) / (std + eps): TRL's 1e-4; verl's is 1e-6


class Objective:
    """Base objective: PPO-clipped GRPO surrogate with the configured aggregation."""

    name: ClassVar[str] = "base"
    Params: ClassVar[type[ObjectiveParams]] = ObjectiveParams
    needs_reference: ClassVar[bool] = False
    needs_generation_stats: ClassVar[bool] = False
    needs_groups: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        names = {f.name for f in fields(self.Params)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(
                f"objective {self.name!r}: unknown parameter(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(names))})"
            )
        self.params = self.Params(**params)
        if self.params.clip_ratio_c and self.params.clip_ratio_c <= 1.0:
            raise ValueError(
                f"objective {self.name!r}: clip_ratio_c must be > 1 (verl's dual clip) or 0 "
                f"(off), got {self.params.clip_ratio_c}"
            )
        if self.params.loss_agg not in LOSS_AGGS:
            raise ValueError(
                f"objective {self.name!r}: loss_agg must be one of {LOSS_AGGS}, "
                f"got {self.params.loss_agg!r}"
            )

    #: the loss is TRL's own ``GRPOTrainer._compute_loss`` (with ``trl_loss_type``); the
    #: trainer delegates to it and ``loss`` serves the tests and the options TRL lacks
    trl_loss: ClassVar[bool] = False

    @property
    def uses_groups(self) -> bool:
        """Whether ``prepare`` needs whole groups and verifier outcomes: the objective's own
        group quantities, or zero-variance removal switched on (``remove_zero_variance``)."""
        return self.needs_groups or bool(getattr(self.params, "remove_zero_variance", False))

    @property
    def uses_trl_loss(self) -> bool:
        """True when TRL's own loss computes this objective: GRPO and DAPO without verl's
        dual clip (TRL has none)."""
        return self.trl_loss and not self.params.clip_ratio_c

    @property
    def trl_loss_type(self) -> str:
        """The TRL ``loss_type`` with the same aggregation (set on ``GRPOConfig``)."""
        return "grpo" if self.params.loss_agg == SEQ_MEAN else "dapo"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self.params)}

    def prepare(self, batch: PrepBatch) -> tuple[dict[str, Tensor], dict[str, float]]:
        return {}, {}

    def _aggregate(self, per_token: Tensor, mask: Tensor, batch: LossBatch) -> Tensor:
        return aggregate(
            per_token,
            mask,
            self.params.loss_agg,
            token_normalizer=batch.token_normalizer,
            seq_scale=batch.seq_scale,
        )

    def loss(self, batch: LossBatch) -> LossOutput:
        p = self.params
        per_token, low, high = ppo_clip(
            batch.logp, batch.old_logp, batch.advantages, p.epsilon, p.epsilon_high, p.clip_ratio_c
        )
        loss = self._aggregate(_apply_is(per_token, batch), batch.mask, batch)
        return LossOutput(loss, _pg_metrics(low, high, batch.mask))


# --------------------------------------------------------------------------- GRPO


class GRPO(Objective):
    """GRPO (Shao et al. 2024): symmetric clip 0.2, mean over sequences of token means."""

    name = "grpo"
    trl_loss = True


# --------------------------------------------------------------------------- DAPO


@dataclass
class DAPOParams(ObjectiveParams):
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    loss_agg: str = TOKEN_MEAN
    remove_zero_variance: bool = True
    overlong_buffer_frac: float = 0.2  # soft overlong shaping over the last 20% of the budget
    overlong_penalty: float = 1.0  # weight of TRL's soft overlong punishment reward


def zero_variance_keep(correct: Tensor, group: Tensor) -> Tensor:
    """1.0 for completions whose group has both outcomes (0 < #correct < G), else 0.0."""
    keep = torch.zeros_like(correct, dtype=torch.float32)
    for g in torch.unique(group):
        sel = group == g
        k = correct[sel].sum()
        keep[sel] = float(0 < k < int(sel.sum()))
    return keep


def zero_variance_prepare(
    objective: Objective, batch: PrepBatch
) -> tuple[dict[str, Tensor], dict[str, float]]:
    """``rcea_keep`` for objectives with ``remove_zero_variance`` (DAPO's dynamic removal;
    the Entropy-Mechanism recipes' group filtering for Clip-Cov and KL-Cov)."""
    if not objective.params.remove_zero_variance:  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
        return {}, {"objective/removed_frac": 0.0}
    keep = zero_variance_keep(batch.correct, batch.group)
    return {"rcea_keep": keep}, {"objective/removed_frac": 1.0 - float(keep.mean())}


def kept_mask(batch: LossBatch) -> Tensor:
    keep = batch.extras.get("rcea_keep")
    return batch.mask if keep is None else batch.mask * keep.unsqueeze(1).to(batch.mask.dtype)


class DAPO(Objective):
    """DAPO (Yu et al. 2025): token-level loss, clip-higher 0.2/0.28, dynamic removal of
    zero-variance groups (their completions leave the loss and the token normaliser;
    no re-sampling to refill the batch), soft overlong shaping (a reward term)."""

    name = "dapo"
    Params = DAPOParams
    trl_loss = True
    needs_groups = True

    def prepare(self, batch: PrepBatch) -> tuple[dict[str, Tensor], dict[str, float]]:
        return zero_variance_prepare(self, batch)

    def loss(self, batch: LossBatch) -> LossOutput:
        p = self.params
        mask = kept_mask(batch)
        per_token, low, high = ppo_clip(
            batch.logp, batch.old_logp, batch.advantages, p.epsilon, p.epsilon_high, p.clip_ratio_c
        )
        loss = self._aggregate(_apply_is(per_token, batch), mask, batch)
        return LossOutput(loss, _pg_metrics(low, high, mask))


# --------------------------------------------------------------------------- Clip-Cov


@dataclass
class ClipCovParams(ObjectiveParams):
    clip_ratio: float = 2e-4
    lb: float = 1.0
    ub: float = 5.0
    remove_zero_variance: bool = False  # the Entropy-Mechanism recipes' group filtering


def clip_cov_select(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    *,
    clip_ratio: float,
    lb: float,
    ub: float,
    eps_low: float,
    eps_high: float,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Clip-Cov's token selection (verl ``compute_policy_loss_clip_cov``): among valid tokens
    not already clipped by the PPO ratio clip whose covariance lies strictly inside
    ``(lb, ub)``, a uniformly random ``max(floor(clip_ratio * N), 1)`` are chosen
    (N = valid tokens). Returns (selected bool (B, T), in-range candidates bool (B, T))."""
    adv2 = adv_2d(adv).expand_as(logp)
    cov = token_covariance(logp, adv2, mask)
    ratio = torch.exp(logp.detach() - old_logp)
    loss1 = -adv2 * ratio
    loss2 = -adv2 * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    clipped_by_ppo = loss2 > loss1
    valid = mask > 0
    candidates = valid & ~clipped_by_ppo & (cov > lb) & (cov < ub)
    selected = torch.zeros_like(candidates)
    idx = torch.nonzero(candidates.reshape(-1)).squeeze(-1)
    if idx.numel() > 0:
        n_clip = max(int(clip_ratio * float(valid.sum())), 1)
        perm = torch.randperm(idx.numel(), generator=generator)[: min(n_clip, idx.numel())]
        flat = selected.reshape(-1).clone()
        flat[idx[perm.to(idx.device)]] = True
        selected = flat.view_as(candidates)
    return selected, candidates


class ClipCov(Objective):
    """Clip-Cov (Cui et al. 2025): detach a random ``clip_ratio`` fraction of tokens whose
    covariance lies in ``(lb, ub)`` (their surrogate term is zeroed), PPO clip otherwise."""

    name = "clip_cov"
    Params = ClipCovParams

    def prepare(self, batch: PrepBatch) -> tuple[dict[str, Tensor], dict[str, float]]:
        return zero_variance_prepare(self, batch)

    def loss(self, batch: LossBatch) -> LossOutput:
        p = self.params
        mask = kept_mask(batch)
        selected, candidates = clip_cov_select(
            batch.logp,
            batch.old_logp,
            batch.advantages,
            mask,
            clip_ratio=p.clip_ratio,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            lb=p.lb,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            ub=p.ub,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            eps_low=p.epsilon,
            eps_high=p.epsilon_high,
            generator=batch.generator,
        )
        per_token, low, high = ppo_clip(
            batch.logp, batch.old_logp, batch.advantages, p.epsilon, p.epsilon_high, p.clip_ratio_c
        )
        per_token = per_token * (~selected).to(per_token.dtype)
        loss = self._aggregate(_apply_is(per_token, batch), mask, batch)
        metrics = _pg_metrics(low, high, mask)
        metrics["objective/clip_cov_frac"] = masked_mean(selected.float(), mask)
        # 1 when the covariance mask selected nothing on this update (docs/estimators.md item 13);
        # the logged mean over a logging window is the share of such updates
        metrics["objective/cov_mask_empty"] = float(not bool(selected.any()))
        metrics["objective/cov_in_range_frac"] = masked_mean(candidates.float(), mask)
        return LossOutput(loss, metrics)


# --------------------------------------------------------------------------- KL-Cov


@dataclass
class KLCovParams(ObjectiveParams):
    k_ratio: float = 2e-3
    kl_coef: float = 0.5
    remove_zero_variance: bool = False  # the Entropy-Mechanism recipes' group filtering


def kl_cov_select(logp: Tensor, adv: Tensor, mask: Tensor, k_ratio: float) -> Tensor:
    """KL-Cov's selection, as verl ``compute_policy_loss_kl_cov`` makes it: the top
    ``max(floor(k_ratio * N), 1)`` valid tokens (N of them, row-major order) by covariance,
    picked by ``torch.topk`` on the CPU copy of the valid tokens' covariances. Ties (e.g. a
    micro-batch whose advantages are all 0, where every covariance is 0) fall as
    ``torch.topk`` breaks them, exactly as in verl."""
    adv2 = adv_2d(adv).expand_as(logp)
    valid = (mask > 0).reshape(-1)
    idx = torch.nonzero(valid).squeeze(-1)
    selected = torch.zeros_like(valid)
    if idx.numel() > 0 and k_ratio > 0:
        a = adv2.detach().reshape(-1)[idx].cpu()
        lp = logp.detach().reshape(-1)[idx].cpu()
        cov = (a - a.mean()) * (lp - lp.mean())
        k = max(int(idx.numel() * k_ratio), 1)
        top = torch.topk(cov, k, largest=True).indices
        selected[idx[top.to(idx.device)]] = True
    return selected.view_as(mask)


class KLCov(Objective):
    """KL-Cov (Cui et al. 2025): unclipped surrogate ``-r A`` on every token, plus
    ``kl_coef * |log pi - log pi_old|`` on the top ``k_ratio`` fraction by covariance (as
    in verl: no ratio clip). Importance weights multiply the whole per-token loss, the KL
    term included, as verl's ``rollout_is_weights`` do."""

    name = "kl_cov"
    Params = KLCovParams

    def prepare(self, batch: PrepBatch) -> tuple[dict[str, Tensor], dict[str, float]]:
        return zero_variance_prepare(self, batch)

    def loss(self, batch: LossBatch) -> LossOutput:
        p = self.params
        mask = kept_mask(batch)
        adv = adv_2d(batch.advantages)
        ratio = torch.exp(batch.logp - batch.old_logp)
        selected = kl_cov_select(batch.logp, batch.advantages, mask, p.k_ratio)  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
        penalty = p.kl_coef * (batch.logp - batch.old_logp).abs()  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
        per_token = _apply_is(-adv * ratio + penalty * selected.to(ratio.dtype), batch)
        loss = self._aggregate(per_token, mask, batch)
        return LossOutput(
            loss,
            {
                "objective/kl_cov_frac": masked_mean(selected.float(), mask),
                "objective/cov_mask_empty": float(not bool(selected.any())),
                "objective/kl_cov_abs_kl": masked_mean(penalty.detach(), selected.float()),
            },
        )


# --------------------------------------------------------------------------- GTPO


GTPO_THRESHOLD_RULES = ("absolute", "readme", "calibrated")


@dataclass
class GTPOParams(ObjectiveParams):
    """GTPO as its authors' code defines it (winstonsmith1897/GTPO @ 5d33811e,
    ``gtpo/gtpo_training.py`` with ``config.yaml``'s ``gtpo_runtime``)."""

    entropy_coef: float = 0.1  # ENT_SCALE: A <- A - 0.1 <H> on kept completions
    entropy_threshold: float = 0.7  # ENT_THRESHOLD (nats) for threshold_rule "absolute"
    # "absolute": entropy_threshold nats (the code); "readme": ln 2 (the README equation);
    # "calibrated": entropy_threshold x H0, H0 = mean completion entropy of the first batch
    threshold_rule: str = "absolute"
    conflict_weight: float = 2.0  # W_RAW on positive conflict tokens (squared where runs overlap)
    conflict: bool = True
    on_policy: bool = True  # ratio exp(logp - sg(logp)) = 1, no clip (the code); False: PPO clip


def _leading_run(raw: Tensor) -> Tensor:
    return torch.cumprod(raw.to(torch.int64), dim=1).bool()


def gtpo_conflicts(
    completion_ids: Tensor, mask: Tensor, advantages: Tensor, group: Tensor, weight: float = 2.0
) -> tuple[Tensor, Tensor, Tensor]:
    """GTPO's conflict tokens and weights, per group of completions (right-padded rows).

    Among a group's completions with non-zero advantage, a token is *in conflict* at a
    position when some positive- and some negative-advantage completion carry that token
    there. Only two runs count: the *leading* run (from the first token while every
    position is in conflict) and the *trailing* run (the same from the last token, positions
    aligned at each completion's end). Per token the weight is ``weight`` for each run a
    positive completion's token is in (so ``weight**2`` where both runs cover it), ``0`` for
    a negative completion's token in either run, 1 elsewhere; zero-advantage completions
    keep weight 1. Returns (weights (B, T), conflict bool (B, T), conflict count per
    completion (B,), at least 1) — the count is the union of the two runs at the tokens'
    true positions (the reference counts its trailing run at reversed positions: a slip,
    see docs/objectives.md)."""
    adv = advantages if advantages.dim() == 1 else advantages[:, 0]
    valid = mask > 0
    b, t = mask.shape
    weights = valid.to(torch.float64)
    conflict = torch.zeros_like(valid)
    count = torch.ones(b, dtype=torch.float64, device=mask.device)
    lengths = valid.sum(-1)
    pos_t = torch.arange(t, device=mask.device).unsqueeze(0)
    # end-aligned view: column j holds the token j places before the end (j = 0: the last)
    src = (lengths.unsqueeze(1) - 1 - pos_t).clamp(min=0)
    rev_valid = pos_t < lengths.unsqueeze(1)
    rev_ids = completion_ids.gather(1, src)
    for g in torch.unique(group):
        rows = torch.nonzero((group == g) & (adv != 0)).squeeze(-1)
        if rows.numel() == 0:
            continue
        pos = adv[rows] > 0
        runs = []
        for ids, ok in ((completion_ids[rows], valid[rows]), (rev_ids[rows], rev_valid[rows])):
            same = (ids.unsqueeze(0) == ids.unsqueeze(1)) & ok.unsqueeze(0) & ok.unsqueeze(1)
            has_pos = (same & pos.view(1, -1, 1)).any(1)
            has_neg = (same & ~pos.view(1, -1, 1)).any(1)
            runs.append(_leading_run(ok & has_pos & has_neg))
        lead, trail_rev = runs
        trail = trail_rev.gather(1, src[rows]) & valid[rows]  # back to true positions
        w = torch.ones(rows.numel(), t, dtype=torch.float64, device=mask.device)
        for run in (lead, trail):
            w = w * torch.where(run, torch.where(pos.unsqueeze(1), weight, 0.0), 1.0)
        both = (lead | trail) & valid[rows]
        weights[rows] = w * valid[rows]
        conflict[rows] = both
        count[rows] = both.sum(-1).clamp(min=1).to(torch.float64)
    return weights, conflict, count


class GTPO(Objective):
    """GTPO (Simoni et al. 2025) as its authors' code computes it: conflict-token weights
    (:func:`gtpo_conflicts`), completions whose mean token entropy exceeds the threshold
    dropped (advantage 0), the kept ones' advantage shaped to ``A - entropy_coef * <H>``
    (entropy detached), on-policy ratio (value 1) without clip, and each completion's
    token-mean loss divided by its conflict-token count, summed over completions; no
    reference model. See docs/objectives.md."""

    name = "gtpo"
    Params = GTPOParams
    needs_groups = True

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params.threshold_rule not in GTPO_THRESHOLD_RULES:  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            raise ValueError(
                f"objective 'gtpo': threshold_rule must be one of {GTPO_THRESHOLD_RULES}, "
                f"got {self.params.threshold_rule!r}"  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            )
        self.h0: float | None = None

    def prepare(self, batch: PrepBatch) -> tuple[dict[str, Tensor], dict[str, float]]:
        if not self.params.conflict:  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            return {}, {"objective/conflict_frac": 0.0}
        w, conf, count = gtpo_conflicts(
            batch.completion_ids,
            batch.mask,
            batch.advantages,
            batch.group,
            self.params.conflict_weight,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
        )
        dtype = batch.mask.dtype
        return {"rcea_token_weight": w.to(dtype), "rcea_conflict_count": count.to(dtype)}, {
            "objective/conflict_frac": masked_mean(conf.float(), batch.mask)
        }

    def threshold(self, seq_ent: Tensor, batch: LossBatch) -> float:
        p = self.params
        if p.threshold_rule == "absolute":  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            return p.entropy_threshold  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
        if p.threshold_rule == "readme":  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            return math.log(2.0)
        if self.h0 is None:
            first = seq_ent.mean()
            # under data parallelism: the mean over the ranks' first micro-batches (equal
            # sizes), i.e. the first on-policy batch of the whole run
            self.h0 = float(first if batch.all_mean is None else batch.all_mean(first))
        return p.entropy_threshold * self.h0  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)

    def loss(self, batch: LossBatch) -> LossOutput:
        p = self.params
        mask = batch.mask
        n_tok = mask.sum(-1).clamp(min=1.0)
        seq_ent = (batch.entropy.detach() * mask).sum(-1) / n_tok
        keep = seq_ent <= self.threshold(seq_ent, batch)
        adv = adv_2d(batch.advantages)[:, :1].expand(-1, 1)
        shaped = torch.where(keep.unsqueeze(1), adv - p.entropy_coef * seq_ent.unsqueeze(1), 0.0)  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
        if p.on_policy:  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            ratio = torch.exp(batch.logp - batch.logp.detach())
            per_token = -ratio * shaped
            low = high = torch.zeros_like(mask, dtype=torch.bool)
        else:
            per_token, low, high = ppo_clip(
                batch.logp, batch.old_logp, shaped, p.epsilon, p.epsilon_high, p.clip_ratio_c
            )
        weight = batch.extras.get("rcea_token_weight")
        if weight is not None:
            per_token = per_token * weight
        per_token = _apply_is(per_token, batch)
        count = batch.extras.get("rcea_conflict_count")
        per_seq = (per_token * mask).sum(-1) / n_tok
        if count is not None:
            per_seq = per_seq / count.clamp(min=1.0)
        loss = per_seq.sum() * batch.seq_scale
        metrics = _pg_metrics(low, high, mask)
        metrics["objective/filtered_frac"] = 1.0 - float(keep.float().mean())
        if self.h0 is not None:
            metrics["objective/h0"] = self.h0
        return LossOutput(loss, metrics)


# --------------------------------------------------------------------------- EP-GRPO


EP_BUCKET_RULES = ("entropy", "position")


@dataclass
class EPGRPOParams(ObjectiveParams):
    n_buckets: int = 10
    # "entropy": cumulative-entropy share (the project's reading of the abstract);
    # "position": relative position t / length (the supplement's "relative-position buckets")
    bucket_rule: str = "entropy"
    gate_coef: float = 3.0
    progress_weight: float = 0.2
    process_scale: float = 1.0


def entropy_gate(entropy: Tensor, mask: Tensor, coef: float) -> Tensor:
    """Token weights ``2 sigmoid(coef (h / mean_i h - 1))``: 1 at the completion's mean
    entropy, up to 2 on high-entropy decision pivots, towards 0 on near-certain tokens."""
    mean_h = (entropy * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    rel = entropy / mean_h.clamp(min=1e-8)
    return 2 * torch.sigmoid(coef * (rel - 1)) * mask


def progress_buckets(
    entropy: Tensor, mask: Tensor, n_buckets: int, rule: str = "entropy"
) -> Tensor:
    """Progress bucket ``ceil(n u) - 1`` of each token. ``rule="entropy"``: ``u`` is the
    cumulative-entropy share ``cumsum(h) / sum(h)`` in (0, 1] (relative position instead
    when a completion has zero entropy); ``rule="position"``: ``u = (t + 1) / length``."""
    if rule not in EP_BUCKET_RULES:
        raise ValueError(f"bucket rule must be one of {EP_BUCKET_RULES}, got {rule!r}")
    h = (entropy * mask).clamp(min=0)
    total = h.sum(-1, keepdim=True)
    cum = h.cumsum(-1)
    length = mask.sum(-1, keepdim=True).clamp(min=1.0)
    pos = mask.cumsum(-1) / length
    if rule == "position":
        total = torch.zeros_like(total)
    u = torch.where(total > 0, cum / total.clamp(min=1e-12), pos)
    b = torch.ceil(u * n_buckets).long() - 1
    return b.clamp(0, n_buckets - 1)


def ep_token_advantages(
    advantages: Tensor,
    entropy: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    group: Tensor,
    *,
    n_buckets: int,
    bucket_rule: str = "entropy",
    gate_coef: float,
    progress_weight: float,
    process_scale: float,
) -> tuple[Tensor, dict[str, float]]:
    """EP-GRPO token advantages (our reading of the abstract, see the README):

    ``A_hat[i,t] = g[i,t] A[i] + progress_weight * p[i,t]`` where ``g`` is the entropy gate,
    ``s[i,t] = A[i] + process_scale (log pi_old - log pi_ref)[i,t]`` is the outcome-anchored
    policy-reference signal and ``p`` is ``s`` normalised within (group, cumulative-entropy
    bucket): centred, and divided by its standard deviation when that exceeds 1."""
    adv = advantages if advantages.dim() == 1 else advantages[:, 0]
    gate = entropy_gate(entropy, mask, gate_coef)
    bucket = progress_buckets(entropy, mask, n_buckets, bucket_rule)
    signal = adv.unsqueeze(1) + process_scale * (old_logp - ref_logp)
    proc = torch.zeros_like(signal)
    valid = mask > 0
    for g in torch.unique(group):
        in_g = (group == g).unsqueeze(1) & valid
        for b in range(n_buckets):
            sel = in_g & (bucket == b)
            n = int(sel.sum())
            if n < 2:
                continue
            vals = signal[sel]
            mu = vals.mean()
            sd = vals.std(unbiased=False)
            proc[sel] = (vals - mu) / torch.clamp(sd, min=1.0)
    token_adv = (gate * adv.unsqueeze(1) + progress_weight * proc) * mask
    metrics = {
        "objective/gate_mean": masked_mean(gate, mask),
        "objective/process_abs_mean": masked_mean(proc.abs(), mask),
        "objective/policy_ref_divergence": masked_mean((old_logp - ref_logp).abs(), mask),
    }
    return token_adv, metrics


class EPGRPO(Objective):
    """EP-GRPO (Yu et al. 2026; mechanism from the abstract): entropy-gated token weights,
    an outcome-anchored policy-reference log-probability signal and progress-aligned
    normalisation over 10 cumulative-entropy buckets; PPO clip on the token advantages."""

    name = "ep_grpo"
    Params = EPGRPOParams
    needs_reference = True
    needs_generation_stats = True
    needs_groups = True

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if self.params.bucket_rule not in EP_BUCKET_RULES:  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            raise ValueError(
                f"objective 'ep_grpo': bucket_rule must be one of {EP_BUCKET_RULES}, "
                f"got {self.params.bucket_rule!r}"  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            )

    def prepare(self, batch: PrepBatch) -> tuple[dict[str, Tensor], dict[str, float]]:
        if batch.entropy is None or batch.old_logp is None or batch.ref_logp is None:
            raise ValueError("ep_grpo needs generation-time entropies, old and reference logps")
        p = self.params
        token_adv, metrics = ep_token_advantages(
            batch.advantages,
            batch.entropy,
            batch.old_logp,
            batch.ref_logp,
            batch.mask,
            batch.group,
            n_buckets=p.n_buckets,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            bucket_rule=p.bucket_rule,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            gate_coef=p.gate_coef,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            progress_weight=p.progress_weight,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
            process_scale=p.process_scale,  # type: ignore[attr-defined]  # self.params is this objective's own Params subclass (its ClassVar)
        )
        return {"rcea_token_adv": token_adv}, metrics

    def loss(self, batch: LossBatch) -> LossOutput:
        p = self.params
        adv = batch.extras.get("rcea_token_adv", batch.advantages)
        per_token, low, high = ppo_clip(
            batch.logp, batch.old_logp, adv, p.epsilon, p.epsilon_high, p.clip_ratio_c
        )
        loss = self._aggregate(_apply_is(per_token, batch), batch.mask, batch)
        return LossOutput(loss, _pg_metrics(low, high, batch.mask))


# --------------------------------------------------------------------------- registry

OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (GRPO, DAPO, ClipCov, KLCov, GTPO, EPGRPO)
}


def make_objective(name: str, **params: Any) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r} (choose from {', '.join(OBJECTIVES)})")
    return OBJECTIVES[name](**params)


def default_params(name: str) -> dict[str, Any]:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r} (choose from {', '.join(OBJECTIVES)})")
    return asdict(OBJECTIVES[name].Params())


__all__ = [
    "LOSS_AGGS",
    "OBJECTIVES",
    "SEQ_MEAN",
    "TOKEN_MEAN",
    "LossBatch",
    "LossOutput",
    "Objective",
    "PrepBatch",
    "aggregate",
    "clip_cov_select",
    "gtpo_conflicts",
    "group_advantages",
    "default_params",
    "ep_token_advantages",
    "kl_cov_select",
    "make_objective",
    "ppo_clip",
    "progress_buckets",
    "token_covariance",
    "zero_variance_keep",
]
