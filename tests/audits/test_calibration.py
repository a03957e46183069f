"""Tests for rcea.audits.calibration (docs/estimators.md item 12) against scikit-learn and scipy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from sklearn.metrics import accuracy_score, f1_score

from rcea.audits.calibration import accepted_set_precision, clopper_pearson, judge_calibration

HUMAN = st.sampled_from(["valid", "invalid"])
JUDGE = st.sampled_from(["valid", "invalid", "unparseable"])


@st.composite
def calibration_sets(draw):
    n = draw(st.integers(1, 40))
    human = draw(st.lists(HUMAN, min_size=n, max_size=n))
    judge = draw(st.lists(JUDGE, min_size=n, max_size=n))
    return human, judge


def _check(human: list[str], judge: list[str]) -> None:
    res = judge_calibration(human, judge)
    assert res.accuracy == pytest.approx(accuracy_score(human, judge), abs=1e-12)
    sk_f1 = f1_score(human, judge, labels=["valid", "invalid"], average="macro", zero_division=0)
    assert res.macro_f1 == pytest.approx(sk_f1, abs=1e-12)
    accepted = [h for h, j in zip(human, judge, strict=True) if j == "valid"]
    if accepted:
        assert res.accepted_valid_precision == pytest.approx(
            accepted.count("valid") / len(accepted)
        )
    else:
        assert res.accepted_valid_precision is None
    human_valid = [j for h, j in zip(human, judge, strict=True) if h == "valid"]
    if human_valid:
        assert res.valid_recall == pytest.approx(human_valid.count("valid") / len(human_valid))
    else:
        assert res.valid_recall is None
    assert res.coverage == pytest.approx(1 - judge.count("unparseable") / len(judge))
    assert res.n_items == len(human)
    assert res.n_unparseable == judge.count("unparseable")
    assert res.n_human_valid + res.n_human_invalid == len(human)


def test_known_example() -> None:
    human = ["valid", "valid", "valid", "invalid", "invalid", "invalid", "valid", "invalid"]
    judge = [
        "valid",
        "valid",
        "invalid",
        "valid",
        "invalid",
        "unparseable",
        "unparseable",
        "invalid",
    ]
    res = judge_calibration(human, judge)
    _check(human, judge)
    assert res.accuracy == pytest.approx(4 / 8)
    assert res.accepted_valid_precision == pytest.approx(2 / 3)
    assert res.valid_recall == pytest.approx(2 / 4)
    assert res.coverage == pytest.approx(6 / 8)
    assert res.confusion["invalid"]["unparseable"] == 1
    assert res.to_dict()["n_unparseable"] == 2


@settings(max_examples=100, deadline=None)
@given(calibration_sets())
def test_matches_sklearn(data) -> None:
    _check(*data)


def test_unparseable_counts_as_wrong() -> None:
    human = ["valid", "invalid"]
    perfect = judge_calibration(human, ["valid", "invalid"])
    one_unparseable = judge_calibration(human, ["valid", "unparseable"])
    assert perfect.accuracy == 1.0 and perfect.macro_f1 == 1.0
    assert one_unparseable.accuracy == 0.5
    assert one_unparseable.macro_f1 < 1.0
    assert one_unparseable.accepted_valid_precision == 1.0  # not an acceptance


def test_class_never_appears_and_all_unparseable() -> None:
    res = judge_calibration(["invalid"] * 3, ["unparseable"] * 3)
    assert res.accuracy == 0.0 and res.macro_f1 == 0.0 and res.coverage == 0.0
    assert res.accepted_valid_precision is None and res.valid_recall is None
    _check(["valid"] * 4, ["valid"] * 4)


def test_bad_labels() -> None:
    with pytest.raises(ValueError, match=r"human_labels\[0\]"):
        judge_calibration(["unparseable"], ["valid"])
    with pytest.raises(ValueError, match=r"judge_verdicts\[1\]"):
        judge_calibration(["valid", "valid"], ["valid", "yes"])
    with pytest.raises(ValueError, match="empty"):
        judge_calibration([], [])
    with pytest.raises(ValueError, match="length mismatch"):
        judge_calibration(["valid"], ["valid", "valid"])


def test_clopper_pearson_matches_scipy_binomtest() -> None:
    for n in (1, 2, 5, 17, 50, 200):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            if not 0 <= k <= n:
                continue
            for conf in (0.9, 0.95, 0.99):
                ci = binomtest(k, n).proportion_ci(confidence_level=conf, method="exact")
                lo, hi = clopper_pearson(k, n, conf)
                assert lo == pytest.approx(ci.low, abs=1e-9)
                assert hi == pytest.approx(ci.high, abs=1e-9)


def test_accepted_set_precision() -> None:
    a = ["valid"] * 45 + ["invalid"] * 5
    b = ["valid"] * 43 + ["invalid"] * 7
    res = accepted_set_precision(a, b)
    ci_a = binomtest(45, 50).proportion_ci(confidence_level=0.95, method="exact")
    ci_b = binomtest(43, 50).proportion_ci(confidence_level=0.95, method="exact")
    assert res.annotator_a.precision == pytest.approx(0.9)
    assert res.annotator_b.precision == pytest.approx(0.86)
    assert (res.annotator_a.ci_low, res.annotator_a.ci_high) == pytest.approx(
        (ci_a.low, ci_a.high), abs=1e-9
    )
    assert (res.annotator_b.ci_low, res.annotator_b.ci_high) == pytest.approx(
        (ci_b.low, ci_b.high), abs=1e-9
    )
    assert res.annotator_agreement == pytest.approx(48 / 50)
    d = res.to_dict()
    assert d["annotator_a"]["n_valid"] == 45 and d["confidence"] == 0.95


@settings(max_examples=40, deadline=None)
@given(st.lists(HUMAN, min_size=1, max_size=30))
def test_accepted_set_single_and_extremes(labels: list[str]) -> None:
    res = accepted_set_precision(labels, labels, confidence=0.95)
    k = labels.count("valid")
    ci = binomtest(k, len(labels)).proportion_ci(confidence_level=0.95, method="exact")
    assert res.annotator_a.ci_low == pytest.approx(ci.low, abs=1e-9)
    assert res.annotator_a.ci_high == pytest.approx(ci.high, abs=1e-9)
    assert res.annotator_a.ci_low <= res.annotator_a.precision <= res.annotator_a.ci_high
    assert res.annotator_agreement == 1.0


def test_accepted_set_bad_inputs() -> None:
    with pytest.raises(ValueError, match="confidence"):
        accepted_set_precision(["valid"], ["valid"], confidence=1.0)
    with pytest.raises(ValueError, match="length mismatch"):
        accepted_set_precision(["valid"], ["valid", "invalid"])
    with pytest.raises(ValueError, match=r"labels_annotator_b\[0\]"):
        accepted_set_precision(["valid"], ["unparseable"])
    with pytest.raises(ValueError, match="k and n"):
        clopper_pearson(1.5, 3)
