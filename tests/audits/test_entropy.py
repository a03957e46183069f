"""Tests for rcea.audits.entropy against independent references (exact enumeration, scipy)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from rcea.audits.entropy import (
    _paired_bootstrap,
    _paired_bootstrap_loop,
    binary_entropy,
    broad_token_entropy_ratio,
    entropy_report,
    outcome_entropy,
    paired_token_entropy_ratio,
    per_question_token_entropy,
    sequence_decomposition,
    sign_test_greater,
)

# ---------------------------------------------------------------- helpers / fixtures


def _synthetic(n_questions: int, k: int, seed: int, p_range=(0.05, 0.95)):
    """Per-trajectory arrays for n_questions × k samples: failures have higher entropy."""
    rng = np.random.default_rng(seed)
    qids, rewards, ent = [], [], []
    for q in range(n_questions):
        p = rng.uniform(*p_range)
        r = (rng.random(k) < p).astype(int)
        base = rng.uniform(0.3, 1.0)
        h = np.where(r == 1, rng.gamma(4, base / 4, k), rng.gamma(4, 1.2 * base / 4, k))
        qids += [f"q{q:03d}"] * k
        rewards += r.tolist()
        ent += h.tolist()
    return np.array(qids), np.array(rewards), np.array(ent)


def _paired_rows(spec):
    """Build rows from {qid: (success_values, failure_values)}."""
    qids, rewards, ent = [], [], []
    for q, (s, f) in spec.items():
        for v in s:
            qids.append(q)
            rewards.append(1)
            ent.append(v)
        for v in f:
            qids.append(q)
            rewards.append(0)
            ent.append(v)
    return qids, rewards, ent


# ---------------------------------------------------------------- item 1


@pytest.mark.parametrize("p", [0.0, 1e-9, 0.1, 0.25, 0.5, 0.9, 1.0])
def test_binary_entropy_matches_scipy(p):
    assert binary_entropy(p) == pytest.approx(stats.entropy([p, 1 - p]), abs=1e-12)


def test_binary_entropy_edges_and_max():
    assert binary_entropy(0.0) == 0.0
    assert binary_entropy(1.0) == 0.0
    assert binary_entropy(0.5) == pytest.approx(math.log(2))


@pytest.mark.parametrize("bad", [-0.1, 1.1, float("nan"), float("inf")])
def test_binary_entropy_rejects_bad(bad):
    with pytest.raises(ValueError):
        binary_entropy(bad)


def test_outcome_entropy():
    assert outcome_entropy([1, 0, 1, 1]) == pytest.approx(stats.entropy([0.75, 0.25]))
    assert outcome_entropy([1, 1, 1]) == 0.0
    with pytest.raises(ValueError, match="empty"):
        outcome_entropy([])
    with pytest.raises(ValueError, match="only 0 and 1"):
        outcome_entropy([0, 2])
    with pytest.raises(ValueError, match="non-finite"):
        outcome_entropy([0, float("nan")])


# ---------------------------------------------------------------- item 2: exact tree policy

# A small Markov-chain policy over tokens {a, b, EOS}: the next-token distribution depends
# on the previous token; the sequence ends at EOS or is forced to end after MAX_LEN tokens.
TOKENS = ("a", "b", "$")
START = {"a": 0.5, "b": 0.3, "$": 0.2}
AFTER = {"a": {"a": 0.2, "b": 0.5, "$": 0.3}, "b": {"a": 0.6, "b": 0.1, "$": 0.3}}
MAX_LEN = 4  # content tokens; then EOS is forced (probability 1)


def _next_dist(prev):
    return START if prev is None else AFTER[prev]


def _enumerate_policy():
    """All complete sequences with their exact probabilities."""
    out = {}

    def rec(prefix, prob):
        prev = prefix[-1] if prefix else None
        if len(prefix) == MAX_LEN:
            out[tuple(prefix) + ("$",)] = prob
            return
        for tok, p in _next_dist(prev).items():
            if tok == "$":
                out[tuple(prefix) + ("$",)] = prob * p
            else:
                rec(prefix + [tok], prob * p)

    rec([], 1.0)
    return out


def _reward(seq):
    return int(seq.count("a") >= 2)


def _sample_policy(n, rng):
    """Sample n sequences token by token; return (log-prob, reward) arrays."""
    logp = np.zeros(n)
    n_a = np.zeros(n, dtype=int)
    prev = np.full(n, -1)  # -1 = start, 0 = a, 1 = b
    alive = np.ones(n, dtype=bool)
    tables = {
        -1: np.array([START[t] for t in TOKENS]),
        0: np.array([AFTER["a"][t] for t in TOKENS]),
        1: np.array([AFTER["b"][t] for t in TOKENS]),
    }
    for step in range(MAX_LEN):
        u = rng.random(n)
        tok = np.full(n, 2)
        for state, probs in tables.items():
            m = alive & (prev == state)
            cdf = np.cumsum(probs)
            tok[m] = np.searchsorted(cdf, u[m], side="right")
            logp[m] += np.log(probs[tok[m]])
        n_a += alive & (tok == 0)
        ended = alive & (tok == 2)
        prev = np.where(alive & ~ended, tok, prev)
        alive &= ~ended
        del step
    return logp, (n_a >= 2).astype(int)


def test_enumeration_is_a_distribution_and_satisfies_prop1():
    dist = _enumerate_policy()
    probs = np.array(list(dist.values()))
    assert probs.sum() == pytest.approx(1.0, abs=1e-12)
    rew = np.array([_reward(s) for s in dist])
    h_y = -(probs * np.log(probs)).sum()
    p1 = probs[rew == 1].sum()
    cond = [stats.entropy(probs[rew == r] / probs[rew == r].sum()) for r in (1, 0)]
    assert h_y == pytest.approx(binary_entropy(p1) + p1 * cond[0] + (1 - p1) * cond[1], abs=1e-12)


def test_sequence_decomposition_converges_to_exact_enumeration():
    dist = _enumerate_policy()
    probs = np.array(list(dist.values()))
    rew = np.array([_reward(s) for s in dist])
    logs = np.log(probs)
    h_y = -(probs * logs).sum()
    p1 = probs[rew == 1].sum()
    exact = {}
    sds = {}
    for r in (1, 0):
        q = probs[rew == r] / probs[rew == r].sum()
        exact[r] = stats.entropy(q)
        sds[r] = math.sqrt((q * (logs[rew == r] - (q * logs[rew == r]).sum()) ** 2).sum())
    sd_all = math.sqrt((probs * (logs + h_y) ** 2).sum())

    n = 200_000
    ell, r_s = _sample_policy(n, np.random.default_rng(7))
    res = sequence_decomposition(ell, r_s)
    # Monte Carlo tolerance: 5 standard errors (+ the error of log p̂_r for conditionals).
    assert res.sequence_entropy == pytest.approx(h_y, abs=5 * sd_all / math.sqrt(n))
    assert res.p_success == pytest.approx(p1, abs=5 * math.sqrt(p1 * (1 - p1) / n))
    for r, got in ((1, res.conditional_entropy_success), (0, res.conditional_entropy_failure)):
        k_r = (r_s == r).sum()
        tol = 5 * sds[r] / math.sqrt(k_r) + 5 * math.sqrt(1 / k_r)
        assert got == pytest.approx(exact[r], abs=tol)
    assert abs(res.residual) < 1e-9
    assert res.quantity == "entropy"
    assert res.success_reportable and res.failure_reportable


def test_sequence_decomposition_small_sample_residual_and_none_for_missing_outcome():
    rng = np.random.default_rng(3)
    ell = -rng.gamma(3, 5, 20)
    res = sequence_decomposition(ell, np.ones(20, dtype=int), k_min=8)
    assert res.conditional_entropy_failure is None
    assert res.k_failure == 0 and not res.failure_reportable
    assert res.outcome_entropy == 0.0
    # with only successes, Ĥ(Y|R=1,x) = Ĥ(Y|x)
    assert res.conditional_entropy_success == pytest.approx(res.sequence_entropy)
    assert abs(res.residual) < 1e-9

    r = np.array([1] * 3 + [0] * 17)
    res = sequence_decomposition(ell, r, k_min=8)
    assert not res.success_reportable and res.failure_reportable
    manual = -ell[:3].mean() + math.log(3 / 20)
    assert res.conditional_entropy_success == pytest.approx(manual)
    assert abs(res.residual) < 1e-9


def test_sequence_decomposition_token_mixture_and_flags():
    ell = [-3.0, -4.0, -5.0, -6.0]
    r = [1, 1, 0, 0]
    h = [0.2, 0.4, 0.9, 1.1]
    res = sequence_decomposition(
        ell, r, mean_token_entropy=h, truncated=[False, True, False, True], cross_entropy=True
    )
    assert res.token_entropy_success == pytest.approx(0.3)
    assert res.token_entropy_failure == pytest.approx(1.0)
    assert res.token_mixture == pytest.approx(0.5 * 0.3 + 0.5 * 1.0)
    assert abs(res.token_mixture_residual) < 1e-12
    assert res.n_truncated == 2
    assert res.quantity == "cross_entropy"
    json.dumps(res.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("ell", "r", "match"),
    [
        ([-1.0, 0.5], [1, 0], "<= 0"),
        ([-1.0, float("nan")], [1, 0], "non-finite"),
        ([-1.0], [1, 0], "length mismatch"),
        ([], [], "empty"),
        ([-1.0, -2.0], [1, 3], "only 0 and 1"),
    ],
)
def test_sequence_decomposition_bad_inputs(ell, r, match):
    with pytest.raises(ValueError, match=match):
        sequence_decomposition(ell, r)


# ---------------------------------------------------------------- item 3: per question, broad


def test_per_question_token_entropy_matches_manual_grouping():
    q, r, h = _synthetic(12, 16, seed=1)
    rows = per_question_token_entropy(q, r, h)
    assert [row.question_id for row in rows] == sorted(set(q.tolist()))
    for row in rows:
        m = q == row.question_id
        s, f = h[m & (r == 1)], h[m & (r == 0)]
        assert row.k_success == s.size and row.k_failure == f.size
        assert row.token_entropy == pytest.approx(h[m].mean())
        if s.size:
            assert row.token_entropy_success == pytest.approx(s.mean())
        else:
            assert row.token_entropy_success is None
        if f.size:
            assert row.token_entropy_failure == pytest.approx(f.mean())
        else:
            assert row.token_entropy_failure is None


def test_per_question_none_when_outcome_absent():
    rows = per_question_token_entropy(["x", "x", "y"], [1, 1, 0], [0.1, 0.3, 0.7])
    by = {row.question_id: row for row in rows}
    assert by["x"].token_entropy_failure is None and by["x"].k_failure == 0
    assert by["y"].token_entropy_success is None and by["y"].token_entropy_failure == 0.7


def test_broad_ratio_matches_manual():
    q, r, h = _synthetic(30, 24, seed=2)
    res = broad_token_entropy_ratio(q, r, h, k_min=8)
    s_means, f_means = [], []
    ids = sorted(set(q.tolist()))
    for qq in ids:
        m = q == qq
        if (m & (r == 1)).sum() >= 8:
            s_means.append(h[m & (r == 1)].mean())
        if (m & (r == 0)).sum() >= 8:
            f_means.append(h[m & (r == 0)].mean())
    assert res.n_success_eligible == len(s_means)
    assert res.coverage_success == pytest.approx(len(s_means) / len(ids))
    assert res.coverage_failure == pytest.approx(len(f_means) / len(ids))
    assert res.ratio == pytest.approx(np.mean(f_means) / np.mean(s_means))


def test_broad_ratio_undefined_without_eligible_outcome():
    res = broad_token_entropy_ratio(["a"] * 5, [1] * 5, [0.5] * 5, k_min=8)
    assert res.ratio is None and res.coverage_success == 0.0
    assert res.token_entropy_success is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rewards": [1, 0, 1]}, "length mismatch"),
        ({"mean_token_entropy": [0.1, -0.2]}, "non-negative"),
        ({"mean_token_entropy": [0.1, float("nan")]}, "non-finite"),
        ({"rewards": [1, 0.5]}, "only 0 and 1"),
        ({"question_ids": [None, "a"]}, "question id"),
    ],
)
def test_token_entropy_bad_inputs(kwargs, match):
    args = {"question_ids": ["a", "a"], "rewards": [1, 0], "mean_token_entropy": [0.1, 0.2]}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        broad_token_entropy_ratio(**args)


def test_empty_inputs_rejected():
    with pytest.raises(ValueError, match="empty"):
        per_question_token_entropy([], [], [])


# ---------------------------------------------------------------- sign test


def test_sign_test_reproduces_table_a5():
    assert sign_test_greater(21, 42) == pytest.approx(0.5612, abs=5e-5)
    assert sign_test_greater(21, 42) == pytest.approx(
        stats.binomtest(21, 42, alternative="greater").pvalue, rel=1e-12
    )
    # another Table A5 row: 7B GTPO 57.5% of 40 → 23 higher → 0.2148
    assert sign_test_greater(23, 40) == pytest.approx(0.2148, abs=5e-5)


@given(st.integers(0, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_sign_test_matches_scipy_binomtest(hn):
    h, n = hn
    if n == 0:
        return
    assert sign_test_greater(h, n) == pytest.approx(
        stats.binomtest(h, n, alternative="greater").pvalue, rel=1e-9, abs=1e-300
    )


def test_paired_sign_test_21_of_42_through_the_estimator():
    rng = np.random.default_rng(5)
    spec = {}
    for i in range(42):
        s = rng.uniform(0.5, 1.0, 8)
        f = rng.uniform(0.5, 1.0, 8)
        # force direction: first 21 failure higher, rest lower
        f = f + 1.0 if i < 21 else f * 0.3
        spec[f"q{i}"] = (s, f)
    res = paired_token_entropy_ratio(*_paired_rows(spec), k_min=8, n_boot=100, seed=0)
    assert res.n_paired_questions == 42 and res.n_higher == 21 and res.n_ties == 0
    assert res.direction_share == pytest.approx(0.5)
    assert res.sign_test_p == pytest.approx(0.5612, abs=5e-5)


def test_exact_ties_are_dropped_from_sign_test_n():
    spec = {}
    for i in range(10):
        s = np.full(8, 0.5)
        f = np.full(8, 0.5) if i < 3 else np.full(8, 0.9 if i < 8 else 0.1)
        spec[i] = (s, f)
    res = paired_token_entropy_ratio(*_paired_rows(spec), k_min=8, n_boot=100, seed=0)
    assert res.n_ties == 3 and res.n_higher == 5 and res.n_lower == 2
    assert res.sign_test_n == 7
    assert res.direction_share == pytest.approx(5 / 10)  # denominator |E|
    assert res.sign_test_p == pytest.approx(
        stats.binomtest(5, 7, alternative="greater").pvalue, rel=1e-12
    )


# ---------------------------------------------------------------- paired ratio & bootstrap


def test_paired_ratio_point_estimate_is_geometric_mean():
    q, r, h = _synthetic(40, 32, seed=3)
    res = paired_token_entropy_ratio(q, r, h, k_min=8, n_boot=300, seed=11)
    logs = []
    for qq in sorted(set(q.tolist())):
        m = q == qq
        s, f = h[m & (r == 1)], h[m & (r == 0)]
        if s.size >= 8 and f.size >= 8:
            logs.append(math.log(f.mean() / s.mean()))
    assert res.n_paired_questions == len(logs) > 5
    assert res.ratio == pytest.approx(math.exp(np.mean(logs)), rel=1e-12)
    assert res.coverage_paired == pytest.approx(len(logs) / 40)
    assert res.ci_low <= res.ratio <= res.ci_high
    assert res.n_boot_nonfinite == 0


def test_bootstrap_seed_semantics_and_thread_independence():
    q, r, h = _synthetic(25, 32, seed=4)
    a = paired_token_entropy_ratio(q, r, h, n_boot=400, seed=1, n_threads=1)
    b = paired_token_entropy_ratio(q, r, h, n_boot=400, seed=1, n_threads=3)
    c = paired_token_entropy_ratio(q, r, h, n_boot=400, seed=2)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert a.ratio == c.ratio


def test_bootstrap_invariant_to_row_order():
    q, r, h = _synthetic(20, 24, seed=6)
    perm = np.random.default_rng(0).permutation(q.size)
    a = paired_token_entropy_ratio(q, r, h, n_boot=300, seed=9)
    b = paired_token_entropy_ratio(q[perm], r[perm], h[perm], n_boot=300, seed=9)
    assert a.to_dict() == b.to_dict()


def test_bootstrap_small_chunks_and_blocks_are_thread_independent():
    succ = [np.array([0.5, 0.7, 0.9]), np.array([0.2, 0.3])]
    fail = [np.array([1.0, 1.5]), np.array([0.4, 0.6, 0.8, 0.9])]
    kw = {"chunk": 5, "block_elements": 7}  # many blocks, many chunks per question
    a = _paired_bootstrap(succ, fail, 500, 3, n_threads=1, **kw)
    b = _paired_bootstrap(succ, fail, 500, 3, n_threads=2, **kw)
    # the thread pool is only used for large problems: force it with a huge B as well
    big_a = _paired_bootstrap(succ, fail, 200_000, 3, n_threads=1)
    big_b = _paired_bootstrap(succ, fail, 200_000, 3, n_threads=2)
    np.testing.assert_array_equal(big_a, big_b)
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(a).all()


def test_bootstrap_outer_level_exact_distribution():
    # Constant values within each question → within-question resampling is deterministic;
    # with two questions of ratios r1, r2 the replicate is r1, √(r1 r2) or r2 with
    # probabilities 1/4, 1/2, 1/4.
    succ = [np.full(3, 1.0), np.full(4, 1.0)]
    fail = [np.full(3, 2.0), np.full(5, 8.0)]
    reps = _paired_bootstrap(succ, fail, 20_000, 5)
    values = {2.0: 0.25, 4.0: 0.5, 8.0: 0.25}
    for v, p in values.items():
        share = np.isclose(reps, v).mean()
        assert share == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / 20_000))
    assert np.isclose(reps[:, None], list(values)).any(axis=1).all()


def test_bootstrap_within_level_exact_distribution():
    # One question, failures constant 3, successes {1, 2}: mean s* ∈ {1, 1.5, 2} with
    # probabilities 1/4, 1/2, 1/4, so the replicate is 3, 2 or 1.5.
    for kw in ({}, {"chunk": 7, "block_elements": 1000}):
        reps = _paired_bootstrap([np.array([1.0, 2.0])], [np.array([3.0, 3.0])], 20_000, 8, **kw)
        for v, p in {3.0: 0.25, 2.0: 0.5, 1.5: 0.25}.items():
            share = np.isclose(reps, v).mean()
            assert share == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / 20_000))


def test_vectorised_bootstrap_agrees_with_loop_reference():
    rng = np.random.default_rng(12)
    succ = [rng.gamma(3, 0.2, rng.integers(2, 7)) for _ in range(6)]
    fail = [rng.gamma(3, 0.3, rng.integers(2, 7)) for _ in range(6)]
    vec = _paired_bootstrap(succ, fail, 6000, 1)
    loop = _paired_bootstrap_loop(succ, fail, 3000, 2)
    se = math.sqrt(vec.var() / 6000 + loop.var() / 3000)
    assert vec.mean() == pytest.approx(loop.mean(), abs=5 * se)
    assert vec.std() == pytest.approx(loop.std(), rel=0.1)
    assert np.quantile(vec, 0.05) == pytest.approx(np.quantile(loop, 0.05), abs=6 * se * 3)
    assert np.quantile(vec, 0.95) == pytest.approx(np.quantile(loop, 0.95), abs=6 * se * 3)


def test_single_paired_question_has_nondegenerate_ci():
    spec = {"only": (np.linspace(0.2, 0.9, 10), np.linspace(0.5, 1.5, 10))}
    res = paired_token_entropy_ratio(*_paired_rows(spec), n_boot=500, seed=0)
    assert res.n_paired_questions == 1
    assert res.ratio == pytest.approx(1.0 / 0.55)
    assert res.ci_low < res.ratio < res.ci_high


def test_no_paired_question_is_undefined_not_zero():
    spec = {"a": (np.full(10, 0.4), np.full(3, 0.9)), "b": (np.full(2, 0.4), np.full(9, 0.9))}
    res = paired_token_entropy_ratio(*_paired_rows(spec), n_boot=200, seed=0)
    assert res.n_paired_questions == 0
    assert res.ratio is None and res.ci_low is None and res.ci_high is None
    assert res.direction_share is None and res.sign_test_p is None
    d = res.to_dict()
    assert d["ratio"] is None
    json.dumps(d, allow_nan=False)


def test_near_zero_success_entropy_is_excluded_and_listed():
    spec = {
        "zero": (np.zeros(8), np.full(8, 0.5)),
        "ok1": (np.linspace(0.3, 0.5, 8), np.linspace(0.4, 0.9, 8)),
        "ok2": (np.linspace(0.3, 0.6, 8), np.linspace(0.2, 0.5, 8)),
    }
    res = paired_token_entropy_ratio(*_paired_rows(spec), n_boot=300, seed=0)
    assert res.excluded_question_ids == ("zero",)
    assert res.n_paired_questions == 3 and res.n_ratio_questions == 2
    expected = math.exp((math.log(0.65 / 0.4) + math.log(0.35 / 0.45)) / 2)
    assert res.ratio == pytest.approx(expected)
    assert res.n_higher == 2  # "zero" still votes in the direction check
    assert set(res.question_ratios) == {"ok1", "ok2"}
    assert math.isfinite(res.ci_low) and math.isfinite(res.ci_high)


def test_resampled_zero_means_are_counted_not_silent():
    # successes contain zeros: some resamples have mean 0 → replicate dropped and counted.
    spec = {"q": (np.array([0.0] * 7 + [0.8]), np.linspace(0.5, 1.0, 8))}
    res = paired_token_entropy_ratio(*_paired_rows(spec), n_boot=2000, seed=3)
    p_all_zero = (7 / 8) ** 8
    assert res.n_boot_nonfinite == pytest.approx(
        2000 * p_all_zero, abs=5 * math.sqrt(2000 * p_all_zero)
    )
    assert res.n_boot_nonfinite > 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_boot": 0}, "n_boot"),
        ({"k_min": 0}, "k_min"),
        ({"confidence": 1.0}, "confidence"),
        ({"seed": -1}, "seed"),
        ({"min_success_entropy": -1.0}, "min_success_entropy"),
    ],
)
def test_paired_bad_arguments(kwargs, match):
    args = {"seed": 0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        paired_token_entropy_ratio(["a", "a"], [1, 0], [0.1, 0.2], **args)


# ---------------------------------------------------------------- properties


@st.composite
def _datasets(draw):
    n_q = draw(st.integers(1, 6))
    qids, rewards, ent = [], [], []
    for q in range(n_q):
        k = draw(st.integers(1, 20))
        r = draw(st.lists(st.integers(0, 1), min_size=k, max_size=k))
        h = draw(
            st.lists(
                st.floats(0.05, 3.0, allow_nan=False, allow_infinity=False),
                min_size=k,
                max_size=k,
            )
        )
        qids += [q] * k
        rewards += r
        ent += h
    return qids, rewards, ent


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_datasets(), st.randoms(use_true_random=False), st.integers(0, 1000))
def test_property_row_order_and_relabelling(data, rnd, offset):
    qids, rewards, ent = data
    k_min = 3
    base = paired_token_entropy_ratio(qids, rewards, ent, k_min=k_min, n_boot=50, seed=4)
    # row order: everything identical, bootstrap included
    order = list(range(len(qids)))
    rnd.shuffle(order)
    shuffled = paired_token_entropy_ratio(
        [qids[i] for i in order],
        [rewards[i] for i in order],
        [ent[i] for i in order],
        k_min=k_min,
        n_boot=50,
        seed=4,
    )
    assert shuffled.to_dict() == base.to_dict()
    # relabelling questions (a permutation of ids): point estimates unchanged
    ids = sorted(set(qids))
    new = ids[:]
    rnd.shuffle(new)
    mapping = {a: f"z{b + offset}" for a, b in zip(ids, new, strict=True)}
    rel = paired_token_entropy_ratio(
        [mapping[q] for q in qids], rewards, ent, k_min=k_min, n_boot=50, seed=4
    )
    for key in ("n_paired_questions", "n_higher", "n_ties", "sign_test_p", "direction_share"):
        assert getattr(rel, key) == getattr(base, key)
    if base.ratio is None:
        assert rel.ratio is None
    else:
        assert rel.ratio == pytest.approx(base.ratio, rel=1e-12)
        assert rel.ci_low <= rel.ratio * (1 + 1e-12) and rel.ci_high >= rel.ratio * (1 - 1e-12)
    b1 = broad_token_entropy_ratio(qids, rewards, ent, k_min=k_min)
    b2 = broad_token_entropy_ratio([mapping[q] for q in qids], rewards, ent, k_min=k_min)
    assert b1.coverage_success == b2.coverage_success
    assert (b1.ratio is None) == (b2.ratio is None)
    if b1.ratio is not None:
        assert b1.ratio == pytest.approx(b2.ratio, rel=1e-12)


# ---------------------------------------------------------------- report


def test_entropy_report_keys_macro_averages_and_json():
    q, r, h = _synthetic(15, 20, seed=9)
    rng = np.random.default_rng(1)
    ell = -rng.gamma(5, 8, q.size)
    rep = entropy_report(q, r, h, ell, k_min=4, n_boot=200, seed=5)
    d = rep.to_dict()
    for key in (
        "paired_ratio",
        "paired_ci_low",
        "paired_ci_high",
        "broad_ratio",
        "coverage_success",
        "coverage_failure",
        "direction_share",
        "sign_test_p",
        "n_paired_questions",
        "mean_outcome_entropy",
        "mean_sequence_entropy",
        "max_abs_residual",
        "seed",
        "n_boot",
        "k_min",
    ):
        assert key in d, key
    json.dumps(d, allow_nan=False)
    assert d["seed"] == 5 and d["n_boot"] == 200 and d["k_min"] == 4
    ids = sorted(set(q.tolist()))
    outcome = [stats.entropy([r[q == i].mean(), 1 - r[q == i].mean()]) for i in ids]
    assert rep.mean_outcome_entropy == pytest.approx(np.mean(outcome))
    seq = [-ell[q == i].mean() for i in ids]
    assert rep.mean_sequence_entropy == pytest.approx(np.mean(seq))
    assert rep.max_abs_residual < 1e-9
    assert rep.max_abs_token_mixture_residual < 1e-12
    cond_s = [
        -ell[(q == i) & (r == 1)].mean() + math.log((r[q == i] == 1).mean())
        for i in ids
        if ((q == i) & (r == 1)).sum() >= 4
    ]
    assert rep.mean_conditional_entropy_success == pytest.approx(np.mean(cond_s))
    same = paired_token_entropy_ratio(q, r, h, k_min=4, n_boot=200, seed=5)
    assert d["paired_ratio"] == same.ratio and d["paired_ci_low"] == same.ci_low
    assert d["broad_ratio"] == broad_token_entropy_ratio(q, r, h, k_min=4).ratio


def test_entropy_report_without_sequences():
    q, r, h = _synthetic(5, 10, seed=10)
    rep = entropy_report(q, r, h, k_min=3, n_boot=100, seed=0)
    assert rep.mean_sequence_entropy is None and rep.max_abs_residual is None
    assert all(x.sequence is None for x in rep.questions)
    json.dumps(rep.to_dict(), allow_nan=False)


def test_entropy_report_length_mismatch():
    with pytest.raises(ValueError, match="length mismatch"):
        entropy_report(["a", "a"], [1, 0], [0.1, 0.2], [-1.0], seed=0, n_boot=100)


def test_all_permutations_of_tiny_question_give_same_point_estimates():
    vals_s, vals_f = [0.1, 0.2, 0.4], [0.3, 0.5, 0.6]
    rows = [("q", 1, v) for v in vals_s] + [("q", 0, v) for v in vals_f]
    seen = set()
    for perm in itertools.islice(itertools.permutations(rows), 0, None, 7):
        res = paired_token_entropy_ratio(
            [p[0] for p in perm],
            [p[1] for p in perm],
            [p[2] for p in perm],
            k_min=3,
            n_boot=50,
            seed=1,
        )
        seen.add((res.ratio, res.ci_low, res.ci_high))
    assert len(seen) == 1
