"""rcea.audits.mode_tail (docs/estimators.md item 16) against a plain-numpy computation
written here, and a constructed endpoint where one mode's tokens carry all the positive
covariance mass."""

from __future__ import annotations

import numpy as np
import pytest

from rcea.audits.mode_tail import (
    QUESTION_SUM_COLUMNS,
    TrajectorySums,
    mode_stratified_tail,
    mode_tail_from_sums,
    tail_question_sums,
    trajectory_sums,
)
from rcea.audits.tail import reward_stratified_tail


def _endpoint(seed: int, n_q: int = 10, k: int = 8):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    n = n_q * k
    groups = [f"q{j}" for j in range(n_q) for _ in range(k)]
    rewards = (rng.random(n) < 0.5).astype(int)
    in_c = rewards * (rng.random(n) < 0.85)
    modes = rng.choice(["a", "b", "c", "uncertain"], size=n, p=[0.5, 0.3, 0.15, 0.05]).tolist()
    lengths = rng.integers(3, 12, size=n)
    traj = np.repeat(np.arange(n), lengths)
    logp = -rng.gamma(1.5, 1.0, size=traj.size)
    return groups, rewards, in_c, modes, traj, logp


def _reference(groups, rewards, in_c, modes, traj, logp, quantile=0.99):  # type: ignore[no-untyped-def]
    r = np.asarray(rewards, float)
    adv = np.zeros(len(r))
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        mu, sd = r[idx].mean(), r[idx].std()
        adv[idx] = 0.0 if sd == 0 else (r[idx] - mu) / (sd + 1e-6)
    a = adv[traj]
    c = (logp - logp.mean()) * (a - a.mean())
    member = [m if f and m != "uncertain" else None for f, m in zip(in_c, modes, strict=True)]
    maj = {}
    for g in set(groups):
        cnt = {}
        for i, x in enumerate(groups):
            if x == g and member[i] is not None:
                cnt[member[i]] = cnt.get(member[i], 0) + 1
        if cnt:
            maj[g] = sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    in_maj = np.array([member[t] is not None and maj[groups[t]] == member[t] for t in traj])
    in_cc = np.array([member[t] is not None for t in traj])
    m = c[in_maj & (c > 0)].sum() / c[in_cc & (c > 0)].sum()
    share_t = in_maj.sum() / in_cc.sum()
    succ = r[traj] == 1
    cut = np.sort(c[succ])[int(np.ceil(quantile * succ.sum())) - 1]
    tail = succ & (c >= cut)
    tail_share = c[tail & in_maj & (c > 0)].sum() / c[tail & (c > 0)].sum()
    tokens = {"c": c, "maj": in_maj, "in_c": in_cc, "tail": tail, "success": succ}
    return m, share_t, tail_share, maj, tokens


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_matches_a_plain_numpy_computation(seed: int) -> None:
    args = _endpoint(seed)
    res = mode_stratified_tail(*args[:4], args[4], args[5])
    m, t, tail, maj, _ = _reference(*args)
    assert res.majority_mass_share == pytest.approx(m, rel=1e-9)
    assert res.majority_token_share == pytest.approx(t, rel=1e-12)
    assert res.concentration_ratio == pytest.approx(m / t, rel=1e-9)
    assert res.success_tail_majority_share == pytest.approx(tail, rel=1e-9, abs=1e-15)
    assert res.majority_modes == dict(sorted(maj.items()))
    # the success tail is item 7's: the same cutoff, the same selection size
    item7 = reward_stratified_tail(args[0], args[1], args[4], args[5])
    assert res.n_success_tail == item7.success.n_selected


@pytest.mark.parametrize("seed", [0, 1])
def test_per_question_sums_are_a_plain_loop_and_pool_to_the_numbers(seed: int) -> None:
    """Item 17 resamples questions' sums: each question's six sums (a loop over its tokens
    here) and item 7's success-stratum pair pool back (Σ over Σ) to M, T, M/T, the tail
    share and item 7's success share."""
    args = _endpoint(seed)
    groups, rewards, in_c, modes, traj, logp = args
    res = mode_stratified_tail(*args)
    *_, tok = _reference(*args)
    q_of = np.array(groups)[traj]
    want = {}
    for q in sorted(set(groups)):
        s = {"mass_majority": 0.0, "mass_c": 0.0, "tokens_majority": 0.0, "tokens_c": 0.0,
             "tail_mass_majority": 0.0, "tail_mass": 0.0}  # fmt: skip
        for i in np.flatnonzero(q_of == q):
            pos = max(tok["c"][i], 0.0)
            s["mass_majority"] += pos if tok["maj"][i] else 0.0
            s["mass_c"] += pos if tok["in_c"][i] else 0.0
            s["tokens_majority"] += float(tok["maj"][i])
            s["tokens_c"] += float(tok["in_c"][i])
            s["tail_mass_majority"] += pos if tok["tail"][i] and tok["maj"][i] else 0.0
            s["tail_mass"] += pos if tok["tail"][i] else 0.0
        want[q] = tuple(s[k] for k in QUESTION_SUM_COLUMNS)
    assert res.question_sums.keys() == want.keys()
    for q, v in want.items():
        assert res.question_sums[q] == pytest.approx(v, rel=1e-9, abs=1e-12)
    col = np.array([res.question_sums[q] for q in sorted(want)]).sum(axis=0)
    assert res.majority_mass_share == pytest.approx(col[0] / col[1], rel=1e-12)
    assert res.majority_token_share == pytest.approx(col[2] / col[3], rel=1e-12)
    assert res.concentration_ratio == pytest.approx(col[0] / col[1] / (col[2] / col[3]), rel=1e-12)
    for q, ratio in res.question_ratios.items():
        m_maj, m_c, t_maj, t_c = res.question_sums[q][:4]
        assert ratio == pytest.approx((m_maj / m_c) / (t_maj / t_c), rel=1e-12)
    # item 7's share of each stratum from the stored per-trajectory sums, per question
    sums = trajectory_sums(groups, rewards, traj, logp)
    item7 = reward_stratified_tail(groups, rewards, traj, logp)
    c = tok["c"]
    for stratum, want_share in ((1, item7.success.share), (0, item7.failure.share)):
        in_s = np.asarray(rewards)[traj] == stratum
        cut = np.sort(c[in_s])[int(np.ceil(0.99 * in_s.sum())) - 1]
        pairs = tail_question_sums(groups, rewards, sums, stratum=stratum)
        assert pairs.keys() == {q for q in set(groups) if (c[(q_of == q) & in_s] > 0).any()}
        for q, (tail_mass, mass) in pairs.items():
            sel = (q_of == q) & in_s & (c > 0)
            assert mass == pytest.approx(c[sel].sum(), rel=1e-9)
            assert tail_mass == pytest.approx(c[sel & (c >= cut)].sum(), rel=1e-9, abs=1e-15)
        a, b = np.array(list(pairs.values())).sum(axis=0)
        assert a / b == pytest.approx(want_share, rel=1e-12)
    old = TrajectorySums(**{**sums.__dict__, "failure_tail_positive_mass": None})
    with pytest.raises(ValueError, match="no failure-stratum tail"):
        tail_question_sums(groups, rewards, old, stratum=0)


def test_a_mode_carrying_all_positive_mass_has_ratio_one_over_its_token_share() -> None:
    # one question, 4 successes in mode a (the majority, 3 tokens each) and 2 in b, 2
    # failures; the a tokens are the confident ones (log π above the mean) of successes
    # (A above the mean), so every positive c is on a tokens
    groups = ["q"] * 8
    rewards = [1, 1, 1, 1, 1, 1, 0, 0]
    in_c = [1, 1, 1, 1, 1, 1, 0, 0]
    modes = ["a", "a", "a", "a", "b", "b", None, None]
    traj = np.repeat(np.arange(8), 3)
    logp = np.array([-0.1] * 12 + [-5.0] * 6 + [-2.0] * 6)
    res = mode_stratified_tail(groups, rewards, in_c, modes, traj, logp)
    assert res.majority_modes == {"q": "a"}
    assert res.majority_mass_share == 1.0
    assert res.majority_token_share == pytest.approx(12 / 18)
    assert res.concentration_ratio == pytest.approx(18 / 12)
    assert res.question_ratios == {"q": pytest.approx(18 / 12)}


def test_ties_follow_the_codebook_order_and_bad_input_is_named() -> None:
    groups = ["q"] * 4
    args = (groups, [1, 1, 0, 0], [1, 1, 0, 0], ["b", "a", None, None], np.arange(4), -np.ones(4))
    assert mode_stratified_tail(*args).majority_modes == {"q": "a"}
    assert mode_stratified_tail(*args, mode_order=["b", "a"]).majority_modes == {"q": "b"}
    with pytest.raises(ValueError, match=r"in_c\[2\] is 1 but rewards\[2\] is 0"):
        mode_stratified_tail(
            groups, [1, 1, 0, 0], [1, 1, 1, 0], ["a"] * 4, np.arange(4), -np.ones(4)
        )


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_from_per_trajectory_sums_equals_the_token_computation(seed: int) -> None:
    """What the probe stores (four numbers per trajectory) gives the same item 16 as the
    tokens, for a partition applied afterwards (two partitions, one reduction)."""
    groups, rewards, in_c, modes, traj, logp = _endpoint(seed)
    sums = trajectory_sums(groups, rewards, traj, logp)
    assert sums.n_tokens.sum() == traj.size
    other = list(reversed(modes))
    for labels in (modes, other):
        want = mode_stratified_tail(groups, rewards, in_c, labels, traj, logp).to_dict()
        got = mode_tail_from_sums(groups, in_c, labels, sums).to_dict()
        assert got.keys() == want.keys()
        for k, v in want.items():
            if isinstance(v, float):
                assert got[k] == pytest.approx(v, rel=1e-12), k
            elif k == "question_ratios":
                assert got[k].keys() == v.keys()
                for q in v:
                    assert got[k][q] == pytest.approx(v[q], rel=1e-12)
            elif k == "question_sums":
                assert got[k].keys() == v.keys()
                for q in v:
                    assert got[k][q] == pytest.approx(v[q], rel=1e-12, abs=1e-12)
            elif k == "question_ratio_quartiles" and v is not None:
                assert got[k] == pytest.approx(v, rel=1e-12)
            else:
                assert got[k] == v, k


def test_sums_length_mismatch_is_named() -> None:
    groups, rewards, in_c, modes, traj, logp = _endpoint(0)
    sums = trajectory_sums(groups, rewards, traj, logp)
    with pytest.raises(ValueError, match="length mismatch: sums=80"):
        mode_tail_from_sums(groups[:-1], in_c[:-1], modes[:-1], sums)
