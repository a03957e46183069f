"""The codebook cycle on the store with the oracle backend (SQLite and PostgreSQL):
induce → merge → freeze → assign ×2 → reconcile → researcher queue → new data → NEW →
extension review → v2 (parent recorded) → reassignment of the affected only → export,
checked against the domain's ground truth."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlmodel import select

from rcea.pipeline.codebook import OracleBackend
from rcea.study.codebook import (
    CodebookFrozenError,
    CodebookStageError,
    assign,
    decide_extension,
    edit_draft,
    export_partition,
    freeze_codebooks,
    induce,
    list_extensions,
    merge,
    reconcile,
    request_extensions,
    researcher_queue,
    resolve_dispute,
)
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import (
    CodebookAssignment,
    CodebookBatch,
    CodebookVersion,
    Partition,
    PartitionAssignment,
)
from tests.support.codebook_study import PHASE1, PHASE2, assert_recovers, first_half, ingest, truth
from tests.support.fake_llm import strategy_of


def test_oracle_cycle_extends_refreezes_and_exports(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    oracle = OracleBackend(strategy_of)
    kw = {"study": "s", "backend": oracle, "actor": "alice"}
    ingest(engine, tmp_path, PHASE1, 0, "phase1")
    first_half(engine, oracle)
    with session_scope(engine) as s:
        versions = s.exec(select(CodebookVersion).order_by(CodebookVersion.question_id)).all()
        assert [(v.question_id, v.version) for v in versions] == [
            ("q00", 1),
            ("q01", 1),
            ("q02", 1),
        ]
        assert [sorted(m["name"] for m in v.modes) for v in versions] == [
            ["direct", "distribute"],
            ["direct", "factor"],
            ["direct", "distribute"],
        ]
        queue = researcher_queue(s, study="s")
        assert len(queue) == 2 and {d.question_id for d in queue} == {"q01"}
        assert all("special label NONE" in d.reasons for d in queue)
        q_ids = [d.id for d in queue]

    # Every stage is idempotent: a rerun plans nothing new and calls nothing.
    again = assign(engine, batch_size=3, **kw)
    assert again.n_run == 0 and again.n_skipped == again.n_batches > 0
    assert induce(engine, batch_size=4, **kw).n_run == 0
    assert reconcile(engine, **kw).n_run == 0

    # Export refuses while the researcher queue is not empty.
    with pytest.raises(CodebookStageError, match="2 researcher queue"), session_scope(engine) as s:
        export_partition(s, study="s", actor="alice", artifacts_dir=tmp_path / "art")
    with session_scope(engine) as s:
        for d in q_ids:
            resolve_dispute(s, study="s", dispute_id=d, actor="bob", uncertain=True)
        with pytest.raises(CodebookStageError, match="already resolved"):
            resolve_dispute(s, study="s", dispute_id=q_ids[0], actor="bob", mode="m1")

    # New checkpoint data brings a strategy q00's codebook lacks.
    ingest(engine, tmp_path, PHASE2, 100, "phase2")
    before = assign(engine, batch_size=3, **kw)
    assert before.n_skipped > 0 and before.n_run == 4  # 5 new trajectories, 2 passes, ≤3 each
    rec = reconcile(engine, **kw)
    assert rec.details["arbitration"] == {"resolved": 0, "new": 3, "researcher": 0}
    with session_scope(engine) as s:
        (ext,) = request_extensions(s, study="s", actor="alice")
        assert ext.question_id == "q00" and ext.status == "pending"
        assert [(p["name"], len(p["trajectory_ids"])) for p in ext.proposals] == [("factor", 3)]
        assert request_extensions(s, study="s", actor="alice")[0].id == ext.id  # no duplicate
        ext, v2 = decide_extension(
            s, study="s", extension_id=ext.id, approve=True, actor="carol", reason="real method"
        )
        v1 = s.exec(
            select(CodebookVersion).where(
                CodebookVersion.question_id == "q00", CodebookVersion.version == 1
            )
        ).one()
        assert v2 is not None and v2.version == 2 and v2.parent_id == v1.id
        assert "extension #" in v2.reason and "real method" in v2.reason
        assert [m["id"] for m in v2.modes] == ["m1", "m2", "m3"]
        assert v2.modes[:2] == v1.modes and v2.modes[2]["name"] == "factor"
        assert len(ext.affected_trajectory_ids) == 3
        v2_id = v2.id
    re_assign = assign(engine, batch_size=3, **kw)
    assert re_assign.n_run == 2  # only the 3 affected trajectories, twice
    with session_scope(engine) as s:
        rows = s.exec(
            select(CodebookAssignment).where(CodebookAssignment.version_id == v2_id)
        ).all()
        assert len(rows) == 6 and {r.label for r in rows} == {"m3"}
    reconcile(engine, **kw)

    with session_scope(engine) as s:
        out = export_partition(s, study="s", actor="alice", artifacts_dir=tmp_path / "art")
        n_acc = sum(len(v) for v in PHASE1.values()) + len(PHASE2["q00"])
        assert out["created"] and out["n_accepted"] == n_acc
        assert out["n_uncertain"] == 2 and out["n_included"] == n_acc - 2
        assert out["n_modes"] == 7 and out["source"].startswith("codebook:")
        part = s.get(Partition, out["partition_id"])
        assert part.content_hash == out["partition_hash"] and part.n_uncertain == 2
        labels = {
            r.trajectory_id: (r.question_id, r.mode)
            for r in s.exec(
                select(PartitionAssignment).where(PartitionAssignment.partition_id == part.id)
            ).all()
        }
        freezes = [e.payload for e in list_events(s, kind="codebook.freeze")]
        assert [(f["question_id"], f["version"]) for f in freezes][-1] == ("q00", 2)
        assert freezes[-1]["parent_id"] == freezes[0]["version_id"]
        assert len(list_events(s, kind="codebook.extension.approve")) == 1
        assert len(list_events(s, kind="partition.freeze")) == 1
        again = export_partition(s, study="s", actor="alice", artifacts_dir=tmp_path / "art")
        assert not again["created"] and again["partition_id"] == part.id
    assert_recovers(labels, truth(engine))
    table = pq.read_table(out["parquet"]).to_pylist()
    assert len(table) == n_acc
    by_tid = {r["trajectory_id"]: r for r in table}
    assert {r["mode"] for r in table if labels[r["trajectory_id"]][1] is None} == {"uncertain"}
    assert all(by_tid[t]["mode"] == m for t, (_, m) in labels.items() if m is not None)
    assert {r["codebook_version"] for r in table if r["question_id"] == "q00"} == {1, 2}

    # Frozen codebooks reject edits: in the domain layer and in the database.
    with pytest.raises(CodebookFrozenError, match="frozen"), session_scope(engine) as s:
        edit_draft(s, study="s", question_id="q00", op="rename", actor="x", mode="m1", name="y")
    for stmt in ("UPDATE codebook_version SET reason = 'x'", "DELETE FROM codebook_version"):
        with (
            pytest.raises(DBAPIError, match="codebook_version rows are frozen"),
            engine.begin() as conn,
        ):
            conn.execute(sa.text(stmt))
    with pytest.raises(DBAPIError, match="codebook_export rows are frozen"), engine.begin() as conn:
        conn.execute(sa.text("UPDATE codebook_export SET n_modes = 0"))


def test_draft_edits_rejection_and_researcher_proposals(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    oracle = OracleBackend(strategy_of)
    kw = {"study": "s", "backend": oracle, "actor": "alice"}
    ingest(engine, tmp_path, {"q00": ["direct", "distribute", "direct", "factor"]}, 0, "a")
    # Induce on a sample that misses the rare strategy, so assignment meets it as NEW.
    induce(engine, batch_size=4, sample_per_question=2, seed=5, **kw)
    merge(engine, **kw)
    with session_scope(engine) as s:
        draft = edit_draft(
            s, study="s", question_id="q00", op="add", actor="bob", name="guess", criterion="?"
        )
        names = [m["name"] for m in draft.modes]
        assert "guess" in names and "factor" not in names
        edit_draft(
            s, study="s", question_id="q00", op="drop", actor="bob", mode=draft.modes[-1]["id"]
        )
        with pytest.raises(CodebookStageError, match="no draft"):
            edit_draft(s, study="s", question_id="q9", op="drop", actor="bob", mode="m1")
        (v1,) = freeze_codebooks(s, study="s", actor="alice")
        assert freeze_codebooks(s, study="s", actor="alice") == []  # idempotent
        assert len(list_events(s, kind="codebook.edit")) == 2
    assign(engine, batch_size=2, **kw)
    reconcile(engine, **kw)
    with session_scope(engine) as s:
        (ext,) = request_extensions(s, study="s", actor="alice")
        new_ids = [t for p in ext.proposals for t in p["trajectory_ids"]]
        assert len(new_ids) >= 1
        ext, none = decide_extension(
            s, study="s", extension_id=ext.id, approve=False, actor="carol", reason="noise"
        )
        assert none is None and ext.status == "rejected"
        queue = researcher_queue(s, study="s")
        assert sorted(d.trajectory_id for d in queue) == sorted(new_ids)
        assert all("rejected" in d.reasons[-1] for d in queue)
        with pytest.raises(CodebookStageError, match="already rejected"):
            decide_extension(s, study="s", extension_id=ext.id, approve=True, actor="c")
        with pytest.raises(CodebookStageError, match="no mode 'm9'"):
            resolve_dispute(s, study="s", dispute_id=queue[0].id, actor="bob", mode="m9")
        with pytest.raises(CodebookStageError, match="exactly one"):
            resolve_dispute(s, study="s", dispute_id=queue[0].id, actor="bob")
        # A researcher can still propose the mode; it becomes a new request.
        for d in queue:
            resolve_dispute(
                s, study="s", dispute_id=d.id, actor="bob", new_name="factor", new_criterion="cf"
            )
        (ext2,) = request_extensions(s, study="s", actor="alice")
        assert ext2.id != ext.id and ext2.proposals[0]["name"] == "factor"
        assert [e.status for e in list_extensions(s, study="s")] == ["rejected", "pending"]
        _, v2 = decide_extension(s, study="s", extension_id=ext2.id, approve=True, actor="c")
        assert v2 is not None and v2.parent_id == v1.id
        with pytest.raises(CodebookStageError, match="raised against version 1"):
            resolve_dispute(s, study="s", dispute_id=queue[0].id, actor="bob", uncertain=True)
        with pytest.raises(CodebookStageError, match="no extension request"):
            decide_extension(s, study="s", extension_id=999, approve=True, actor="c")
    assign(engine, batch_size=2, **kw)
    reconcile(engine, **kw)
    with session_scope(engine) as s:
        out = export_partition(s, study="s", actor="alice", artifacts_dir=tmp_path / "art")
        assert out["n_uncertain"] == 0 and out["n_included"] == 4
        n_batches = s.exec(
            select(sa.func.count())
            .select_from(CodebookBatch)
            .where(CodebookBatch.status == "planned")
        ).one()
        assert n_batches == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_second_pass_never_repeats_a_first_pass_batch(engine, tmp_path: Path, seed: int) -> None:  # type: ignore[no-untyped-def]
    """Two solutions per question and batches of two: each pass is one batch per question,
    and a shuffle repeats the first pass's order half the time. A repeated order is the
    same prompt (served from the cache), so pass 2 would not be an independent pass."""
    questions = {f"q{i:02d}": ["direct", "distribute"] for i in range(10)}
    ingest(engine, tmp_path, questions, step=0, name="two")
    oracle = OracleBackend(strategy_of)
    kw = {"study": "s", "backend": oracle, "actor": "alice"}
    induce(engine, batch_size=4, **kw)
    merge(engine, **kw)
    with session_scope(engine) as s:
        freeze_codebooks(s, study="s", actor="alice")
    assign(engine, batch_size=2, seed=seed, **kw)
    with session_scope(engine) as s:
        rows = s.exec(select(CodebookBatch).where(CodebookBatch.stage == "assign")).all()
        by_q: dict[str, dict[int, list[tuple[str, ...]]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            by_q[r.question_id][r.pass_no].append(tuple(r.trajectory_ids))
    assert len(by_q) == len(questions)
    for q, passes in by_q.items():
        assert set(passes) == {1, 2}, q
        assert not set(passes[1]) & set(passes[2]), (q, passes)


def test_assign_in_chunks_equals_one_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``assign`` plans and runs bounded chunks of questions (memory flat in the study's
    size): chunks of one question give the same batches, labels and report as one chunk,
    and a rerun in chunks plans and asks nothing new."""
    import rcea.study.codebook.stages as stages
    from rcea.study.store import make_engine, upgrade

    questions = {
        **PHASE1,
        "q03": ["factor", "direct"] * 4,
        "q04": ["distribute", "factor", None, "direct"] * 2,
    }
    seen = []
    calls: list[list[str]] = []
    run_chunk = stages._assign_chunk

    def counted(*args, **kw):  # type: ignore[no-untyped-def]
        calls.append(list(args[4]))
        return run_chunk(*args, **kw)

    monkeypatch.setattr(stages, "_assign_chunk", counted)
    for chunk in (10_000, 9):
        monkeypatch.setattr(stages, "ASSIGN_CHUNK", chunk)
        root = tmp_path / f"c{chunk}"
        root.mkdir()
        eng = make_engine(f"sqlite:///{root / 'store.db'}")
        upgrade(eng)
        ingest(eng, root, questions, step=0, name="chunks")
        oracle = OracleBackend(strategy_of)
        kw = {"study": "s", "backend": oracle, "actor": "alice"}
        induce(eng, batch_size=4, **kw)
        merge(eng, **kw)
        with session_scope(eng) as s:
            freeze_codebooks(s, study="s", actor="alice")
        report = assign(eng, batch_size=3, seed=5, **kw).to_dict()
        again = assign(eng, batch_size=3, seed=5, **kw).to_dict()
        with session_scope(eng) as s:
            batches = sorted(
                (b.question_id, b.pass_no, tuple(b.trajectory_ids), b.status, b.batch_key)
                for b in s.exec(select(CodebookBatch).where(CodebookBatch.stage == "assign"))
            )
            labels = sorted(
                (a.question_id, a.trajectory_id, a.pass_no, a.label, a.confidence)
                for a in s.exec(select(CodebookAssignment))
            )
        eng.dispose()
        report.pop("usage", None)
        seen.append((report, batches, labels, again))
    (one, b1, l1, _), (many, b2, l2, rerun) = seen
    assert one == many and one["n_questions"] == len(questions)
    assert b1 == b2 and l1 == l2
    assert len(l1) == 2 * sum(len(v) for v in questions.values())  # every success, twice
    assert rerun["n_run"] == 0 and rerun["n_skipped"] == rerun["n_batches"] == len(b2)
    # one chunk per assign call at first, then one chunk per question
    assert calls == [sorted(questions)] * 2 + [[q] for q in sorted(questions)] * 2
