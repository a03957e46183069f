"""Tests for rcea.audits.agreement (docs/estimators.md item 10) against scikit-learn."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import (
    accuracy_score,
    cohen_kappa_score,
    confusion_matrix,
    f1_score,
    precision_recall_fscore_support,
)

from rcea.audits.agreement import (
    LABELS,
    final_reference,
    pair_agreement,
    unresolved_pairs,
)

labels_st = st.sampled_from(["same", "different"])


@st.composite
def label_pairs(draw, min_size: int = 1, max_size: int = 40):
    n = draw(st.integers(min_size, max_size))
    x = draw(st.lists(labels_st, min_size=n, max_size=n))
    y = draw(st.lists(labels_st, min_size=n, max_size=n))
    return x, y


def _sklearn(x: list[str], y: list[str]) -> dict:
    labels = list(LABELS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p, r, f, s = precision_recall_fscore_support(
            y, x, labels=labels, zero_division=0, average=None
        )
        kappa = cohen_kappa_score(x, y, labels=labels)
    return {
        "macro_f1": f1_score(y, x, labels=labels, average="macro", zero_division=0),
        "precision": dict(zip(labels, p, strict=True)),
        "recall": dict(zip(labels, r, strict=True)),
        "f1": dict(zip(labels, f, strict=True)),
        "support": dict(zip(labels, s, strict=True)),
        "kappa": None if math.isnan(kappa) else kappa,
        "accuracy": accuracy_score(y, x),
        "confusion": confusion_matrix(y, x, labels=labels),
    }


def _check_against_sklearn(x: list[str], y: list[str]) -> None:
    res = pair_agreement(x, y)
    ref = _sklearn(x, y)
    assert res.n_pairs == len(x)
    assert res.macro_f1 == pytest.approx(ref["macro_f1"], abs=1e-12)
    assert res.accuracy == pytest.approx(ref["accuracy"], abs=1e-12)
    for lab in LABELS:
        m = res.per_class[lab]
        assert m.precision == pytest.approx(ref["precision"][lab], abs=1e-12)
        assert m.recall == pytest.approx(ref["recall"][lab], abs=1e-12)
        assert m.f1 == pytest.approx(ref["f1"][lab], abs=1e-12)
        assert m.support == ref["support"][lab]
    if ref["kappa"] is None:
        assert res.cohen_kappa is None
    else:
        assert res.cohen_kappa == pytest.approx(ref["kappa"], abs=1e-12)
    for i, r in enumerate(LABELS):
        for j, p in enumerate(LABELS):
            assert res.confusion[r][p] == ref["confusion"][i, j]


def test_known_example() -> None:
    x = ["same", "same", "different", "different", "same", "different"]
    y = ["same", "different", "different", "different", "same", "same"]
    _check_against_sklearn(x, y)
    res = pair_agreement(x, y)
    # same: TP=2 FP=1 FN=1 -> F1 = 4/6; different: TP=2 FP=1 FN=1 -> 4/6
    assert res.macro_f1 == pytest.approx(2 / 3)
    assert res.different_precision == pytest.approx(2 / 3)
    assert res.to_dict()["per_class"]["different"]["recall"] == pytest.approx(2 / 3)


@settings(max_examples=150, deadline=None)
@given(label_pairs())
def test_matches_sklearn(pair) -> None:
    _check_against_sklearn(*pair)


def test_class_that_never_appears() -> None:
    x = y = ["same"] * 5
    res = pair_agreement(x, y)
    assert res.per_class["different"].f1 == 0.0
    assert res.macro_f1 == pytest.approx(0.5)  # sklearn: mean over both declared labels
    assert res.cohen_kappa is None  # undefined: no expected disagreement
    _check_against_sklearn(x, y)
    _check_against_sklearn(["different"] * 3, ["same"] * 3)


@settings(max_examples=60, deadline=None)
@given(labels_st)
def test_single_item(label: str) -> None:
    _check_against_sklearn([label], [label])
    other = "same" if label == "different" else "different"
    _check_against_sklearn([label], [other])


@settings(max_examples=80, deadline=None)
@given(label_pairs())
def test_symmetries(pair) -> None:
    x, y = pair
    res = pair_agreement(x, y)
    swapped = pair_agreement(y, x)
    # macro-F1 and κ are symmetric in the two raters; precision and recall swap
    assert swapped.macro_f1 == pytest.approx(res.macro_f1, abs=1e-12)
    assert (swapped.cohen_kappa is None) == (res.cohen_kappa is None)
    if res.cohen_kappa is not None:
        assert swapped.cohen_kappa == pytest.approx(res.cohen_kappa, abs=1e-12)
    for lab in LABELS:
        assert swapped.per_class[lab].precision == pytest.approx(res.per_class[lab].recall)
    # renaming the classes (same <-> different in both) swaps the class metrics only
    flip = {"same": "different", "different": "same"}
    renamed = pair_agreement([flip[v] for v in x], [flip[v] for v in y])
    assert renamed.macro_f1 == pytest.approx(res.macro_f1, abs=1e-12)
    assert renamed.per_class["same"].f1 == pytest.approx(res.per_class["different"].f1)
    # reordering pairs changes nothing
    perm = list(range(len(x)))[::-1]
    rev = pair_agreement([x[i] for i in perm], [y[i] for i in perm])
    assert rev.to_dict() == res.to_dict()


def test_bad_labels() -> None:
    with pytest.raises(ValueError, match=r"labels_x\[1\]"):
        pair_agreement(["same", "Same"], ["same", "same"])
    with pytest.raises(ValueError, match="empty"):
        pair_agreement([], [])
    with pytest.raises(ValueError, match="length mismatch"):
        pair_agreement(["same"], ["same", "different"])
    with pytest.raises(ValueError, match="single string"):
        pair_agreement("same", "same")


def test_final_reference() -> None:
    ids = ["p1", "p2", "p3", "p4"]
    a = ["same", "same", "different", "different"]
    b = ["same", "different", "different", "same"]
    ref = final_reference(ids, a, b, {"p2": "different", "p4": "same", "p3": "same"})
    assert ref.labels == ("same", "different", "same", "same")
    assert ref.sources == ("agreed", "adjudicated", "adjudicated", "adjudicated")
    assert (ref.n_agreed, ref.n_adjudicated, ref.n_disagreements, ref.n_overridden) == (1, 3, 2, 1)
    aligned = final_reference(ids, a, b, [None, "different", None, "same"])
    assert aligned.labels == ("same", "different", "different", "same")
    assert ref.to_dict()["labels"] == list(ref.labels)


def test_final_reference_unresolved_names_pairs() -> None:
    ids = ["p1", "p2", "p3"]
    a = ["same", "same", "different"]
    b = ["different", "same", "same"]
    with pytest.raises(ValueError, match=r"\['p1', 'p3'\]"):
        final_reference(ids, a, b, None)
    with pytest.raises(ValueError, match=r"\['p3'\]"):
        final_reference(ids, a, b, {"p1": "same"})
    assert unresolved_pairs(ids, a, b, {"p1": "same"}) == ["p3"]
    with pytest.raises(ValueError, match="not audit pairs"):
        final_reference(ids, a, b, {"p9": "same", "p1": "same", "p3": "same"})
    with pytest.raises(ValueError, match="unique"):
        final_reference(["p1", "p1"], ["same"] * 2, ["same"] * 2)
    with pytest.raises(ValueError, match="adjudicated label for pair 'p1'"):
        final_reference(ids, a, b, {"p1": "maybe", "p3": "same"})
