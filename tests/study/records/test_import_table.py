"""``rcea import table`` (any JSONL/Parquet/CSV through ``--map``/``--const``) and
``rcea export`` (the interchange schema back out): both checked against a plain
``rcea ingest`` of the same records, field by field and token array by token array."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rcea.app.cli import app
from rcea.pipeline.importers.table import TableSpec, TableSpecError, parse_pairs, read_table
from rcea.pipeline.records import RecordValidationError
from rcea.study.records.export import export_study, study_records
from rcea.study.records.imports import import_table
from rcea.study.records.ingest import ingest_file
from tests.support.helpers import write_jsonl

# interchange field -> the column name the "lab format" uses
RENAME = {
    "trajectory_id": "id",
    "question_id": "problem",
    "text": "completion",
    "reward": "correct",
    "step": "global_step",
    "seed": "sample_idx",
    "token_entropies": "ents",
    "seq_logprob": "logp",
    "answer": "pred",
    "truncated": "hit_limit",
}
CONSTS = {"run": "grpo", "model": "tiny"}


def records() -> list[dict[str, Any]]:
    out = []
    for i in range(12):
        rec: dict[str, Any] = {
            "trajectory_id": f"t{i:03d}",
            "question_id": str(100 + i % 3),
            "text": f'line one of {i}\nline, two "quoted"\n\\boxed{{{i}}}',
            "reward": i % 2,
            "run": "grpo",
            "model": "tiny",
            "step": 10 * (i % 2),
            "seed": i,
            "seq_logprob": -0.25 * i,
            "answer": str(i),
            "truncated": i == 4,
        }
        if i % 4:
            rec["token_entropies"] = [0.125 * i, 0.5, 1.0 / (i + 1)]
        if i == 7:
            del rec["answer"], rec["seq_logprob"]
        out.append(rec)
    return out


def renamed(rec: dict[str, Any]) -> dict[str, Any]:
    return {RENAME.get(k, k): v for k, v in rec.items() if k not in CONSTS}


def write_csv(path: Path, recs: list[dict[str, Any]]) -> Path:
    cols = ["id", "problem", "completion", "correct", "global_step", "sample_idx", "ents"]
    cols += ["logp", "pred", "hit_limit", "extra_col"]
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for rec in recs:
            row = renamed(rec)
            if "ents" in row:
                row["ents"] = json.dumps(row["ents"])
            row["hit_limit"] = "true" if row["hit_limit"] else "false"
            row["extra_col"] = "ignored"
            w.writerow(row)
    return path


def write_parquet(path: Path, recs: list[dict[str, Any]]) -> Path:
    rows = [renamed(r) for r in recs]
    for row in rows:
        row["problem"] = int(row["problem"])  # a numeric question id becomes a string
    cols = sorted({k for r in rows for k in r})
    table = pa.table({c: [r.get(c) for r in rows] for c in cols})
    pq.write_table(table, path)
    return path


MAP_ARGS = [f"{f}={c}" for f, c in RENAME.items()]
CONST_ARGS = [f"{f}={v}" for f, v in CONSTS.items()]
SPEC = TableSpec(parse_pairs(MAP_ARGS, "--map"), parse_pairs(CONST_ARGS, "--const"))


def stored(engine, study: str, data: Path) -> tuple[list[dict[str, Any]], list[Any]]:  # type: ignore[no-untyped-def]
    recs, tokens = study_records(engine, study, data)
    return recs, [None if t is None else t.tolist() for t in tokens]


def ingest(engine, path: Path, study: str, data: Path) -> None:  # type: ignore[no-untyped-def]
    ingest_file(engine, path, study=study, artifacts_dir=data / "artifacts", data_dir=data)


def test_map_import_of_csv_and_parquet_equals_plain_ingest(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    recs = records()
    ingest(engine, write_jsonl(tmp_path / "ref.jsonl", recs), "ref", data)
    ref = stored(engine, "ref", data)
    assert len(ref[0]) == 12 and sum(t is not None for t in ref[1]) == 9
    assert ref[0][4]["truncated"] is True and ref[0][7]["answer"] is None
    for name, path in (
        ("csv", write_csv(tmp_path / "lab.csv", recs)),
        ("pq", write_parquet(tmp_path / "lab.parquet", recs)),
    ):
        res = import_table(
            engine, path, SPEC, study=name, artifacts_dir=data / "artifacts", data_dir=data
        )
        assert (res.n_trajectories, res.n_questions, res.n_imported_files) == (12, 3, 1)
        assert stored(engine, name, data) == ref, name
        again = import_table(
            engine, path, SPEC, study=name, artifacts_dir=data / "artifacts", data_dir=data
        )
        assert (again.n_imported_files, again.n_skipped_files) == (0, 1)
        assert len(stored(engine, name, data)[0]) == 12


def test_export_round_trip(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    recs = records()
    recs[2]["validity"] = 1
    recs[3]["validity"] = 0
    recs[5].update(sampling_temperature=0.7, sampling_top_p=0.95, mode="m1", split="eval")
    ingest(engine, write_jsonl(tmp_path / "ref.jsonl", recs[:6]), "ref", data)
    ingest(engine, write_jsonl(tmp_path / "ref2.jsonl", recs[6:]), "ref", data)  # 2 artifacts
    ref = stored(engine, "ref", data)
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"export.{fmt}"
        res = export_study(engine, "ref", out, fmt=fmt, data_dir=data)
        assert res.n_trajectories == 12
        ingest(engine, out, f"copy-{fmt}", data)
        assert stored(engine, f"copy-{fmt}", data) == ref, fmt
    lines = (tmp_path / "export.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first == recs[0]
    assert "answer" not in json.loads(lines[7])  # absent stays absent
    # Round-trip values are the exact input values (not re-rounded).
    assert json.loads(lines[5])["token_entropies"] == recs[5]["token_entropies"]


def test_errors_name_file_line_and_source_column(tmp_path: Path) -> None:
    recs = records()
    path = write_csv(tmp_path / "lab.csv", recs)
    text = path.read_text(encoding="utf-8").replace("t005,101,", "t005,101,", 1)
    # Record t005 starts on line 1 + 5 * 3 + 1 = 17 (every text spans 3 physical lines).
    bad = text.replace('\\boxed{5}",1,', '\\boxed{5}",yes,', 1)
    assert bad != text
    path.write_text(bad, encoding="utf-8")
    with pytest.raises(RecordValidationError) as info:
        read_table(path, SPEC)
    assert [str(e) for e in info.value.errors] == [
        f"{path}:line 17: correct (reward): must be 0 or 1, got 'yes'"
    ]
    spec = TableSpec(SPEC.mapping, {"run": "grpo", "model": "tiny", "split": "train"})
    with pytest.raises(RecordValidationError) as info:
        read_table(write_csv(tmp_path / "ok.csv", recs), spec)
    assert [str(e) for e in info.value.errors] == [
        f"{tmp_path / 'ok.csv'}:line 2: --const split: must be one of probe, eval, got 'train'"
    ]
    pq_path = write_parquet(tmp_path / "lab.parquet", recs)
    table = pq.read_table(pq_path)
    table = table.set_column(
        table.column_names.index("global_step"),
        "global_step",
        pa.array([0, 10, -1, 10, 0, 10, 0, 10, 0, 10, 0, 10]),
    )
    pq.write_table(table, pq_path)
    with pytest.raises(RecordValidationError) as info:
        read_table(pq_path, SPEC)
    assert [str(e) for e in info.value.errors] == [
        f"{pq_path}:row 2: global_step (step): must be >= 0, got -1"
    ]


def test_spec_errors(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "lab.csv", records())
    with pytest.raises(TableSpecError, match=r"no column named 'nope' \(its columns: id, problem"):
        read_table(path, TableSpec({"text": "nope"}, {}))
    with pytest.raises(TableSpecError, match=r"required field\(s\) trajectory_id, .*--map"):
        read_table(path, TableSpec({}, {}))
    with pytest.raises(TableSpecError, match="'colour' is not a record field"):
        parse_pairs(["colour=red"], "--map")
    with pytest.raises(TableSpecError, match="expected FIELD=VALUE"):
        parse_pairs(["reward"], "--map")
    with pytest.raises(TableSpecError, match="run: given both by --map and --const"):
        read_table(path, TableSpec({**SPEC.mapping, "run": "id"}, SPEC.consts))


def test_cli_import_table_and_export(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rcea.app.cli.common import engine as cli_engine
    from rcea.study.settings import get_settings

    monkeypatch.setenv("RCEA_DATABASE_URL", store_url)
    get_settings.cache_clear()
    runner = CliRunner()
    path = write_csv(tmp_path / "lab.csv", records())
    maps = [a for m in MAP_ARGS for a in ("--map", m)]
    consts = [a for c in CONST_ARGS for a in ("--const", c)]
    out = runner.invoke(app, ["import", "table", str(path), "--study", "lab", *maps, *consts])
    assert out.exit_code == 0, out.output
    assert "imported 12 trajectories, 3 questions from 1 file(s), study lab" in out.output
    nomap = runner.invoke(app, ["import", "table", str(path), "--study", "lab2", "--json"])
    assert nomap.exit_code == 1
    assert "required field(s) trajectory_id" in json.loads(nomap.stdout)["error"]
    exp = runner.invoke(app, ["export", "lab", "--format", "parquet", "--json"])
    assert exp.exit_code == 0, exp.output
    target = Path(json.loads(exp.stdout)["path"])
    assert target == tmp_path / "lab.parquet" and target.exists()
    again = runner.invoke(app, ["export", "lab", "--format", "parquet"])
    assert again.exit_code == 1 and "exists: pass --force" in again.output
    assert runner.invoke(app, ["ingest", str(target), "--study", "back"]).exit_code == 0
    eng = cli_engine()
    data = get_settings().data_dir
    assert stored(eng, "back", data) == stored(eng, "lab", data)
    arr = np.asarray(stored(eng, "back", data)[1][1])
    np.testing.assert_array_equal(arr, [0.125, 0.5, 0.5])
    by_suffix = runner.invoke(app, ["export", "lab", "--out", str(tmp_path / "x.parquet")])
    assert by_suffix.exit_code == 0 and pq.read_table(tmp_path / "x.parquet").num_rows == 12
    clash = runner.invoke(app, ["export", "lab", "--out", "y.parquet", "--format", "jsonl"])
    assert clash.exit_code == 1 and "is a .parquet name but --format is jsonl" in clash.output
    unknown = runner.invoke(app, ["export", "nope"])
    assert unknown.exit_code == 1 and "no study named 'nope'" in unknown.output
