"""Tests for rcea.audits.gates (docs/estimators.md item 11): passing inputs, each requirement
failing alone, uncertain-pair exclusion, stages, and values checked against scikit-learn."""

from __future__ import annotations

import json

import pytest
from sklearn.metrics import f1_score, precision_score, recall_score

from rcea.audits.gates import GATE_TOLERANCE, evaluate_gate
from rcea.audits.thresholds import GateThresholds
from tests.support.gates import DEFAULT, Audit, build, gate

LAB = ["same", "different"]


def sk_values(audit: Audit) -> dict[str, float]:
    keep = [x is not None for x in audit.automatic]
    ref = [v for v, k in zip(audit.reference, keep, strict=True) if k]
    auto = [v for v, k in zip(audit.automatic, keep, strict=True) if k]
    # F1_HH over every pair both annotators labelled (docs/estimators.md item 10), never the subset
    hh = f1_score(audit.b, audit.a, labels=LAB, average="macro", zero_division=0)
    au = f1_score(ref, auto, labels=LAB, average="macro", zero_division=0)
    return {
        "human_human_macro_f1": hh,
        "automatic_macro_f1": au,
        "gap": hh - au,
        "different_precision": precision_score(
            ref, auto, pos_label="different", labels=LAB, zero_division=0
        ),
        "different_recall": recall_score(
            ref, auto, pos_label="different", labels=LAB, zero_division=0
        ),
    }


def check_values(report, audit: Audit) -> None:
    for key, value in sk_values(audit).items():
        assert getattr(report, key) == pytest.approx(value, abs=1e-12), key


def test_passing_gate() -> None:
    audit = build(hh_disagree=4, auto_fp=1, auto_fn=1)
    report = gate(audit, rubric_hash="r" * 64, partition_hash="p" * 64, audited_coverage=0.99)
    check_values(report, audit)
    assert report.passed is True and report.failed_requirements == ()
    assert [r.name for r in report.requirements] == [
        "human_human_macro_f1",
        "automatic_macro_f1",
        "gap",
        "different_precision",
        "different_recall",
        "automatic_coverage",
    ]
    assert (report.n_pairs, report.n_adjudicated, report.n_unresolved) == (100, 4, 0)
    assert report.n_excluded_uncertain == 0 and report.n_evaluated == 100
    d = report.to_dict()
    json.dumps(d)
    for key in (
        "human_human_macro_f1",
        "automatic_macro_f1",
        "gap",
        "different_precision",
        "different_recall",
        "automatic_coverage",
        "passed",
    ):
        assert key in d
    assert d["rubric_hash"] == "r" * 64 and d["partition_hash"] == "p" * 64
    assert d["thresholds"] == DEFAULT.to_dict()
    assert d["audited_coverage"] == 0.99
    gap_req = d["requirements"][2]
    assert gap_req == {
        "name": "gap",
        "value": report.gap,
        "threshold": 0.05,
        "comparator": "<=",
        "passed": True,
    }


# Each case: inputs under which exactly one requirement fails (checked, not assumed).
FAIL_ALONE = {
    # A vs B disagree on 30 %; the automatic labels match the reference exactly
    "human_human_macro_f1": (dict(hh_disagree=30), 0.97, DEFAULT),
    # HH ≈ 0.86 and automatic 0.84 (8 FP + 8 FN): gap 0.02, different P = R = 0.84
    "automatic_macro_f1": (dict(hh_disagree=14, auto_fp=8, auto_fn=8), 0.97, DEFAULT),
    # HH = 1, automatic 0.90
    "gap": (dict(auto_fp=5, auto_fn=5), 0.97, DEFAULT),
    # 13 reference-same pairs called different: precision 50/63 < 0.80, recall 1
    "different_precision": (dict(hh_disagree=10, auto_fp=13), 0.97, DEFAULT),
    # 13 reference-different pairs called same: recall 37/50 < 0.80, precision 1
    "different_recall": (dict(hh_disagree=10, auto_fn=13), 0.97, DEFAULT),
    "automatic_coverage": (dict(hh_disagree=2, auto_fp=1), 0.94, DEFAULT),
}


@pytest.mark.parametrize("requirement", list(FAIL_ALONE))
def test_each_requirement_can_fail_alone(requirement: str) -> None:
    kwargs, coverage, thresholds = FAIL_ALONE[requirement]
    audit = build(**kwargs)
    report = gate(audit, coverage=coverage, thresholds=thresholds)
    check_values(report, audit)
    assert report.passed is False
    assert report.failed_requirements == (requirement,)
    failing = next(r for r in report.requirements if r.name == requirement)
    if failing.comparator == ">=":
        assert failing.value < failing.threshold
    else:
        assert failing.value > failing.threshold


def test_threshold_change_flips_the_same_inputs() -> None:
    audit = build(hh_disagree=4, auto_fp=1, auto_fn=1)
    strict = GateThresholds(human_human_macro_f1_min=0.99)
    assert gate(audit).passed is True
    report = gate(audit, thresholds=strict)
    assert report.failed_requirements == ("human_human_macro_f1",)
    assert report.thresholds == strict


def test_gap_equal_to_threshold_passes_despite_float_rounding() -> None:
    # 13 same / 36 different, 2 different called same: automatic macro-F1 = 19/20 exactly
    audit = build(n_same=13, n_diff=36, auto_fn=2)
    report = gate(audit)
    assert report.human_human_macro_f1 == 1.0
    assert report.gap > 0.05  # 0.050000000000000044 in float64
    assert report.gap - 0.05 < GATE_TOLERANCE
    assert report.passed is True


def test_uncertain_pairs_excluded_counted_and_listed() -> None:
    audit = build(hh_disagree=6, auto_fp=2, auto_fn=3, n_uncertain=7)
    audit.automatic[3] = "uncertain"  # the string form is accepted too
    report = gate(audit)
    n_unc = sum(x is None or x == "uncertain" for x in audit.automatic)
    assert report.n_excluded_uncertain == n_unc == 8
    assert report.n_evaluated == 100 - n_unc
    assert report.excluded_pair_ids == tuple(
        pid for pid, x in zip(audit.ids, audit.automatic, strict=True) if x in (None, "uncertain")
    )
    audit.automatic[3] = None
    check_values(report, audit)  # automatic F1s on the non-uncertain pairs, F1_HH on all
    sub_hh = f1_score(
        [x for x, u in zip(audit.b, audit.automatic, strict=True) if u is not None],
        [x for x, u in zip(audit.a, audit.automatic, strict=True) if u is not None],
        labels=LAB,
        average="macro",
        zero_division=0,
    )
    assert report.human_human_macro_f1_evaluated == pytest.approx(sub_hh)
    assert report.to_dict()["n_excluded_uncertain"] == 8


def test_all_uncertain_cannot_pass() -> None:
    audit = build(n_same=3, n_diff=3, n_uncertain=6)
    report = gate(audit, coverage=1.0)
    assert report.automatic_macro_f1 is None and report.human_human_macro_f1 == 1.0
    assert report.passed is False
    assert set(report.failed_requirements) == {
        "automatic_macro_f1",
        "gap",
        "different_precision",
        "different_recall",
    }


def test_final_with_unresolved_disagreement_raises_naming_pairs() -> None:
    audit = build(hh_disagree=4)
    del audit.adjudicated["p000"]
    del audit.adjudicated["p050"]
    with pytest.raises(ValueError, match=r"\['p000', 'p050'\]"):
        gate(audit)


def test_adjudication_overriding_agreed_label_changes_reference_not_hh() -> None:
    audit = build(auto_fp=1)
    # arbitration sided with the automatic label on an agreed pair
    audit.adjudicated["p049"] = "different"
    audit.reference[49] = "different"
    report = gate(audit)
    check_values(report, audit)
    assert report.human_human_macro_f1 == 1.0 and report.automatic_macro_f1 == 1.0
    assert report.n_adjudicated == 1


def test_preliminary_stage_reports_without_gating() -> None:
    audit = build(hh_disagree=6, auto_fp=2, auto_fn=1, n_uncertain=3)
    audit.adjudicated.clear()  # adjudication has not happened yet
    report = gate(audit, stage="preliminary")
    assert report.passed is None and report.requirements == ()
    assert report.n_unresolved == 6 and report.n_adjudicated == 0
    keep = [x is not None for x in audit.automatic]
    a = [v for v, k in zip(audit.a, keep, strict=True) if k]
    b = [v for v, k in zip(audit.b, keep, strict=True) if k]
    auto = [v for v, k in zip(audit.automatic, keep, strict=True) if k]
    assert report.automatic_vs_a_macro_f1 == pytest.approx(
        f1_score(a, auto, labels=LAB, average="macro", zero_division=0)
    )
    assert report.automatic_vs_b_macro_f1 == pytest.approx(
        f1_score(b, auto, labels=LAB, average="macro", zero_division=0)
    )
    assert report.human_human_macro_f1 == pytest.approx(
        f1_score(audit.b, audit.a, labels=LAB, average="macro", zero_division=0)
    )
    assert report.human_human_macro_f1_evaluated == pytest.approx(
        f1_score(b, a, labels=LAB, average="macro", zero_division=0)
    )
    assert report.automatic_macro_f1 is None and report.gap is None
    json.dumps(report.to_dict())


def test_bad_inputs() -> None:
    audit = build(n_same=2, n_diff=2)
    with pytest.raises(ValueError, match="stage"):
        gate(audit, stage="draft")
    with pytest.raises(ValueError, match="automatic_coverage"):
        gate(audit, coverage=1.2)
    with pytest.raises(ValueError, match="audited_coverage"):
        gate(audit, audited_coverage=-0.1)
    with pytest.raises(ValueError, match="GateThresholds"):
        gate(audit, thresholds={"gap_max": 0.05})
    audit.automatic[0] = "maybe"
    with pytest.raises(ValueError, match=r"automatic\[0\]"):
        gate(audit)
    with pytest.raises(ValueError, match="length mismatch"):
        evaluate_gate(["p1"], ["same"] * 2, ["same"] * 2, None, ["same"] * 2, 1.0, DEFAULT)


def test_human_human_f1_is_over_every_pair_both_labelled() -> None:
    # Constructed case: 6 pairs; A and B disagree on the two pairs whose
    # automatic label is uncertain. Over all pairs F1_HH = 2/3 (fails 0.85); on the
    # automatically labelled subset it would be 1.0 (and pass).
    ids = [f"p{i}" for i in range(6)]
    a = ["same", "same", "different", "different", "same", "different"]
    b = ["same", "same", "different", "different", "different", "same"]
    auto = ["same", "same", "different", "different", None, None]
    adj = {"p4": "same", "p5": "different"}
    report = evaluate_gate(ids, a, b, adj, auto, 0.97, DEFAULT)
    expected = f1_score(b, a, labels=LAB, average="macro", zero_division=0)
    assert expected == pytest.approx(2 / 3)
    assert report.human_human_macro_f1 == pytest.approx(2 / 3)
    assert report.human_human_macro_f1_evaluated == 1.0
    assert "human_human_macro_f1" in report.failed_requirements
    assert report.gap == pytest.approx(2 / 3 - 1.0)
    # the automatic F1s exclude the two pairs without an automatic label, counted
    assert report.automatic_macro_f1 == 1.0 and report.n_excluded_uncertain == 2


def test_adjudication_scope_is_applied_and_recorded() -> None:
    # p1: A = B = same, automatic different, adjudicated to different
    ids = ["p0", "p1", "p2", "p3"]
    a = ["same", "same", "different", "different"]
    b = ["same", "same", "different", "same"]
    auto = ["same", "different", "different", "different"]
    adj = {"p1": "different", "p3": "different"}
    wide = evaluate_gate(ids, a, b, adj, auto, 0.97, DEFAULT)
    narrow = evaluate_gate(ids, a, b, adj, auto, 0.97, DEFAULT, adjudication_scope="disagreements")
    assert wide.to_dict()["adjudication_scope"] == "disagreements_and_automatic"
    assert narrow.to_dict()["adjudication_scope"] == "disagreements"
    # wide: reference moves to the automatic label on p1 → automatic F1 = 1
    assert wide.automatic_macro_f1 == 1.0 and wide.n_adjudications_out_of_scope == 0
    # narrow: p1's adjudication is out of scope; reference stays "same" there
    ref = ["same", "same", "different", "different"]
    expected = f1_score(ref, auto, labels=LAB, average="macro", zero_division=0)
    assert expected < 1.0 and narrow.automatic_macro_f1 == pytest.approx(expected)
    assert narrow.n_adjudications_out_of_scope == 1
    with pytest.raises(ValueError, match="adjudication_scope"):
        evaluate_gate(ids, a, b, adj, auto, 0.97, DEFAULT, adjudication_scope="all")
