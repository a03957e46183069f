"""rcea.audits.gates' contract pinned exactly, written from the mutants `make mutation` left
alive (docs/mutation.md): the inclusive tolerance band of every requirement, each bad input
refused with its exact message naming the argument, the stage and the reference agreement
carried by the report, and ``to_dict`` built field by field from the dataclass."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from rcea.audits.agreement import AgreementResult, pair_agreement
from rcea.audits.gates import (
    GATE_TOLERANCE,
    GateReport,
    RequirementResult,
    evaluate_gate,
    requirement_result,
)
from rcea.audits.thresholds import GateThresholds
from tests.support.gates import DEFAULT, build, gate


@pytest.mark.parametrize("threshold", [0.0, 0.05, 0.8, 0.85, 1.0])
def test_the_tolerance_band_is_inclusive_on_both_comparators(threshold: float) -> None:
    tol = GATE_TOLERANCE
    cases = [
        (">=", threshold, True),  # exactly at the threshold
        (">=", threshold - tol, True),  # the band's edge is in
        (">=", threshold - 3 * tol, False),
        (">=", threshold + tol, True),
        ("<=", threshold, True),
        ("<=", threshold + tol, True),
        ("<=", threshold + 3 * tol, False),
        ("<=", threshold - tol, True),
    ]
    for comparator, value, ok in cases:
        got = requirement_result("r", value, threshold, comparator)
        assert got == RequirementResult("r", value, threshold, comparator, ok), (comparator, value)
        assert got.passed is ok
    missing = requirement_result("r", None, threshold, ">=")
    assert missing.passed is False and missing.value is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"coverage": 1.2}, "automatic_coverage must be in [0, 1], got 1.2"),
        ({"audited_coverage": -0.1}, "audited_coverage must be in [0, 1], got -0.1"),
        ({"thresholds": {"gap_max": 0.05}}, "thresholds must be a GateThresholds instance"),
    ],
)
def test_bad_arguments_are_refused_with_their_exact_message(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        gate(build(n_same=2, n_diff=2), **kwargs)


def _call(which: str):  # type: ignore[no-untyped-def]
    a = build(n_same=2, n_diff=2)
    args = {"ids": a.ids, "a": a.a, "b": a.b, "auto": a.automatic}
    if which.endswith("-short"):
        key = which.removesuffix("-short")
        args[key] = args[key][:3]
    elif which == "a-bad":
        args["a"] = ["x"] * 4
    elif which == "b-bad":
        args["b"] = ["x"] * 4
    elif which == "auto-str":
        args["auto"] = "same"
    return evaluate_gate(args["ids"], args["a"], args["b"], None, args["auto"], 1.0, DEFAULT)


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("a-bad", "annotator_a[0] must be 'same' or 'different', got 'x'"),
        ("b-bad", "annotator_b[0] must be 'same' or 'different', got 'x'"),
        ("a-short", "length mismatch: pair_ids=4, annotator_a=3, annotator_b=4, automatic=4"),
        ("b-short", "length mismatch: pair_ids=4, annotator_a=4, annotator_b=3, automatic=4"),
        ("auto-short", "length mismatch: pair_ids=4, annotator_a=4, annotator_b=4, automatic=3"),
        ("auto-str", "automatic must be a sequence of labels, not a single string"),
    ],
)
def test_bad_labels_are_refused_naming_the_argument(which: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _call(which)


def _plain(value: object) -> object:
    """A report field as JSON-ready data, from its type alone (independent of to_dict)."""
    if isinstance(value, AgreementResult | GateThresholds | RequirementResult):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("stage", ["preliminary", "final"])
def test_report_stage_reference_and_dict(stage: str) -> None:
    audit = build(hh_disagree=6, auto_fp=2, auto_fn=1, n_uncertain=3)
    if stage == "preliminary":
        audit.adjudicated.clear()
    report = gate(audit, stage=stage, audited_coverage=0.9, rubric_hash="r", partition_hash="p")
    assert report.stage == stage
    keep = [x is not None for x in audit.automatic]
    auto = [v for v, k in zip(audit.automatic, keep, strict=True) if k]
    ref = [v for v, k in zip(audit.reference, keep, strict=True) if k]
    if stage == "final":
        expected_ref = pair_agreement(auto, ref)
        assert report.automatic_vs_reference == expected_ref
        assert report.automatic_vs_reference.macro_f1 == report.automatic_macro_f1
    else:
        assert report.automatic_vs_reference is None
    for name in ("human_human", "automatic_vs_a", "automatic_vs_b"):
        assert isinstance(getattr(report, name), AgreementResult), name
    d = report.to_dict()
    fields = [f.name for f in dataclasses.fields(GateReport)]
    assert sorted(d) == sorted(fields)  # every field, nothing else (order is not a contract)
    assert d == {name: _plain(getattr(report, name)) for name in fields}
    assert json.loads(json.dumps(d)) == d
    assert d["stage"] == stage and d["excluded_pair_ids"] == ["p097", "p098", "p099"]


@pytest.mark.parametrize("field", list(GateThresholds().to_dict()))
def test_thresholds_accept_the_closed_unit_interval_only(field: str) -> None:
    for ok in (0, 0.0, 0.5, 1, 1.0):
        assert GateThresholds(**{field: ok}).to_dict()[field] == float(ok)
    for bad in (-1e-9, 1.0000001, 1.5, 2.0, "0.9", None):
        message = f"gate threshold {field} must be a number in [0, 1], got {bad!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            GateThresholds(**{field: bad})
