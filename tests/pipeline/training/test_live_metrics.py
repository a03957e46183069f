"""The live ``rcea/`` numbers of a step (docs/training-live.md): on constructed batches each
equals the ``rcea/audits/`` estimator (or the objective's mask rule) applied to the same numbers;
one outcome only gives NaN (undefined), never 0; verl's own ``DataProto`` gives the same
dict as the TRL path."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rcea.audits.entropy import (  # noqa: E402
    broad_token_entropy_ratio,
    outcome_report,
    per_question_token_entropy,
)
from rcea.audits.tail import reward_stratified_tail  # noqa: E402
from rcea.pipeline.training.live_metrics import (  # noqa: E402
    METRICS,
    LiveSettings,
    RolloutRows,
    batch_metrics,
    verl_batch_metrics,
)
from rcea.pipeline.training.objectives import (  # noqa: E402
    ClipCovParams,
    KLCovParams,
    clip_cov_select,
    kl_cov_select,
)
from tests.support.verl_env import import_verl  # noqa: E402

# 3 groups x 4 completions: g0 mixed (2/2), g1 mixed (1/3), g2 all failed
GROUPS = np.repeat([0, 1, 2], 4)
SUCCESS = np.array([1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0], dtype=np.int8)


def _batch(seed: int = 0, success: np.ndarray = SUCCESS) -> RolloutRows:
    gen = torch.Generator().manual_seed(seed)
    b, t = len(GROUPS), 9
    lengths = torch.randint(3, t + 1, (b,), generator=gen)
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).float()
    entropy = torch.rand(b, t, generator=gen, dtype=torch.float64) * 2
    logp = -torch.rand(b, t, generator=gen, dtype=torch.float64) * 3
    old = logp + (torch.rand(b, t, generator=gen, dtype=torch.float64) - 0.5) * 0.2
    adv = torch.randn(b, generator=gen, dtype=torch.float64)
    return RolloutRows(GROUPS.copy(), success.copy(), mask, entropy, logp, old, adv)


def _flat(rows: RolloutRows) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per valid token (row-major, by hand): trajectory, entropy, log-prob; per row h̄_i."""
    traj, ent, lp = [], [], []
    for i in range(rows.mask.size(0)):
        for j in range(rows.mask.size(1)):
            if rows.mask[i, j] > 0:
                traj.append(i)
                ent.append(float(rows.entropy[i, j]))
                lp.append(float(rows.logp[i, j]))
    h_bar = np.array(
        [np.mean([e for k, e in zip(traj, ent, strict=True) if k == i]) for i in range(12)]
    )
    return np.array(traj), np.array(ent), np.array(lp), h_bar


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_metric_equals_the_audits_estimator(seed: int) -> None:
    rows = _batch(seed)
    settings = LiveSettings(clip_cov=ClipCovParams(clip_ratio=0.1, lb=-10.0, ub=10.0))
    got = batch_metrics([rows], settings)
    assert set(got) == set(METRICS)
    traj, _, lp, h_bar = _flat(rows)

    outcome = outcome_report(GROUPS, SUCCESS, k_min=1)
    assert got["rcea/outcome_entropy"] == pytest.approx(outcome.mean_outcome_entropy)
    assert got["rcea/zero_variance_share"] == pytest.approx(1 / 3)
    assert got["rcea/success_rate"] == pytest.approx(3 / 12)

    per_q = per_question_token_entropy(GROUPS, SUCCESS, h_bar)
    assert got["rcea/token_entropy"] == pytest.approx(np.mean([r.token_entropy for r in per_q]))
    # the split: the broad estimator on the groups with both outcomes (g0, g1)
    both = GROUPS < 2
    broad = broad_token_entropy_ratio(GROUPS[both], SUCCESS[both], h_bar[both], k_min=1)
    assert got["rcea/groups_both_outcomes"] == 2
    assert got["rcea/token_entropy_success"] == pytest.approx(broad.token_entropy_success)
    assert got["rcea/token_entropy_failure"] == pytest.approx(broad.token_entropy_failure)
    assert got["rcea/token_entropy_ratio"] == pytest.approx(broad.ratio)

    tail = reward_stratified_tail(GROUPS, SUCCESS, traj, lp)
    assert got["rcea/cov_tail_share_success"] == pytest.approx(tail.success.share)
    assert got["rcea/cov_tail_share_failure"] == pytest.approx(tail.failure.share)
    assert got["rcea/cov_tail_gap_pp"] == pytest.approx(tail.gap_failure_minus_success_pp)

    cc = settings.clip_cov
    clip, _ = clip_cov_select(
        rows.logp, rows.old_logp, rows.advantages, rows.mask, clip_ratio=cc.clip_ratio,
        lb=cc.lb, ub=cc.ub, eps_low=cc.epsilon, eps_high=cc.epsilon_high,
    )  # fmt: skip
    kl = kl_cov_select(rows.logp, rows.advantages, rows.mask, KLCovParams().k_ratio)
    n = float(rows.mask.sum())
    assert got["rcea/clip_cov_frac"] == pytest.approx(float(clip.sum()) / n)
    assert got["rcea/kl_cov_frac"] == pytest.approx(float(kl.sum()) / n)
    assert got["rcea/clip_cov_frac"] > 0


def test_micro_batches_of_one_step_pool_into_one_batch() -> None:
    """Groups split over micro-batches (TRL shuffles the generation batch) count once."""
    rows = _batch(3)
    whole = batch_metrics([rows], LiveSettings())
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
    parts = []
    for idx in (perm[:5], perm[5:]):
        i = idx.numpy()
        parts.append(
            RolloutRows(
                rows.group[i], rows.success[i], rows.mask[idx], rows.entropy[idx],
                rows.logp[idx], rows.old_logp[idx], rows.advantages[idx],
            )
        )  # fmt: skip
    split = batch_metrics(parts, LiveSettings())
    for name in METRICS[:-2]:  # the mask fractions are per micro-batch, as in the losses
        assert split[name] == pytest.approx(whole[name]), name


def test_one_outcome_only_is_undefined_never_zero() -> None:
    for outcome in (0, 1):
        got = batch_metrics([_batch(0, np.full(12, outcome, dtype=np.int8))], LiveSettings())
        for name in (
            "rcea/token_entropy_success",
            "rcea/token_entropy_failure",
            "rcea/token_entropy_ratio",
            "rcea/cov_tail_share_success",
            "rcea/cov_tail_share_failure",
            "rcea/cov_tail_gap_pp",
        ):
            assert math.isnan(got[name]), (outcome, name)
        assert got["rcea/groups_both_outcomes"] == 0
        assert got["rcea/zero_variance_share"] == 1.0
        assert got["rcea/outcome_entropy"] == 0.0  # no outcome uncertainty: a real 0
        assert got["rcea/token_entropy"] > 0


def test_min_groups_and_k_min_gate_the_split() -> None:
    rows = _batch(0)
    assert math.isnan(batch_metrics([rows], LiveSettings(min_groups=3))["rcea/token_entropy_ratio"])
    one = batch_metrics([rows], LiveSettings(k_min=2))  # only g0 has 2 of each outcome
    assert one["rcea/groups_both_outcomes"] == 1
    with pytest.raises(ValueError, match="min_groups"):
        LiveSettings(min_groups=0)


def test_verl_dataproto_gives_the_same_dict() -> None:
    dp = import_verl("verl.protocol")
    rows = _batch(4)
    b, t = rows.mask.shape
    scores = torch.zeros(b, t)
    scores[torch.arange(b), 0] = torch.as_tensor(rows.success, dtype=torch.float32)
    uid = np.array([f"prompt-{g}" for g in rows.group], dtype=object)
    batch = dp.DataProto.from_dict(
        tensors={
            "responses": torch.zeros(b, t, dtype=torch.long),
            "response_mask": rows.mask,
            "token_level_scores": scores,
            "old_log_probs": rows.logp,
            "entropys": rows.entropy,
            "advantages": rows.advantages.unsqueeze(1).expand(b, t).contiguous(),
        },
        non_tensors={"uid": uid},
    )
    got = verl_batch_metrics(batch)
    rows.old_logp = rows.logp  # verl's batch carries the rollout policy's log-probs only
    want = batch_metrics([rows], LiveSettings())
    assert set(got) == set(want)
    for name in METRICS:
        assert got[name] == pytest.approx(want[name], nan_ok=True), name
    missing = dp.DataProto.from_dict(tensors={"response_mask": rows.mask}, non_tensors={"uid": uid})
    with pytest.raises(ValueError, match="entropys"):
        verl_batch_metrics(missing)
