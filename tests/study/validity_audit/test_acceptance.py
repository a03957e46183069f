"""Predeclared acceptance of the validity judge (rcea/audits/acceptance.py): "calibrated" only
when every threshold holds; otherwise "calibration-failed", validity-dependent numbers are
refused at publish, and the report commands exit 5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.acceptance import (
    CALIBRATION_FIELDS,
    JudgeAcceptance,
    accepted_acceptance,
    calibration_acceptance,
)
from rcea.audits.rubric import parse_rubric
from rcea.study import events
from rcea.study.report.build import build_report
from rcea.study.report.publication import refusal_reasons
from rcea.study.report.schema import report_json
from rcea.study.store import append_event, list_events, require_study, session_scope
from rcea.study.store.models import ValidityCheck
from rcea.study.validity_audit.reports import accepted_report, calibration_report
from rcea.study.validity_audit.status import validity_status
from tests.support.helpers import RUBRIC, audit_study
from tests.support.report_study import accepted_passing
from tests.support.validity import stored_check

runner = CliRunner()
GOOD = {
    "accuracy": 0.957,
    "macro_f1": 0.95,
    "accepted_valid_precision": 0.949,
    "valid_recall": 0.966,
    "coverage": 1.0,
}
# the judge: accuracy 0.800, valid recall 0.714 (5 of 7 valid accepted)
WEAK_JUDGE = ["valid"] * 5 + ["invalid"] * 5
WEAK_HUMAN = ["valid"] * 7 + ["invalid"] * 3


def test_defaults_and_hash() -> None:
    t = JudgeAcceptance()
    assert (t.accuracy_min, t.macro_f1_min, t.accepted_valid_precision_min) == (0.9, 0.85, 0.9)
    assert (t.valid_recall_min, t.coverage_min, t.accepted_precision_lower_min) == (0.9, 0.95, 0.8)
    old = parse_rubric(RUBRIC)
    assert old.acceptance == t and "acceptance" not in old.to_dict()
    strict = parse_rubric(RUBRIC + "\n[acceptance]\naccuracy_min = 0.95\n")
    assert strict.acceptance.accuracy_min == 0.95 and strict.content_hash() != old.content_hash()
    with pytest.raises(ValueError, match=r"\[acceptance\] coverage_min must be in \[0, 1\]"):
        parse_rubric(RUBRIC + "\n[acceptance]\ncoverage_min = 1.5\n")


def _both(values: dict) -> dict:  # type: ignore[type-arg]
    """A report whose balanced and population figures are ``values``."""
    return {**values, "population": dict(values)}


def test_the_papers_judge_passes() -> None:
    assert calibration_acceptance(_both(GOOD), JudgeAcceptance())["passed"] is True
    assert calibration_acceptance(GOOD, JudgeAcceptance(basis="balanced"))["passed"] is True


@pytest.mark.parametrize("basis", ["population", "balanced"])
@pytest.mark.parametrize("field", CALIBRATION_FIELDS)
def test_below_each_calibration_threshold_fails(field: str, basis: str) -> None:
    """Only the figures of the declared basis count: the other basis may miss freely."""
    t = JudgeAcceptance(basis=basis)
    threshold = getattr(t, f"{field}_min")

    def rep(values: dict) -> dict:  # type: ignore[type-arg]
        other = {**GOOD, field: 0.0}
        if basis == "population":
            return {**other, "population": values}
        return {**values, "population": other}

    at = calibration_acceptance(rep({**GOOD, field: threshold}), t)
    assert at["passed"] is True  # the threshold itself holds (>=)
    res = calibration_acceptance(rep({**GOOD, field: threshold - 0.001}), t)
    assert res["passed"] is False and res["basis"] == basis
    assert [r["name"] for r in res["requirements"] if not r["passed"]] == [field]
    missing = {k: v for k, v in GOOD.items() if k != field}
    assert calibration_acceptance(rep(missing), t)["passed"] is False


def test_accepted_set_lower_bound_per_annotator() -> None:
    t = JudgeAcceptance()

    def rep(lo_a: float, lo_b: float) -> dict:  # type: ignore[type-arg]
        return {
            "confidence": 0.95,
            "annotator_a": {"ci_low": lo_a},
            "annotator_b": {"ci_low": lo_b},
        }

    assert accepted_acceptance(rep(0.85, 0.80), t)["passed"] is True
    bad = accepted_acceptance(rep(0.85, 0.799), t)
    assert bad["passed"] is False
    assert [r["name"] for r in bad["requirements"] if not r["passed"]] == [
        "accepted_precision_lower_b"
    ]
    with pytest.raises(ValueError, match="95%"):
        accepted_acceptance({**rep(0.9, 0.9), "confidence": 0.9}, t)


def _judged_study(engine, tmp_path: Path, report: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    audit_study(engine, tmp_path)
    with session_scope(engine) as s:
        sid = require_study(s, name="s").id
        run = {"judge_hash": "j" * 64, "judge_name": "llm", "n_judged": 30}
        append_event(s, actor="r", kind=events.JUDGE_RUN, study_id=sid, payload=run)
        done = {"judge_hash": "j" * 64, "calibration": "c1", "report": report}
        append_event(s, actor="r", kind=events.CALIBRATION_COMPLETED, study_id=sid, payload=done)


@pytest.mark.parametrize("field", CALIBRATION_FIELDS)
def test_a_calibration_below_a_threshold_refuses_validity_numbers(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, field: str
) -> None:
    _judged_study(engine, tmp_path, {**GOOD, field: 0.5})
    with session_scope(engine) as s:
        st = validity_status(s, study_id=require_study(s, name="s").id)
        assert st["status"] == "calibration-failed"
        assert st["failed_requirements"] == [f"calibration c1: {field} 0.5000 < " + str(
            getattr(JudgeAcceptance(), f"{field}_min"))]  # fmt: skip
        rep = report_json(build_report(s, study="s", n_boot=200))
    assert rep["audits"]["validity"]["status"] == "calibration-failed"
    reasons = refusal_reasons(rep)
    assert any("FAILED its predeclared acceptance thresholds" in r and field in r for r in reasons)


def test_a_calibration_meeting_every_threshold_is_calibrated(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _judged_study(engine, tmp_path, GOOD)
    with session_scope(engine) as s:
        sid = require_study(s, name="s").id
        append_event(s, actor="r", kind=events.ACCEPTED_COMPLETED, study_id=sid,
                     payload=accepted_passing("j" * 64))  # fmt: skip
        st = validity_status(s, study_id=sid)
        assert st["status"] == "calibrated" and st["failed_requirements"] == []
        rep = report_json(build_report(s, study="s", n_boot=200))
    assert not any("validity" in r for r in refusal_reasons(rep))


def test_held_out_calibration_alone_is_incomplete(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A passing held-out calibration without a completed accepted-set check is
    "calibration-incomplete": validity-dependent numbers are refused like a failed gate."""
    _judged_study(engine, tmp_path, GOOD)
    with session_scope(engine) as s:
        st = validity_status(s, study_id=require_study(s, name="s").id)
        assert st["status"] == "calibration-incomplete" and st["failed_requirements"] == []
        assert "no completed accepted-set check" in st["missing"][0]
        rep = report_json(build_report(s, study="s", n_boot=200))
    assert rep["audits"]["validity"]["status"] == "calibration-incomplete"
    reasons = refusal_reasons(rep)
    assert any("calibration is INCOMPLETE" in r for r in reasons), reasons
    val = [q for q in rep["quantities"] if "validity" in q["depends_on"]]
    assert val and not any(q["publishable"] for q in val)


def _cli(engine, monkeypatch, *args: str):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    return runner.invoke(app, list(args))


def test_calibrate_report_exit_codes_and_status(engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    human = {"annotator-1": WEAK_HUMAN}
    stored_check(engine, kind="calibration", judge=WEAK_JUDGE, labels=human, name="weak")
    out = _cli(engine, monkeypatch, "judge", "calibrate", "report", "--calibration", "weak",
               "--json")  # fmt: skip
    assert out.exit_code == 5, out.output
    data = json.loads(out.stdout)
    assert data["report"]["accuracy"] == pytest.approx(0.8)
    assert data["report"]["valid_recall"] == pytest.approx(5 / 7)
    assert (data["outcome"], data["exit_code"]) == ("failed", 5)
    failed = {r["name"] for r in data["acceptance"]["requirements"] if not r["passed"]}
    assert failed == {"accuracy", "macro_f1", "valid_recall"}
    text = _cli(engine, monkeypatch, "judge", "calibrate", "report", "--calibration", "weak")
    assert text.exit_code == 5 and "acceptance: FAILED" in text.output
    # thresholds frozen into the plan: a lenient rubric accepts the same labels
    lenient = dict.fromkeys(f"{k}_min" for k in CALIBRATION_FIELDS)
    lenient = {**JudgeAcceptance(basis="balanced").to_dict(), **{k: 0.5 for k in lenient}}
    stored_check(engine, kind="calibration", judge=WEAK_JUDGE, labels=human, name="lenient",
                 acceptance=lenient)  # fmt: skip
    ok = _cli(engine, monkeypatch, "judge", "calibrate", "report", "--calibration", "lenient",
              "--json")  # fmt: skip
    assert ok.exit_code == 0 and json.loads(ok.stdout)["outcome"] == "passed"
    # pending: nothing decided, exit 0
    stored_check(engine, kind="calibration", judge=["valid", "valid"],
                 labels={}, name="pending")  # fmt: skip
    pend = _cli(engine, monkeypatch, "judge", "calibrate", "report", "--calibration", "pending",
                "--json")  # fmt: skip
    assert pend.exit_code == 0 and json.loads(pend.stdout)["outcome"] == "undecided"
    with session_scope(engine) as s:
        check = s.exec(select(ValidityCheck).where(ValidityCheck.name == "weak")).one()
        assert calibration_report(s, check)["outcome"] == "failed"
        ev = [e.payload for e in list_events(s, kind=events.CALIBRATION_COMPLETED)]
    assert [e["acceptance"]["passed"] for e in ev] == [False, True]


def test_population_basis_passes_a_judge_the_balanced_sample_understates(  # type: ignore[no-untyped-def]
    engine, monkeypatch
) -> None:
    """The weak-looking balanced sample (accuracy 0.8, recall 5/7) of a judge that accepts
    95 % of a population: weighted by the population's verdict shares its accuracy is
    0.95·1 + 0.05·(3/5) = 0.98 and its valid recall 0.95/(0.95 + 0.05·2/5) ≈ 0.979; the
    default (population) thresholds pass it, and the report shows both bases."""
    stored_check(engine, kind="calibration", judge=WEAK_JUDGE, labels={"annotator-1": WEAK_HUMAN},
                 name="pop", acceptance={**JudgeAcceptance().to_dict(), "coverage_min": 0.0,
                                         "macro_f1_min": 0.5},
                 population={"accepted": 9500, "not_accepted": 500})  # fmt: skip
    out = _cli(engine, monkeypatch, "judge", "calibrate", "report", "--calibration", "pop",
               "--json")  # fmt: skip
    data = json.loads(out.stdout)
    assert out.exit_code == 0, out.output
    pop = data["report"]["population"]
    assert data["report"]["accuracy"] == pytest.approx(0.8)
    assert pop["accuracy"] == pytest.approx(0.98)
    assert pop["valid_recall"] == pytest.approx(0.95 / 0.97)
    assert pop["intervals"]["accuracy"][0] < 0.98 < pop["intervals"]["accuracy"][1]
    assert (pop["n_boot"], pop["seed"], pop["population"]) == (
        10_000, 1, {"accepted": 9500, "not_accepted": 500})  # fmt: skip
    assert data["acceptance"]["basis"] == "population" and data["outcome"] == "passed"
    text = _cli(engine, monkeypatch, "judge", "calibrate", "report", "--calibration", "pop")
    assert "population" in text.output and "0.98" in text.output
    # the view's audit page: both bases beside the threshold of the declared one
    from rcea.app.view.data import audit as audit_data
    from rcea.study.settings import get_settings

    get_settings.cache_clear()
    frame = audit_data.calibration_figures("cal")
    row = frame[frame["figure"] == "accuracy"].iloc[0]
    assert (row["calibration"], row["outcome"], row["basis"]) == ("pop", "passed", "population")
    assert row["balanced"] == pytest.approx(0.8) and row["population"] == pytest.approx(0.98)
    assert row["low"] < 0.98 < row["high"] and row["threshold"] == 0.9 and row["passed"]


def test_accepted_report_exit_codes(engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # 20 accepted items; B says invalid for 6: precision 0.7, lower bound well under 0.80
    stored_check(engine, kind="accepted", judge=["valid"] * 20, name="acc",
                 labels={"A": ["valid"] * 20, "B": ["invalid"] * 6 + ["valid"] * 14})  # fmt: skip
    out = _cli(engine, monkeypatch, "judge", "accepted", "report", "--check", "acc", "--json")
    assert out.exit_code == 5, out.output
    data = json.loads(out.stdout)
    assert (data["outcome"], data["exit_code"]) == ("failed", 5)
    assert [r["passed"] for r in data["acceptance"]["requirements"]] == [True, False]
    text = _cli(engine, monkeypatch, "judge", "accepted", "report", "--check", "acc")
    assert text.exit_code == 5 and "acceptance: FAILED" in text.output
    stored_check(engine, kind="accepted", judge=["valid"] * 40, name="acc-ok",
                 labels={"A": ["valid"] * 40, "B": ["valid"] * 40})  # fmt: skip
    ok = _cli(engine, monkeypatch, "judge", "accepted", "report", "--check", "acc-ok", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["outcome"] == "passed"
    with session_scope(engine) as s:
        check = s.exec(select(ValidityCheck).where(ValidityCheck.name == "acc")).one()
        assert accepted_report(s, check)["acceptance"]["passed"] is False


def test_a_failed_accepted_set_check_fails_the_calibration(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _judged_study(engine, tmp_path, GOOD)
    with session_scope(engine) as s:
        sid = require_study(s, name="s").id
        bad = accepted_acceptance(
            {"confidence": 0.95, "annotator_a": {"ci_low": 0.9}, "annotator_b": {"ci_low": 0.6}},
            JudgeAcceptance(),
        )
        append_event(s, actor="r", kind=events.ACCEPTED_COMPLETED, study_id=sid,
                     payload={"judge_hash": "j" * 64, "check": "a1", "report": {},
                              "acceptance": bad})  # fmt: skip
        st = validity_status(s, study_id=sid)
    assert st["status"] == "calibration-failed"
    assert st["failed_requirements"] == [
        "accepted-set check a1: accepted_precision_lower_b 0.6000 < 0.8"
    ]
