"""Transactional ingest of interchange records into the store.

An ingest either writes every record of the file or nothing: validation happens before
the transaction, the token artifact is written atomically and removed again if the
database transaction fails, and re-ingesting an identical file is a reported no-op.
A JSONL or Parquet file of more than ``STREAM_CHUNK`` records is validated and written chunk by
chunk inside that one transaction (``_write_stream``), so memory does not grow with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError
from tqdm import tqdm

from rcea.audits.inputs import open_input
from rcea.audits.rubric import EstimatorSettings
from rcea.pipeline.importers.common import check_train_seed
from rcea.pipeline.records import (
    MAX_ERRORS,
    SCALAR_FIELDS,
    RecordBatch,
    RecordError,
    RecordValidationError,
    checked_input,
    iter_record_batches,
    question_texts,
)
from rcea.study.store import (
    Ingest,
    Question,
    Study,
    Trajectory,
    get_or_create_study,
    require_study,
    session_scope,
)
from rcea.study.store.artifacts import new_artifact_path, write_token_artifact

INSERT_CHUNK = 5_000
# A JSONL or Parquet file is read, validated and written this many records at a time (one
# transaction for the whole file), so an ingest's memory does not grow with the file.
STREAM_CHUNK = 50_000
ID_LOOKUP_CHUNK = 900  # under SQLite's oldest limit of 999 bound variables


@dataclass(frozen=True)
class IngestResult:
    study: str
    source: str
    n_trajectories: int
    n_questions: int
    n_new_questions: int
    already_ingested: bool
    ingest_id: int
    token_artifact: str | None

    def summary(self) -> str:
        if self.already_ingested:
            return (
                f"already ingested: {self.source} is identical to ingest #{self.ingest_id} "
                f"of study {self.study}; nothing written"
            )
        return (
            f"ingested {self.n_trajectories} trajectories, {self.n_questions} questions, "
            f"study {self.study}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stamp_train_seed(batch: RecordBatch, train_seed: int | None) -> RecordBatch:
    """``batch`` with every missing ``train_seed`` set to ``train_seed`` (nothing to do when
    it is None); a record naming another training seed is an error naming its location."""
    if train_seed is None:
        return batch
    col = batch.columns["train_seed"]
    errors = [
        RecordError(
            batch.source,
            batch.locations[i],
            "train_seed",
            f"is {v}, but --train-seed {train_seed} was given",
        )
        for i, v in enumerate(col)
        if v is not None and v != train_seed
    ]
    if errors:
        raise RecordValidationError(errors[:MAX_ERRORS], truncated=len(errors) > MAX_ERRORS)
    batch.columns["train_seed"] = [train_seed] * len(col)
    return batch


def file_sha256(path: Path, train_seed: int | None = None) -> str:
    h = hashlib.sha256()
    with open_input(path) as fh:  # a regular file: a FIFO would hang, /dev/zero never end
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    if train_seed is None:  # the hash of the bytes alone, as before the option existed
        return h.hexdigest()
    return hashlib.sha256(f"{h.hexdigest()}:train_seed={train_seed}".encode()).hexdigest()


def ingest_file(
    engine: Engine,
    path: str | Path,
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    allow_extra: bool = False,
    progress: bool = False,
    train_seed: int | None = None,
) -> IngestResult:
    """Validate ``path`` and write all its records to ``study`` in one transaction.
    ``train_seed`` (``rcea ingest --train-seed``) fills the training seed of records without
    one and refuses records naming another (docs/estimators.md item 17); it joins the
    ingest's hash, so the same file under another training seed is not a no-op."""

    path = checked_input(path)
    check_train_seed(train_seed)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # Hashing (hashlib releases the GIL) overlaps parsing and validation.
        pending_sha = pool.submit(file_sha256, path, train_seed)
        with session_scope(engine) as session:
            st = session.execute(select(Study).where(Study.name == study)).scalar_one_or_none()  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
            has_ingests = (
                st is not None
                and session.execute(
                    select(Ingest.id).where(Ingest.study_id == st.id).limit(1)  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
                ).first()
                is not None
            )
            if has_ingests:
                # A file identical to an earlier ingest is a no-op before any (slow)
                # validation, so here the hash is needed first.
                prior = session.execute(
                    select(Ingest).where(
                        Ingest.study_id == st.id,  # type: ignore[union-attr]  # has_ingests above implies st is not None
                        Ingest.sha256 == pending_sha.result(),  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    )
                ).scalar_one_or_none()
                if prior is not None:
                    return IngestResult(
                        study,
                        str(path),
                        prior.n_records,
                        0,
                        0,
                        True,
                        prior.id,
                        prior.token_artifact,
                    )
        chunks = (
            stamp_train_seed(b, train_seed)
            for b in iter_record_batches(path, chunk_records=STREAM_CHUNK, allow_extra=allow_extra)
        )
        batch = next(chunks)
        following = next(chunks, None)
        if following is not None:
            head = [batch, following]
            del batch, following  # _write_stream lets each chunk go once written
            return _write_stream(
                engine,
                head,
                chunks,
                study=study,
                sha=pending_sha.result(),
                artifacts_dir=artifacts_dir,
                data_dir=data_dir,
                progress=progress,
            )
        sha = pending_sha.result()
    return write_batch(
        engine,
        batch,
        study=study,
        sha=sha,
        artifacts_dir=artifacts_dir,
        data_dir=data_dir,
        progress=progress,
    )


def known_hashes(engine: Engine, study: str) -> set[str]:
    """The content hashes of every earlier ingest of ``study`` (empty for a new study)."""
    with session_scope(engine) as session:
        st = session.execute(select(Study).where(Study.name == study)).scalar_one_or_none()  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        if st is None:
            return set()
        return set(session.execute(select(Ingest.sha256).where(Ingest.study_id == st.id)).scalars())  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column


def ingest_batches(
    engine: Engine,
    items: list[tuple[RecordBatch, str]],
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool = False,
) -> list[IngestResult]:
    """Write already validated batches (an importer's output), each with its content hash,
    to ``study`` in ONE transaction: all of them or none. One ingest row per batch, so a
    later import skips the batches whose hash is already stored (``known_hashes``)."""
    return _write_batches(
        engine,
        items,
        study=study,
        artifacts_dir=artifacts_dir,
        data_dir=data_dir,
        progress=progress,
    )


def write_batch(
    engine: Engine,
    batch: RecordBatch,
    *,
    study: str,
    sha: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool,
) -> IngestResult:
    return _write_batches(
        engine,
        [(batch, sha)],
        study=study,
        artifacts_dir=artifacts_dir,
        data_dir=data_dir,
        progress=progress,
    )[0]


def _write_batches(
    engine: Engine,
    items: list[tuple[RecordBatch, str]],
    *,
    study: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool,
) -> list[IngestResult]:
    artifacts: list[Path] = []
    results: list[IngestResult] = []
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        with session_scope(engine) as session:
            st = get_or_create_study(session, name=study)
            _refuse_cross_batch_duplicates([b for b, _ in items])
            _refuse_store_duplicates(session, [b for b, _ in items], st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            for batch, sha in items:
                tids = batch.columns["trajectory_id"]
                pending = None
                artifact: Path | None = None
                if batch.token_present is not None and batch.token_present.any():
                    artifact = new_artifact_path(artifacts_dir, study)
                    artifacts.append(artifact)
                    # The Parquet write (pyarrow, GIL released) overlaps the SQL inserts.
                    pending = pool.submit(
                        write_token_artifact,
                        artifact,
                        tids,
                        batch.token_values,  # type: ignore[arg-type]  # the token arrays are set for a batch with token entropies (the branch's condition)
                        batch.token_offsets,  # type: ignore[arg-type]  # the token arrays are set for a batch with token entropies (the branch's condition)
                        batch.token_present,
                    )
                rel = str(artifact.relative_to(data_dir)) if artifact else None
                ing = Ingest(
                    study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                    source=batch.source,
                    sha256=sha,
                    n_records=len(batch),
                    token_artifact=rel,
                )
                session.add(ing)
                session.flush()
                new_q = _write_questions(session, batch, st.id, ing.created_at)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                _insert_trajectories(session, batch, st.id, ing.id, rel, progress)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                if pending is not None:
                    pending.result()  # the artifact must be in place before we commit
                results.append(
                    IngestResult(
                        study,
                        batch.source,
                        len(batch),
                        batch.n_questions,
                        len(new_q),
                        False,
                        ing.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                        rel,
                    )
                )
    except BaseException:
        pool.shutdown(wait=True)
        _remove_artifacts(artifacts)
        raise
    pool.shutdown(wait=True)
    return results


def _write_stream(
    engine: Engine,
    head: list[RecordBatch],
    rest: Iterator[RecordBatch],
    *,
    study: str,
    sha: str,
    artifacts_dir: Path,
    data_dir: Path,
    progress: bool,
) -> IngestResult:
    """Write a file that spans several chunks: every chunk inside ONE transaction (all or
    nothing), each validated as it is read; ids and question texts that span chunks are
    checked against the rows this transaction already wrote. One ingest row for the file;
    each chunk with token entropies gets its own artifact (rows point at theirs)."""

    artifacts: list[Path] = []
    n_records = 0
    n_new_questions = 0
    question_ids: set[str] = set()
    source = head[0].source
    bar = tqdm(unit="rec", desc="ingest (streamed)", disable=not progress)
    try:
        with session_scope(engine) as session:
            st = get_or_create_study(session, name=study)
            ing = Ingest(
                study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                source=source,
                sha256=sha,
                n_records=0,
                token_artifact=None,
            )
            session.add(ing)
            session.flush()
            first_artifact: str | None = None
            for batch in _drain(head, rest):
                _refuse_stored_ids(session, batch, st.id, ing.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                n_new_questions += len(_write_questions(session, batch, st.id, ing.created_at))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                rel = None
                if batch.token_present is not None and batch.token_present.any():
                    artifact = new_artifact_path(artifacts_dir, study)
                    artifacts.append(artifact)
                    write_token_artifact(
                        artifact,
                        batch.columns["trajectory_id"],
                        batch.token_values,  # type: ignore[arg-type]  # the token arrays are set for a batch with token entropies (the branch's condition)
                        batch.token_offsets,  # type: ignore[arg-type]  # the token arrays are set for a batch with token entropies (the branch's condition)
                        batch.token_present,
                    )
                    rel = str(artifact.relative_to(data_dir))
                    first_artifact = first_artifact or rel
                _insert_trajectories(session, batch, st.id, ing.id, rel, False)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                n_records += len(batch)
                question_ids.update(batch.columns["question_id"])
                bar.update(len(batch))
                del batch  # held no longer than it is written: memory stays one chunk
            ing.n_records = n_records
            ing.token_artifact = first_artifact
            session.flush()
            result = IngestResult(
                study,
                source,
                n_records,
                len(question_ids),
                n_new_questions,
                False,
                ing.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                first_artifact,
            )
    except BaseException:
        _remove_artifacts(artifacts)
        raise
    finally:
        bar.close()
    return result


def _drain(head: list[RecordBatch], rest: Iterator[RecordBatch]) -> Iterator[RecordBatch]:
    """``head``'s chunks (popped, so the list no longer holds them), then ``rest``."""
    while head:
        yield head.pop(0)
    yield from rest


def _remove_artifacts(artifacts: list[Path]) -> None:
    """Undo the token artifacts of a failed ingest (and a half-written temporary file)."""
    for artifact in artifacts:
        artifact.unlink(missing_ok=True)
        artifact.with_suffix(".parquet.tmp").unlink(missing_ok=True)


def _refuse_stored_ids(session: Any, batch: RecordBatch, study_id: int, ingest_id: int) -> None:
    """The chunk's records whose trajectory id the study already holds, looked up by id
    (memory bounded by the chunk): written earlier by this same file, or by another."""
    tids = batch.columns["trajectory_id"]
    found: dict[str, int] = {}
    for start in range(0, len(tids), ID_LOOKUP_CHUNK):
        part = tids[start : start + ID_LOOKUP_CHUNK]
        found.update(
            session.execute(
                select(Trajectory.trajectory_id, Trajectory.ingest_id).where(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    Trajectory.study_id == study_id,
                    Trajectory.trajectory_id.in_(part),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
                )
            ).all()
        )
    if not found:
        return
    errors = [
        RecordError(
            batch.source,
            loc,
            "trajectory_id",
            f"duplicate trajectory_id {tid!r} (earlier in this file)"
            if found[tid] == ingest_id
            else f"trajectory_id {tid!r} already exists in the store",
        )
        for tid, loc in zip(tids, batch.locations, strict=True)
        if tid in found
    ]
    raise RecordValidationError(errors[:100], truncated=len(errors) > 100)


def _refuse_cross_batch_duplicates(batches: list[RecordBatch]) -> None:
    """A trajectory id in two batches of one transaction (each batch alone is checked by
    the reader) is named at both places."""
    if len(batches) < 2:
        return
    first: dict[str, str] = {}
    errors: list[RecordError] = []
    for batch in batches:
        for tid, loc in zip(batch.columns["trajectory_id"], batch.locations, strict=True):
            where = f"{batch.source}:{loc}"
            if tid in first:
                errors.append(
                    RecordError(
                        batch.source,
                        loc,
                        "trajectory_id",
                        f"duplicate trajectory_id {tid!r} (first at {first[tid]})",
                    )
                )
            else:
                first[tid] = where
    if errors:
        raise RecordValidationError(errors[:100], truncated=len(errors) > 100)


def _write_questions(session: Any, batch: RecordBatch, study_id: int, created_at: Any) -> list[str]:
    """Insert the batch's new questions with their texts, give a text to stored questions
    that had none, and refuse a text that differs from the stored one (naming the first
    record that carries it). Returns the new question ids."""
    existing = dict(
        session.execute(
            select(Question.question_id, Question.text).where(Question.study_id == study_id)  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
    )
    texts = question_texts(batch)
    errors = [
        RecordError(
            batch.source,
            loc,
            "question",
            f"question_id {qid!r} already has a different question text in the store; "
            "one question id, one problem statement",
        )
        for qid, (text, loc) in sorted(texts.items(), key=lambda kv: kv[1][1])
        if existing.get(qid) is not None and existing[qid] != text
    ]
    if errors:
        raise RecordValidationError(errors[:100], truncated=len(errors) > 100)
    new_q = sorted(set(batch.columns["question_id"]) - set(existing))
    golds: dict[str, str] = {}
    for qid, gold in zip(
        batch.columns["question_id"], batch.columns.get("ground_truth", []), strict=False
    ):
        if type(gold) is str and qid not in golds:
            golds[qid] = gold
    if golds:  # a reference answer is kept where the stored question has none yet
        stored_gold = dict(
            session.execute(
                select(Question.question_id, Question.ground_truth).where(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    Question.study_id == study_id
                )
            ).all()
        )
        for qid in sorted(q for q in golds if q in existing and stored_gold.get(q) is None):
            session.execute(
                update(Question)
                .where(Question.study_id == study_id, Question.question_id == qid)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                .values(ground_truth=golds[qid])
            )
    if new_q:
        session.execute(
            insert(Question),
            [
                {
                    "study_id": study_id,
                    "question_id": q,
                    "text": texts[q][0] if q in texts else None,
                    "ground_truth": golds.get(q),
                    "created_at": created_at,
                }
                for q in new_q
            ],
        )
    for qid in sorted(q for q in texts if q in existing and existing[q] is None):
        session.execute(
            update(Question)
            .where(Question.study_id == study_id, Question.question_id == qid)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
            .values(text=texts[qid][0])
        )
    return new_q


def _refuse_store_duplicates(session: Any, batches: list[RecordBatch], study_id: int) -> None:
    """Every record of every batch whose trajectory id the study already holds, named."""
    existing = set(
        session.execute(
            select(Trajectory.trajectory_id).where(Trajectory.study_id == study_id)  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).scalars()
    )
    if not existing:
        return
    errors = [
        RecordError(
            batch.source, loc, "trajectory_id", f"trajectory_id {tid!r} already exists in the store"
        )
        for batch in batches
        for tid, loc in zip(batch.columns["trajectory_id"], batch.locations, strict=True)
        if tid in existing
    ]
    if errors:
        raise RecordValidationError(errors[:100], truncated=len(errors) > 100)


def _insert_trajectories(
    session: Any,
    batch: RecordBatch,
    study_id: int,
    ingest_id: int,
    artifact: str | None,
    progress: bool,
) -> None:
    """Bulk insert through the driver's ``executemany`` (no per-row ORM work)."""
    cols = batch.columns
    n = len(batch)
    present = batch.token_present
    names = [f for f in SCALAR_FIELDS if f in Trajectory.model_fields]
    all_names = [*names, "study_id", "ingest_id", "token_artifact", "token_row"]
    conn = session.connection()
    compiled = insert(Trajectory.__table__).compile(dialect=conn.dialect, column_keys=all_names)  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
    order = list(compiled.positiontup) if compiled.positional else all_names  # type: ignore[arg-type]  # a positional dialect's compiled insert has its position tuple
    has_tokens = present.tolist() if present is not None else [False] * n
    extra = {
        "study_id": [study_id] * n,
        "ingest_id": [ingest_id] * n,
        "token_artifact": [artifact if t else None for t in has_tokens],
        "token_row": [i if t else None for i, t in enumerate(has_tokens)],
    }
    source = {**{k: cols[k] for k in names}, **extra}
    ordered = [source[k] for k in order]
    bar = tqdm(total=n, unit="rec", desc="ingest", disable=not progress, leave=False)
    try:
        for start in range(0, n, INSERT_CHUNK):
            stop = min(start + INSERT_CHUNK, n)
            chunk = list(zip(*(c[start:stop] for c in ordered), strict=True))  # type: ignore[index]  # not checked by hand yet: every value of source is expected to be a column (a sequence)
            params: list[Any] = (
                chunk if compiled.positional else [dict(zip(order, r, strict=True)) for r in chunk]
            )
            try:
                conn.exec_driver_sql(str(compiled), params)
            except IntegrityError as exc:  # a concurrent ingest won the race
                raise RecordValidationError(
                    [
                        RecordError(
                            batch.source,
                            "file",
                            "trajectory_id",
                            f"conflicts with records written meanwhile: {exc.orig}",
                        )
                    ]
                ) from exc
            except DBAPIError as exc:  # never let the driver print the rows' texts
                reason = str(exc.orig).splitlines()[0][:200] if exc.orig else "refused"
                where = f"{batch.locations[start]} to {batch.locations[stop - 1]}"
                raise RecordValidationError(
                    [
                        RecordError(
                            batch.source,
                            "file",
                            None,
                            f"the store refused the records of {where}: "
                            f"{type(exc.orig).__name__}: {reason}",
                        )
                    ]
                ) from None
            bar.update(stop - start)
    finally:
        bar.close()


def k_min_warnings(engine: Any, study: str, k_min: int | None = None) -> list[str]:
    """One line per checkpoint (run, model, step) of ``study`` whose questions have fewer
    samples than ``k_min`` (default: the rubric default, 8) even at the most: no question
    there can be eligible for validity or mode numbers (docs/estimators.md "Minimum
    evidence"). Import warns with these; nothing is refused."""
    k = EstimatorSettings().k_min if k_min is None else k_min
    with session_scope(engine) as s:
        sid = require_study(s, name=study).id
        per_q = (
            select(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
                Trajectory.run,
                Trajectory.model,
                Trajectory.step,
                func.count().label("n"),
            )
            .where(Trajectory.study_id == sid)
            .group_by(Trajectory.run, Trajectory.model, Trajectory.step, Trajectory.question_id)
            .subquery()
        )
        rows = s.execute(
            select(per_q.c.run, per_q.c.model, per_q.c.step, func.max(per_q.c.n))
            .group_by(per_q.c.run, per_q.c.model, per_q.c.step)
            .order_by(per_q.c.run, per_q.c.model, per_q.c.step)
        ).all()
    return [
        f"{run}/{model}/step {step}: at most {most} sample(s) per question, fewer than "
        f"K_min = {k}: no question can be eligible for validity or mode numbers"
        for run, model, step, most in rows
        if most < k
    ]
