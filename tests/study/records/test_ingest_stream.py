"""A JSONL file larger than one chunk is read, validated and written chunk by chunk in
ONE transaction: same rows as a one-chunk ingest, all or nothing, ids and question texts
checked across chunks, artifacts removed on failure."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

import rcea.study.records.ingest as ingest_mod
from rcea.pipeline.records import RecordValidationError, iter_jsonl_batches, iter_parquet_batches
from rcea.study.store import Ingest, Question, Trajectory
from rcea.study.store.artifacts import read_token_entropies
from tests.support.helpers import ingest_into, make_record, store_counts, write_jsonl

_counts = store_counts
_ingest = ingest_into


def _empty_store(engine) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        conn.execute(sa.delete(Trajectory))
        conn.execute(sa.delete(Question))
        conn.execute(sa.delete(Ingest))


def _records(n: int) -> list[dict]:
    recs = [make_record(i, token_entropies=[0.01 * i, 0.5, 1.0 + i]) for i in range(n)]
    recs[4].pop("token_entropies")  # a row without tokens inside a chunk that has some
    return recs


def _stored(engine, data: Path) -> list[tuple]:  # type: ignore[no-untyped-def]
    cols = [c for c in Trajectory.__table__.columns if c.name not in ("id", "ingest_id")]
    keep = [c for c in cols if c.name not in ("token_artifact", "token_row")]
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(*keep, Trajectory.token_artifact, Trajectory.token_row).order_by(
                Trajectory.trajectory_id
            )
        ).all()
    out = []
    for r in rows:
        scalars = tuple(r[: len(keep)])
        art, row = r[len(keep)], r[len(keep) + 1]
        tokens = None if art is None else tuple(read_token_entropies(data / art, [row])[0].tolist())
        out.append((*scalars, tokens))
    return out


def test_reader_yields_bounded_chunks_with_file_line_numbers(tmp_path: Path) -> None:
    recs = _records(11)
    path = write_jsonl(tmp_path / "a.jsonl", recs)
    batches = list(iter_jsonl_batches(path, chunk_records=4))
    assert [len(b) for b in batches] == [4, 4, 3]
    assert batches[2].locations == ["line 9", "line 10", "line 11"]
    assert [t for b in batches for t in b.columns["trajectory_id"]] == [
        r["trajectory_id"] for r in recs
    ]
    exact = list(iter_jsonl_batches(path, chunk_records=11))
    assert [len(b) for b in exact] == [11]
    with pytest.raises(ValueError, match="at least 1"):
        list(iter_jsonl_batches(path, chunk_records=0))


def test_streamed_ingest_equals_one_chunk_ingest(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    recs = _records(23)
    one = tmp_path / "one"
    path = write_jsonl(tmp_path / "a.jsonl", recs)
    whole = _ingest(engine, path, one)
    expected = _stored(engine, one)
    _empty_store(engine)
    monkeypatch.setattr(ingest_mod, "STREAM_CHUNK", 5)
    streamed_dir = tmp_path / "streamed"
    res = _ingest(engine, path, streamed_dir)
    assert (res.n_trajectories, res.n_questions, res.n_new_questions) == (
        whole.n_trajectories,
        whole.n_questions,
        whole.n_new_questions,
    )
    assert _stored(engine, streamed_dir) == expected
    # One ingest row for the file, its hash makes a second ingest a no-op.
    assert _counts(engine)["ingest"] == 1
    assert len(list((streamed_dir / "artifacts").rglob("*.parquet"))) == 5
    again = _ingest(engine, path, streamed_dir)
    assert again.already_ingested and again.ingest_id == res.ingest_id
    assert _counts(engine)["trajectory"] == 23


def test_duplicate_across_chunks_writes_nothing(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(ingest_mod, "STREAM_CHUNK", 4)
    recs = _records(12)
    recs[10]["trajectory_id"] = recs[1]["trajectory_id"]
    with pytest.raises(RecordValidationError, match=r"line 11: trajectory_id: duplicate .*earlier"):
        _ingest(engine, write_jsonl(tmp_path / "a.jsonl", recs), tmp_path)
    assert _counts(engine) == {"study": 0, "question": 0, "ingest": 0, "trajectory": 0}
    assert not list((tmp_path / "artifacts").rglob("*.parquet*"))


def test_bad_record_in_a_late_chunk_writes_nothing(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(ingest_mod, "STREAM_CHUNK", 4)
    recs = _records(12)
    recs[9]["reward"] = 3
    with pytest.raises(RecordValidationError, match="line 10: reward"):
        _ingest(engine, write_jsonl(tmp_path / "a.jsonl", recs), tmp_path)
    assert _counts(engine) == {"study": 0, "question": 0, "ingest": 0, "trajectory": 0}
    assert not list((tmp_path / "artifacts").rglob("*.parquet*"))


def test_store_duplicate_and_question_conflict_across_chunks(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    _ingest(engine, write_jsonl(tmp_path / "a.jsonl", [make_record(100)]), tmp_path)
    monkeypatch.setattr(ingest_mod, "STREAM_CHUNK", 3)
    clash = [make_record(i) for i in range(95, 101)]  # t00100 is stored, in chunk 2
    with pytest.raises(RecordValidationError, match=r"line 6: trajectory_id: .*already exists"):
        _ingest(engine, write_jsonl(tmp_path / "b.jsonl", clash), tmp_path)
    assert _counts(engine)["trajectory"] == 1
    texts = [make_record(i, question="What is 2+2?") for i in range(6)]
    for r in texts:
        r["question_id"] = "q-same"
    for r in texts[3:]:  # chunk 2 agrees with itself, not with chunk 1 (already written)
        r["question"] = "What is 3+3?"
    with pytest.raises(RecordValidationError, match="line 4: question: .*different question text"):
        _ingest(engine, write_jsonl(tmp_path / "c.jsonl", texts), tmp_path)
    assert _counts(engine)["trajectory"] == 1
    assert _counts(engine)["ingest"] == 1


def _write_parquet(path: Path, recs: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(recs), path, row_group_size=4)
    return path


def test_parquet_reader_chunks_keep_file_row_numbers(tmp_path: Path) -> None:
    recs = _records(11)
    path = _write_parquet(tmp_path / "a.parquet", recs)
    batches = list(iter_parquet_batches(path, chunk_records=5))
    assert [len(b) for b in batches] == [5, 5, 1]
    assert batches[1].locations == [f"row {i}" for i in range(5, 10)]
    assert [t for b in batches for t in b.columns["trajectory_id"]] == [
        r["trajectory_id"] for r in recs
    ]


def test_streamed_parquet_ingest_equals_one_chunk_and_is_all_or_nothing(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    recs = _records(17)
    path = _write_parquet(tmp_path / "a.parquet", recs)
    one = tmp_path / "one"
    _ingest(engine, path, one)
    expected = _stored(engine, one)
    _empty_store(engine)
    monkeypatch.setattr(ingest_mod, "STREAM_CHUNK", 5)
    streamed_dir = tmp_path / "streamed"
    res = _ingest(engine, path, streamed_dir)
    assert res.n_trajectories == 17 and _stored(engine, streamed_dir) == expected
    _empty_store(engine)
    bad = _records(17)
    bad[12]["reward"] = 3
    bad_dir = tmp_path / "bad"
    with pytest.raises(RecordValidationError, match="row 12: reward"):
        _ingest(engine, _write_parquet(tmp_path / "bad.parquet", bad), bad_dir)
    assert _counts(engine)["trajectory"] == 0 and _counts(engine)["ingest"] == 0
    assert not list((bad_dir / "artifacts").rglob("*.parquet*"))


def test_a_written_chunk_is_let_go(engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Memory stays one chunk: when chunk k is written, no earlier chunk is still
    referenced (by the caller, the head list or the loop)."""
    import gc
    import weakref

    monkeypatch.setattr(ingest_mod, "STREAM_CHUNK", 4)
    refs: list[weakref.ref] = []
    real_iter, real_insert = ingest_mod.iter_record_batches, ingest_mod._insert_trajectories

    def tracked(*a, **kw):  # type: ignore[no-untyped-def]
        for b in real_iter(*a, **kw):
            refs.append(weakref.ref(b))
            yield b

    alive_before: list[int] = []

    def insert(session, batch, *a, **kw):  # type: ignore[no-untyped-def]
        gc.collect()
        k = next(i for i, r in enumerate(refs) if r() is batch)
        alive_before.append(sum(r() is not None for r in refs[:k]))
        return real_insert(session, batch, *a, **kw)

    monkeypatch.setattr(ingest_mod, "iter_record_batches", tracked)
    monkeypatch.setattr(ingest_mod, "_insert_trajectories", insert)
    res = _ingest(engine, write_jsonl(tmp_path / "a.jsonl", _records(18)), tmp_path)
    assert res.n_trajectories == 18 and len(alive_before) == 5
    assert alive_before == [0, 0, 0, 0, 0]
