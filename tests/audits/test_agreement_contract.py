"""Contract tests for rcea.audits.agreement (mutation testing).

Exact error messages, the serialised forms (``to_dict``), the convenience properties and
the adjudication alignment, each pinned against hand counts or scikit-learn.
"""

from __future__ import annotations

import pytest
from sklearn.metrics import f1_score, precision_score, recall_score

from rcea.audits.agreement import (
    DIFFERENT,
    LABELS,
    SAME,
    AgreementResult,
    ClassMetrics,
    ReferenceLabels,
    check_labels,
    final_reference,
    pair_agreement,
    resolve_adjudication,
    unresolved_pairs,
)

X = ["same", "same", "different", "different", "same", "different", "different"]
Y = ["same", "different", "different", "different", "same", "same", "different"]


def test_constants() -> None:
    assert SAME == "same"
    assert DIFFERENT == "different"
    assert LABELS == ("same", "different")


def test_check_labels_messages_exact() -> None:
    with pytest.raises(ValueError) as e:
        check_labels("same", "lx")
    assert str(e.value) == "lx must be a sequence of labels, not a single string"
    with pytest.raises(ValueError) as e:
        check_labels([], "lx")
    assert str(e.value) == "lx is empty"
    with pytest.raises(ValueError) as e:
        check_labels(["same", "Same"], "lx")
    assert str(e.value) == "lx[1] must be 'same' or 'different', got 'Same'"
    assert check_labels([], "lx", allow_empty=True) == []
    assert check_labels(("same", "different"), "lx") == ["same", "different"]


def test_pair_agreement_argument_names_in_messages() -> None:
    with pytest.raises(ValueError) as e:
        pair_agreement(["x"], ["same"])
    assert str(e.value) == "labels_x[0] must be 'same' or 'different', got 'x'"
    with pytest.raises(ValueError) as e:
        pair_agreement(["same"], ["x"])
    assert str(e.value) == "labels_y[0] must be 'same' or 'different', got 'x'"
    with pytest.raises(ValueError) as e:
        pair_agreement([], ["same"])
    assert str(e.value) == "labels_x is empty"
    with pytest.raises(ValueError) as e:
        pair_agreement(["same"], [])
    assert str(e.value) == "labels_y is empty"
    with pytest.raises(ValueError) as e:
        pair_agreement(["same"], ["same", "same"])
    assert str(e.value) == "length mismatch: labels_x=1, labels_y=2"


def test_pair_agreement_exact_against_sklearn() -> None:
    res = pair_agreement(X, Y)
    # hand counts: rows = reference y, columns = x
    assert res.confusion == {
        "same": {"same": 2, "different": 1},
        "different": {"same": 1, "different": 3},
    }
    assert res.n_pairs == 7
    assert res.accuracy == 5 / 7
    lab = list(LABELS)
    ref_macro = f1_score(Y, X, labels=lab, average="macro", zero_division=0)
    assert res.macro_f1 == pytest.approx(ref_macro, abs=1e-15)
    assert res.macro_f1 == pytest.approx((2 / 3 + 3 / 4) / 2, abs=1e-15)
    assert res.different_precision == pytest.approx(
        precision_score(Y, X, pos_label="different", zero_division=0), abs=1e-15
    )
    assert res.different_precision == 3 / 4
    assert res.different_recall == pytest.approx(
        recall_score(Y, X, pos_label="different", zero_division=0), abs=1e-15
    )
    assert res.different_recall == 3 / 4
    assert res.per_class["same"] == ClassMetrics(2 / 3, 2 / 3, 2 / 3, 3)
    # kappa: po = 5/7, pe = (3*3 + 4*4)/49 = 25/49 -> (35/49 - 25/49)/(24/49) = 10/24
    assert res.cohen_kappa == pytest.approx(10 / 24, abs=1e-15)
    assert isinstance(res.macro_f1, float)
    assert isinstance(res.cohen_kappa, float)


def test_different_properties_read_the_different_class() -> None:
    # asymmetric so that precision != recall for "different" and differs from "same"
    x = ["different", "different", "different", "same"]
    y = ["different", "same", "same", "same"]
    res = pair_agreement(x, y)
    assert res.different_precision == pytest.approx(
        precision_score(y, x, pos_label="different"), abs=1e-15
    )
    assert res.different_precision == 1 / 3
    assert res.different_recall == 1.0
    assert res.per_class["same"].precision == 1.0
    assert res.per_class["same"].recall == 1 / 3


def test_kappa_undefined_only_when_one_label_throughout() -> None:
    assert pair_agreement(["same"] * 3, ["same"] * 3).cohen_kappa is None
    # complete disagreement with both labels: expected disagreement > 0, kappa defined
    res = pair_agreement(["same", "different"], ["different", "same"])
    assert res.cohen_kappa == -1.0
    # x constant, y varying: expected disagreement > 0, kappa = 0
    res = pair_agreement(["same", "same"], ["same", "different"])
    assert res.cohen_kappa == 0.0


def test_agreement_to_dict_exact() -> None:
    res = pair_agreement(X, Y)
    d = res.to_dict()
    assert list(d) == ["n_pairs", "macro_f1", "accuracy", "cohen_kappa", "per_class", "confusion"]
    assert d["n_pairs"] == 7
    assert d["macro_f1"] == res.macro_f1
    assert d["accuracy"] == res.accuracy
    assert d["cohen_kappa"] == res.cohen_kappa
    assert d["per_class"] == {
        "same": {"precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "support": 3},
        "different": {"precision": 3 / 4, "recall": 3 / 4, "f1": 3 / 4, "support": 4},
    }
    assert d["confusion"] == {
        "same": {"same": 2, "different": 1},
        "different": {"same": 1, "different": 3},
    }
    # a copy: mutating the dict does not touch the result
    d["confusion"]["same"]["same"] = 99
    assert res.confusion["same"]["same"] == 2


def test_class_metrics_to_dict_keys() -> None:
    assert ClassMetrics(0.1, 0.2, 0.3, 4).to_dict() == {
        "precision": 0.1,
        "recall": 0.2,
        "f1": 0.3,
        "support": 4,
    }
    r = AgreementResult(1, 0.5, 1.0, None, {}, {})
    assert r.to_dict()["cohen_kappa"] is None


def test_resolve_adjudication_forms_and_messages() -> None:
    ids = ["p1", "p2", "p3"]
    assert resolve_adjudication(ids, None) == [None, None, None]
    assert resolve_adjudication(ids, {"p2": "same"}) == [None, "same", None]
    assert resolve_adjudication([1, 2], {2: "different"}) == [None, "different"]
    assert resolve_adjudication(ids, [None, "different", None]) == [None, "different", None]
    with pytest.raises(ValueError) as e:
        resolve_adjudication(["p1", "p2", "p1", "p3", "p2"], None)
    assert str(e.value) == "pair_ids must be unique; duplicated: ['p1', 'p2']"
    with pytest.raises(ValueError) as e:
        resolve_adjudication(ids, {"zz": "same", "p1": "same", "aa": "same"})
    assert str(e.value) == "adjudicated names pair ids that are not audit pairs: ['aa', 'zz']"
    with pytest.raises(ValueError) as e:
        resolve_adjudication(ids, "same")
    assert str(e.value) == "adjudicated must be a mapping or a sequence, not a string"
    with pytest.raises(ValueError) as e:
        resolve_adjudication(ids, ["same", None])
    assert str(e.value) == "length mismatch: pair_ids=3, adjudicated=2"
    with pytest.raises(ValueError) as e:
        resolve_adjudication(ids, {"p3": "maybe"})
    assert str(e.value) == "adjudicated label for pair 'p3' must be 'same' or 'different'"
    with pytest.raises(ValueError) as e:
        resolve_adjudication(ids, [None, "maybe", None])
    assert str(e.value) == "adjudicated label for pair 'p2' must be 'same' or 'different'"


def test_unresolved_pairs_exact() -> None:
    ids = [1, 2, 3, 4]
    a = ["same", "same", "different", "different"]
    b = ["same", "different", "same", "different"]
    assert unresolved_pairs(ids, a, b) == ["2", "3"]
    assert unresolved_pairs(ids, a, b, {3: "same"}) == ["2"]
    assert unresolved_pairs(ids, a, b, [None, "same", "same", None]) == []
    assert unresolved_pairs([], [], []) == []
    with pytest.raises(ValueError) as e:
        unresolved_pairs(ids, ["x"] + a[1:], b)
    assert str(e.value) == "labels_a[0] must be 'same' or 'different', got 'x'"
    with pytest.raises(ValueError) as e:
        unresolved_pairs(ids, a, b[:3] + ["x"])
    assert str(e.value) == "labels_b[3] must be 'same' or 'different', got 'x'"
    with pytest.raises(ValueError) as e:
        unresolved_pairs(ids, a, b[:3])
    assert str(e.value) == "length mismatch: pair_ids=4, labels_a=4, labels_b=3"


def test_final_reference_exact() -> None:
    ids = [1, 2, 3, 4, 5]
    a = ["same", "same", "different", "different", "same"]
    b = ["same", "different", "same", "different", "same"]
    adj = {2: "different", 3: "same", 4: "same"}  # 4 overrides an agreed label
    ref = final_reference(ids, a, b, adj)
    assert ref == ReferenceLabels(
        pair_ids=("1", "2", "3", "4", "5"),
        labels=("same", "different", "same", "same", "same"),
        sources=("agreed", "adjudicated", "adjudicated", "adjudicated", "agreed"),
        n_agreed=2,
        n_adjudicated=3,
        n_disagreements=2,
        n_overridden=1,
    )
    assert ref.to_dict() == {
        "pair_ids": ["1", "2", "3", "4", "5"],
        "labels": ["same", "different", "same", "same", "same"],
        "sources": ["agreed", "adjudicated", "adjudicated", "adjudicated", "agreed"],
        "n_agreed": 2,
        "n_adjudicated": 3,
        "n_disagreements": 2,
        "n_overridden": 1,
    }
    assert list(ref.to_dict()) == [
        "pair_ids",
        "labels",
        "sources",
        "n_agreed",
        "n_adjudicated",
        "n_disagreements",
        "n_overridden",
    ]
    # an adjudication equal to the agreed label is not an override
    same = final_reference(["p"], ["same"], ["same"], {"p": "same"})
    assert same.n_overridden == 0
    assert same.sources == ("adjudicated",)


def test_final_reference_messages_exact() -> None:
    with pytest.raises(ValueError) as e:
        final_reference([1, 2, 3], ["same", "same", "different"], ["different", "same", "same"])
    assert str(e.value) == (
        "2 pair(s) where annotators A and B disagree have no adjudicated label: ['1', '3']"
    )
    with pytest.raises(ValueError) as e:
        final_reference([], [], [])
    assert str(e.value) == "labels_a is empty"
    with pytest.raises(ValueError) as e:
        final_reference([1], ["same"], [])
    assert str(e.value) == "labels_b is empty"
    with pytest.raises(ValueError) as e:
        final_reference([1], ["same"], ["nope"])
    assert str(e.value) == "labels_b[0] must be 'same' or 'different', got 'nope'"
    with pytest.raises(ValueError) as e:
        final_reference([1, 2], ["same"], ["same"])
    assert str(e.value) == "length mismatch: pair_ids=2, labels_a=1, labels_b=1"


def test_final_reference_counts_every_override() -> None:
    # two agreed labels changed by adjudication, one confirmed, one disagreement resolved
    ids = ["p1", "p2", "p3", "p4"]
    a = ["same", "different", "same", "same"]
    b = ["same", "different", "same", "different"]
    adj = {"p1": "different", "p2": "same", "p3": "same", "p4": "same"}
    ref = final_reference(ids, a, b, adj)
    assert ref.n_overridden == 2
    assert ref.n_disagreements == 1
    assert ref.n_adjudicated == 4
    assert ref.labels == ("different", "same", "same", "same")
