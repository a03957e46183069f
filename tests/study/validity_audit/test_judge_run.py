"""The validity judge in the store, on SQLite and PostgreSQL: freezing (hash, versions,
parents, immutability), resumable runs with the toy oracle, the validity column and the
``judge.run`` contract, calibration and accepted-set sampling, v̂₊ per checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlmodel import select

from rcea.pipeline.judge import DEFAULT_TEMPLATE, JudgeTemplate
from rcea.pipeline.toy import (
    process_valid,
    question_from_id,
)
from rcea.study.report.schema import report_json
from rcea.study.settings import Settings
from rcea.study.store import list_events, require_study, session_scope
from rcea.study.store.models import JudgeVerdict, JudgeVersion, Trajectory, ValidityItem
from rcea.study.validity_audit.attempts import attempt_seed
from rcea.study.validity_audit.checks import (
    DEVELOPMENT,
    HELD_OUT,
    check_items,
    sample_accepted,
    sample_calibration,
)
from rcea.study.validity_audit.run import run_judge
from rcea.study.validity_audit.status import validity_status
from rcea.study.validity_audit.validity import validity_by_checkpoint
from rcea.study.validity_audit.versions import JudgeError
from tests.support.judge_study import (
    ORACLE,
    WEAK,
    freeze,
    ingest_toy,
)


def test_freeze_versions_and_immutability(engine) -> None:  # type: ignore[no-untyped-def]
    jid, v1, h1, created = freeze(engine, "j", ORACLE)
    assert (v1, created) == (1, True)
    assert freeze(engine, "j", ORACLE) == (jid, 1, h1, False)  # identical: no-op
    changed = JudgeTemplate(
        "validity", 2, DEFAULT_TEMPLATE.system + " Be strict.", DEFAULT_TEMPLATE.user
    )
    jid2, v2, h2, created2 = freeze(engine, "j", ORACLE, changed)
    assert (v2, created2) == (2, True) and h2 != h1
    with session_scope(engine) as s:
        row = s.get(JudgeVersion, jid2)
        assert row.parent_id == jid
        assert row.content["template_hash"] == changed.content_hash()
        events = list_events(s, kind="judge.freeze")
        assert [e.payload["version"] for e in events] == [1, 2]
    for stmt in (
        sa.update(JudgeVersion).where(JudgeVersion.id == jid).values(content_hash="x"),
        sa.delete(JudgeVersion).where(JudgeVersion.id == jid2),
    ):
        with (
            pytest.raises(DBAPIError, match="judge_version rows are frozen"),
            engine.begin() as conn,
        ):
            conn.execute(stmt)


def test_run_is_resumable_and_writes_validity(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = ingest_toy(engine, tmp_path)
    freeze(engine, "oracle", ORACLE)
    settings = Settings(data_dir=tmp_path / "d")
    with session_scope(engine) as s:
        sid = require_study(s, name="toy").id
        assert validity_status(s, study_id=sid)["status"] == "no-judge"
    first = run_judge(engine, study="toy", judge="oracle", settings=settings, actor="r")
    successes = [r for r in recs if r["reward"] == 1]
    truth = {
        r["trajectory_id"]: process_valid(question_from_id(r["question_id"]), r["text"])
        for r in successes
    }
    assert first["n_new"] == len(successes) == first["n_judged"]
    assert first["n_valid"] == sum(truth.values()) and first["n_invalid"] > 0
    assert first["coverage"] == 1.0 and first["complete"]
    again = run_judge(engine, study="toy", judge="oracle", settings=settings, actor="r")
    assert again["n_new"] == 0 and again["n_already_judged"] == len(successes)
    with session_scope(engine) as s:
        rows = s.exec(select(Trajectory).where(Trajectory.study_id == sid)).all()
        for t in rows:
            if t.reward == 1:
                assert t.validity == truth[t.trajectory_id]
            else:
                assert t.validity is None  # failures are never judged
        runs = list_events(s, kind="judge.run", study_id=sid)
        assert len(runs) == 2 and runs[-1].payload["n_judged"] == len(successes)
        st = validity_status(s, study_id=sid)
        assert st["status"] == "uncalibrated" and st["judge_hash"] == first["judge_hash"]
        # verdicts are immutable
        vid = s.exec(select(JudgeVerdict.id)).first()
    with pytest.raises(DBAPIError, match="judge_verdict rows are frozen"), engine.begin() as conn:
        conn.execute(sa.update(JudgeVerdict).where(JudgeVerdict.id == vid).values(verdict="valid"))
    with session_scope(engine) as s:
        report = validity_by_checkpoint(s, study_id=sid, k_min=3)
        (group,) = report["groups"]
        expected = []
        for q in sorted({r["question_id"] for r in successes}):
            mine = [truth[r["trajectory_id"]] for r in successes if r["question_id"] == q]
            if len(mine) >= 3:
                expected.append(sum(mine) / len(mine))
        assert group["mean_validity_rate"] == pytest.approx(sum(expected) / len(expected))
        assert group["judge_coverage"] == 1.0


def test_run_refuses_a_contradicting_backend(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.validity_audit.run import RunOptions

    ingest_toy(engine, tmp_path, n_questions=2, per_question=4)
    freeze(engine, "oracle", ORACLE)
    for opts in (RunOptions(backend="openai"), RunOptions(oracle=WEAK)):
        with pytest.raises(JudgeError, match="freeze a new judge version"):
            run_judge(
                engine,
                study="toy",
                judge="oracle",
                settings=Settings(data_dir=tmp_path),
                actor="r",
                options=opts,
            )


def test_calibration_and_accepted_sampling(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ingest_toy(engine, tmp_path, n_questions=10, per_question=14)
    freeze(engine, "oracle", ORACLE)
    run_judge(engine, study="toy", judge="oracle", settings=Settings(data_dir=tmp_path), actor="r")
    with session_scope(engine) as s:
        cal = sample_calibration(
            s, study="toy", judge="oracle", actor="r", size=30, held_out=12, seed=3
        )
        items = check_items(s, check_id=cal.id)
        assert len(items) == 30 and cal.plan["n_drawn"] == 30
        acc = [i for i in items if i.judge_verdict == "valid"]
        assert len(acc) == 15  # balanced
        held = [i for i in items if i.split == HELD_OUT]
        assert len(held) == 12 and sum(i.judge_verdict == "valid" for i in held) == 6
        assert sum(i.split == DEVELOPMENT for i in items) == 18
        assert all(i.trajectory_id not in i.item_key for i in items)
        cal_ids = {i.trajectory_id for i in items}
        # a second calibration of the same judge: fresh items, a seed derived from the attempt
        again = sample_calibration(
            s, study="toy", judge="oracle", actor="r", size=30, held_out=12, seed=3, name="again"
        )
        again_ids = {i.trajectory_id for i in check_items(s, check_id=again.id)}
        assert again_ids and not again_ids & cal_ids
        assert again.plan["attempt"] == 2 and again.seed == attempt_seed(3, 2)
        cal_ids |= again_ids
        with pytest.raises(JudgeError, match="holds out"):
            sample_calibration(s, study="toy", judge="oracle", actor="r", size=5000, held_out=4000)
        chk = sample_accepted(s, study="toy", size=10, actor="r", seed=1)
        picked = check_items(s, check_id=chk.id)
        assert len(picked) == 10
        assert all(i.judge_verdict == "valid" for i in picked)
        assert not {i.trajectory_id for i in picked} & cal_ids
        with pytest.raises(JudgeError, match="outside the calibration"):
            sample_accepted(s, study="toy", size=10_000, actor="r")
        item_id = picked[0].id
    with pytest.raises(DBAPIError, match="validity_item rows are frozen"), engine.begin() as conn:
        conn.execute(sa.update(ValidityItem).where(ValidityItem.id == item_id).values(split="x"))


def test_report_validity_uses_the_verdicts(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Estimator item 4 (docs/estimators.md): unparseable verdicts count against judge
    coverage, never as acceptances — in the report too, although the validity column
    stores them as 0."""
    from rcea.study.report.build import build_report

    recs = ingest_toy(engine, tmp_path)
    freeze(engine, "undecided", "tests.support.judge_study:undecided_on_slips")
    run_judge(
        engine,
        study="toy",
        judge="undecided",
        settings=Settings(data_dir=tmp_path / "d"),
        actor="r",
    )
    successes = [r for r in recs if r["reward"] == 1]
    n_unparseable = sum(
        not process_valid(question_from_id(r["question_id"]), r["text"]) for r in successes
    )
    assert n_unparseable > 0
    with session_scope(engine) as s:
        sid = require_study(s, name="toy").id
        (group,) = validity_by_checkpoint(s, study_id=sid, k_min=3)["groups"]
        report = report_json(build_report(s, study="toy", k_min=3, n_boot=50))
    (ck,) = report["checkpoints"]
    assert ck["validity"]["judge_coverage"] == pytest.approx(1 - n_unparseable / len(successes))
    assert ck["validity"]["judge_coverage"] == group["judge_coverage"] < 1.0
    assert ck["validity"]["mean_validity_rate"] == group["mean_validity_rate"]


def test_write_validity_counts_only_this_judges_valid_verdicts(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The column follows the named judge's verdicts alone: with two judges' verdicts
    stored, switching between them rewrites every success (and never a failure)."""
    from rcea.study.validity_audit.run import write_validity

    ingest_toy(engine, tmp_path)
    oracle_id = freeze(engine, "oracle", ORACLE)[0]
    weak_id = freeze(engine, "weak", WEAK)[0]
    settings = Settings(data_dir=tmp_path / "d")
    run_judge(engine, study="toy", judge="weak", settings=settings, actor="r")
    run_judge(engine, study="toy", judge="oracle", settings=settings, actor="r")

    def column_and_verdicts(judge_id: int) -> tuple[dict[str, Any], dict[str, Any]]:
        with session_scope(engine) as s:
            sid = require_study(s, name="toy").id
            write_validity(s, judge_id=judge_id, study_id=sid)
        with session_scope(engine) as s:
            col = {
                t.trajectory_id: (t.reward, t.validity)
                for t in s.exec(select(Trajectory).where(Trajectory.study_id == sid)).all()
            }
            ver = dict(
                s.exec(
                    select(JudgeVerdict.trajectory_id, JudgeVerdict.verdict).where(
                        JudgeVerdict.judge_id == judge_id
                    )
                ).all()
            )
        return col, ver

    seen = []
    for judge_id in (weak_id, oracle_id, weak_id):
        col, ver = column_and_verdicts(judge_id)
        for tid, (reward, validity) in col.items():
            if reward == 1:
                assert validity == int(ver[tid] == "valid"), (judge_id, tid)
            else:
                assert validity is None
        seen.append(col)
    assert seen[0] == seen[2] and seen[0] != seen[1]
