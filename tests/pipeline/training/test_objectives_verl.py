"""GRPO, DAPO, Clip-Cov and KL-Cov against verl's own ``core_algos`` (the installed verl,
reached through :func:`tests.support.verl_env.import_verl`) on identical float64 tensors:
several seeds, padded completions, a zero-variance group, with and without importance
weights. Losses and gradients w.r.t. the log-probs must agree to 1e-7 (relative)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rcea.pipeline.training import objectives as ob  # noqa: E402
from rcea.pipeline.training.objectives import LossBatch, make_objective  # noqa: E402
from tests.support.verl_env import import_verl  # noqa: E402

SEEDS = list(range(6))
AGGS = {ob.SEQ_MEAN: "seq-mean-token-mean", ob.TOKEN_MEAN: "token-mean"}


@pytest.fixture(scope="module")
def core() -> Any:
    return import_verl("verl.trainer.ppo.core_algos")


class VerlActorConfig(SimpleNamespace):
    """The attributes verl's policy losses read from an ``ActorConfig``."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def verl_config(
    eps_low: float = 0.2, eps_high: float = 0.2, clip_ratio_c: float = 3.0, **policy: Any
) -> VerlActorConfig:
    return VerlActorConfig(
        clip_ratio=eps_low,
        clip_ratio_low=eps_low,
        clip_ratio_high=eps_high,
        clip_ratio_c=clip_ratio_c,
        policy_loss=SimpleNamespace(
            clip_cov_ratio=policy.get("clip_cov_ratio"),
            clip_cov_lb=policy.get("clip_cov_lb"),
            clip_cov_ub=policy.get("clip_cov_ub"),
            kl_cov_ratio=policy.get("kl_cov_ratio"),
            ppo_kl_coef=policy.get("ppo_kl_coef"),
        ),
        global_batch_info={},
    )


def make_inputs(core: Any, seed: int, zero_adv: bool = False) -> dict[str, Any]:
    """4 groups of 4 completions, up to 12 tokens (right padding, every row >= 1 token);
    group 0 mixed, group 3 zero-variance (all correct). Advantages from verl's GRPO
    estimator (its default epsilon 1e-6)."""
    g = torch.Generator().manual_seed(seed)
    b, t = 16, 12
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).double()
    logp = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    # log-ratios up to +-1.5: ratios from 0.22 to 4.5, so both clips and verl's dual clip act
    old = logp + (torch.rand(b, t, generator=g, dtype=torch.float64) - 0.5) * 3
    correct = (torch.rand(b, generator=g) > 0.5).double()
    correct[:4] = torch.tensor([1.0, 0.0, 1.0, 0.0])  # group 0 always mixed
    correct[12:] = 1.0
    group = np.repeat(np.arange(4), 4)
    token_rewards = torch.zeros(b, t, dtype=torch.float64)
    token_rewards[torch.arange(b), lengths - 1] = correct
    adv, _ = core.compute_grpo_outcome_advantage(token_rewards, mask, group)
    if zero_adv:
        adv = torch.zeros_like(adv)
    old[1, 0] = logp[1, 0] - 1.5  # ratio 4.5 on a negative-advantage token: the dual clip acts
    is_w = 0.5 + torch.rand(b, t, generator=g, dtype=torch.float64)
    return {"logp": logp, "old": old, "mask": mask, "adv": adv, "is": is_w, "correct": correct}


def ours(objective: ob.Objective, x: dict[str, Any], with_is: bool, **kw: Any) -> tuple:
    logp = x["logp"].clone().requires_grad_(True)
    batch = LossBatch(
        logp=logp,
        old_logp=x["old"],
        entropy=torch.ones_like(logp),
        mask=x["mask"],
        advantages=x["adv"],
        is_ratio=x["is"] if with_is else None,
        **kw,
    )
    out = objective.loss(batch)
    out.loss.backward()
    return out.loss.detach(), logp.grad


def verl(fn: Any, x: dict[str, Any], agg: str, with_is: bool, config: Any, rows=None) -> tuple:
    sel = slice(None) if rows is None else rows
    logp = x["logp"][sel].clone().requires_grad_(True)
    loss, _ = fn(
        old_log_prob=x["old"][sel],
        log_prob=logp,
        advantages=x["adv"][sel],
        response_mask=x["mask"][sel],
        loss_agg_mode=AGGS[agg],
        config=config,
        rollout_is_weights=x["is"][sel] if with_is else None,
    )
    loss.backward()
    return loss.detach(), logp.grad


def assert_same(a: tuple, b: tuple) -> None:
    # 1e-7 relative: verl's sequence mean divides by (tokens + 1e-8), TRL's by tokens
    torch.testing.assert_close(a[0], b[0], rtol=1e-7, atol=1e-10)
    torch.testing.assert_close(a[1], b[1], rtol=1e-7, atol=1e-10)


def test_grpo_advantages_of_verl_are_the_group_z_scores(core: Any) -> None:
    """verl's estimator (epsilon 1e-6, unbiased std) on the test inputs: per group
    ``(R - mean) / (std + eps)``; the zero-variance group gets 0 (the case DAPO removes)."""
    x = make_inputs(core, 0)
    r = x["correct"].view(4, 4)
    z = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)
    per_row = x["adv"].sum(1) / x["mask"].sum(1)
    torch.testing.assert_close(per_row, z.reshape(-1), rtol=1e-12, atol=1e-12)
    assert bool((per_row[12:] == 0).all())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("with_is", [False, True])
@pytest.mark.parametrize("agg", list(AGGS))
def test_grpo_loss_and_gradient_equal_verl_vanilla(core: Any, seed, with_is, agg) -> None:
    x = make_inputs(core, seed)
    fn = core.compute_policy_loss_vanilla
    # TRL's surrogate (no dual clip) is verl's with the dual-clip bound out of reach
    got = ours(make_objective("grpo", loss_agg=agg), x, with_is)
    assert_same(got, verl(fn, x, agg, with_is, verl_config(clip_ratio_c=1e12)))
    # verl's dual clip (c = 3, its default) as an option
    dual = ours(make_objective("grpo", loss_agg=agg, clip_ratio_c=3.0), x, with_is)
    assert_same(dual, verl(fn, x, agg, with_is, verl_config(clip_ratio_c=3.0)))
    assert not torch.allclose(dual[1], got[1])  # the dual clip acts on these inputs


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("with_is", [False, True])
def test_dapo_loss_and_gradient_equal_verl_on_the_filtered_batch(core: Any, seed, with_is) -> None:
    """DAPO: clip-higher 0.2/0.28, token mean; the zero-variance group removed (verl's
    dynamic sampling drops it from the batch, the project masks it out of loss and
    normaliser)."""
    x = make_inputs(core, seed)
    obj = make_objective("dapo")
    keep = ob.zero_variance_keep(x["correct"], torch.arange(16) // 4)
    assert keep.tolist() == [1.0] * 12 + [0.0] * 4 or keep[12:].sum() == 0
    rows = keep.bool()
    loss, grad = ours(obj, x, with_is, extras={"rcea_keep": keep.double()})
    cfg = verl_config(0.2, 0.28, clip_ratio_c=1e12)
    v_loss, v_grad = verl(core.compute_policy_loss_vanilla, x, ob.TOKEN_MEAN, with_is, cfg, rows)
    assert_same((loss, grad[rows]), (v_loss, v_grad))
    assert bool((grad[~rows] == 0).all())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("with_is", [False, True])
@pytest.mark.parametrize("agg", list(AGGS))
def test_clip_cov_selection_loss_and_gradient_equal_verl(core: Any, seed, with_is, agg) -> None:
    x = make_inputs(core, seed)
    kw = dict(clip_ratio=0.05, lb=0.2, ub=5.0)
    obj = make_objective("clip_cov", loss_agg=agg, **kw)
    sel, cand = ob.clip_cov_select(
        x["logp"], x["old"], x["adv"], x["mask"], eps_low=0.2, eps_high=0.2,
        generator=torch.Generator().manual_seed(seed), **kw,
    )  # fmt: skip
    assert int(sel.sum()) == max(int(0.05 * float(x["mask"].sum())), 1) < int(cand.sum())
    got = ours(obj, x, with_is, generator=torch.Generator().manual_seed(seed))
    torch.manual_seed(seed)  # verl draws from the global generator
    cfg = verl_config(clip_ratio_c=1e12, clip_cov_ratio=0.05, clip_cov_lb=0.2, clip_cov_ub=5.0)
    want = verl(core.compute_policy_loss_clip_cov, x, agg, with_is, cfg)
    assert_same(got, want)
    # verl's selected tokens are ours: the ones whose gradient verl zeroes although the PPO
    # clip leaves them active (selected tokens of the zero-variance group have none anyway)
    live = ours(make_objective("grpo", loss_agg=agg), x, with_is)[1] != 0
    assert torch.equal((want[1] == 0) & live, sel & live)
    assert bool((sel & live).any())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("with_is", [False, True])
@pytest.mark.parametrize("agg", list(AGGS))
@pytest.mark.parametrize("zero_adv", [False, True])
def test_kl_cov_selection_loss_and_gradient_equal_verl(core: Any, seed, with_is, agg, zero_adv):
    """Including importance weights on the KL term and all-zero-advantage micro-batches
    (every covariance ties at 0: ``torch.topk``'s pick, as in verl)."""
    x = make_inputs(core, seed, zero_adv=zero_adv)
    obj = make_objective("kl_cov", loss_agg=agg, k_ratio=0.05, kl_coef=1.0)
    got = ours(obj, x, with_is)
    cfg = verl_config(kl_cov_ratio=0.05, ppo_kl_coef=1.0)
    want = verl(core.compute_policy_loss_kl_cov, x, agg, with_is, cfg)
    assert_same(got, want)
    sel = ob.kl_cov_select(x["logp"], x["adv"], x["mask"], 0.05)
    assert int(sel.sum()) == max(int(0.05 * float(x["mask"].sum())), 1)
    if zero_adv:
        # the whole gradient is the KL term on the selected tokens
        assert torch.equal(got[1] != 0, sel)


@pytest.mark.parametrize("seed", SEEDS)
def test_advantage_epsilon_option_equals_verl_and_trl(core: Any, seed: int) -> None:
    """``group_advantages`` with verl's epsilon (1e-6) is verl's estimator, with TRL's
    (1e-4) TRL's formula (its own ``nanstd``); zero-variance groups get 0 either way."""
    from trl.trainer.utils import nanstd

    g = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(16, generator=g) > 0.5).double() + torch.rand(16, generator=g) * 0.1
    rewards[12:] = 1.0  # a zero-variance group
    group = np.repeat(np.arange(4), 4)
    mask = torch.ones(16, 3, dtype=torch.float64)
    token_rewards = torch.zeros(16, 3, dtype=torch.float64)
    token_rewards[:, -1] = rewards
    verl_adv, _ = core.compute_grpo_outcome_advantage(token_rewards, mask, group, epsilon=1e-6)
    torch.testing.assert_close(ob.group_advantages(rewards, 4, 1e-6), verl_adv[:, 0])
    grouped = rewards.view(4, 4)
    trl = (grouped - grouped.mean(1, keepdim=True)) / (nanstd(grouped, dim=1).unsqueeze(1) + 1e-4)
    torch.testing.assert_close(ob.group_advantages(rewards, 4, 1e-4), trl.reshape(-1))
    assert not torch.allclose(ob.group_advantages(rewards, 4, 1e-4), verl_adv[:, 0], atol=1e-6)


def test_trainer_applies_the_advantage_epsilon_to_its_rows(core: Any) -> None:
    """The trainer recomputes TRL's advantages from the same weighted rewards with the
    objective's epsilon and keeps this process's rows (process 1 of 2 here)."""
    pytest.importorskip("trl")
    from rcea.pipeline.training.trainer import RceaGRPOTrainer

    g = torch.Generator().manual_seed(0)
    rpf = torch.stack(
        [(torch.rand(16, generator=g) > 0.5).float(), -torch.rand(16, generator=g)], 1
    )
    fake = SimpleNamespace(
        objective=make_objective("grpo", advantage_epsilon=1e-6),
        scale_rewards="group",
        multi_objective_aggregation="sum_then_normalize",
        reward_weights=torch.tensor([1.0, 0.5]),
        _rcea_rewards_per_func=rpf,
        model=SimpleNamespace(training=True),
        num_generations=4,
        accelerator=SimpleNamespace(process_index=1),
    )
    out = RceaGRPOTrainer.rcea_advantages(fake, {"advantages": torch.zeros(8)})
    rewards = (rpf[:, 0] + 0.5 * rpf[:, 1]).double()
    token_rewards = torch.zeros(16, 2, dtype=torch.float64)
    token_rewards[:, -1] = rewards
    verl_adv, _ = core.compute_grpo_outcome_advantage(
        token_rewards, torch.ones(16, 2, dtype=torch.float64), np.repeat(np.arange(4), 4)
    )
    torch.testing.assert_close(out["advantages"].double(), verl_adv[8:, 0], rtol=1e-5, atol=1e-6)
    fake.objective = make_objective("grpo")  # TRL's epsilon: TRL's own advantages stay
    same = {"advantages": torch.zeros(8)}
    assert RceaGRPOTrainer.rcea_advantages(fake, same) is same


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", ["clip_cov", "kl_cov"])
def test_cov_objectives_with_group_filtering_equal_verl_on_the_filtered_batch(
    core: Any, seed: int, name: str
) -> None:
    """The Entropy-Mechanism recipes filter zero-variance groups (verl drops them from the
    batch); with ``remove_zero_variance`` the project masks them out of the selection, the
    covariance means and the token normaliser: verl's loss and gradient on the kept rows."""
    x = make_inputs(core, seed)
    kw = dict(clip_ratio=0.05, lb=0.2, ub=5.0) if name == "clip_cov" else dict(k_ratio=0.05)
    obj = make_objective(name, loss_agg=ob.TOKEN_MEAN, remove_zero_variance=True, **kw)
    assert obj.uses_groups
    extras, metrics = obj.prepare(
        ob.PrepBatch(
            completion_ids=torch.zeros(16, 12, dtype=torch.long),
            mask=x["mask"],
            advantages=x["adv"][:, 0],
            correct=x["correct"],
            group=torch.arange(16) // 4,
        )
    )
    keep = extras["rcea_keep"].double()
    assert metrics["objective/removed_frac"] >= 0.25 and keep[12:].sum() == 0
    rows = keep.bool()
    loss, grad = ours(
        obj, x, True, extras={"rcea_keep": keep}, generator=torch.Generator().manual_seed(seed)
    )
    if name == "clip_cov":
        torch.manual_seed(seed)
        cfg = verl_config(clip_ratio_c=1e12, clip_cov_ratio=0.05, clip_cov_lb=0.2, clip_cov_ub=5.0)
        fn = core.compute_policy_loss_clip_cov
    else:
        cfg = verl_config(kl_cov_ratio=0.05, ppo_kl_coef=0.5)
        fn = core.compute_policy_loss_kl_cov
    want = verl(fn, x, ob.TOKEN_MEAN, True, cfg, rows)
    assert_same((loss, grad[rows]), want)
    assert bool((grad[~rows] == 0).all())
