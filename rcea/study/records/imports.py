"""``rcea import``: an importer's records through the one transactional ingest.

Every guarantee of ``rcea ingest`` is shared: the importer validates everything before
anything is written, every error names the file, line/row and (source) field, the batches
go to the store in ONE transaction (all files of a verl import, or none), and each file is
one ingest row whose hash covers its bytes and the import options, so importing the same
files again is a no-op and importing a directory with new step files adds only those.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from tqdm import tqdm

from rcea.audits.inputs import check_output_file
from rcea.pipeline.importers.common import import_digest
from rcea.pipeline.importers.table import TableSpec, read_table
from rcea.pipeline.importers.verl import VerlOptions, read_verl_file, step_files
from rcea.pipeline.records import RecordBatch, RecordError, RecordValidationError, checked_input
from rcea.study.events import IMPORT_VERL
from rcea.study.records.ingest import IngestResult, ingest_batches, known_hashes
from rcea.study.store import append_event, require_study, session_scope


@dataclass
class ImportResult:
    study: str
    source: str
    n_files: int
    n_imported_files: int
    n_skipped_files: int
    n_trajectories: int
    n_questions: int
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    #: verl only: the score rule of each imported file (``rcea.pipeline.importers.verl.score_rule``)
    score_rules: dict[str, Any] = field(default_factory=dict)
    n_special_stripped: int = 0
    n_answer_missing: int = 0

    def summary(self) -> str:
        if not self.n_imported_files:
            return (
                f"already imported: all {self.n_files} file(s) of {self.source} are in study "
                f"{self.study}; nothing written"
            )
        skipped = f" ({self.n_skipped_files} already imported)" if self.n_skipped_files else ""
        return (
            f"imported {self.n_trajectories} trajectories, {self.n_questions} questions from "
            f"{self.n_imported_files} file(s){skipped}, study {self.study}"
        )

    def notes(self) -> list[str]:
        """The score rule and what the import changed or could not fill, one line each."""
        out = []
        for rule in {json.dumps(r, sort_keys=True) for r in self.score_rules.values()}:
            out.append("score rule: " + describe_rule(json.loads(rule)))
        if self.n_special_stripped:
            out.append(
                f"stripped {self.n_special_stripped} trailing special token(s) from completions"
            )
        if self.n_answer_missing:
            out.append(f"{self.n_answer_missing} sample(s) have no --answer-key value")
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_rule(rule: dict[str, Any]) -> str:
    """One line for a recorded score rule (import output and the report)."""
    values = ", ".join(str(v) for v in rule.get("score_values", []))
    src, thr = rule.get("source", "score"), rule.get("threshold")
    if src != "score":
        how = f"R = `{src}`" + (f" > {thr:g}" if thr is not None else " (0/1)")
    elif thr is not None:
        how = f"R = 1 when score > {thr:g}"
    else:
        how = "R = score (0/1)"
    return f"{how}; score values seen: {values}"


def _store(
    engine: Engine,
    source: str,
    files: list[Path],
    read: Any,
    digest: Any,
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool,
) -> ImportResult:
    known = known_hashes(engine, study)
    items: list[tuple[RecordBatch, str]] = []
    skipped: list[str] = []
    errors: list[RecordError] = []
    truncated = False
    bar = tqdm(total=len(files), unit="file", desc="import", disable=not progress, leave=False)
    try:
        for path in files:
            sha = digest(path)
            if sha in known:
                skipped.append(str(path))
            else:
                try:
                    items.append((read(path), sha))
                except RecordValidationError as exc:
                    errors.extend(exc.errors)
                    truncated = truncated or exc.truncated
            bar.update(1)
    finally:
        bar.close()
    if errors:  # every file's problems in one report; nothing is written
        raise RecordValidationError(errors, truncated=truncated)
    results: list[IngestResult] = []
    if items:
        results = ingest_batches(
            engine,
            items,
            study=study,
            artifacts_dir=artifacts_dir,
            data_dir=data_dir,
            progress=progress,
        )
    questions = {q for b, _ in items for q in b.columns["question_id"]}
    return ImportResult(
        study=study,
        source=source,
        n_files=len(files),
        n_imported_files=len(results),
        n_skipped_files=len(skipped),
        n_trajectories=sum(r.n_trajectories for r in results),
        n_questions=len(questions),
        imported=[r.source for r in results],
        skipped=skipped,
    )


def import_verl(
    engine: Engine,
    directory: str | Path,
    opts: VerlOptions,
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool = False,
    problems_out: Path | None = None,
) -> ImportResult:
    """Import every ``{global_step}.jsonl`` of a verl dump directory (or one such file).
    ``problems_out``: also write ``{"question_id", "problem"}`` JSONL of every question in
    the dump (``rcea judge problems`` reads it), after a successful import."""
    directory = Path(directory)
    if problems_out is not None:  # before the import commits, not after
        check_output_file(problems_out, option="--problems-out")
    files, other = step_files(directory)
    if not files:
        raise RecordValidationError(
            [RecordError(str(directory), "directory", None, "no {global_step}.jsonl files")]
        )
    options = opts.digest_options()
    read: dict[Path, RecordBatch] = {}

    def read_one(path: Path) -> RecordBatch:
        read[path] = read_verl_file(path, opts)
        return read[path]

    result = _store(
        engine,
        str(directory),
        files,
        read_one,
        lambda p: import_digest(p, "verl", options),
        study=study,
        artifacts_dir=artifacts_dir,
        data_dir=data_dir,
        progress=progress,
    )
    result.ignored = [str(p) for p in other]
    imported = [p for p in files if p in read and str(p) in result.imported]
    result.score_rules = {str(p): read[p].extra.get("score_rule") for p in imported}
    result.n_special_stripped = sum(read[p].extra.get("n_special_stripped", 0) for p in imported)
    result.n_answer_missing = sum(read[p].extra.get("n_answer_missing", 0) for p in imported)
    if imported:
        record_verl_import(engine, study, str(directory), opts, result)
    if problems_out is not None:
        problems: dict[str, str] = {}
        for path in files:
            batch = read.get(path) or read_verl_file(path, opts)
            for qid, text in zip(
                batch.columns["question_id"], batch.columns["question"], strict=True
            ):
                problems.setdefault(qid, text)
        write_problems(problems_out, problems)
    return result


def record_verl_import(
    engine: Engine, study: str, source: str, opts: VerlOptions, result: ImportResult
) -> None:
    """Append an ``import.verl`` event: the options and each file's score rule."""

    with session_scope(engine) as session:
        st = require_study(session, name=study)
        append_event(
            session,
            actor="rcea import verl",
            kind=IMPORT_VERL,
            study_id=st.id,
            payload={
                "source": source,
                "options": opts.digest_options(),
                "score_rules": result.score_rules,
                "n_special_stripped": result.n_special_stripped,
                "n_answer_missing": result.n_answer_missing,
            },
        )


def write_problems(path: Path, problems: dict[str, str]) -> None:
    """``{"question_id": ..., "problem": ...}`` per line, sorted by id, written atomically."""

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for qid in sorted(problems):
            fh.write(json.dumps({"question_id": qid, "problem": problems[qid]}, ensure_ascii=False))
            fh.write("\n")
    os.replace(tmp, path)


def import_table(
    engine: Engine,
    path: str | Path,
    spec: TableSpec,
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool = False,
) -> ImportResult:
    """Import one JSONL / Parquet / CSV file through ``--map`` / ``--const``."""
    path = checked_input(path)
    options = spec.digest_options()
    return _store(
        engine,
        str(path),
        [path],
        lambda p: read_table(p, spec),
        lambda p: import_digest(p, "table", options),
        study=study,
        artifacts_dir=artifacts_dir,
        data_dir=data_dir,
        progress=progress,
    )
