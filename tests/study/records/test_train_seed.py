"""The training seed (docs/estimators.md item 17) at import: the record's optional
``train_seed`` is stored, ``rcea ingest --train-seed`` fills it (and refuses a record naming
another), and the verl importer keeps two seeds of one run apart (ids, options, re-import)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.pipeline.importers.verl import VerlOptions
from rcea.pipeline.records import RecordValidationError
from rcea.study.records.imports import import_verl
from rcea.study.records.ingest import ingest_file
from rcea.study.store import Trajectory
from tests.support.helpers import make_record, write_jsonl


def _stored(engine) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.select(
                    Trajectory.trajectory_id, Trajectory.seed, Trajectory.train_seed
                ).order_by(Trajectory.id)
            )
        ]


def _ingest(engine, path: Path, data: Path, **kw: Any):  # type: ignore[no-untyped-def]
    return ingest_file(
        engine, path, study="s", artifacts_dir=data / "artifacts", data_dir=data, **kw
    )


def test_the_record_field_is_stored_apart_from_the_decoding_seed(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = [make_record(0, train_seed=3), make_record(1)]
    _ingest(engine, write_jsonl(tmp_path / "a.jsonl", recs), tmp_path)
    assert _stored(engine) == [("t00000", 0, 3), ("t00001", 1, None)]


def test_a_bad_train_seed_names_line_and_field(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    recs = [make_record(0), make_record(1, train_seed=-1)]
    with pytest.raises(RecordValidationError, match="line 2: train_seed: must be >= 0"):
        _ingest(engine, write_jsonl(tmp_path / "a.jsonl", recs), tmp_path)
    assert _stored(engine) == []


def test_ingest_option_fills_and_refuses_another_seed(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(0), make_record(1, train_seed=2)])
    _ingest(engine, path, tmp_path, train_seed=2)
    assert [r[2] for r in _stored(engine)] == [2, 2]
    clash = write_jsonl(tmp_path / "b.jsonl", [make_record(5), make_record(6, train_seed=1)])
    with pytest.raises(RecordValidationError, match="line 2: train_seed: is 1, but --train-seed 2"):
        _ingest(engine, clash, tmp_path, train_seed=2)
    assert len(_stored(engine)) == 2


def test_the_same_file_under_another_train_seed_is_not_a_noop(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The training seed joins the ingest hash: the second ingest is attempted (and here
    refused on its ids, which the file itself fixes), not skipped as already ingested."""
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(0)])
    _ingest(engine, path, tmp_path, train_seed=1)
    assert _ingest(engine, path, tmp_path, train_seed=1).already_ingested
    with pytest.raises(RecordValidationError, match="already exists"):
        _ingest(engine, path, tmp_path, train_seed=2)


def test_cli_ingest_refuses_a_negative_train_seed_in_json(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [make_record(0)])
    res = CliRunner().invoke(app, ["ingest", str(path), "--train-seed", "-3", "--json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert out["ok"] is False and "--train-seed must be an integer >= 0" in out["error"]


def _dump(directory: Path) -> Path:
    directory.mkdir(parents=True)
    lines = [
        {"input": f"user\nWhat is {q}+1?\nassistant\n", "output": f"\\boxed{{{q + s}}}"}
        | {"score": float(s % 2), "step": 5}
        for q in range(2)
        for s in range(4)
    ]
    (directory / "5.jsonl").write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    return directory


def _verl(engine, dump: Path, tmp_path: Path, train_seed: int | None):  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    opts = VerlOptions(run="grpo", model="m", train_seed=train_seed)
    return import_verl(
        engine, dump, opts, study="s", artifacts_dir=data / "artifacts", data_dir=data
    )


def test_two_seeds_of_one_run_import_side_by_side(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dump = _dump(tmp_path / "rollouts")
    _verl(engine, dump, tmp_path, 1)
    _verl(engine, dump, tmp_path, 2)
    again = _verl(engine, dump, tmp_path, 2)
    assert again.n_imported_files == 0  # the same seed's files again: a no-op
    rows = _stored(engine)
    assert len(rows) == 16
    assert {r[2] for r in rows} == {1, 2}
    assert all(r[0].startswith(f"grpo:m:t{r[2]}:s5:") for r in rows)


def test_an_import_without_train_seed_keeps_its_ids_and_hash(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dump = _dump(tmp_path / "rollouts")
    _verl(engine, dump, tmp_path, None)
    assert _verl(engine, dump, tmp_path, None).n_imported_files == 0
    rows = _stored(engine)
    assert all(r[0].startswith("grpo:m:s5:") and r[2] is None for r in rows)
    assert "train_seed" not in VerlOptions(run="r", model="m").digest_options()


def test_the_option_refuses_a_negative_seed() -> None:
    with pytest.raises(ValueError, match="--train-seed must be an integer >= 0"):
        VerlOptions(run="r", model="m", train_seed=-1)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_writes_the_train_seed_back(engine, tmp_path: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    from rcea.pipeline.records import read_records
    from rcea.study.records.export import export_study

    recs = [make_record(0, train_seed=4), make_record(1)]
    _ingest(engine, write_jsonl(tmp_path / "a.jsonl", recs), tmp_path)
    out = tmp_path / f"out.{fmt}"
    export_study(engine, "s", out, fmt=fmt, data_dir=tmp_path)
    assert read_records(out).columns["train_seed"] == [4, None]
