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

from rcea.pipeline.importers.common import import_digest
from rcea.pipeline.importers.lm_eval import LmEvalOptions, read_lm_eval_file, samples_files
from rcea.pipeline.importers.table import TableSpec, read_table
from rcea.pipeline.importers.trl import TrlOptions, completion_files, read_trl_file
from rcea.pipeline.importers.verl import VerlOptions, read_verl_file, step_files
from rcea.pipeline.records import RecordBatch, RecordError, RecordValidationError
from rcea.study.events import IMPORT_LM_EVAL, IMPORT_TRL, IMPORT_VERL
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
    #: TRL only: completions left out as empty (--skip-empty-output), and files that
    #: re-logged the previous file's generation batch (skipped, not imported twice)
    n_empty_skipped: int = 0
    relogged: list[str] = field(default_factory=list)

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
        if self.n_empty_skipped:
            out.append(f"skipped {self.n_empty_skipped} empty completion(s) (--skip-empty-output)")
        if self.relogged:
            out.append(
                f"skipped {len(self.relogged)} file(s) that re-log the previous step's "
                "generation batch: " + ", ".join(Path(p).name for p in self.relogged[:5])
            )
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
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
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


def import_trl(
    engine: Engine,
    directory: str | Path,
    opts: TrlOptions,
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool = False,
) -> ImportResult:
    """Import TRL's ``completions_{step}.parquet`` logs (an output dir, its ``completions/``
    folder or one file), all or nothing; files already imported are skipped, and files that
    re-log the previous file's rows are skipped and listed."""
    directory = Path(directory)
    files, other = completion_files(directory)
    if not files:
        raise RecordValidationError(
            [RecordError(str(directory), "directory", None, "no completions_{step}.parquet files")]
        )
    batches: dict[Path, RecordBatch] = {}
    relogged: list[str] = []
    errors: list[RecordError] = []
    previous = None
    for path in files:
        try:
            batch = read_trl_file(path, opts, previous=previous)
        except RecordValidationError as exc:
            errors.extend(exc.errors)
            previous = None
            continue
        if batch is None:
            relogged.append(str(path))
            continue
        previous = batch.extra.pop("columns")
        batches[path] = batch
    if errors:
        raise RecordValidationError(errors)
    options = opts.digest_options()
    result = _store(
        engine,
        str(directory),
        list(batches),
        batches.__getitem__,
        lambda p: import_digest(p, "trl", options),
        study=study,
        artifacts_dir=artifacts_dir,
        data_dir=data_dir,
        progress=progress,
    )
    result.ignored = [str(p) for p in other]
    result.relogged = relogged
    result.n_files = len(files)
    imported = [p for p in batches if str(p) in result.imported]
    result.score_rules = {str(p): batches[p].extra["score_rule"] for p in imported}
    result.n_special_stripped = sum(batches[p].extra["n_special_stripped"] for p in imported)
    result.n_empty_skipped = sum(batches[p].extra["n_empty_skipped"] for p in imported)
    if imported:
        with session_scope(engine) as session:
            st = require_study(session, name=study)
            append_event(
                session,
                actor="rcea import trl",
                kind=IMPORT_TRL,
                study_id=st.id,
                payload={
                    "source": str(directory),
                    "options": options,
                    "score_rules": result.score_rules,
                    "n_special_stripped": result.n_special_stripped,
                    "n_empty_skipped": result.n_empty_skipped,
                    "relogged": relogged,
                },
            )
    return result


def import_lm_eval(
    engine: Engine,
    paths: list[str | Path],
    opts: LmEvalOptions,
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool = False,
) -> ImportResult:
    """Import lm-eval ``samples_<task>_<timestamp>.jsonl`` files (or the folders holding
    them), all or nothing. Every file is read, in (timestamp, name) order, so a question's
    seeds count its responses across all of them; files already imported are skipped."""
    files, other = samples_files([Path(p) for p in paths])
    source = ", ".join(str(p) for p in paths)
    if not files:
        raise RecordValidationError(
            [RecordError(source, "directory", None, "no samples_<task>_<timestamp>.jsonl files")]
        )
    batches: dict[Path, RecordBatch] = {}
    errors: list[RecordError] = []
    offsets: dict[str, int] = {}
    for path in files:
        try:
            batches[path] = read_lm_eval_file(path, opts, offsets=offsets)
        except RecordValidationError as exc:
            errors.extend(exc.errors)
    if errors:
        raise RecordValidationError(errors)
    options = opts.digest_options()
    result = _store(
        engine,
        source,
        files,
        batches.__getitem__,
        lambda p: import_digest(p, "lm-eval", options),
        study=study,
        artifacts_dir=artifacts_dir,
        data_dir=data_dir,
        progress=progress,
    )
    result.ignored = [str(p) for p in other]
    imported = [p for p in files if str(p) in result.imported]
    result.score_rules = {str(p): batches[p].extra["score_rule"] for p in imported}
    result.n_special_stripped = sum(batches[p].extra["n_special_stripped"] for p in imported)
    result.n_empty_skipped = sum(batches[p].extra["n_empty_skipped"] for p in imported)
    if imported:
        with session_scope(engine) as session:
            st = require_study(session, name=study)
            append_event(
                session,
                actor="rcea import lm-eval",
                kind=IMPORT_LM_EVAL,
                study_id=st.id,
                payload={
                    "source": source,
                    "files": [str(p) for p in imported],
                    "options": options,
                    "score_rules": result.score_rules,
                    "n_special_stripped": result.n_special_stripped,
                    "n_empty_skipped": result.n_empty_skipped,
                },
            )
    return result
