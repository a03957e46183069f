"""Calibration attempts under a predeclared policy (docs/validity-audit.md "Attempts"):
a failed calibration binds the frozen judge; a re-calibration needs the rubric's
[recalibration] policy, the same rubric and a reason, draws fresh items with a seed
derived from the attempt, is judged against tightened thresholds with its Bonferroni α;
any undecided check can be abandoned with a reason; every attempt stays on the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study import events
from rcea.study.pair_audit.freeze import freeze_rubric
from rcea.study.report.attempts import ABANDONED, attempts, chain
from rcea.study.settings import Settings
from rcea.study.store import list_events, require_study, session_scope
from rcea.study.store.models import ValidityCheck, ValidityLabel
from rcea.study.validity_audit.attempts import abandon_check, attempt_seed
from rcea.study.validity_audit.checks import (
    HELD_OUT,
    check_items,
    get_check,
    sample_accepted,
    sample_calibration,
)
from rcea.study.validity_audit.reports import calibration_report
from rcea.study.validity_audit.run import run_judge
from rcea.study.validity_audit.versions import JudgeError
from tests.support.judge_study import ORACLE, freeze, ingest_toy

runner = CliRunner()
BASE = """
[rubric]
name = "cal"
version = "{version}"

[calibration]
size = 30
held_out = 12
seed = 4
"""
POLICY = """
[recalibration]
max_attempts = 2
tighten = 0.02
correction = "bonferroni"
"""


def _rubric(s, tmp_path: Path, version: str, policy: str = "") -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / f"rubric-{version}.toml"
    path.write_text(BASE.format(version=version) + policy)
    freeze_rubric(s, path=path, actor="r")
    return "cal"


def _label(s, check: ValidityCheck, agree: bool) -> None:  # type: ignore[no-untyped-def]
    """One counted label per held-out item: the judge's verdict (agree) or the opposite."""
    for n, item in enumerate(check_items(s, check_id=check.id)):  # type: ignore[arg-type]
        if item.split != HELD_OUT:
            continue
        same = item.judge_verdict == "valid"
        label = "valid" if same == agree else "invalid"
        s.add(
            ValidityLabel(
                check_id=check.id, annotation_id=1000 * check.id + n, task_id=1000 * check.id + n,
                project_id=1, item_id=item.id, role="annotator-1", user_id=7, label=label,
                status="counted",
            )
        )  # fmt: skip
    s.flush()


def _judged(engine, tmp_path: Path, study: str) -> None:  # type: ignore[no-untyped-def]
    ingest_toy(engine, tmp_path, study=study, n_questions=12, per_question=14)
    freeze(engine, "oracle", ORACLE)
    run_judge(engine, study=study, judge="oracle", settings=Settings(data_dir=tmp_path), actor="r")


def test_a_failed_calibration_binds_the_judge_without_a_policy(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _judged(engine, tmp_path, "toy")
    with session_scope(engine) as s:
        rubric = _rubric(s, tmp_path, "1")
        first = sample_calibration(s, study="toy", judge="oracle", actor="r", rubric=rubric)
        assert first.plan["attempt"] == 1 and first.seed == 4  # the rubric's seed
        assert first.plan["alpha"] == 0.05 and first.plan["recalibration"] is None
        _label(s, first, agree=False)
        assert calibration_report(s, first)["outcome"] == "failed"
        with pytest.raises(JudgeError, match="binds its frozen judge.*new judge version"):
            sample_calibration(
                s, study="toy", judge="oracle", actor="r", rubric=rubric, reason="again"
            )
        with pytest.raises(JudgeError, match="decided"):
            abandon_check(s, first, reason="too late", actor="r")


def test_recalibration_under_the_declared_policy(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _judged(engine, tmp_path, "toy2")
    with session_scope(engine) as s:
        rubric = _rubric(s, tmp_path, "2", POLICY)
        first = sample_calibration(s, study="toy2", judge="oracle", actor="r", rubric=rubric)
        assert first.plan["alpha"] == pytest.approx(0.025)  # Bonferroni over 2 attempts
        assert first.plan["confidence"] == pytest.approx(0.975)
        _label(s, first, agree=False)
        failed = calibration_report(s, first)
        assert failed["outcome"] == "failed" and failed["attempt"] == 1
        assert failed["report"]["population"]["confidence"] == pytest.approx(0.975)
        with pytest.raises(JudgeError, match="needs a recorded reason"):
            sample_calibration(s, study="toy2", judge="oracle", actor="r", rubric=rubric)
        other = tmp_path / "other.toml"
        other.write_text(BASE.format(version="1").replace('"cal"', '"other"') + POLICY)
        freeze_rubric(s, path=other, actor="r")
        with pytest.raises(JudgeError, match="must use the rubric that predeclared it"):
            sample_calibration(
                s, study="toy2", judge="oracle", actor="r", rubric="other", reason="x"
            )
        second = sample_calibration(
            s, study="toy2", judge="oracle", actor="r", rubric=rubric, reason="annotator retrained"
        )
        plan = second.plan
        assert (plan["attempt"], plan["reason"], plan["failed_before"]) == (
            2, "annotator retrained", [first.name])  # fmt: skip
        # thresholds tightened by the policy, α from the correction, a derived seed
        assert plan["tighten_by"] == pytest.approx(0.02)
        assert plan["acceptance"]["accuracy_min"] == pytest.approx(0.92)
        assert plan["acceptance"]["accepted_precision_lower_min"] == pytest.approx(0.80)
        assert second.seed == attempt_seed(4, 2) != 4 and plan["rubric_seed"] == 4
        # fresh items: none of the first attempt's trajectories again
        ids = {i.trajectory_id for i in check_items(s, check_id=first.id)}
        again = {i.trajectory_id for i in check_items(s, check_id=second.id)}
        assert again and not ids & again and plan["n_excluded_earlier_attempts"] == len(ids)
        _label(s, second, agree=True)
        passed = calibration_report(s, second)
        assert passed["outcome"] == "passed" and passed["attempt"] == 2
        assert passed["thresholds"]["accuracy_min"] == pytest.approx(0.92)
        assert {r["threshold"] for r in passed["acceptance"]["requirements"]} >= {0.92}
        assert (passed["correction"], passed["alpha"]) == ("bonferroni", pytest.approx(0.025))
        with pytest.raises(JudgeError, match="max_attempts = 2 are spent"):
            sample_calibration(
                s, study="toy2", judge="oracle", actor="r", rubric=rubric, reason="3"
            )
        sid = require_study(s, name="toy2").id
        records = [
            {"id": e.id, "time": e.time.isoformat(), "actor": e.actor, "kind": e.kind,
             "payload": e.payload}
            for e in list_events(s, study_id=sid)
        ]  # fmt: skip
    listed = [a for a in attempts(chain(records)) if a["kind"] == "calibration"]
    assert [(a["attempt"], a["outcome"]) for a in listed] == [(1, "failed"), (2, "passed")]
    assert listed[1]["reason"] == "annotator retrained"
    assert listed[1]["thresholds"]["accuracy_min"] == pytest.approx(0.92)
    assert listed[0]["thresholds"]["accuracy_min"] == pytest.approx(0.90)
    assert [a["alpha"] for a in listed] == [pytest.approx(0.025)] * 2
    assert [a["basis"] for a in listed] == ["population"] * 2


def _cli(engine, monkeypatch, *args: str):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    return runner.invoke(app, list(args))


def test_abandon_keeps_the_attempt_on_the_record(engine, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _judged(engine, tmp_path, "toy3")
    with session_scope(engine) as s:
        rubric = _rubric(s, tmp_path, "4")
        check = sample_calibration(s, study="toy3", judge="oracle", actor="r", rubric=rubric)
        name = check.name
    out = _cli(engine, monkeypatch, "judge", "calibrate", "abandon", "--calibration", name,
               "--reason", "", "--json")  # fmt: skip
    assert out.exit_code == 1 and "needs a reason" in json.loads(out.stdout)["error"]
    out = _cli(engine, monkeypatch, "judge", "calibrate", "abandon", "--calibration", name,
               "--reason", "wrong guideline", "--json")  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["outcome"] == "abandoned"
    again = _cli(engine, monkeypatch, "judge", "calibrate", "abandon", "--calibration", name,
                 "--reason", "twice")  # fmt: skip
    assert again.exit_code == 1 and "already abandoned" in again.output
    with session_scope(engine) as s:
        check = get_check(s, name=name, kind="calibration")
        _label(s, check, agree=True)
        rep = calibration_report(s, check)  # labelled afterwards: never decided
        assert rep["outcome"] == "abandoned" and rep["abandoned"]["reason"] == "wrong guideline"
        assert not list_events(s, kind=events.CALIBRATION_COMPLETED)
        sid = require_study(s, name="toy3").id
        records = [
            {"id": e.id, "time": e.time.isoformat(), "actor": e.actor, "kind": e.kind,
             "payload": e.payload}
            for e in list_events(s, study_id=sid)
        ]  # fmt: skip
        acc = sample_accepted(s, study="toy3", size=5, actor="r")
        acc_name = acc.name
    listed = attempts(chain(records))
    assert [(a["outcome"], a["abandon_reason"]) for a in listed] == [(ABANDONED, "wrong guideline")]
    out = _cli(engine, monkeypatch, "judge", "accepted", "abandon", "--check", acc_name,
               "--reason", "sampled the wrong judge", "--json")  # fmt: skip
    assert out.exit_code == 0 and json.loads(out.stdout)["check"] == acc_name
