"""Tests for rcea.audits.passk against math.comb and brute-force enumeration."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcea.audits.passk import macro_benchmark_accuracy, macro_pass_at_k, pass_at_k


def _comb_reference(n, c, k):
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def _enumeration_reference(n, c, k):
    """Share of all k-subsets of n samples (first c correct) containing a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_matches_enumeration_for_all_small_cases():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(
                    _enumeration_reference(n, c, k), abs=1e-12
                ), (n, c, k)


@given(
    st.integers(1, 400).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))
    )
)
def test_matches_math_comb(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(_comb_reference(n, c, k), abs=1e-12)


def test_known_values_and_edges():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(64, 1, 64) == 1.0
    assert pass_at_k(64, 60, 5) == 1.0  # n − c < k


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (4, 1, 5, "n >= k"),
        (4, 5, 2, "c"),
        (4, -1, 2, "non-negative"),
        (4, 1, 0, "positive"),
        (4.5, 1, 1, "non-negative integer"),
        (True, 1, 1, "non-negative integer"),
    ],
)
def test_bad_inputs(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_macro_pass_at_k_is_unweighted_mean():
    ns, cs = [16, 16, 20], [0, 4, 20]
    res = macro_pass_at_k(ns, cs, [8, 1])
    assert list(res.values) == [1, 8]
    for k in (1, 8):
        expected = np.mean([_comb_reference(n, c, k) for n, c in zip(ns, cs, strict=True)])
        assert res.values[k] == pytest.approx(expected)
    d = res.to_dict()
    assert set(d["pass_at_k"]) == {"pass_at_1", "pass_at_8"} and d["n_questions"] == 3
    json.dumps(d)
    with pytest.raises(ValueError, match="n >= k"):
        macro_pass_at_k([4], [1], [8])
    with pytest.raises(ValueError, match="empty"):
        macro_pass_at_k([], [], [1])
    with pytest.raises(ValueError, match="length mismatch"):
        macro_pass_at_k([4, 4], [1], [1])


def test_macro_benchmark_accuracy():
    res = macro_benchmark_accuracy({"math500": [1, 0, 1, 1], "aime": [0, 1], "amc": [1]})
    assert res.accuracy == {"aime": 0.5, "amc": 1.0, "math500": 0.75}
    assert res.macro_accuracy == pytest.approx((0.75 + 0.5 + 1.0) / 3)
    assert res.n["math500"] == 4
    json.dumps(res.to_dict())
    with pytest.raises(ValueError, match="non-empty mapping"):
        macro_benchmark_accuracy({})
    with pytest.raises(ValueError, match="empty"):
        macro_benchmark_accuracy({"x": []})
    with pytest.raises(ValueError, match="only 0 and 1"):
        macro_benchmark_accuracy({"x": [1, 2]})
