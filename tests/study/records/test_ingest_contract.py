"""``rcea.study.records.ingest`` pinned exactly, written from the mutants `make mutation` left alive
(docs/mutation.md): the result of a new and of a repeated ingest field by field, the
summaries word for word, new questions counted against the study's earlier ones, the
store-duplicate refusal (message, location, cap) and the stored rows' token links."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import sqlalchemy as sa

from rcea.pipeline.records import RecordValidationError
from rcea.study.records.ingest import IngestResult, file_sha256, ingest_file
from rcea.study.store import Ingest, Question, Trajectory
from tests.support.helpers import make_record, write_jsonl


def _ingest(engine, path: Path, data: Path, study: str = "s") -> IngestResult:  # type: ignore[no-untyped-def]
    return ingest_file(engine, path, study=study, artifacts_dir=data / "artifacts", data_dir=data)


def test_file_sha256_is_the_files_sha256(tmp_path: Path) -> None:
    path = tmp_path / "big.bin"
    data = bytes(range(256)) * 5000  # more than one 1 MiB block
    path.write_bytes(data)
    assert file_sha256(path) == hashlib.sha256(data).hexdigest()


def test_results_and_summaries_exactly(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = write_jsonl(tmp_path / "a.jsonl", [make_record(i) for i in range(4)])
    res = _ingest(engine, first, tmp_path)
    with engine.connect() as conn:
        ing = conn.execute(sa.select(Ingest)).one()
    assert ing.sha256 == file_sha256(first) and ing.n_records == 4 and ing.source == str(first)
    assert res == IngestResult("s", str(first), 4, 3, 3, False, ing.id, None)
    assert res.summary() == "ingested 4 trajectories, 3 questions, study s"
    with engine.connect() as conn:  # no token entropies in the file: no token links
        links = conn.execute(sa.select(Trajectory.token_artifact, Trajectory.token_row)).all()
    assert [tuple(r) for r in links] == [(None, None)] * 4
    assert res.to_dict() == {
        "study": "s",
        "source": str(first),
        "n_trajectories": 4,
        "n_questions": 3,
        "n_new_questions": 3,
        "already_ingested": False,
        "ingest_id": ing.id,
        "token_artifact": None,
    }
    again = _ingest(engine, first, tmp_path)
    assert again == IngestResult("s", str(first), 4, 0, 0, True, ing.id, None)
    assert again.summary() == (
        f"already ingested: {first} is identical to ingest #{ing.id} of study s; nothing written"
    )
    # q0 and q1 exist already; q3 and q4 are new
    second = write_jsonl(
        tmp_path / "b.jsonl",
        [
            make_record(i, question_id=q)
            for i, q in [(10, "q0"), (11, "q3"), (12, "q4"), (13, "q1")]
        ],
    )
    res2 = _ingest(engine, second, tmp_path)
    assert (res2.n_trajectories, res2.n_questions, res2.n_new_questions) == (4, 4, 2)
    assert res2.ingest_id != ing.id and not res2.already_ingested
    with engine.connect() as conn:
        qs = conn.execute(sa.select(Question.question_id).order_by(Question.question_id))
        assert [q for (q,) in qs] == ["q0", "q1", "q2", "q3", "q4"]
    # the same file into another study is a new ingest there, not a no-op
    other = _ingest(engine, first, tmp_path, study="t")
    assert (other.study, other.already_ingested, other.n_new_questions) == ("t", False, 3)


def test_token_artifact_links(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = [make_record(i, token_entropies=[0.5] * (i + 1)) for i in range(3)]
    recs[1].pop("token_entropies")
    res = _ingest(engine, write_jsonl(tmp_path / "t.jsonl", recs), tmp_path)
    assert res.token_artifact is not None
    assert (tmp_path / res.token_artifact).is_file()
    assert not Path(res.token_artifact).is_absolute()
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                Trajectory.trajectory_id,
                Trajectory.token_artifact,
                Trajectory.token_row,
                Trajectory.n_tokens,
                Trajectory.ingest_id,
            ).order_by(Trajectory.trajectory_id)
        ).all()
    assert [tuple(r) for r in rows] == [
        ("t00000", res.token_artifact, 0, 1, res.ingest_id),
        ("t00001", None, None, None, res.ingest_id),
        ("t00002", res.token_artifact, 2, 3, res.ingest_id),
    ]
    with engine.connect() as conn:
        ing = conn.execute(sa.select(Ingest)).one()
        created = {q.created_at for q in conn.execute(sa.select(Question)).all()}
    assert ing.token_artifact == res.token_artifact
    assert created == {ing.created_at}  # questions are dated by their ingest
    again = _ingest(engine, tmp_path / "t.jsonl", tmp_path)
    assert again.already_ingested and again.token_artifact == res.token_artifact


def test_store_duplicates_refused_exactly(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _ingest(engine, write_jsonl(tmp_path / "a.jsonl", [make_record(i) for i in range(3)]), tmp_path)
    clash = write_jsonl(tmp_path / "b.jsonl", [make_record(i) for i in (5, 2, 6, 0)])
    with pytest.raises(RecordValidationError) as info:
        _ingest(engine, clash, tmp_path)
    assert [str(e) for e in info.value.errors] == [
        f"{clash}:line 2: trajectory_id: trajectory_id 't00002' already exists in the store",
        f"{clash}:line 4: trajectory_id: trajectory_id 't00000' already exists in the store",
    ]
    assert not info.value.truncated


def test_store_duplicates_capped_at_100(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = [make_record(i) for i in range(101)]
    _ingest(engine, write_jsonl(tmp_path / "a.jsonl", recs), tmp_path)
    again = write_jsonl(tmp_path / "b.jsonl", [*recs, make_record(500)])
    with pytest.raises(RecordValidationError) as info:
        _ingest(engine, again, tmp_path)
    assert len(info.value.errors) == 100 and info.value.truncated
    exactly = write_jsonl(tmp_path / "c.jsonl", [*recs[:100], make_record(501)])
    with pytest.raises(RecordValidationError) as info:
        _ingest(engine, exactly, tmp_path)
    assert len(info.value.errors) == 100 and not info.value.truncated


def test_missing_file(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FileNotFoundError, match=f"^{tmp_path / 'no.jsonl'}: no such file$"):
        _ingest(engine, tmp_path / "no.jsonl", tmp_path)


def test_unknown_fields_refused_unless_allowed(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_jsonl(tmp_path / "x.jsonl", [make_record(0, colour="red")])
    with pytest.raises(RecordValidationError) as info:
        _ingest(engine, path, tmp_path)
    assert [str(e) for e in info.value.errors] == [
        f"{path}:line 1: colour: unknown field (not in the record schema; --allow-extra ignores it)"
    ]
    res = ingest_file(
        engine, path, study="s", artifacts_dir=tmp_path / "a", data_dir=tmp_path, allow_extra=True
    )
    assert res.n_trajectories == 1


def test_repeat_is_per_study(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A file ingested into study s is new to study t, even once t has ingests of its own."""
    a = write_jsonl(tmp_path / "a.jsonl", [make_record(0)])
    b = write_jsonl(tmp_path / "b.jsonl", [make_record(1)])
    _ingest(engine, a, tmp_path, study="s")
    _ingest(engine, b, tmp_path, study="t")
    res = _ingest(engine, a, tmp_path, study="t")
    assert not res.already_ingested and res.n_trajectories == 1
