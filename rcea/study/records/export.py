"""``rcea export``: a study's trajectories back to the interchange schema (JSONL/Parquet).

Rows come out in store order (ingest by ingest, line by line) with every record field the
store keeps — token entropies read back from the ingests' artifacts — so ingesting the
export into another study gives identical records. Absent optional fields are left out
(JSONL) or null (Parquet). The file is written under a temporary name and renamed.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.engine import Engine
from tqdm import tqdm

from rcea.pipeline.records import SCALAR_FIELDS
from rcea.study.store import Question, Trajectory, require_study, session_scope
from rcea.study.store.artifacts import read_token_entropies

FORMATS = ("jsonl", "parquet")


@dataclass(frozen=True)
class ExportResult:
    study: str
    path: str
    format: str
    n_trajectories: int

    def summary(self) -> str:
        return f"exported {self.n_trajectories} trajectories of study {self.study} to {self.path}"


def stored_fields() -> list[str]:
    """The record fields the store keeps (the interchange schema minus any it does not)."""
    return [f for f in SCALAR_FIELDS if f in Trajectory.model_fields]


def study_records(
    engine: Engine, study: str, data_dir: Path, *, progress: bool = False
) -> tuple[list[dict[str, Any]], list[np.ndarray[Any, Any] | None]]:
    """(scalar fields per trajectory, token-entropy array or None per trajectory)."""
    names = stored_fields()
    cols = [getattr(Trajectory, n) for n in names]
    with session_scope(engine) as session:
        st = require_study(session, name=study)
        rows = session.execute(
            select(*cols, Trajectory.token_artifact, Trajectory.token_row)  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
            .where(Trajectory.study_id == st.id)
            .order_by(Trajectory.id)
        ).all()
        per_question = {
            q: (text, gold)
            for q, text, gold in session.execute(
                select(Question.question_id, Question.text, Question.ground_truth).where(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    Question.study_id == st.id
                )
            ).all()
        }
    records = [dict(zip(names, r[: len(names)], strict=True)) for r in rows]
    for rec in records:  # the question's text and reference answer, kept per question
        text, gold = per_question.get(rec["question_id"], (None, None))
        rec["question"], rec["ground_truth"] = text, gold
    tokens: list[np.ndarray[Any, Any] | None] = [None] * len(rows)
    by_artifact: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r.token_artifact is not None and r.token_row is not None:
            by_artifact[r.token_artifact].append((i, r.token_row))
    bar = tqdm(total=len(rows), unit="rec", desc="export", disable=not progress, leave=False)
    try:
        for artifact, pairs in by_artifact.items():
            arrays = read_token_entropies(data_dir / artifact, [row for _, row in pairs])
            for (i, _), arr in zip(pairs, arrays, strict=True):
                tokens[i] = arr
            bar.update(len(pairs))
        bar.update(len(rows) - sum(len(p) for p in by_artifact.values()))
    finally:
        bar.close()
    return records, tokens


def export_study(
    engine: Engine,
    study: str,
    out: Path,
    *,
    fmt: str,
    data_dir: Path,
    progress: bool = False,
) -> ExportResult:
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: use jsonl or parquet")
    records, tokens = study_records(engine, study, data_dir, progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        if fmt == "jsonl":
            _write_jsonl(tmp, records, tokens)
        else:
            _write_parquet(tmp, records, tokens)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(study, str(out), fmt, len(records))


def _write_jsonl(path: Path, records: list[dict[str, Any]], tokens: list[Any]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for rec, tok in zip(records, tokens, strict=True):
            obj = {k: v for k, v in rec.items() if v is not None}
            if tok is not None:
                obj["token_entropies"] = tok.tolist()
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")


def _write_parquet(path: Path, records: list[dict[str, Any]], tokens: list[Any]) -> None:
    data: dict[str, Any] = {}
    for name in [*stored_fields(), "question", "ground_truth"]:
        values = [r[name] for r in records]
        if any(v is not None for v in values):
            data[name] = values
    if any(t is not None for t in tokens):
        f32 = all(t.dtype == np.float32 for t in tokens if t is not None)
        value_type = pa.float32() if f32 else pa.float64()
        data["token_entropies"] = pa.array(
            [None if t is None else t.tolist() for t in tokens], type=pa.list_(value_type)
        )
    pq.write_table(pa.table(data), path, compression="zstd")
