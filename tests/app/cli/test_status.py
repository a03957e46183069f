"""``rcea status --study S``: any study's next step, from import to verify, computed from
the store (``rcea.study.progress.study_steps``), walked through a study built with the shared
report-study support: nothing → imported → judged → audit drawn → final gate failed
(the options named) / passed with a calibration (publish) → published (verify)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlmodel import select
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.study import events
from rcea.study.labelling import VALIDITY, bind_existing
from rcea.study.pair_audit.sampling import draw_audit
from rcea.study.settings import get_settings
from rcea.study.store import append_event, make_engine, require_study, session_scope, upgrade
from rcea.study.store.models import Trajectory, ValidityCheck
from rcea.study.study_status import status_lines, study_steps
from rcea.study.validity_audit.status import validity_status
from tests.support import report_study
from tests.support.helpers import RUBRIC, fake_person
from tests.support.validity import stored_check


def steps(engine) -> list[tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return [(x.track, x.command) for x in study_steps(s, study="rep")]


def test_status_walks_a_study_from_import_to_verify(  # type: ignore[no-untyped-def]
    engine, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert steps(engine) == [("import", "rcea import verl DIR --study rep --run RUN --model MODEL")]
    report_study.make_report_study(engine, tmp_path)
    assert steps(engine) == [
        ("validity judge", "rcea judge run --study rep --judge NAME"),
        ("codebook", "rcea codebook run --study rep"),
        ("report", "rcea report build --study rep"),
    ]
    with session_scope(engine) as s:
        codebook = study_steps(s, study="rep")[1]
    assert codebook.waits_for and "validity judge" in codebook.waits_for
    report_study.judge(engine, calibrated_hash=None)
    # the calibration sample is sized from the rubric: first the rubric, then the sample
    assert steps(engine)[:2] == [
        ("validity calibration", "rcea audit rubric init --study rep --out rubric.toml"),
        ("codebook", "rcea codebook run --study rep"),
    ]
    audit_id = report_study.draw(engine, tmp_path)
    got = steps(engine)
    assert [t for t, _ in got] == ["validity calibration", "pair audit", "report"]
    assert got[0][1] == (
        "rcea judge calibrate sample --study rep --judge toy-judge --rubric test-rubric"
    )
    assert got[1][1] == ("rcea audit push --study rep --annotator-a A_EMAIL --annotator-b B_EMAIL")
    report_study.final_gate(engine, audit_id, passing=False)
    with session_scope(engine) as s:
        now = study_steps(s, study="rep")
    failed = [x for x in now if "FAILED" in x.state]
    assert len(failed) == 1
    assert failed[0].command == "rcea report publish --study rep --entropy-only"
    assert "revise the codebook" in failed[0].state
    assert "report" not in [x.track for x in now]  # nothing else to publish
    # The gate command itself names the options when the final gate fails.

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["audit", "gate", "--final", "--study", "rep"])
    assert "the final gate FAILED; the options:" in res.output, res.output
    assert "  - publish the audit-independent numbers alone: rcea report publish --study rep" in (
        res.output
    )


def test_status_passed_gate_publish_and_verify(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report_study.make_report_study(engine, tmp_path)
    report_study.judge(engine, calibrated_hash=report_study.JUDGE)
    audit_id = report_study.draw(engine, tmp_path)
    report_study.final_gate(engine, audit_id, passing=True)
    got = steps(engine)
    assert ("validity calibration", None) in got and ("pair audit", None) in got
    assert got[-1] == ("report", "rcea report publish --study rep --out reports/")
    bundle = report_study.publish(engine, tmp_path / "reports")
    where = bundle.get("bundle") or bundle.get("path") or bundle.get("out")
    assert steps(engine)[-1] == ("verify", f"rcea report verify {where}")


def test_status_cli(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    eng = make_engine(store_url)
    upgrade(eng)
    report_study.make_report_study(eng, tmp_path)
    eng.dispose()
    runner = CliRunner()
    res = runner.invoke(app, ["status", "--study", "rep"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[:4] == [
        "status — study rep",
        "  validity judge: no judge run on this study",
        "    needs a frozen judge (`rcea judge freeze --name NAME`, once)",
        "    NEXT: rcea judge run --study rep --judge NAME",
    ]
    assert "    then: rcea report build --study rep" in res.output
    data = json.loads(runner.invoke(app, ["status", "--study", "rep", "--json"]).stdout)
    assert [x["track"] for x in data["steps"]] == ["validity judge", "codebook", "report"]


def test_a_failed_calibration_is_not_completed_and_names_the_remedy(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path
) -> None:
    """The calibration's labels are in, its report missed a threshold: `rcea status` says
    FAILED with the missed requirement and the remedy (a revised judge), as `rcea judge
    status` says calibration-failed — never "completed" with nothing to do."""

    report_study.make_report_study(engine, tmp_path, study="cal")
    made = stored_check(
        engine, kind="calibration", judge=["valid"] * 4, labels={"annotator-1": ["invalid"] * 4}
    )
    with session_scope(engine) as s:
        check = s.get(ValidityCheck, s.exec(select_check("c1")).one())
        bind_existing(s, VALIDITY, check, "annotator-1", person=fake_person("A"), user_id=7,
                      project_id=1)  # fmt: skip
        sid = made["study_id"]
        append_event(s, actor="r", kind=events.JUDGE_RUN, study_id=sid,
                     payload={"judge_hash": made["judge_hash"], "judge_name": "llm"})  # fmt: skip
        append_event(
            s, actor="r", kind=events.CALIBRATION_COMPLETED, study_id=sid,
            payload={"judge_hash": made["judge_hash"], "calibration": "c1",
                     "report": {"accuracy": 0.0, "macro_f1": 0.0, "accepted_valid_precision": 0.0,
                                "valid_recall": 1.0, "coverage": 1.0}},
        )  # fmt: skip
        assert validity_status(s, study_id=sid)["status"] == "calibration-failed"
        (step,) = [x for x in study_steps(s, study="cal") if x.track == "validity calibration"]
    assert "FAILED" in step.state and "accuracy" in step.state, step
    assert "completed" not in step.state
    assert step.command == "rcea judge freeze --name llm --template TEMPLATE --reason TEXT"


def select_check(name: str):  # type: ignore[no-untyped-def]

    return select(ValidityCheck.id).where(ValidityCheck.name == name)


REAUDIT = '\n[reaudit]\nmax_attempts = 2\ncorrection = "bonferroni"\n'


def test_a_failed_gate_offers_the_reaudit_the_rubric_allows(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """After a failed final gate, NEXT is the re-audit the frozen rubric predeclares
    (`[reaudit]`), and that very command draws it; without the policy, the entropy-only
    bundle."""

    report_study.make_report_study(engine, tmp_path)
    report_study.judge(engine, calibrated_hash=report_study.JUDGE)
    audit_id = report_study.draw(engine, tmp_path, rubric=RUBRIC + REAUDIT)
    report_study.final_gate(engine, audit_id, passing=False)
    with session_scope(engine) as s:
        (failed,) = [x for x in study_steps(s, study="rep") if "FAILED" in x.state]
    assert failed.command == (
        "rcea audit sample --study rep --rubric test-rubric --rubric-version 1 --reason TEXT"
    )
    assert "attempt 2 of 2, correction bonferroni" in failed.state
    with session_scope(engine) as s:  # the printed command is accepted as it stands
        draw_audit(s, study="rep", rubric="test-rubric", rubric_version="1", reason="TEXT",
                   actor="r")  # fmt: skip
    assert steps(engine)[1][1] == (
        "rcea audit push --study rep --annotator-a A_EMAIL --annotator-b B_EMAIL"
    )


def test_probe_scoring_is_offered_only_with_a_checkpoint_and_never_next(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path
) -> None:

    report_study.make_report_study(engine, tmp_path)
    with session_scope(engine) as s:
        sid = require_study(s, name="rep").id
        s.execute(
            update(Trajectory)
            .where(Trajectory.study_id == sid, Trajectory.step == 20)
            .values(mean_token_entropy=None)
        )
    # rewards only, no checkpoint ever scored: no probe step at all
    assert "token entropies" not in [t for t, _ in steps(engine)]
    ckpt = tmp_path / "global_step_10"
    ckpt.mkdir()
    with session_scope(engine) as s:
        append_event(s, actor="r", kind=events.PROBE_SCORE, study_id=sid,
                     payload={"run": "grpo", "model": "tiny", "step": 10,
                              "checkpoint": str(ckpt)})  # fmt: skip
        got = study_steps(s, study="rep")
    probe = [x for x in got if x.track == "token entropies"]
    assert len(probe) == 1 and probe[0].optional
    assert probe[0].command == (
        "rcea probe score --study rep --run clipcov --model tiny --step 20 --checkpoint DIR"
    )
    lines = status_lines("rep", got)
    assert "    NEXT: rcea judge run --study rep --judge NAME" in lines
    assert f"    optional: {probe[0].command}" in lines
    ckpt.rmdir()  # the checkpoint is gone: nothing to offer
    assert "token entropies" not in [t for t, _ in steps(engine)]
