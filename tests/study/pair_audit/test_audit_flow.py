"""The pair-audit workflow on the store (no Label Studio): freezes, sampling, labels, gate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from sklearn.metrics import f1_score
from sqlalchemy.exc import DBAPIError

from rcea.annotation.payloads import ParsedAnnotation
from rcea.audits.sampling import attempt_seed
from rcea.study.pair_audit.freeze import FreezeError, freeze_partition_from_modes, freeze_rubric
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs, draw_audit, get_audit, record_dev_questions
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import Audit, AuditPair, AuditTask, PartitionAssignment
from tests.support.helpers import (
    RUBRIC,
    audit_study,
    bind_fake,
    draw_test_audit,
    fake_tasks,
    rubric_file,
)


def test_rubric_freeze_is_immutable_and_versioned(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        row, created = freeze_rubric(s, path=rubric_file(tmp_path), actor="alice")
        assert created and len(row.content_hash) == 64
        again, created2 = freeze_rubric(s, path=rubric_file(tmp_path), actor="alice")
        assert not created2 and again.id == row.id
    changed = RUBRIC.replace("pairs_per_question = 6", "pairs_per_question = 7")
    with pytest.raises(FreezeError, match="bump \\[rubric\\] version"), session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, changed), actor="alice")
    with session_scope(engine) as s:
        v2, _ = freeze_rubric(
            s, path=rubric_file(tmp_path, changed.replace('"1"', '"2"')), actor="alice"
        )
        assert v2.parent_id == row.id
        assert [e.payload["version"] for e in list_events(s, kind="rubric.freeze")] == ["1", "2"]
    with pytest.raises(DBAPIError, match="rubric rows are frozen"), engine.begin() as conn:
        conn.execute(sa.text("UPDATE rubric SET content_hash = 'x'"))


def test_unknown_rubric_key_is_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="colour"), session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, RUBRIC + "colour = 1\n"), actor="a")


def test_sample_needs_rubric_and_partition(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    with pytest.raises(FreezeError, match="no frozen rubric"), session_scope(engine) as s:
        draw_audit(s, study="s", rubric="test-rubric", actor="r")
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path), actor="r")
    with pytest.raises(FreezeError, match="no frozen partition"), session_scope(engine) as s:
        draw_audit(s, study="s", rubric="test-rubric", actor="r")


def test_sample_is_reproducible_disjoint_and_locked(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    with session_scope(engine) as s:
        record_dev_questions(s, study="s", questions=["q1"], actor="r")
    audit_id = draw_test_audit(engine, tmp_path)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        pairs = audit_pairs(s, audit_id=audit_id)
        assert len(pairs) == 18 and "q1" not in {p.question_id for p in pairs}
        assert audit.excluded_questions == ["q1"]
        # a second audit of the partition is a new sample: none of the first one's pairs,
        # a seed derived from the attempt (same inputs and seed reproduce a draw:
        # tests/audits/test_sampling.py)
        second = draw_audit(s, study="s", rubric="test-rubric", actor="r", name="again")
        again = audit_pairs(s, audit_id=second.id)
        first_pairs = {(p.trajectory_a, p.trajectory_b) for p in pairs}
        assert again and not first_pairs & {(p.trajectory_a, p.trajectory_b) for p in again}
        assert second.seed == attempt_seed(audit.seed, 2)
        assert second.partition_hash == audit.partition_hash
        # the reward-0 trajectory never enters the partition
        assert "t00999" not in {p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs}
    for stmt in (
        sa.update(AuditPair).values(automatic="same"),
        sa.update(PartitionAssignment).values(mode="m9"),
        sa.delete(PartitionAssignment),
    ):
        with (
            pytest.raises(DBAPIError, match="(audit_pair|partition_assignment) rows are frozen"),
            engine.begin() as conn,
        ):
            conn.execute(stmt)


def test_plan_larger_than_data_is_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    big = RUBRIC.replace("n_questions = 3", "n_questions = 9")
    with session_scope(engine) as s:
        freeze_rubric(s, path=rubric_file(tmp_path, big), actor="r")
        freeze_partition_from_modes(s, study="s", actor="r")
    with pytest.raises(ValueError, match="asks for 9 question"), session_scope(engine) as s:
        draw_audit(s, study="s", rubric="test-rubric", actor="r")


def _other(label: str) -> str:
    return "different" if label == "same" else "same"


def test_labels_statuses_and_gate(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    tasks = fake_tasks(engine, audit_id)
    ann_id = iter(range(1, 10_000))

    def ann(role: str, pair_id: int, label: str | None, user: int, **kw: object) -> None:
        with session_scope(engine) as s:
            a = ParsedAnnotation(
                next(ann_id),
                tasks[role][pair_id] if pair_id else 99999,
                {"A": 1, "B": 2}[role],
                user,
                label,
                None,
                bool(kw.get("cancelled", False)),
            )
            record_annotation(s, get_audit(s, study="s"), a, source="test")

    with session_scope(engine) as s:
        pairs = audit_pairs(s, audit_id=audit_id)
        assert gate_status(s, s.get(Audit, audit_id), final=False)["status"] == "pending"
    ann("A", pairs[0].id, "same", user=99)  # wrong user
    ann("A", 0, "same", user=11)  # unknown task
    ann("A", pairs[0].id, "same", user=11, cancelled=True)
    for p in pairs:
        truth = p.automatic or "same"
        ann("A", p.id, truth, user=11)
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=False)
        assert res["status"] == "pending" and res["progress"]["A"] == len(pairs)
        assert res["labels"] == {
            "wrong_user": 1,
            "unknown_task": 1,
            "cancelled": 1,
            "counted": len(pairs),
        }
    flipped = pairs[1]
    for p in pairs:
        truth = p.automatic or "same"
        other = "different" if truth == "same" else "same"
        ann("B", p.id, other if p.id == flipped.id else truth, user=12)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        res = gate_status(s, audit, final=False)
        assert res["status"] == "preliminary" and res["n_needing_adjudication"] == 1
        with pytest.raises(FreezeError, match="need adjudication"):
            gate_status(s, audit, final=True)
        # adjudicator task for the disagreement
        s.add(
            AuditTask(
                audit_id=audit_id,
                role="adjudicator",
                pair_id=flipped.id,
                project_id=3,
                task_id=3000 + flipped.id,
                left_is_a=False,
            )
        )
    bind_fake(engine, audit_id, "adjudicator", project_id=3, user_id=13)
    with session_scope(engine) as s:
        a = ParsedAnnotation(
            next(ann_id), 3000 + flipped.id, 3, 13, flipped.automatic or "same", None, False
        )
        record_annotation(s, get_audit(s, study="s"), a, source="test")
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=True)
        assert res["stage"] == "final"
        rep = res["report"]
        assert rep["automatic_macro_f1"] == pytest.approx(1.0)
        # deterministic: A and B disagree on one pair of 18 (sklearn, then pinned)
        ev = [p for p in pairs if p.automatic is not None]
        assert flipped.id in {p.id for p in ev} and len(ev) == 18
        a_lab = [p.automatic for p in ev]
        b_lab = [_other(p.automatic) if p.id == flipped.id else p.automatic for p in ev]
        hh = f1_score(a_lab, b_lab, average="macro")
        assert rep["human_human_macro_f1"] == pytest.approx(hh, abs=1e-12)
        assert rep["human_human_macro_f1"] == pytest.approx(257 / 275, abs=1e-12)  # 0.9345
        assert rep["gap"] == pytest.approx(hh - 1.0, abs=1e-12)
        assert (res["status"], rep["passed"], rep["n_adjudicated"]) == ("passed", True, 1)
        assert rep["automatic_coverage"] == pytest.approx(29 / 30)


def test_updated_annotation_replaces_label_and_keeps_history(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        pid = audit_pairs(s, audit_id=audit_id)[0].id
        for label in ("same", "same", "different"):
            record_annotation(
                s,
                audit,
                ParsedAnnotation(7, tasks["A"][pid], 1, 11, label, None, False),
                source="webhook",
            )
    with session_scope(engine) as s:
        from rcea.study.pair_audit.labels import current_labels

        assert current_labels(s, s.get(Audit, audit_id))["A"][pid] == "different"
        history = [e.payload["label"] for e in list_events(s) if e.kind.startswith("annotation")]
        assert history == ["same", "different"]


LEAKS = {
    # provenance field -> (column overrides for the trajectory, text that leaks it)
    "trajectory_id": ({}, lambda r: f"written by {r.trajectory_id}"),
    "run": ({}, lambda r: r.run),
    "model": ({}, lambda r: r.model),
    "question_id": ({}, lambda r: r.question_id),
    "step": ({}, lambda r: str(r.step)),
    "seed": ({}, lambda r: str(r.seed)),
    "mode": ({}, lambda r: r.mode),
    "run inside text": ({"run": "grpo-clipcov-7b"}, lambda r: "as grpo-clipcov-7b does"),
    "model inside text": ({"model": "qwen2.5-7b"}, lambda r: "qwen2.5-7b wrote this"),
}


@pytest.mark.parametrize("kind", list(LEAKS))
def test_push_refuses_every_leak_before_touching_label_studio(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, kind: str
) -> None:
    """Every kind of provenance in a text is refused, and the scan runs before any server,
    account or project is touched (the people registry must not be used at all)."""
    from rcea.annotation.tasks import BlindingViolation
    from rcea.study.pair_audit.push import push_audit
    from rcea.study.store.models import Trajectory

    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    with session_scope(engine) as s:
        pair = audit_pairs(s, audit_id=audit_id)[0]
        row = s.exec(
            sa.select(Trajectory).where(Trajectory.trajectory_id == pair.trajectory_a)
        ).scalar_one()
        s.expunge(row)
    columns, leak = LEAKS[kind]
    for key, value in columns.items():
        setattr(row, key, value)
    text = leak(row)
    # Frozen tables reject edits, but trajectory rows are ordinary rows.
    with engine.begin() as conn:
        conn.execute(
            sa.update(Trajectory)
            .where(Trajectory.trajectory_id == pair.trajectory_a)
            .values(text=text, **columns)
        )

    class Untouchable:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"Label Studio used: {name}")

    with (
        pytest.raises(BlindingViolation, match=re.escape(text if len(text) < 20 else text[:10])),
        session_scope(engine) as s,
    ):
        push_audit(
            s,
            s.get(Audit, audit_id),
            Untouchable(),  # type: ignore[arg-type]
            annotators={"A": "a@x.test", "B": "b@x.test"},
            webhook=None,
            actor="t",
        )
