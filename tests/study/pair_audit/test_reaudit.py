"""A failed final gate binds its partition (docs/publication.md "Every attempt"): another
audit is refused unless the failed audit's frozen rubric predeclares ``[reaudit]`` and a
reason is recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import select
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.rubric import ReauditPolicy, parse_rubric
from rcea.audits.sampling import attempt_seed
from rcea.study import events
from rcea.study.pair_audit.freeze import FreezeError, freeze_rubric
from rcea.study.pair_audit.gate import decide_gate, gate_status, record_final_gate
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit
from rcea.study.report.schema import report_json
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import Audit
from tests.support.helpers import RUBRIC, rubric_file
from tests.support.pair_audit import FAILING_GATE, drawn_and_labelled, study_with_rubric

POLICY = '\n[reaudit]\nmax_attempts = 2\ncorrection = "bonferroni"\n'
runner = CliRunner()


def _final(engine, audit_id: int) -> str:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return decide_gate(s, s.get(Audit, audit_id), final=True, actor="r")["status"]


def _draw(engine, **kw):  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return draw_audit(s, study="s", rubric="test-rubric", actor="r", **kw).id


def test_reaudit_section_keeps_old_hashes_and_validates() -> None:
    old = parse_rubric(RUBRIC)
    assert old.reaudit == ReauditPolicy() and "reaudit" not in old.to_dict()
    assert parse_rubric(RUBRIC + "\n[reaudit]\nmax_attempts = 1\n").content_hash() == (
        old.content_hash()
    )
    new = parse_rubric(RUBRIC + POLICY)
    assert new.reaudit.max_attempts == 2 and new.content_hash() != old.content_hash()
    assert parse_rubric(new.to_toml()) == new
    with pytest.raises(ValueError, match=r"\[reaudit\] correction"):
        parse_rubric(RUBRIC + '\n[reaudit]\nmax_attempts = 2\ncorrection = "holm-ish"\n')
    with pytest.raises(ValueError, match=r"\[reaudit\] max_attempts"):
        parse_rubric(RUBRIC + "\n[reaudit]\nmax_attempts = 0\n")


def test_failed_gate_binds_partition_without_policy(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    study_with_rubric(engine, tmp_path, RUBRIC + FAILING_GATE)
    first = drawn_and_labelled(engine)
    assert _final(engine, first) == "failed"
    with pytest.raises(FreezeError, match="predeclares no re-audit policy") as err:
        _draw(engine, seed=1, reason="try again")
    assert "refreeze the codebook" in str(err.value) and "new partition" in str(err.value)
    with session_scope(engine) as s:
        assert len(s.exec(select(Audit)).all()) == 1
        # a rubric frozen after the failure cannot grant itself a re-audit
        v2 = RUBRIC.replace('version = "1"', 'version = "2"') + FAILING_GATE + POLICY
        freeze_rubric(s, path=rubric_file(tmp_path, v2), actor="r")
    with pytest.raises(FreezeError, match="predeclares no re-audit policy"):
        _draw(engine, seed=1, reason="try again", rubric_version="2")


def test_passed_gate_does_not_bind(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    study_with_rubric(engine, tmp_path, RUBRIC)
    first = drawn_and_labelled(engine)
    assert _final(engine, first) == "passed"
    second = _draw(engine, seed=7)
    with session_scope(engine) as s:
        ev = [e.payload for e in list_events(s, kind=events.AUDIT_SAMPLE)]
    assert [(e["audit_id"], e["attempt"], e["failed_before"]) for e in ev] == [
        (first, 1, []),
        (second, 2, []),
    ]


def test_reaudit_with_policy_needs_reason_and_respects_max(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study_with_rubric(engine, tmp_path, RUBRIC + FAILING_GATE + POLICY)
    first = drawn_and_labelled(engine)
    assert _final(engine, first) == "failed"
    with pytest.raises(FreezeError, match="needs a recorded reason"):
        _draw(engine, seed=1)
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    out = runner.invoke(
        app, ["audit", "sample", "--study", "s", "--rubric", "test-rubric", "--seed", "1",
              "--reason", "annotator B misread the guideline", "--json"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    second = json.loads(out.stdout)["audit_id"]
    with session_scope(engine) as s:
        ev = {e.payload["audit_id"]: e.payload for e in list_events(s, kind=events.AUDIT_SAMPLE)}
    assert ev[second]["attempt"] == 2 and ev[second]["failed_before"] == [ev[first]["name"]]
    assert ev[second]["reason"] == "annotator B misread the guideline"
    assert ev[second]["reaudit"]["max_attempts"] == 2
    assert ev[second]["reaudit"]["correction"] == "bonferroni"
    # a re-audit is a new sample: no pair of the first audit again, a seed derived from
    # the attempt, the first audit's pairs counted as excluded
    with session_scope(engine) as s:
        drawn = {
            a: {frozenset((p.trajectory_a, p.trajectory_b)) for p in audit_pairs(s, audit_id=a)}
            for a in (first, second)
        }
    assert drawn[second] and not drawn[first] & drawn[second]
    assert ev[second]["seed"] == attempt_seed(1, 2) != 1 and ev[second]["rubric_seed"] == 1
    assert ev[second]["n_excluded_earlier_pairs"] == len(drawn[first])
    refused = runner.invoke(
        app, ["audit", "sample", "--study", "s", "--rubric", "test-rubric", "--seed", "2",
              "--reason", "third time", "--json"],
    )  # fmt: skip
    assert refused.exit_code == 1 and "max_attempts = 2 are spent" in refused.output


def test_report_states_the_failure_after_a_passing_reaudit(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.build import build_report
    from rcea.study.report.html import render_html
    from rcea.study.report.schema import StudyReport

    study_with_rubric(engine, tmp_path, RUBRIC + FAILING_GATE + POLICY)
    first = drawn_and_labelled(engine)
    assert _final(engine, first) == "failed"
    second = drawn_and_labelled(engine, seed=1, reason="B misread the guideline")
    with session_scope(engine) as s:  # the second attempt's gate, recorded as passed
        audit = s.get(Audit, second)
        live = gate_status(s, audit, final=True)
        passed = {**live, "status": "passed", "report": {**live["report"], "passed": True}}
        record_final_gate(s, audit, passed, "r")
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="s", n_boot=200))
        first_name, second_name = s.get(Audit, first).name, s.get(Audit, second).name
    pair = rep["audits"]["pair"]
    assert (pair["status"], pair["audit"], pair["blocked_by"]) == ("passed", second_name, None)
    failed = pair["failures_on_partition"]
    assert [f["audit"] for f in failed] == [first_name]
    assert failed[0]["audit_id"] == first and failed[0]["recorded_by"] == "r"
    StudyReport.model_validate(rep)
    html = render_html(rep, scope="full (audited)", figures={}, hashes={})
    assert "A failed attempt is on the record of this partition" in html and first_name in html
