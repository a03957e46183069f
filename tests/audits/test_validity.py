"""Tests for rcea.audits.validity (item 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from rcea.audits.validity import validity_rate


def _rows(spec):
    """spec: {qid: (verdicts of successes, n_failures)}."""
    q, r, v = [], [], []
    for qid, (verdicts, n_fail) in spec.items():
        for x in verdicts:
            q.append(qid)
            r.append(1)
            v.append(x)
        for _ in range(n_fail):
            q.append(qid)
            r.append(0)
            v.append(None)
    return q, r, v


def test_hand_computed_example():
    spec = {
        "a": ([1] * 6 + [0] * 2 + [None] * 2, 3),  # K+ = 10, v = 0.6, coverage 0.8
        "b": ([True] * 8, 0),  # v = 1, h_b = 0
        "c": ([1, 0, 1], 5),  # K+ = 3 < 8: not eligible
        "d": ([], 9),  # no successes
    }
    res = validity_rate(*_rows(spec), k_min=8)
    by = {row.question_id: row for row in res.questions}
    assert by["a"].validity_rate == pytest.approx(0.6)
    assert by["a"].validity_entropy == pytest.approx(stats.entropy([0.6, 0.4]))
    assert by["a"].judge_coverage == pytest.approx(0.8)
    assert (by["a"].n_accepted, by["a"].n_rejected, by["a"].n_unparseable) == (6, 2, 2)
    assert by["b"].validity_entropy == 0.0
    assert by["c"].validity_rate is None and not by["c"].eligible
    assert by["c"].judge_coverage == pytest.approx(1.0)
    assert by["d"].judge_coverage is None and by["d"].k_success == 0
    assert res.n_eligible == 2 and res.coverage == pytest.approx(0.5)
    assert res.mean_validity_rate == pytest.approx((0.6 + 1.0) / 2)
    assert res.mean_validity_entropy == pytest.approx(stats.entropy([0.6, 0.4]) / 2)
    assert res.n_judged == 21 and res.n_unparseable == 2
    assert res.judge_coverage == pytest.approx(19 / 21)
    assert res.judge_coverage_eligible == pytest.approx(16 / 18)
    json.dumps(res.to_dict(), allow_nan=False)


def test_unparseable_string_is_not_an_acceptance():
    res = validity_rate(["q"] * 8, [1] * 8, [1, 1, 1, 1, "unparseable", "Unparseable", None, 0])
    row = res.questions[0]
    assert row.validity_rate == pytest.approx(4 / 8)
    assert row.n_unparseable == 3 and row.judge_coverage == pytest.approx(5 / 8)


def test_verdicts_on_failures_are_ignored():
    a = validity_rate(["q"] * 10, [1] * 8 + [0, 0], [1] * 8 + [None, "garbage"])
    assert a.questions[0].validity_rate == 1.0 and a.n_judged == 8


def test_no_eligible_question_is_undefined():
    res = validity_rate(["a", "a", "b"], [1, 1, 0], [1, 0, None], k_min=8)
    assert res.n_eligible == 0
    assert res.mean_validity_rate is None and res.mean_validity_entropy is None
    assert res.judge_coverage_eligible is None
    assert res.judge_coverage == 1.0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((["a"], [1], ["valid"]), "validity at index 0"),
        ((["a"], [1], [2]), "validity at index 0"),
        ((["a"], [1], [float("nan")]), "NaN"),
        ((["a", "a"], [1], [1, 1]), "length mismatch"),
        ((["a"], [3], [1]), "only 0 and 1"),
        (([], [], []), "empty"),
    ],
)
def test_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        validity_rate(*args)


def test_bad_k_min():
    with pytest.raises(ValueError, match="k_min"):
        validity_rate(["a"], [1], [1], k_min=0)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["x", "y", "z", 7]),
            st.integers(0, 1),
            st.sampled_from([0, 1, None, "unparseable"]),
        ),
        min_size=1,
        max_size=60,
    ),
    st.randoms(use_true_random=False),
)
def test_property_row_order_invariance_and_bounds(rows, rnd):
    q, r, v = zip(*rows, strict=True)
    a = validity_rate(q, r, v, k_min=2)
    perm = list(range(len(rows)))
    rnd.shuffle(perm)
    b = validity_rate([q[i] for i in perm], [r[i] for i in perm], [v[i] for i in perm], k_min=2)
    assert a.to_dict() == b.to_dict()
    for row in a.questions:
        if row.validity_rate is not None:
            assert 0.0 <= row.validity_rate <= 1.0
            assert 0.0 <= row.validity_entropy <= np.log(2) + 1e-12
