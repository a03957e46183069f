"""``rcea import``: an importer's records through the one transactional ingest.

Every guarantee of ``rcea ingest`` is shared: the importer validates everything before
anything is written, every error names the file, line/row and (source) field, the batches
go to the store in ONE transaction (all files of a verl import, or none), and each file is
one ingest row whose hash covers its bytes and the import options, so importing the same
files again is a no-op and importing a directory with new step files adds only those.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import col
from tqdm import tqdm

from rcea.audits.evidence_sizing import coverage_at
from rcea.audits.inputs import InputError, check_output_file, open_input
from rcea.audits.rubric import EstimatorSettings
from rcea.pipeline.importers.common import import_digest
from rcea.pipeline.importers.lm_eval import LmEvalOptions, read_lm_eval_file, samples_files
from rcea.pipeline.importers.table import TableSpec, read_table
from rcea.pipeline.importers.trl import TrlOptions, completion_files, read_trl_file
from rcea.pipeline.importers.verl import VerlOptions, read_verl_file, step_files
from rcea.pipeline.records import (
    RecordBatch,
    RecordError,
    RecordValidationError,
    checked_input,
    input_refusal,
)
from rcea.study.events import IMPORT_LM_EVAL, IMPORT_TRL, IMPORT_VERL
from rcea.study.pair_audit.plan import success_counts
from rcea.study.records.ingest import IngestResult, ingest_batches, known_hashes
from rcea.study.store import Study, append_event, list_events, require_study, session_scope


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
    #: completions left out as empty (--skip-empty-output; their seeds stay used)
    n_empty_skipped: int = 0
    #: verl only: one line per thing the import could not fill (e.g. --answer-key absent
    #: from some files), printed as ``warning:`` lines
    warnings: list[str] = field(default_factory=list)
    #: TRL only: files that re-logged the previous file's generation batch (skipped, not
    #: imported twice)
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
        if self.n_empty_skipped:
            out.append(
                f"skipped {self.n_empty_skipped} empty completion(s) (--skip-empty-output; "
                "their seeds stay used)"
            )
        if self.n_answer_missing:
            out.append(f"{self.n_answer_missing} sample(s) have no --answer-key value")
        if self.relogged:
            out.append(
                f"skipped {len(self.relogged)} file(s) that re-log the previous step's "
                "generation batch: " + ", ".join(Path(p).name for p in self.relogged[:5])
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tally(result: ImportResult, extras: dict[str, dict[str, Any]]) -> None:
    """What the readers of the imported files (path → the batch's ``extra``) counted, on
    ``result``: the same keys for every importer."""
    result.score_rules = {p: e.get("score_rule") for p, e in extras.items()}
    result.n_special_stripped = sum(e.get("n_special_stripped", 0) for e in extras.values())
    result.n_answer_missing = sum(e.get("n_answer_missing", 0) for e in extras.values())
    result.n_empty_skipped = sum(e.get("n_empty_skipped", 0) for e in extras.values())


def _tallies(result: ImportResult) -> dict[str, Any]:
    """The counts an import event records."""
    return {
        "score_rules": result.score_rules,
        "n_special_stripped": result.n_special_stripped,
        "n_empty_skipped": result.n_empty_skipped,
    }


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
    before_write: Callable[[list[RecordBatch]], None] | None = None,
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
    if before_write is not None:
        before_write([b for b, _ in items])
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
    unreadable = [e for p in files for e in _refusals(checked_input, p)]
    if unreadable:  # every step file that cannot be read, named before any is hashed
        raise RecordValidationError(unreadable)
    file_bytes = {p: file_digest(p) for p in files}
    refuse_reimport(engine, study, directory, opts, file_bytes)
    read: dict[Path, RecordBatch] = {}
    warnings: list[str] = []

    def read_one(path: Path) -> RecordBatch:
        read[path] = read_verl_file(path, opts)
        return read[path]

    def answers(batches: list[RecordBatch]) -> None:
        """--answer-key absent from every file read: an error per file; from some: a
        warning with the counts (those samples get no answer)."""
        absent = [b.extra["answer_key_absent"] for b in batches if b.extra.get("answer_key_absent")]
        if absent and len(absent) == len(batches):
            raise RecordValidationError(absent)
        if absent:
            n_rows = sum(len(b.columns["trajectory_id"]) for b in batches)
            n_missing = sum(b.extra.get("n_answer_missing", 0) for b in batches)
            warnings.append(
                f"--answer-key {opts.answer_key!r} is in no line of {len(absent)} of "
                f"{len(batches)} file(s) ("
                + ", ".join(Path(e.source).name for e in absent[:5])
                + (" …" if len(absent) > 5 else "")
                + f"); {n_missing} of {n_rows} sample(s) have no answer"
            )

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
        before_write=answers if opts.answer_key is not None else None,
    )
    result.ignored = [str(p) for p in other]
    result.warnings = warnings
    imported = [p for p in files if p in read and str(p) in result.imported]
    _tally(result, {str(p): read[p].extra for p in imported})
    if imported:
        record_verl_import(
            engine, study, str(directory), opts, result, {str(p): file_bytes[p] for p in imported}
        )
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
    engine: Engine,
    study: str,
    source: str,
    opts: VerlOptions,
    result: ImportResult,
    files: dict[str, str] | None = None,
) -> None:
    """Append an ``import.verl`` event: the options, each file's score rule and the
    SHA-256 of each imported file's bytes (what :func:`refuse_reimport` compares)."""

    _import_event(
        engine,
        study,
        "verl",
        IMPORT_VERL,
        {
            "source": source,
            "options": opts.digest_options(),
            "score_rules": result.score_rules,
            "n_special_stripped": result.n_special_stripped,
            "n_answer_missing": result.n_answer_missing,
            "n_empty_skipped": result.n_empty_skipped,
            "files": files or {},
        },
    )


def _import_event(
    engine: Engine, study: str, importer: str, kind: str, payload: dict[str, Any]
) -> None:
    """Append the ``import.<importer>`` event of an import that wrote files (verl, trl,
    lm-eval), by ``rcea import <importer>``."""
    with session_scope(engine) as session:
        st = require_study(session, name=study)
        append_event(
            session, actor=f"rcea import {importer}", kind=kind, study_id=st.id, payload=payload
        )


class ReimportError(ValueError):
    """Files imported before into the study under other options: one line, the earlier
    options and a free study name."""

    def __init__(self, message: str, *, earlier: dict[str, Any], suggested_study: str) -> None:
        super().__init__(message)
        self.earlier = earlier
        self.suggested_study = suggested_study


def _refusals(check: Callable[[Path], object], path: Path) -> list[RecordError]:
    """The errors ``check(path)`` raises as a validation failure (none: an empty list)."""
    try:
        check(path)
    except RecordValidationError as exc:
        return exc.errors
    return []


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes alone (the ingest hash also covers the options), read
    through the hardened opener: an unreadable file is one ``FILE:file: …`` error."""
    h = hashlib.sha256()
    try:
        with open_input(path) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except InputError as exc:
        raise input_refusal(exc) from None
    return h.hexdigest()


def free_study_name(engine: Engine, study: str) -> str:
    """``STUDY-2``, ``STUDY-3``, …: the first name no study has."""
    with session_scope(engine) as session:
        taken = set(session.execute(select(col(Study.name))).scalars())
    n = 2
    while f"{study}-{n}" in taken:
        n += 1
    return f"{study}-{n}"


#: VerlOptions field → its command-line option (for the re-import line)
_FLAGS = {
    "reward_threshold": "--reward-threshold",
    "reward_key": "--reward-key",
    "question_key": "--question-key",
    "answer_key": "--answer-key",
    "validity_key": "--validity-key",
    "chat_template": "--chat-template",
    "question_regex": "--question-regex",
    "skip_empty_output": "--skip-empty-output",
    "multi_turn": "--multi-turn",
}


def _flag(key: str, value: Any) -> str:
    flag = _FLAGS.get(key, f"--{key}")
    if isinstance(value, bool):
        return flag if value else f"no {flag}"
    return f"no {flag}" if value is None else f"{flag} {value}"


def refuse_reimport(
    engine: Engine, study: str, directory: Path, opts: VerlOptions, file_bytes: dict[Path, str]
) -> None:
    """Refuse (:class:`ReimportError`) when files with these bytes were imported into
    ``study`` before for the same run and model under other options: their trajectory ids
    exist, so importing them again could only collide (one "already exists" per sample).
    The line names the options that differ, with the earlier ones, and a free study."""
    with session_scope(engine) as session:
        st = session.execute(select(Study).where(col(Study.name) == study)).scalar_one_or_none()
        if st is None:
            return
        earlier = list_events(session, kind=IMPORT_VERL, study_id=st.id)
        payloads = [e.payload for e in earlier]
    now = opts.digest_options()
    mine = set(file_bytes.values())
    paths = {str(p.resolve()) for p in file_bytes}
    for old in reversed(payloads):
        before = old.get("options", {})
        if (before.get("run"), before.get("model"), before.get("train_seed")) != (
            opts.run,
            opts.model,
            opts.train_seed,
        ):
            continue  # another run, model or training seed: other trajectory ids
        if old.get("files"):
            n_same = len(mine & set(old["files"].values()))
        else:  # an import recorded before file hashes were: its file paths
            n_same = len(paths & {str(Path(f).resolve()) for f in old.get("score_rules", {})})
        if not n_same:
            continue
        changed = [
            k
            for k in sorted(now)
            if k not in ("run", "model", "train_seed") and before.get(k) != now[k]
        ]
        if not changed:
            continue
        suggest = free_study_name(engine, study)
        raise ReimportError(
            f"{directory}: {n_same} file(s) were imported into study {study} before "
            f"(run {opts.run}, model {opts.model}) with other options: "
            + ", ".join(f"{_flag(k, before.get(k))} then, {_flag(k, now[k])} now" for k in changed)
            + "; nothing imported. Rerun with the earlier options, or import into a new "
            f"study: --study {suggest}",
            earlier=before,
            suggested_study=suggest,
        )


def evidence_warnings(engine: Engine, study: str) -> list[str]:
    """One line when, at the default K_min, fewer than half of the study's checkpoints
    have enough questions with K₊ ≥ K_min for the minimum-evidence floor (docs/estimators.md
    "Minimum evidence"): their validity and mode numbers would read "insufficient
    evidence" under the default rubric. ``rcea audit rubric init`` sizes K_min to the
    study; the line says so (with 8 samples per question, K₊ ≥ 8 needs all 8 to succeed)."""
    est = EstimatorSettings()
    floor = est.min_evidence()["validity"]
    with session_scope(engine) as session:
        st = require_study(session, name=study)
        succ = success_counts(session, study_id=st.id, accepted_only=False)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    cov = coverage_at(
        {ck: list(per.values()) for ck, per in succ.items()},
        est.k_min,
        min_questions=floor["questions"],
        min_share=floor["share"],
    )
    if not cov.n_checkpoints or 2 * cov.n_meeting_floor >= cov.n_checkpoints:
        return []
    return [
        f"at the default K_min = {est.k_min}, {cov.n_checkpoints - cov.n_meeting_floor} of "
        f"{cov.n_checkpoints} checkpoint(s) have too few questions with K+ >= {est.k_min} "
        f"successes for the minimum-evidence floor ({floor['questions']} questions, "
        f'{floor["share"]:.0%}): their validity and mode numbers would read "insufficient '
        f'evidence"; `rcea audit rubric init --study {study}` sizes K_min to the study'
    ]


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
    _tally(result, {str(p): batches[p].extra for p in imported})
    if imported:
        payload = {"source": str(directory), "options": options, **_tallies(result)}
        _import_event(engine, study, "trl", IMPORT_TRL, {**payload, "relogged": relogged})
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
    _tally(result, {str(p): batches[p].extra for p in imported})
    if imported:
        files_in = [str(p) for p in imported]
        payload = {"source": source, "files": files_in, "options": options, **_tallies(result)}
        _import_event(engine, study, "lm-eval", IMPORT_LM_EVAL, payload)
    return result
