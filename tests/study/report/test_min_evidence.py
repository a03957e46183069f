"""Predeclared minimum evidence (rubric ``[estimators] min_eligible_questions`` and
``min_eligible_share``): a number below the floor is computed and shown, labelled
"insufficient evidence", never "audited"; publish says so in its scope; verify agrees;
``rcea report build`` warns at the top."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.audits.rubric import EstimatorSettings, parse_rubric
from rcea.study import events
from rcea.study.records.ingest import ingest_file
from rcea.study.report.build import build_report
from rcea.study.report.publication import AUDITED_LABEL, FULL_SCOPE, INSUFFICIENT_LABEL
from rcea.study.report.publish import publish_report
from rcea.study.report.schema import StudyReport, report_json
from rcea.study.report.verify import verify_bundle
from rcea.study.store import append_event, require_study, session_scope
from tests.support.helpers import RUBRIC, make_record, write_jsonl
from tests.support.report_study import accepted_passing

runner = CliRunner()
GOOD = {
    "accuracy": 0.957,
    "macro_f1": 0.95,
    "accepted_valid_precision": 0.949,
    "valid_recall": 0.966,
    "coverage": 1.0,
}


def test_floors_keep_old_hashes() -> None:
    old = parse_rubric(RUBRIC)
    assert "min_eligible_questions" not in old.to_dict()["estimators"]
    assert (old.estimators.min_eligible_questions, old.estimators.min_eligible_share) == (10, 0.25)
    new = parse_rubric(RUBRIC + "\n[estimators]\nmin_eligible_questions = 3\n")
    assert new.content_hash() != old.content_hash()
    assert new.to_dict()["estimators"]["min_eligible_questions"] == 3
    with pytest.raises(ValueError, match="min_eligible_share"):
        EstimatorSettings(min_eligible_share=1.5)


def _one_eligible(engine, tmp_path: Path, *, eligible: int) -> None:  # type: ignore[no-untyped-def]
    """40 questions; ``eligible`` of them with 8 successes (K+ >= k_min = 8), the others
    with one; validity from the column, the judge calibrated by a recorded event."""
    recs, i = [], 0
    for q in range(40):
        for _ in range(8 if q < eligible else 1):
            i += 1
            recs.append(make_record(i, question_id=f"q{q}", reward=1, validity=1))
    ingest_file(engine, write_jsonl(tmp_path / "s.jsonl", recs), study="s",
                artifacts_dir=tmp_path / "art", data_dir=tmp_path)  # fmt: skip
    with session_scope(engine) as s:
        sid = require_study(s, name="s").id
        run = {"judge_hash": "j" * 64, "judge_name": "llm", "n_judged": len(recs)}
        append_event(s, actor="r", kind=events.JUDGE_RUN, study_id=sid, payload=run)
        done = {"judge_hash": "j" * 64, "calibration": "c1", "report": GOOD}
        append_event(s, actor="r", kind=events.CALIBRATION_COMPLETED, study_id=sid, payload=done)
        acc = accepted_passing("j" * 64)
        append_event(s, actor="r", kind=events.ACCEPTED_COMPLETED, study_id=sid, payload=acc)


def test_one_eligible_question_is_insufficient_evidence(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _one_eligible(engine, tmp_path, eligible=1)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="s", n_boot=200))
    StudyReport.model_validate(rep)
    val = [q for q in rep["quantities"] if q["section"] == "validity"]
    assert val and all(q["label"] == INSUFFICIENT_LABEL for q in val)
    rate = next(q for q in val if q["name"] == "mean_validity_rate")
    assert rate["value"] == 1.0 and rate["n"] == 1  # computed and shown
    assert rate["evidence"] == (
        "insufficient evidence: 1 of 40 questions eligible (share 0.025); the rubric's "
        "floor is 10 questions and share 0.25"
    )
    assert rep["insufficient_evidence"] and all(
        "insufficient evidence" in line for line in rep["insufficient_evidence"]
    )
    with session_scope(engine) as s:
        res = publish_report(s, study="s", out_dir=tmp_path / "out", actor="p", n_boot=200)
    assert res["scope"].startswith(FULL_SCOPE + "; ") and res["scope"] != FULL_SCOPE
    assert "insufficient evidence, not audited" in res["scope"]
    bundle = Path(res["bundle"])
    published = json.loads((bundle / "report.json").read_text())
    assert published["scope"] == res["scope"]
    assert all(q["label"] != AUDITED_LABEL for q in published["quantities"] if q["evidence"])
    ver = verify_bundle(bundle)
    assert ver.ok, ver.mismatches
    # an edited label (calling it audited) no longer verifies
    for q in published["quantities"]:
        if q["evidence"]:
            q["label"] = AUDITED_LABEL
    (bundle / "report.json").write_text(json.dumps(published))
    assert not verify_bundle(bundle).ok
    monkeypatch.setenv("RCEA_DATABASE_URL", engine.url.render_as_string(hide_password=False))
    out = runner.invoke(app, ["report", "build", "--study", "s", "--n-boot", "200"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("warning: mean_validity_rate")


def test_enough_eligible_questions_are_audited(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _one_eligible(engine, tmp_path, eligible=12)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="s", n_boot=200))
    val = [q for q in rep["quantities"] if q["section"] == "validity"]
    assert val and all(q["label"] == AUDITED_LABEL and q["evidence"] is None for q in val)
    assert rep["insufficient_evidence"] == []


def test_flow_per_checkpoint(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _one_eligible(engine, tmp_path, eligible=1)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="s", n_boot=200))
    (c,) = rep["checkpoints"]
    flow = c["flow"]
    # 8 + 39 trajectories in 40 questions, every one a success, judged and accepted by the
    # validity column; no mode: none assigned; one question eligible for validity
    for stage in ("imported", "successes", "judged", "accepted"):
        assert flow[stage] == {"trajectories": 47, "questions": 40}, stage
    assert flow["assigned"] == {"trajectories": 0, "questions": 0}
    assert flow["eligible"]["validity"] == 1 and flow["eligible"]["retention"] is None
    StudyReport.model_validate(rep)


def test_verify_rederives_the_flow(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import hashlib

    _one_eligible(engine, tmp_path, eligible=12)
    with session_scope(engine) as s:
        res = publish_report(s, study="s", out_dir=tmp_path / "out", actor="p", n_boot=200)
    bundle = Path(res["bundle"])
    assert verify_bundle(bundle).ok
    report = json.loads((bundle / "report.json").read_text())
    report["checkpoints"][0]["flow"]["accepted"]["trajectories"] += 1
    data = json.dumps(report).encode()
    (bundle / "report.json").write_bytes(data)
    hashes = json.loads((bundle / "hashes.json").read_text())
    hashes["files"]["report.json"] = hashlib.sha256(data).hexdigest()
    (bundle / "hashes.json").write_text(json.dumps(hashes))
    ver = verify_bundle(bundle)
    assert not ver.ok and any("flow" in m for m in ver.mismatches), ver.mismatches


def test_each_quantity_has_its_own_floor() -> None:
    """``[estimators] <quantity>_min_questions`` / ``_min_share`` hold one quantity to its
    own floor; the others (and every quantity of an old rubric) keep the one floor."""
    old = parse_rubric(RUBRIC).estimators.min_evidence()
    assert old == {q: {"questions": 10, "share": 0.25} for q in old}
    assert sorted(old) == ["mode_entropy", "paired_ratio", "retention", "validity"]
    text = RUBRIC + "\n[estimators]\nvalidity_min_questions = 1\nvalidity_min_share = 0.02\n"
    new = parse_rubric(text)
    floors = new.estimators.min_evidence()
    assert floors["validity"] == {"questions": 1, "share": 0.02}
    assert floors["retention"] == floors["paired_ratio"] == {"questions": 10, "share": 0.25}
    assert new.to_dict()["estimators"]["validity_min_questions"] == 1
    assert "retention_min_questions" not in new.to_dict()["estimators"]
    assert parse_rubric(new.to_toml()) == new
    with pytest.raises(ValueError, match="retention_min_share"):
        EstimatorSettings(retention_min_share=2.0)


def test_the_validity_floor_applies_to_validity_only(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.report.publication import quantities

    _one_eligible(engine, tmp_path, eligible=1)
    with session_scope(engine) as s:
        rep = report_json(build_report(s, study="s", n_boot=200))
    assert rep["parameters"]["min_evidence"]["validity"] == {"questions": 10, "share": 0.25}
    rep["parameters"]["min_evidence"]["validity"] = {"questions": 1, "share": 0.02}
    val = [q for q in quantities(rep) if q["section"] == "validity"]
    assert val and all(q["label"] == AUDITED_LABEL and q["evidence"] is None for q in val)
    rep["parameters"]["min_evidence"]["validity"] = {"questions": 1, "share": 0.5}
    val = [q for q in quantities(rep) if q["section"] == "validity"]
    assert all(q["label"] == INSUFFICIENT_LABEL for q in val)
