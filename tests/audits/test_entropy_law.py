"""Tests for rcea.audits.entropy_law (docs/estimators.md item 18) against scipy / numpy and
an explicit enumeration of orderings."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from rcea.audits.entropy_law import (
    compare_entropies,
    entropy_order,
    fit_entropy_law,
    kendall_permutation_test,
    kendall_tau_b,
    law_scaling,
    pair_trace,
    run_law,
)


def _trace(a: float, b: float, *, noise: float, seed: int = 0, steps: int = 200, every: int = 5):
    """A generated trace whose accuracy follows R = −a·exp(H) + b (plus noise)."""
    rng = np.random.default_rng(seed)
    s = np.arange(0, steps, every)
    h = 1.2 * np.exp(-s / 50.0) + 0.15
    r = -a * np.exp(h) + b + rng.normal(0.0, noise, s.size)
    return s, h, np.clip(r, 0.0, 1.0)


def test_noise_free_trace_recovers_a_and_b() -> None:
    s, h, r = _trace(0.12, 0.95, noise=0.0)
    fit = fit_entropy_law(h, r)
    assert fit.a == pytest.approx(0.12, abs=1e-12)
    assert fit.b == pytest.approx(0.95, abs=1e-12)
    assert fit.ceiling == pytest.approx(0.95 - 0.12, abs=1e-12)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit.rmse == pytest.approx(0.0, abs=1e-12)
    assert fit.n == s.size


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ols_matches_scipy_linregress_and_lstsq(seed: int) -> None:
    _, h, r = _trace(0.1, 0.9, noise=0.02, seed=seed)
    fit = fit_entropy_law(h, r)
    ref = stats.linregress(np.exp(h), r)
    assert fit.a == pytest.approx(-ref.slope, rel=1e-10)
    assert fit.b == pytest.approx(ref.intercept, rel=1e-10)
    assert fit.r2 == pytest.approx(ref.rvalue**2, rel=1e-10)
    design = np.column_stack([np.exp(h), np.ones_like(h)])
    coef, res, *_ = np.linalg.lstsq(design, r, rcond=None)
    assert (-coef[0], coef[1]) == pytest.approx((fit.a, fit.b), rel=1e-9)
    assert fit.rmse == pytest.approx(math.sqrt(res[0] / h.size), rel=1e-9)
    # the known a and b lie within a few standard errors of the estimate
    assert abs(fit.a - 0.1) < 5 * ref.stderr


def test_prediction_band_matches_the_textbook_interval() -> None:
    _, h, r = _trace(0.1, 0.9, noise=0.02, seed=3)
    fit = fit_entropy_law(h, r)
    x = np.exp(h)
    n = x.size
    ref = stats.linregress(x, r)
    resid = r - (ref.intercept + ref.slope * x)
    s = math.sqrt(float(resid @ resid) / (n - 2))
    x0 = math.exp(0.5)
    half = (
        stats.t.ppf(0.975, n - 2)
        * s
        * math.sqrt(1 + 1 / n + (x0 - x.mean()) ** 2 / ((x - x.mean()) ** 2).sum())
    )
    low, high = fit.band([0.5])
    mid = ref.intercept + ref.slope * x0
    assert (low[0], high[0]) == pytest.approx((mid - half, mid + half), rel=1e-9)


def test_negative_a_is_reported_not_hidden() -> None:
    h = np.array([0.2, 0.4, 0.6, 0.8])
    r = 0.05 * np.exp(h) + 0.1  # accuracy rising with entropy
    fit = fit_entropy_law(h, r)
    assert fit.a is not None and fit.a == pytest.approx(-0.05)
    assert fit.ceiling == pytest.approx(0.05 * 1 + 0.1)  # b − a: R at H = 0


def test_undefined_fits_say_why() -> None:
    assert fit_entropy_law([0.1, 0.2], [0.5, 0.6]).reason == "2 point(s), the fit needs 3"
    flat = fit_entropy_law([0.3, 0.3, 0.3], [0.1, 0.2, 0.3])
    assert flat.a is None and "constant" in (flat.reason or "")
    const_r = fit_entropy_law([0.1, 0.2, 0.3], [0.4, 0.4, 0.4])
    assert const_r.a == pytest.approx(0.0, abs=1e-12) and const_r.r2 is None
    with pytest.raises(ValueError, match="finite"):
        fit_entropy_law([0.1, math.nan, 0.3], [0.1, 0.2, 0.3])


def test_early_fit_predicts_the_rest_as_an_independent_computation_does() -> None:
    s, h, r = _trace(0.1, 0.9, noise=0.01, seed=4)
    law = run_law(s, h, s, r, fit_fraction=0.15)
    cutoff = 0.15 * s.max()
    early = s <= cutoff
    ref = stats.linregress(np.exp(h[early]), r[early])
    pred = ref.intercept + ref.slope * np.exp(h[~early])
    assert law.cutoff_step == pytest.approx(cutoff)
    assert (law.n_early, law.n_rest) == (int(early.sum()), int((~early).sum()))
    assert law.early.a == pytest.approx(-ref.slope, rel=1e-10)
    assert law.early_fit_rmse == pytest.approx(
        math.sqrt(float(np.mean((pred - r[~early]) ** 2))), rel=1e-10
    )
    # the full fit on the same trace is the fit of every pair
    assert law.a == pytest.approx(fit_entropy_law(h, r).a)


def test_early_fit_undefined_when_the_window_is_too_small() -> None:
    s, h, r = _trace(0.1, 0.9, noise=0.01, every=50)  # steps 0, 50, 100, 150
    law = run_law(s, h, s, r, fit_fraction=0.15)
    assert law.n_early == 1 and law.early_fit_rmse is None
    assert "early fit" in (law.reason or "")
    assert law.a is not None  # the full fit still stands
    with pytest.raises(ValueError, match="fit_fraction"):
        run_law(s, h, s, r, fit_fraction=1.5)


def test_pairing_rule_on_uneven_logging_intervals() -> None:
    # entropy every 3 steps from 1 (NaN at 10: an undefined step), validation at uneven steps
    e_steps = [1, 4, 7, 10, 13, 16, 19, 22]
    e_vals = [1.0, 0.9, 0.8, math.nan, 0.6, 0.5, 0.4, 0.3]
    a_steps = [25, 0, 5, 11, 12, 13]  # unsorted on purpose
    a_vals = [0.9, 0.1, 0.2, 0.3, 0.4, 0.5]
    p = pair_trace(e_steps, e_vals, a_steps, a_vals)
    # step 0 has no entropy at or before it: dropped and counted
    assert p.n_unpaired == 1
    assert p.steps == (5, 11, 12, 13, 25)
    # 5 → 4; 11 and 12 → 7 (10 is undefined: the latest *defined* entropy); 13 → 13; 25 → 22
    assert p.entropy_steps == (4, 7, 7, 13, 22)
    assert p.entropy == (0.9, 0.8, 0.8, 0.6, 0.3)
    assert p.accuracy == (0.2, 0.3, 0.4, 0.5, 0.9)
    with pytest.raises(ValueError, match="unique"):
        pair_trace([1], [0.5], [3, 3], [0.1, 0.2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pair_trace([1], [0.5], [3], [1.2])


def test_pairing_feeds_the_fit() -> None:
    s, h, r = _trace(0.1, 0.9, noise=0.0, every=1)
    acc_steps = s[::7]  # validation every 7 steps, entropy every step
    law = run_law(s, h, acc_steps, r[::7])
    assert law.n == acc_steps.size
    assert law.a == pytest.approx(0.1, abs=1e-10) and law.b == pytest.approx(0.9, abs=1e-10)


def test_scaling_fit_matches_linregress_and_predicts_the_largest() -> None:
    n_params = [0.5e9, 1.5e9, 3e9, 7e9]
    logn = np.log(n_params)
    a = 0.02 + 0.01 * logn + np.array([0.0, 0.001, -0.001, 0.0])
    b = 0.3 + 0.02 * logn
    sc = law_scaling(["0.5B", "1.5B", "3B", "7B"], n_params, a, b)
    ref = stats.linregress(logn, a)
    assert sc.a_fit.slope == pytest.approx(ref.slope, rel=1e-10)
    assert sc.a_fit.r2 == pytest.approx(ref.rvalue**2, rel=1e-10)
    assert sc.largest == "7B"
    ref3 = stats.linregress(logn[:3], a[:3])
    assert sc.predicted_a == pytest.approx(ref3.intercept + ref3.slope * logn[3], rel=1e-10)
    assert sc.predicted_b == pytest.approx(b[3], rel=1e-10)  # b is exactly log-linear
    assert sc.ceiling_error == pytest.approx(sc.predicted_ceiling - (b[3] - a[3]))
    few = law_scaling(["a", "b"], [1e9, 2e9], [0.1, 0.2], [0.5, 0.6])
    assert few.predicted_a is None and "needs 3" in (few.reason or "")


def test_compare_entropies_names_the_best_and_by_how_much() -> None:
    s, h, r = _trace(0.1, 0.9, noise=0.01, seed=5)
    rng = np.random.default_rng(9)
    good = run_law(s, h, s, r)
    noisy = run_law(s, h + rng.normal(0, 0.2, h.size), s, r)
    cmp_ = compare_entropies(
        {"global": {"grpo": noisy}, "success": {"grpo": good}, "failure": {"grpo": None}}
    )
    assert cmp_.best == "success"
    assert cmp_.kinds == ("global", "success")
    assert "success-conditioned token entropy predicted performance best" in cmp_.sentence
    assert cmp_.mean_early_fit_rmse["success"] == pytest.approx(good.early_fit_rmse)
    lone = compare_entropies({"global": {"grpo": good}})
    assert lone.best is None and "only one entropy" in lone.sentence


# --------------------------------------------------------------------------- ordering


@pytest.mark.parametrize("seed", range(5))
def test_kendall_tau_b_matches_scipy_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, 9).astype(float)
    y = rng.integers(0, 3, 9).astype(float)
    ref = stats.kendalltau(x, y, variant="b")
    got = kendall_tau_b(x, y)
    if math.isnan(ref.statistic):
        assert got is None
    else:
        assert got == pytest.approx(ref.statistic, abs=1e-12)


def _enumerated_p(x: list[float], y: list[float]) -> float:
    """Two-sided permutation p by explicit enumeration with scipy's τ-b."""
    obs = abs(stats.kendalltau(x, y, variant="b").statistic)
    taus = [
        abs(stats.kendalltau(x, [y[i] for i in p]).statistic)
        for p in itertools.permutations(range(len(y)))
    ]
    return sum(t >= obs - 1e-12 for t in taus) / len(taus)


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([0.9, 0.7, 0.8, 0.3, 0.5, 0.2], [0.40, 0.42, 0.45, 0.55, 0.50, 0.61]),
        ([1.0, 1.0, 0.5, 0.3, 0.3, 0.1], [0.2, 0.3, 0.3, 0.6, 0.5, 0.5]),  # ties in both
        ([0.1, 0.2, 0.3, 0.4], [0.4, 0.1, 0.3, 0.2]),
    ],
)
def test_permutation_p_value_matches_explicit_enumeration(x: list[float], y: list[float]) -> None:
    tau, p, method = kendall_permutation_test(x, y)
    assert method == "exact"
    assert tau == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)
    assert p == pytest.approx(_enumerated_p(x, y), abs=1e-12)


def test_monte_carlo_p_value_is_close_to_exact_and_seeded() -> None:
    x = [0.9, 0.7, 0.8, 0.3, 0.5, 0.2, 0.6]
    y = [0.40, 0.42, 0.45, 0.55, 0.50, 0.61, 0.47]
    _, exact, _ = kendall_permutation_test(x, y)
    _, mc, method = kendall_permutation_test(x, y, max_exact=5, n_random=40_000, seed=3)
    assert method == "monte_carlo"
    assert mc == pytest.approx(exact, abs=0.01)
    assert kendall_permutation_test(x, y, max_exact=5, n_random=40_000, seed=3)[1] == mc


def test_entropy_order_rank_table_exclusions_and_missing_metrics() -> None:
    res = entropy_order(
        "7B",
        ["grpo", "dapo", "clipcov", "klcov", "gtpo"],
        [0.10, 0.30, 0.50, 0.40, 0.20],
        {
            "greedy_accuracy": [0.50, 0.60, 0.70, 0.65, None],
            "pass_at_k": [0.80, 0.82, 0.90, 0.88, 0.81],
        },
        excluded=["gtpo"],
    )
    assert res.excluded == ("gtpo",)
    greedy, passk = res.metrics
    assert greedy.n == 4 and greedy.kendall_tau == pytest.approx(1.0)
    assert greedy.p_value == pytest.approx(2 / 24)  # the identity and its reverse of 4!
    assert passk.runs == ("grpo", "dapo", "clipcov", "klcov")
    table = {row["run"]: row for row in res.rank_table}
    assert set(table) == {"grpo", "dapo", "clipcov", "klcov"}
    assert (
        table["clipcov"]["entropy_rank"] == 1.0 and table["clipcov"]["greedy_accuracy_rank"] == 1.0
    )
    assert table["grpo"]["entropy_rank"] == 4.0
    small = entropy_order("3B", ["a", "b"], [0.1, 0.2], {"pass_at_k": [0.3, 0.4]})
    assert small.metrics[0].p_value is None
    with pytest.raises(ValueError, match="unique"):
        entropy_order("3B", ["a", "a"], [0.1, 0.2], {})
