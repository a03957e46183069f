"""Each objective's loss on hand-computed 2-sample, 2-token batches (values and gradients),
plus property checks of Clip-Cov's selection."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from rcea.pipeline.training import objectives as ob  # noqa: E402
from rcea.pipeline.training.objectives import LossBatch, make_objective  # noqa: E402


def leaf(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64, requires_grad=True)


def t(rows: list[list[float]] | list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def close(x: torch.Tensor, expected) -> None:  # type: ignore[no-untyped-def]
    exp = expected if isinstance(expected, torch.Tensor) else torch.tensor(expected)
    torch.testing.assert_close(x.detach().double(), exp.detach().double(), rtol=1e-7, atol=1e-9)


def grad_of(objective: ob.Objective, batch: LossBatch) -> tuple[float, torch.Tensor]:
    out = objective.loss(batch)
    out.loss.backward()
    return float(out.loss.detach()), batch.logp.grad.clone()


LOGP = [[math.log(0.5), math.log(0.5)], [math.log(0.5), math.log(0.5)]]


def ratios_batch(r: list[list[float]], adv: list[float], **kw) -> LossBatch:  # type: ignore[no-untyped-def]
    """logp = log 0.5 everywhere; old_logp chosen so that exp(logp - old) = r."""
    logp = leaf(LOGP)
    old = t(LOGP) - torch.log(t(r))
    return LossBatch(
        logp=logp,
        old_logp=old,
        entropy=torch.ones(2, 2, dtype=torch.float64),
        mask=torch.ones(2, 2, dtype=torch.float64),
        advantages=t(adv),
        **kw,
    )


def test_grpo_symmetric_clip_and_sequence_mean() -> None:
    # A = (+1, -1); ratios: 1.5 (clipped high), 1.0, 0.5 (clipped low), 1.1
    batch = ratios_batch([[1.5, 1.0], [0.5, 1.1]], [1.0, -1.0])
    loss, grad = grad_of(make_objective("grpo"), batch)
    # per token: -1.2, -1, 0.8, 1.1 -> sequence means -1.1, 0.95 -> mean -0.075
    assert loss == pytest.approx(-0.075)
    # d/dlogp of -A r is -A r; weight 1/2 (token mean) * 1/2 (sequence mean); clipped -> 0
    close(grad, [[0.0, -0.25], [0.0, 0.275]])


def test_grpo_sequence_mean_weights_short_sequences_more() -> None:
    batch = ratios_batch([[1.0, 1.0], [1.0, 1.0]], [1.0, -1.0])
    batch.mask = t([[1.0, 1.0], [1.0, 0.0]])
    _, grad = grad_of(make_objective("grpo"), batch)
    close(grad, [[-0.25, -0.25], [0.5, 0.0]])


def test_dapo_clip_higher_and_token_mean() -> None:
    batch = ratios_batch([[1.25, 1.0], [0.5, 1.1]], [1.0, -1.0])
    loss, grad = grad_of(make_objective("dapo"), batch)
    # 1.25 < 1 + 0.28: not clipped under DAPO (it is under GRPO's 0.2)
    assert loss == pytest.approx((-1.25 - 1.0 + 0.8 + 1.1) / 4)
    close(grad, [[-1.25 / 4, -0.25], [0.0, 1.1 / 4]])
    _, grad_grpo = grad_of(make_objective("grpo"), ratios_batch([[1.25, 1.0], [0.5, 1.1]], [1, -1]))
    assert grad_grpo[0, 0] == 0.0
    # the window's token count normalises, not the micro-batch's
    batch = ratios_batch([[1.0, 1.0], [1.0, 1.0]], [1.0, -1.0], token_normalizer=8.0)
    _, grad = grad_of(make_objective("dapo"), batch)
    close(grad, [[-1 / 8, -1 / 8], [1 / 8, 1 / 8]])


def test_dapo_removes_zero_variance_groups() -> None:
    correct = t([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    group = torch.tensor([0, 0, 1, 1, 2, 2])
    keep = ob.zero_variance_keep(correct, group)
    assert keep.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    obj = make_objective("dapo")
    extras, metrics = obj.prepare(
        ob.PrepBatch(
            completion_ids=torch.zeros(6, 2, dtype=torch.long),
            mask=torch.ones(6, 2),
            advantages=torch.zeros(6),
            correct=correct,
            group=group,
        )
    )
    assert extras["rcea_keep"].tolist() == keep.tolist()
    assert metrics["objective/removed_frac"] == pytest.approx(4 / 6)
    # removed completions get no gradient even with a non-zero advantage
    batch = ratios_batch([[1.0, 1.0], [1.0, 1.0]], [1.0, -1.0], extras={"rcea_keep": t([1.0, 0.0])})
    batch.token_normalizer = 2.0
    _, grad = grad_of(obj, batch)
    close(grad, [[-0.5, -0.5], [0.0, 0.0]])


def test_overlong_shaping_is_trls_and_equals_dapos_formula() -> None:
    """DAPO's soft overlong punishment comes from TRL (``get_soft_overlong_punishment``);
    at every length it equals DAPO's Eq. 13: 0 up to L - B, (L - B - n) / B up to L, -1
    beyond (L = 10, B = 20% of L)."""
    pytest.importorskip("trl")
    from rcea.pipeline.training.rewards import overlong_shaping

    shaping = overlong_shaping(10, buffer_frac=0.2)
    assert type(shaping).__module__.startswith("trl.")
    lengths = list(range(0, 14))
    dapo = [0.0 if n <= 8 else (8 - n) / 2 if n <= 10 else -1.0 for n in lengths]
    assert shaping(completion_ids=[[1] * n for n in lengths]) == pytest.approx(dapo)
    assert dapo[9] == -0.5 and dapo[10] == -1.0
    # no buffer: a hard cut at L
    hard = overlong_shaping(10, buffer_frac=0.0)
    assert hard(completion_ids=[[1] * 10, [1] * 11]) == [0.0, -1.0]
    with pytest.raises(ValueError, match="overlong_buffer_frac"):
        overlong_shaping(10, buffer_frac=1.5)


# logp and advantages with hand-computed covariances:
# mean log pi = -1.175, mean A (token-weighted) = 0.5 ->
# cov = [[0.975 * 1.5, 0.175 * 1.5], [0.675 * -1.5, -1.825 * -1.5]]
#     = [[1.4625, 0.2625], [-1.0125, 2.7375]]
COV_LOGP = [[-0.2, -1.0], [-0.5, -3.0]]
COV_ADV = [2.0, -1.0]


def cov_batch(old_shift: list[list[float]] | None = None) -> LossBatch:
    logp = leaf(COV_LOGP)
    old = t(COV_LOGP) - (t(old_shift) if old_shift else 0.0)
    return LossBatch(
        logp=logp,
        old_logp=old,
        entropy=torch.ones(2, 2, dtype=torch.float64),
        mask=torch.ones(2, 2, dtype=torch.float64),
        advantages=t(COV_ADV),
    )


def test_token_covariance_by_hand() -> None:
    cov = ob.token_covariance(t(COV_LOGP), t(COV_ADV), torch.ones(2, 2, dtype=torch.float64))
    close(cov, [[1.4625, 0.2625], [-1.0125, 2.7375]])


def test_clip_cov_detaches_the_in_range_token_only() -> None:
    obj = make_objective("clip_cov", clip_ratio=0.25, lb=1.0, ub=2.0)
    loss, grad = grad_of(obj, cov_batch())
    # only (0, 0) has covariance in (1, 2): its surrogate term is zeroed
    close(grad, [[0.0, -0.5], [0.25, 0.25]])
    assert loss == pytest.approx(((0.0 - 2.0) / 2 + (1.0 + 1.0) / 2) / 2)
    # with ub = 5 both (0, 0) and (1, 1) qualify but ratio 0.25 of 4 tokens allows one
    sel, cand = ob.clip_cov_select(
        t(COV_LOGP),
        t(COV_LOGP),
        t(COV_ADV),
        torch.ones(2, 2, dtype=torch.float64),
        clip_ratio=0.25,
        lb=1.0,
        ub=5.0,
        eps_low=0.2,
        eps_high=0.2,
        generator=torch.Generator().manual_seed(0),
    )
    assert cand.tolist() == [[True, False], [False, True]]
    assert int(sel.sum()) == 1 and bool((sel & ~cand).sum() == 0)


def test_clip_cov_selection_properties_on_a_random_batch() -> None:
    gen = torch.Generator().manual_seed(3)
    for trial in range(20):
        logp = -torch.rand(8, 16, generator=gen, dtype=torch.float64) * 4
        old = logp + (torch.rand(8, 16, generator=gen, dtype=torch.float64) - 0.5) * 0.6
        adv = torch.randn(8, generator=gen, dtype=torch.float64) * 2
        mask = (torch.rand(8, 16, generator=gen) > 0.2).double()
        ratio_req = [0.02, 0.05, 0.1, 0.3][trial % 4]
        sel, cand = ob.clip_cov_select(
            logp, old, adv, mask, clip_ratio=ratio_req, lb=0.5, ub=3.0,
            eps_low=0.2, eps_high=0.2, generator=gen,
        )  # fmt: skip
        cov = ob.token_covariance(logp, adv, mask)
        n_valid = int(mask.sum())
        allowed = max(int(ratio_req * n_valid), 1)
        # only valid, in-range tokens; exactly min(allowed, candidates) of them
        assert bool((sel & ~cand).sum() == 0)
        assert bool(((cov[sel] > 0.5) & (cov[sel] < 3.0)).all())
        assert bool((mask[sel] == 1).all())
        assert int(sel.sum()) == min(allowed, int(cand.sum()))
        if ratio_req * n_valid >= 1:
            assert int(sel.sum()) <= ratio_req * n_valid
        # the gradient is GRPO's outside the selection and zero inside it
        batch = LossBatch(
            logp=logp.clone().requires_grad_(True),
            old_logp=old,
            entropy=torch.ones_like(logp),
            mask=mask,
            advantages=adv,
        )
        ref = LossBatch(**{**batch.__dict__, "logp": logp.clone().requires_grad_(True)})
        batch.generator = torch.Generator().manual_seed(trial)
        obj = make_objective("clip_cov", clip_ratio=ratio_req, lb=0.5, ub=3.0)
        obj.loss(batch).loss.backward()
        make_objective("grpo").loss(ref).loss.backward()
        chosen, _ = ob.clip_cov_select(
            logp, old, adv, mask, clip_ratio=ratio_req, lb=0.5, ub=3.0,
            eps_low=0.2, eps_high=0.2, generator=torch.Generator().manual_seed(trial),
        )  # fmt: skip
        assert torch.equal(batch.logp.grad[chosen], torch.zeros_like(batch.logp.grad[chosen]))
        assert torch.allclose(batch.logp.grad[~chosen], ref.logp.grad[~chosen])


def test_kl_cov_penalises_the_top_covariance_token() -> None:
    # old policy differs only at (1, 1) (log pi - log pi_old = 0.5): the top-covariance token
    batch = cov_batch(old_shift=[[0.0, 0.0], [0.0, 0.5]])
    obj = make_objective("kl_cov", k_ratio=0.25, kl_coef=0.5)
    loss, grad = grad_of(obj, batch)
    e = math.exp(0.5)
    # no ratio clip: -A r everywhere, + 0.5 |log pi - log pi_old| at (1, 1)
    assert loss == pytest.approx(((-2.0 - 2.0) / 2 + (1.0 + e + 0.25) / 2) / 2)
    close(grad, [[-0.5, -0.5], [0.25, (e + 0.5) / 4]])
    sel = ob.kl_cov_select(t(COV_LOGP), t(COV_ADV), torch.ones(2, 2), 0.5)
    assert sel.tolist() == [[True, False], [False, True]]  # top 2 of 4


def test_gtpo_conflict_runs_by_hand() -> None:
    """Leading run from the first token, trailing run aligned at each completion's end;
    weight 2 on a positive completion's run tokens (4 where both runs cover one), 0 on a
    negative one's; count = tokens in either run."""
    ids = torch.tensor([[5, 7, 9], [5, 8, 9], [6, 4, 0], [3, 6, 4], [1, 2, 0], [1, 2, 0]])
    mask = t([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 0]])
    adv = t([1.0, -1.0, 1.0, -1.0, 0.5, -0.5])
    group = torch.tensor([0, 0, 1, 1, 2, 2])
    w, conf, count = ob.gtpo_conflicts(ids, mask, adv, group)
    # group 0: token 5 leads both, token 9 ends both; 7 vs 8 stops both runs
    # group 1: end-aligned, "6 4" ends both (row 2 has 2 tokens, row 3 three)
    # group 2: identical completions: every token in both runs
    assert w.tolist() == [
        [2.0, 1.0, 2.0], [0.0, 1.0, 0.0],
        [2.0, 2.0, 0.0], [1.0, 0.0, 0.0],
        [4.0, 4.0, 0.0], [0.0, 0.0, 0.0],
    ]  # fmt: skip
    assert count.tolist() == [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    assert conf[3].tolist() == [False, True, True]
    # a position match outside the two runs is no conflict (token 9 at position 1 below)
    w, conf, _ = ob.gtpo_conflicts(
        torch.tensor([[1, 9, 2], [3, 9, 4]]), torch.ones(2, 3), t([1.0, -1.0]), torch.tensor([0, 0])
    )
    assert not bool(conf.any()) and w.tolist() == [[1.0] * 3] * 2
    # zero-advantage completions take no part and keep weight 1
    w, _, count = ob.gtpo_conflicts(ids[:2], mask[:2], t([0.0, 0.0]), torch.tensor([0, 0]))
    assert w.tolist() == [[1.0] * 3] * 2 and count.tolist() == [1.0, 1.0]


def test_gtpo_entropy_shaping_filter_and_conflict_normalisation() -> None:
    obj = make_objective("gtpo")  # the code's defaults: 0.7 nats, 0.1, on-policy
    logp = leaf(LOGP)
    ent = leaf([[0.2, 0.4], [1.0, 1.4]])  # completion entropies 0.3 (kept) and 1.2 (> 0.7)
    batch = LossBatch(
        logp=logp,
        old_logp=t(LOGP) - 0.3,  # ignored on-policy: ratio exp(logp - sg(logp)) = 1
        entropy=ent,
        mask=torch.ones(2, 2, dtype=torch.float64),
        advantages=t([1.0, -1.0]),
        extras={"rcea_token_weight": t([[2.0, 1.0], [0.0, 1.0]]), "rcea_conflict_count": t([2, 1])},
    )
    out = obj.loss(batch)
    out.loss.backward()
    assert out.metrics["objective/filtered_frac"] == pytest.approx(0.5)
    # kept: A - 0.1 <H> = 0.97; per completion token mean / conflict count, summed
    assert float(out.loss.detach()) == pytest.approx(-(0.97 * 2 + 0.97) / 2 / 2)
    close(logp.grad, [[-0.97 * 2 / 4, -0.97 / 4], [0.0, 0.0]])
    assert ent.grad is None  # the entropy is detached
    assert obj.h0 is None  # no calibration under the absolute threshold


def test_gtpo_h0_is_the_mean_over_ranks_under_data_parallelism() -> None:
    """With ``all_mean`` (the trainer's reduction over ranks), H0 is the ranks' mean: here
    this rank's first micro-batch has mean completion entropy 0.75 and the other rank's
    1.25, so H0 = 1.0 and 1.2 <= 1.5 H0 is no longer filtered."""
    seen = []

    def all_mean(x: torch.Tensor) -> torch.Tensor:
        seen.append(float(x))
        return (x + 1.25) / 2

    obj = make_objective("gtpo", threshold_rule="calibrated", entropy_threshold=1.5)
    batch = LossBatch(
        logp=leaf(LOGP),
        old_logp=t(LOGP),
        entropy=leaf([[0.2, 0.4], [1.0, 1.4]]),
        mask=torch.ones(2, 2, dtype=torch.float64),
        advantages=t([1.0, -1.0]),
        all_mean=all_mean,
    )
    out = obj.loss(batch)
    assert seen == [pytest.approx(0.75)] and obj.h0 == pytest.approx(1.0)
    assert out.metrics["objective/filtered_frac"] == 0.0
    obj.loss(batch)
    assert len(seen) == 1  # calibrated once: no further collective


def test_ep_grpo_gate_and_buckets_by_hand() -> None:
    gate = ob.entropy_gate(t([[0.5, 1.5]]), t([[1.0, 1.0]]), coef=3.0)
    sig = 1 / (1 + math.exp(-1.5))
    close(gate, [[2 * (1 - sig), 2 * sig]])
    b = ob.progress_buckets(t([[1.0, 1.0, 2.0], [0.0, 0.0, 0.0]]), torch.ones(2, 3), 2)
    # cumulative entropy share 0.25, 0.5, 1.0; zero-entropy row falls back to position 1/3..1
    assert b.tolist() == [[0, 0, 1], [0, 1, 1]]


def test_ep_grpo_relative_position_buckets() -> None:
    """The supplement's "10 relative-position buckets" as ``bucket_rule = "position"``:
    ``u = (t + 1) / length``, whatever the entropies."""
    ent, mask = t([[5.0, 0.0, 0.0, 1.0, 0.0]]), t([[1.0, 1.0, 1.0, 1.0, 0.0]])
    assert ob.progress_buckets(ent, mask, 2, "position")[0, :4].tolist() == [0, 0, 1, 1]
    assert ob.progress_buckets(ent, mask, 2)[0, :4].tolist() == [1, 1, 1, 1]  # entropy share
    kw = dict(n_buckets=2, gate_coef=3.0, progress_weight=0.2, process_scale=1.0)
    ones, zeros = torch.ones(2, 4, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64)
    div = t([[0.4, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.4]])
    ent = t([[3.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 3.0]])
    args = (t([1.0, -1.0]), ent, div, zeros, ones, torch.tensor([0, 0]))
    by_pos, _ = ob.ep_token_advantages(*args, bucket_rule="position", **kw)
    by_ent, _ = ob.ep_token_advantages(*args, **kw)
    assert not torch.allclose(by_pos, by_ent)
    with pytest.raises(ValueError, match="bucket_rule"):
        make_objective("ep_grpo", bucket_rule="token")


def test_ep_grpo_token_advantages_by_hand() -> None:
    kw = dict(n_buckets=1, gate_coef=3.0, progress_weight=0.2, process_scale=1.0)
    mask = torch.ones(2, 2, dtype=torch.float64)
    group = torch.tensor([0, 0])
    ones = torch.ones(2, 2, dtype=torch.float64)
    zeros = torch.zeros(2, 2, dtype=torch.float64)
    adv, _ = ob.ep_token_advantages(t([1.0, -1.0]), ones, zeros, zeros, mask, group, **kw)
    close(adv, [[1.2, 1.2], [-1.2, -1.2]])
    div = t([[0.5, 0.0], [0.0, 0.0]])
    adv, _ = ob.ep_token_advantages(t([1.0, -1.0]), ones, div, zeros, mask, group, **kw)
    s = [1.5, 1.0, -1.0, -1.0]
    mu = sum(s) / 4
    sd = math.sqrt(sum((x - mu) ** 2 for x in s) / 4)
    expect = [x + 0.2 * (y - mu) / sd for x, y in zip([1, 1, -1, -1], s, strict=True)]
    assert adv.flatten().tolist() == pytest.approx(expect)
    # zero reward variance: the policy-reference signal still moves tokens (sd < 1: no scaling)
    div = t([[0.3, 0.1], [-0.1, -0.3]])
    adv, _ = ob.ep_token_advantages(t([0.0, 0.0]), ones, div, zeros, mask, group, **kw)
    close(adv, [[0.06, 0.02], [-0.02, -0.06]])
    # the loss applies them token by token
    obj = make_objective("ep_grpo")
    batch = ratios_batch([[1.0, 1.0], [1.0, 1.0]], [0.0, 0.0], extras={"rcea_token_adv": adv})
    _, grad = grad_of(obj, batch)
    close(grad, -adv / 4)


def test_unknown_objective_and_parameters_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown objective 'ppo'"):
        make_objective("ppo")
    with pytest.raises(ValueError, match="unknown parameter"):
        make_objective("kl_cov", clip_ratio=0.1)
    with pytest.raises(ValueError, match="loss_agg"):
        make_objective("grpo", loss_agg="sum")
    assert ob.default_params("dapo")["epsilon_high"] == 0.28
    assert ob.default_params("kl_cov")["kl_coef"] == 0.5
    assert ob.default_params("ep_grpo")["n_buckets"] == 10
