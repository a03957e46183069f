"""Tests for rcea.audits.association (docs/estimators.md item 14) against scipy."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rcea.audits.association import (
    pearson_correlation,
    retention_passk_spearman,
    spearman_correlation,
)

METHODS = ["grpo-3B", "dapo-3B", "clipcov-3B", "klcov-3B", "grpo-7B", "clipcov-7B"]
RETENTION = [0.942, 0.911, 0.960, 0.948, 0.896, 0.935]
PASSK = [0.80, 0.78, 0.83, 0.81, 0.86, 0.10]


def test_matches_scipy_spearman_and_lists_exclusions() -> None:
    res = retention_passk_spearman(METHODS, RETENTION, PASSK, excluded=["clipcov-7B"])
    ref = stats.spearmanr(RETENTION[:5], PASSK[:5])
    assert res.n == 5
    assert res.rho == pytest.approx(ref.statistic, abs=1e-12)
    assert res.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert res.excluded == ("clipcov-7B",)
    assert res.methods == tuple(METHODS[:5])
    d = res.to_dict()
    assert d["excluded"] == ["clipcov-7B"] and d["rho"] == res.rho


def test_missing_values_are_dropped_and_listed() -> None:
    passk = list(PASSK)
    passk[2] = None
    res = retention_passk_spearman(METHODS, RETENTION, passk, excluded=["clipcov-7B"])
    assert res.missing == ("clipcov-3B",) and res.n == 4
    keep = [0, 1, 3, 4]
    ref = stats.spearmanr([RETENTION[i] for i in keep], [PASSK[i] for i in keep])
    assert res.rho == pytest.approx(ref.statistic)
    nan_res = retention_passk_spearman(METHODS, RETENTION, [*PASSK[:2], float("nan"), *PASSK[3:]])
    assert nan_res.missing == ("clipcov-3B",)


def test_too_few_methods_gives_none() -> None:
    res = retention_passk_spearman(METHODS[:3], RETENTION[:3], PASSK[:3], excluded=[METHODS[0]])
    assert res.n == 2 and res.rho is None and res.p_value is None
    empty = retention_passk_spearman(METHODS[:1], RETENTION[:1], PASSK[:1], excluded=METHODS[:1])
    assert empty.n == 0 and empty.rho is None


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="unique"):
        retention_passk_spearman(["a", "a", "b"], [1, 2, 3], [1, 2, 3])
    with pytest.raises(ValueError, match="length mismatch"):
        retention_passk_spearman(["a", "b"], [1, 2, 3], [1, 2, 3])
    with pytest.raises(ValueError, match="method 'b'"):
        retention_passk_spearman(["a", "b", "c"], [1, "x", 3], [1, 2, 3])
    with pytest.raises(ValueError, match="not finite"):
        retention_passk_spearman(["a", "b", "c"], [1, math.inf, 3], [1, 2, 3])


finite = st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False)


@st.composite
def xy(draw):
    n = draw(st.integers(3, 25))
    # few distinct values so ties are frequent
    x = draw(st.lists(st.sampled_from([0.0, 1.0, 2.5, 3.0]) | finite, min_size=n, max_size=n))
    y = draw(st.lists(st.sampled_from([0.0, 1.0, 2.5]) | finite, min_size=n, max_size=n))
    return np.array(x), np.array(y)


@settings(max_examples=120, deadline=None)
@given(xy())
def test_correlations_match_scipy(data) -> None:
    x, y = data
    sp = spearman_correlation(x, y)
    pe = pearson_correlation(x, y)
    if np.all(x == x[0]) or np.all(y == y[0]):
        assert sp.estimate is None and pe.estimate is None
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_s = stats.spearmanr(x, y)
        ref_p = stats.pearsonr(x, y)
    assert sp.estimate == pytest.approx(ref_s.statistic, abs=1e-9)
    assert sp.p_value == pytest.approx(ref_s.pvalue, abs=1e-9)
    assert pe.estimate == pytest.approx(ref_p.statistic, abs=1e-9)
    assert pe.p_value == pytest.approx(ref_p.pvalue, abs=1e-7)
    # Spearman is invariant under a strictly increasing transform (doubling is exact in
    # floating point for normal |x| <= 1e3, so it creates no ties, unlike arctan or an added
    # constant); the sign flips under negation
    assert spearman_correlation(2.0 * x, y).estimate == pytest.approx(sp.estimate, abs=1e-9)
    assert spearman_correlation(-x, y).estimate == pytest.approx(-sp.estimate, abs=1e-9)


def test_small_samples() -> None:
    one = spearman_correlation([1.0], [2.0])
    assert one.estimate is None and one.p_value is None and one.n == 1
    two = pearson_correlation([1.0, 2.0], [3.0, 5.0])
    assert two.estimate == pytest.approx(1.0) and two.p_value is None
    perfect = spearman_correlation([1, 2, 3, 4], [10, 20, 30, 40])
    assert perfect.estimate == pytest.approx(1.0) and perfect.p_value == 0.0
    assert spearman_correlation([], []).n == 0
