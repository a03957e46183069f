"""Control characters in records: `rcea validate` and `rcea ingest` refuse them with the
line and the field, before any store write, and never print a text next to its
provenance (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.pipeline.records import RecordValidationError, read_records
from rcea.study.records.ingest import write_batch
from rcea.study.store import Ingest, Question, Study, Trajectory
from tests.support.helpers import make_record, write_jsonl

runner = CliRunner()
SECRET_TEXT = "the-secret-solution-text"


def _nul_file(tmp_path: Path, name: str = "nul.jsonl") -> Path:
    recs = [make_record(i, run="grpo-secret-run") for i in range(5)]
    recs[2]["text"] = SECRET_TEXT + "\x00 and more"  # line 3
    path = write_jsonl(tmp_path / name, recs)
    assert "\\u0000" in path.read_text().splitlines()[2]  # JSON escapes it
    return path


def test_validate_names_line_3_and_field_text_without_printing_it(tmp_path: Path) -> None:
    path = _nul_file(tmp_path)
    out = runner.invoke(app, ["validate", str(path)])
    assert out.exit_code == 1
    assert out.output.splitlines() == [
        f"{path}:line 3: text: contains a control character (U+0000) at character 24; "
        "only tab, line feed and carriage return are allowed",
        f"invalid: 1 error(s) in {path}",
    ]
    assert SECRET_TEXT not in out.output and "grpo-secret-run" not in out.output
    js = runner.invoke(app, ["validate", str(path), "--json"])
    assert js.exit_code == 1
    data = json.loads(js.stdout)
    assert [(e["location"], e["field"]) for e in data["errors"]] == [("line 3", "text")]
    assert SECRET_TEXT not in js.stdout


def test_every_string_field_and_every_c0_control_is_checked(tmp_path: Path) -> None:
    recs = [make_record(i) for i in range(8)]
    recs[0]["trajectory_id"] = "t\x1b[0m"
    recs[1]["question_id"] = "q\x01"
    recs[2]["run"] = "r\x07"
    recs[3]["model"] = "m\x0b"
    recs[4]["answer"] = "\x0c5"
    recs[5]["mode"] = "m\x1f"
    recs[6]["text"] = "lone \ud800 surrogate"
    recs[7]["text"] = "tab\tlf\ncr\r\n DEL\x7f C1\x85 bidi\u202e are stored"  # allowed
    with pytest.raises(RecordValidationError) as info:
        read_records(write_jsonl(tmp_path / "c.jsonl", recs))
    got = [(e.location, e.field, e.message.split(";")[0]) for e in info.value.errors]
    assert got == [
        ("line 1", "trajectory_id", "contains a control character (U+001B) at character 1"),
        ("line 2", "question_id", "contains a control character (U+0001) at character 1"),
        ("line 3", "run", "contains a control character (U+0007) at character 1"),
        ("line 4", "model", "contains a control character (U+000B) at character 1"),
        ("line 5", "answer", "contains a control character (U+000C) at character 0"),
        ("line 6", "mode", "contains a control character (U+001F) at character 1"),
        ("line 7", "text", "contains a lone surrogate (U+D800) at character 5"),
    ]


def test_parquet_rows_with_nul_are_named(tmp_path: Path) -> None:
    recs = [make_record(i) for i in range(3)]
    recs[1]["text"] = "x\x00"
    path = tmp_path / "r.parquet"
    pq.write_table(pa.Table.from_pylist(recs), path)
    with pytest.raises(RecordValidationError) as info:
        read_records(path)
    assert [(e.location, e.field) for e in info.value.errors] == [("row 1", "text")]


@pytest.fixture
def store(store_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    return store_url


def _counts(engine) -> dict[str, int]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return {
            t.__tablename__: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar()
            for t in (Study, Question, Ingest, Trajectory)
        }


def test_ingest_with_nul_leaves_the_store_unchanged(store: str, engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = write_jsonl(tmp_path / "good.jsonl", [make_record(100 + i) for i in range(4)])
    assert runner.invoke(app, ["ingest", str(good), "--study", "s"]).exit_code == 0
    before = _counts(engine)
    assert before == {"study": 1, "question": 3, "ingest": 1, "trajectory": 4}
    for study in ("s", "fresh"):  # an existing study and a new one
        out = runner.invoke(app, ["ingest", str(_nul_file(tmp_path)), "--study", study])
        assert out.exit_code == 1
        assert "line 3: text: contains a control character (U+0000)" in out.output
        assert "nothing ingested" in out.output
        assert SECRET_TEXT not in out.output and "Traceback" not in out.output
        assert _counts(engine) == before


def test_a_store_refusal_never_prints_the_rows(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Defence behind validation: if the database refuses rows anyway (here PostgreSQL and
    a NUL smuggled past validation), the error names the lines, not their texts."""
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite stores NUL; only PostgreSQL refuses it")
    batch = read_records(write_jsonl(tmp_path / "ok.jsonl", [make_record(i) for i in range(3)]))
    batch.columns["text"][1] = SECRET_TEXT + "\x00"
    with pytest.raises(RecordValidationError) as info:
        write_batch(
            engine,
            batch,
            study="s",
            sha="0" * 64,
            artifacts_dir=tmp_path / "art",
            data_dir=tmp_path,
            progress=False,
        )
    message = str(info.value)
    assert "the store refused the records of line 1 to line 3: DataError" in message
    (err,) = info.value.errors
    assert (err.location, err.field) == ("file", None)
    assert err.message == (  # the driver's first line, never the rows
        "the store refused the records of line 1 to line 3: "
        "DataError: PostgreSQL text fields cannot contain NUL (0x00) bytes"
    )
    assert SECRET_TEXT not in message and "grpo" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert _counts(engine) == {"study": 0, "question": 0, "ingest": 0, "trajectory": 0}


def test_problem_files_with_nul_are_refused(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Problem statements reach annotators and the store too (`rcea judge problems`)."""
    from rcea.study.records.ingest import ingest_file
    from rcea.study.store import session_scope
    from rcea.study.store.models import JudgeProblem
    from rcea.study.validity_audit.problems import load_problems

    recs = write_jsonl(tmp_path / "s.jsonl", [make_record(i) for i in range(3)])
    ingest_file(engine, recs, study="s", artifacts_dir=tmp_path / "a", data_dir=tmp_path)
    lines = [
        {"question_id": "q0", "problem": "2+3?"},
        {"question_id": "q1", "problem": SECRET_TEXT + "\x00"},
        {"question_id": "q2", "problem": "4+4?"},
    ]
    path = write_jsonl(tmp_path / "problems.jsonl", lines)
    with pytest.raises(ValueError) as info, session_scope(engine) as s:
        load_problems(s, study="s", source=str(path))
    assert str(info.value) == (
        f"{path}:line 2: problem: contains a control character (U+0000) at character 24; "
        "only tab, line feed and carriage return are allowed"
    )
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(JudgeProblem)).scalar() == 0
