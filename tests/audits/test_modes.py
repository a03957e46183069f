"""Tests for rcea.audits.modes: scipy entropy, exact subset enumeration, properties."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from rcea.audits.modes import mode_entropy, rarefied_retention

# ---------------------------------------------------------------- mode entropy


@pytest.mark.parametrize(
    "labels",
    [["a"], ["a", "b"], ["a", "a", "b", "c", "c", "c"], [1, 2, 2, 3, 3, 3, 3], list("abcdefgh")],
)
def test_mode_entropy_matches_scipy(labels):
    res = mode_entropy(labels)
    counts = list(Counter(labels).values())
    assert res.entropy == pytest.approx(stats.entropy(counts), abs=1e-12)
    assert res.n_eff == pytest.approx(math.exp(stats.entropy(counts)))
    assert res.n == len(labels) and res.n_modes == len(counts)


def test_mode_entropy_excludes_uncertain_and_counts_it():
    res = mode_entropy(["a", "uncertain", "b", "b", "uncertain"])
    assert res.n == 3 and res.n_excluded == 2
    assert res.entropy == pytest.approx(stats.entropy([1, 2]))
    assert res.counts == {"a": 1, "b": 2}
    custom = mode_entropy(["a", "?", "b"], exclude=("?",))
    assert custom.n == 2 and custom.n_eff == pytest.approx(2.0)
    json.dumps(res.to_dict(), allow_nan=False)


def test_mode_entropy_all_excluded_is_undefined_and_empty_is_error():
    res = mode_entropy(["uncertain", "uncertain"])
    assert res.entropy is None and res.n_eff is None and res.n == 0
    with pytest.raises(ValueError, match="empty"):
        mode_entropy([])
    with pytest.raises(ValueError, match="mode label"):
        mode_entropy(["a", None])
    with pytest.raises(ValueError, match="mode label"):
        mode_entropy(["a", 1.5])


@given(st.lists(st.sampled_from("abcde"), min_size=1, max_size=40), st.permutations("abcde"))
def test_mode_entropy_invariant_to_relabelling_and_order(labels, perm):
    mapping = dict(zip("abcde", perm, strict=True))
    a = mode_entropy(labels)
    b = mode_entropy([mapping[z] for z in reversed(labels)])
    assert a.entropy == pytest.approx(b.entropy, abs=1e-12)
    assert 1.0 - 1e-12 <= a.n_eff <= a.n_modes + 1e-9


# ---------------------------------------------------------------- rarefaction


def _exact_expected_neff(labels, n):
    """E[exp(H)] over ALL size-n subsets (uniform), by enumeration."""
    vals = []
    for sub in itertools.combinations(range(len(labels)), n):
        c = Counter(labels[i] for i in sub)
        vals.append(math.exp(stats.entropy(list(c.values()))))
    return float(np.mean(vals)), float(np.std(vals))


def test_rarefaction_mean_converges_to_exact_subset_expectation():
    base = {"q": list("aaabbbcd")}  # m0 = 8
    ckpt = {"q": list("aaaab")}  # mt = 5 → n = 5, base side is rarefied
    d = 4000
    res = rarefied_retention(base, ckpt, n_min=5, n_draws=d, n_boot=100, seed=1)
    row = res.questions[0]
    exp_base, sd_base = _exact_expected_neff(base["q"], 5)
    assert row.n_eff_base == pytest.approx(exp_base, abs=5 * sd_base / math.sqrt(d))
    # checkpoint side is the whole set: deterministic, exact
    assert row.n_eff_checkpoint == pytest.approx(math.exp(stats.entropy([4, 1])), abs=1e-12)
    assert row.retention == pytest.approx(row.n_eff_checkpoint / row.n_eff_base)
    assert res.retention == row.retention
    # every draw is a genuine size-5 subset of distinct positions
    draws = row.base_draws
    assert draws.shape == (d, 5)
    assert all(len(set(r)) == 5 for r in draws.tolist())
    assert draws.min() >= 0 and draws.max() < 8
    # subsets are (approximately) uniform over all C(8,5) = 56
    freq = Counter(tuple(r) for r in draws.tolist())
    assert len(freq) == 56


def test_equal_counts_are_deterministic_whole_set():
    base = {"q": list("aabbccdd")}
    ckpt = {"q": list("aaaaaabc")}
    r1 = rarefied_retention(base, ckpt, n_draws=5, n_boot=100, seed=1)
    r2 = rarefied_retention(base, ckpt, n_draws=5, n_boot=100, seed=99)
    row = r1.questions[0]
    assert row.deterministic
    assert row.n_eff_base == pytest.approx(4.0)
    assert row.n_eff_checkpoint == pytest.approx(math.exp(stats.entropy([6, 1, 1])))
    np.testing.assert_array_equal(row.base_draws, np.tile(np.arange(8), (5, 1)))
    assert r1.retention == r2.retention
    assert r1.ci_low == r1.ci_high == r1.retention  # single eligible question


def test_uncertain_labels_are_excluded_never_drawn_and_counted():
    base = {"q": ["a", "uncertain", "b", "a", "b", "c", "a", "b", "c", "uncertain", "a"]}
    ckpt = {"q": ["a"] * 6 + ["uncertain"] + ["b"] * 3}
    res = rarefied_retention(base, ckpt, n_draws=10, n_boot=100, seed=3)
    row = res.questions[0]
    assert (row.m_base, row.m_checkpoint) == (9, 9)
    assert (row.n_excluded_base, row.n_excluded_checkpoint) == (2, 1)
    assert not {1, 9} & set(row.base_draws.ravel().tolist())
    assert 6 not in set(row.checkpoint_draws.ravel().tolist())


def test_eligibility_denominator_and_no_eligible_question():
    base = {"a": list("ab" * 4), "b": list("abc"), "only_base": list("abcdabcd")}
    ckpt = {"a": list("abcd" * 3), "b": list("ab" * 10), "only_ckpt": list("ab" * 5)}
    res = rarefied_retention(base, ckpt, n_min=8, n_draws=4, n_boot=200, seed=0)
    assert res.n_denominator == 2 and res.n_eligible == 1
    assert res.eligible_share == pytest.approx(0.5)
    assert res.n_base_only == 1 and res.n_checkpoint_only == 1
    none = rarefied_retention(base, ckpt, n_min=20, n_draws=4, n_boot=200, seed=0)
    assert none.n_eligible == 0
    assert none.retention is None and none.ci_low is None and none.ci_high is None
    json.dumps(none.to_dict(), allow_nan=False)
    disjoint = rarefied_retention({"x": ["a"]}, {"y": ["a"]}, n_draws=2, n_boot=100, seed=0)
    assert disjoint.n_denominator == 0 and disjoint.eligible_share is None


def _random_instance(seed, n_q=30):
    rng = np.random.default_rng(seed)
    base, ckpt = {}, {}
    for q in range(n_q):
        k = rng.integers(2, 6)
        p0 = rng.dirichlet(np.ones(k))
        p1 = rng.dirichlet(np.ones(k) * 0.5)
        base[f"q{q}"] = [f"m{z}" for z in rng.choice(k, rng.integers(4, 30), p=p0)]
        ckpt[f"q{q}"] = [f"m{z}" for z in rng.choice(k, rng.integers(4, 30), p=p1)]
    return base, ckpt


def test_bootstrap_ci_seed_semantics():
    base, ckpt = _random_instance(0)
    a = rarefied_retention(base, ckpt, n_boot=500, seed=1)
    b = rarefied_retention(base, ckpt, n_boot=500, seed=1)
    c = rarefied_retention(base, ckpt, n_boot=500, seed=2)
    assert a.to_dict() == b.to_dict()
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert a.n_eligible > 5
    assert a.ci_low <= a.retention <= a.ci_high
    ret = [q.retention for q in a.questions if q.eligible]
    assert a.retention == pytest.approx(np.mean(ret))
    # percentile CI close to the normal approximation for a mean of this many questions
    se = np.std(ret, ddof=1) / math.sqrt(len(ret))
    assert a.ci_high - a.ci_low == pytest.approx(2 * 1.96 * se, rel=0.25)


def test_stored_draws_reproduce_exactly():
    base, ckpt = _random_instance(1, n_q=10)
    first = rarefied_retention(base, ckpt, n_boot=200, seed=5)
    stored = json.loads(json.dumps(first.draws()))
    again = rarefied_retention(base, ckpt, n_boot=200, seed=77, stored_draws=stored)
    for a, b in zip(first.questions, again.questions, strict=True):
        assert a.retention == b.retention
        if a.eligible:
            np.testing.assert_array_equal(a.base_draws, b.base_draws)
    bad = {q: dict(v) for q, v in stored.items()}
    q0 = next(iter(bad))
    bad[q0]["base_draws"] = [row[:-1] for row in bad[q0]["base_draws"]]
    with pytest.raises(ValueError, match="shape"):
        rarefied_retention(base, ckpt, n_boot=200, seed=5, stored_draws=bad)


def test_draws_do_not_depend_on_other_questions():
    base, ckpt = _random_instance(2, n_q=8)
    full = rarefied_retention(base, ckpt, n_boot=100, seed=4)
    keep = list(base)[:3]
    part = rarefied_retention(
        {q: base[q] for q in keep}, {q: ckpt[q] for q in keep}, n_boot=100, seed=4
    )
    full_rows = {r.question_id: r for r in full.questions}
    for r in part.questions:
        assert r.retention == full_rows[r.question_id].retention


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_min": 0}, "n_min"),
        ({"n_draws": 0}, "n_draws"),
        ({"n_boot": 0}, "n_boot"),
        ({"confidence": 0.0}, "confidence"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"seed": 0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rarefied_retention({"q": list("ab" * 5)}, {"q": list("ab" * 5)}, **args)


def test_bad_inputs():
    with pytest.raises(ValueError, match="both empty"):
        rarefied_retention({}, {}, seed=0)
    with pytest.raises(ValueError, match="mode label"):
        rarefied_retention({"q": ["a", None]}, {"q": ["a"]}, seed=0)
    with pytest.raises(ValueError, match="list of mode labels"):
        rarefied_retention({"q": "abc"}, {"q": ["a"]}, seed=0)
    with pytest.raises(ValueError, match="question id"):
        rarefied_retention({1.5: ["a"]}, {1.5: ["a"]}, seed=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10_000), st.randoms(use_true_random=False))
def test_property_invariant_to_dict_order_and_mode_relabelling(seed, rnd):
    base, ckpt = _random_instance(seed, n_q=6)
    ref = rarefied_retention(base, ckpt, n_min=4, n_draws=6, n_boot=100, seed=seed)
    keys = list(base)
    rnd.shuffle(keys)
    # dict insertion order does not matter at all (draws and bootstrap included)
    shuffled = rarefied_retention(
        {q: base[q] for q in keys},
        {q: ckpt[q] for q in reversed(keys)},
        n_min=4,
        n_draws=6,
        n_boot=100,
        seed=seed,
    )
    assert shuffled.to_dict() == ref.to_dict()
    # renaming modes (a bijection) does not change any number
    names = [f"m{i}" for i in range(5)]
    perm = names[:]
    rnd.shuffle(perm)
    mapping = dict(zip(names, [f"x_{p}" for p in perm], strict=True))
    renamed = rarefied_retention(
        {q: [mapping[z] for z in v] for q, v in base.items()},
        {q: [mapping[z] for z in v] for q, v in ckpt.items()},
        n_min=4,
        n_draws=6,
        n_boot=100,
        seed=seed,
    )
    assert renamed.n_eligible == ref.n_eligible
    for key in ("retention", "ci_low", "ci_high"):
        a, b = getattr(renamed, key), getattr(ref, key)
        assert (a is None and b is None) or a == pytest.approx(b, rel=1e-12)
