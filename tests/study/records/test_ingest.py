"""Ingest is all-or-nothing, idempotent for identical files, and keeps token arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from rcea.pipeline.records import RecordValidationError
from rcea.study.store import Trajectory
from rcea.study.store.artifacts import read_token_entropies
from tests.support.helpers import ingest_into, make_record, store_counts, write_jsonl

_counts = store_counts
_ingest = ingest_into


def test_ingest_valid_file(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = [make_record(i, token_entropies=[0.1 * i, 0.2, 0.3]) for i in range(10)]
    recs[3].pop("token_entropies")
    res = _ingest(engine, write_jsonl(tmp_path / "a.jsonl", recs), tmp_path)
    assert (res.n_trajectories, res.n_questions, res.already_ingested) == (10, 3, False)
    assert res.summary() == "ingested 10 trajectories, 3 questions, study s"
    assert _counts(engine) == {"study": 1, "question": 3, "ingest": 1, "trajectory": 10}
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                Trajectory.trajectory_id,
                Trajectory.token_artifact,
                Trajectory.token_row,
                Trajectory.mean_token_entropy,
            ).order_by(Trajectory.trajectory_id)
        ).all()
    assert rows[3].token_artifact is None and rows[3].mean_token_entropy is None
    art = tmp_path / rows[5].token_artifact
    arrays = read_token_entropies(art, [rows[5].token_row, rows[9].token_row])
    np.testing.assert_allclose(arrays[0], [0.5, 0.2, 0.3])
    np.testing.assert_allclose(arrays[1], [0.9, 0.2, 0.3])
    assert rows[5].mean_token_entropy == pytest.approx(1.0 / 3)


def test_invalid_file_ingests_nothing(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = [make_record(i, token_entropies=[0.5]) for i in range(10)]
    recs[7]["reward"] = 3
    with pytest.raises(RecordValidationError, match="line 8: reward"):
        _ingest(engine, write_jsonl(tmp_path / "bad.jsonl", recs), tmp_path)
    assert _counts(engine) == {"study": 0, "question": 0, "ingest": 0, "trajectory": 0}
    assert not list((tmp_path / "artifacts").rglob("*.parquet*"))


def test_reingest_identical_file_is_noop(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(i) for i in range(4)])
    first = _ingest(engine, path, tmp_path)
    again = _ingest(engine, path, tmp_path)
    assert again.already_ingested and again.ingest_id == first.ingest_id
    assert "already ingested" in again.summary()
    assert _counts(engine)["trajectory"] == 4


def test_duplicate_against_store_is_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _ingest(engine, write_jsonl(tmp_path / "a.jsonl", [make_record(i) for i in range(4)]), tmp_path)
    clash = [make_record(i) for i in range(3, 8)]  # t00003 already stored
    with pytest.raises(RecordValidationError, match="line 1: trajectory_id: .*already exists"):
        _ingest(engine, write_jsonl(tmp_path / "b.jsonl", clash), tmp_path)
    assert _counts(engine)["trajectory"] == 4
    # Same ids into another study are fine: ids are unique per study.
    _ingest(engine, write_jsonl(tmp_path / "b.jsonl", clash), tmp_path, study="other")
    assert _counts(engine)["trajectory"] == 9


def test_failure_mid_transaction_rolls_back(
    engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """A conflict in the third insert chunk (a concurrent writer won the race) undoes the
    whole ingest: no rows, no question, no ingest record, no artifact."""
    import rcea.study.records.ingest as ingest_mod

    _ingest(engine, write_jsonl(tmp_path / "first.jsonl", [make_record(7)]), tmp_path)
    before = _counts(engine)
    artifacts_before = sorted((tmp_path / "artifacts").rglob("*.parquet*"))
    monkeypatch.setattr(ingest_mod, "INSERT_CHUNK", 3)
    # Pretend the duplicate check ran before the other writer committed.
    monkeypatch.setattr(ingest_mod, "_refuse_store_duplicates", lambda *a, **k: None)
    recs = [make_record(i, token_entropies=[0.5], question_id=f"new{i}") for i in range(10)]
    path = write_jsonl(tmp_path / "a.jsonl", recs)
    with pytest.raises(
        RecordValidationError, match="conflicts with records written meanwhile"
    ) as info:
        _ingest(engine, path, tmp_path)
    (err,) = info.value.errors
    assert (err.source, err.location, err.field) == (str(path), "file", "trajectory_id")
    assert err.message.startswith("conflicts with records written meanwhile: ")
    assert _counts(engine) == before
    assert sorted((tmp_path / "artifacts").rglob("*.parquet*")) == artifacts_before
