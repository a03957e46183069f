"""The automatic stages of the codebook cycle on the store: induce, merge, assign,
reconcile (arbitration). Each is resumable and idempotent.

Every stage first stores its plan: one ``codebook_batch`` row per batch (status
``planned``), cut from seeded shuffles of sorted ids. Then the planned batches run
concurrently (bounded) and each result is recorded on its row (``done`` or ``failed``)
from the calling thread, in small bulk transactions. A rerun executes exactly the planned
batches that are left — the same requests, so a reply that reached the LLM client's disk
cache before a crash is not paid for twice — and plans new batches only for trajectories
no batch covers yet (new data, an approved extension).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, insert, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from rcea.pipeline.codebook import (
    DEFAULT_CONFIDENCE_THRESHOLD,
    BlindItem,
    CodebookBackend,
    ItemLabel,
    arbitration_status,
    candidate_ids,
    candidates_from_induction,
    dispute_reasons,
    labels_from_reply,
    modes_from_json,
    modes_from_merge,
    modes_to_json,
    plan_batches,
)
from rcea.pipeline.codebook.model import Mode, batch_key, seeded_rng
from rcea.pipeline.codebook.schemas import InduceReply
from rcea.pipeline.llm import LLMResult, run_jobs
from rcea.study import events
from rcea.study.codebook.blinding import study_guard
from rcea.study.codebook.common import (
    INVALID_REPLY,
    CodebookStageError,
    StageReport,
    accepted_by_question,
    accepted_sizes,
    assigned_passes,
    excluded_trajectories,
    handle_map,
    transport_failed,
    version_targets,
    versions_by_question,
)
from rcea.study.store import append_event, problem_texts, require_study, session_scope
from rcea.study.store.models import (
    CodebookAssignment,
    CodebookBatch,
    CodebookDispute,
    CodebookDraft,
    CodebookVersion,
    Trajectory,
    utcnow,
)

FLUSH_EVERY_S = 0.3
FLUSH_EVERY_N = 32
ASSIGN_CHUNK = 10_000
"""accepted trajectories per chunk of questions that ``assign`` plans and runs at once
(its memory is bounded by the chunk, not by the study)"""
PLAN_IN_CHUNK = 500
"""question ids per query when a plan reads their earlier batches"""


@dataclass
class BatchJob:
    row_id: int
    """the planned ``codebook_batch`` row"""
    question_id: str
    trajectory_ids: list[str]
    call: Callable[[], LLMResult[Any]]
    version_id: int | None = None
    pass_no: int = 0
    context: dict[str, Any] = field(default_factory=dict)


Done = list[tuple[BatchJob, LLMResult[Any]]]
Persist = Callable[[Session, Done], None]
"""Derives a stage's rows from a flushed group of results (same transaction)."""


@dataclass(frozen=True)
class PlanSpec:
    question_id: str
    version_id: int | None
    pass_no: int
    targets: Sequence[str]
    salt: tuple[Any, ...]


def _plan(
    session: Session,
    *,
    study_id: int,
    stage: str,
    seed: int,
    batch_size: int,
    specs: Sequence[PlanSpec],
) -> dict[tuple[str, int | None, int], list[CodebookBatch]]:
    """The batches of each (question, version, pass) of ``specs``: those planned before,
    plus new ones for targets no earlier batch covers (one query, one flush)."""
    existing: dict[tuple[str, int | None, int], list[CodebookBatch]] = {}
    asked = sorted({spec.question_id for spec in specs})
    rows: list[CodebookBatch] = []
    for i in range(0, len(asked), PLAN_IN_CHUNK):  # only the asked questions' batches
        rows += session.exec(
            select(CodebookBatch)
            .where(
                CodebookBatch.study_id == study_id,
                CodebookBatch.stage == stage,
                CodebookBatch.question_id.in_(asked[i : i + PLAN_IN_CHUNK]),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
            .order_by(CodebookBatch.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
    # Every batch order already planned for a (question, version), in any pass: a batch
    # of another pass must not repeat one (same ids in the same order is the same prompt,
    # so the "independent" second pass would be the first pass's cached reply).
    orders: dict[tuple[str, int | None], set[tuple[str, ...]]] = {}
    for r in rows:
        existing.setdefault((r.question_id, r.version_id, r.pass_no), []).append(r)
        orders.setdefault((r.question_id, r.version_id), set()).add(tuple(r.trajectory_ids))
    out: dict[tuple[str, int | None, int], list[CodebookBatch]] = {}
    new_rows = []
    for spec in specs:
        key = (spec.question_id, spec.version_id, spec.pass_no)
        seen = orders.setdefault((spec.question_id, spec.version_id), set())
        have = list(existing.get(key, []))
        covered = {t for r in have for t in r.trajectory_ids}
        todo = [t for t in spec.targets if t not in covered]
        for batch in plan_batches(todo, batch_size=batch_size, seed=seed, salt=spec.salt):
            if tuple(batch) in seen and len(batch) > 1:
                # Batches of one pass are disjoint, so the reversed order repeats none.
                batch = batch[::-1]
            seen.add(tuple(batch))
            row = CodebookBatch(
                study_id=study_id,
                stage=stage,
                question_id=spec.question_id,
                version_id=spec.version_id,
                pass_no=spec.pass_no,
                batch_key=batch_key(
                    stage, *spec.salt, spec.question_id, spec.version_id, seed, batch
                ),
                seed=seed,
                trajectory_ids=batch,
                status="planned",
            )
            have.append(row)
            new_rows.append(row)
        out[key] = have
    session.add_all(new_rows)
    session.flush()
    return out


def _todo(
    report: StageReport, rows: Sequence[CodebookBatch], excluded: set[str] | frozenset[str]
) -> list[CodebookBatch]:
    """Count a plan into the report; return the batches still to run: the planned ones
    and those an earlier run recorded as failed for want of an answer (counted in
    ``n_retried``; a batch failed on an invalid reply is an answer and stays finished).
    Trajectories excluded from the cycle since the plan are dropped from the batches
    still to run (a batch left empty gets status ``excluded``)."""
    for r in rows:
        if (r.status == "planned" or transport_failed(r)) and excluded & set(r.trajectory_ids):
            r.trajectory_ids = [t for t in r.trajectory_ids if t not in excluded]
            if not r.trajectory_ids:
                r.status = "excluded"
    retried = [r for r in rows if transport_failed(r)]
    todo = [r for r in rows if r.status == "planned" or transport_failed(r)]
    report.n_batches += len(rows)
    report.n_skipped += len(rows) - len(todo)
    report.n_retried += len(retried)
    return todo


def _execute(
    engine: Engine,
    *,
    jobs: Sequence[BatchJob],
    concurrency: int,
    persist: Persist | None,
    report: StageReport,
) -> None:
    """Run ``jobs`` with bounded concurrency; record each result on its batch row (and
    whatever ``persist`` derives from it) in small transactions from this thread."""
    buffer: Done = []
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal last_flush
        if not buffer:
            return
        with session_scope(engine) as s:
            s.execute(
                update(CodebookBatch),
                [
                    {
                        "id": job.row_id,
                        "request_hash": result.key,
                        "status": "done" if result.ok else "failed",
                        "reply": result.value.model_dump() if result.value is not None else None,
                        "error": result.error,
                        "usage": result.usage_dict(),
                    }
                    for job, result in buffer
                ],
            )
            if persist is not None:
                persist(s, list(buffer))
        buffer.clear()
        last_flush = time.monotonic()

    def on_result(job: BatchJob, result: LLMResult[Any]) -> None:
        report.n_run += 1
        if not result.ok:
            report.n_failed += 1
        buffer.append((job, result))
        # A failure after transport retries is not cached: record it at once.
        urgent = not result.ok and not result.cached
        if urgent or len(buffer) >= FLUSH_EVERY_N or time.monotonic() - last_flush >= FLUSH_EVERY_S:
            flush()

    try:
        run_jobs(jobs, lambda j: j.call(), concurrency=concurrency, on_result=on_result)
    finally:
        flush()


def _texts(
    session: Session, *, study_id: int, known: dict[str, str], ids: Iterable[str]
) -> dict[str, str]:
    """Texts of ``ids`` (from ``known``, else from the store)."""
    missing = sorted({t for t in ids if t not in known})
    if not missing:
        return known
    rows = session.exec(
        select(Trajectory.trajectory_id, Trajectory.text).where(
            Trajectory.study_id == study_id,
            Trajectory.trajectory_id.in_(missing),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
        )
    ).all()
    return {**known, **dict(rows)}


def _items(
    texts: dict[str, str], trajectory_ids: Sequence[str]
) -> tuple[dict[str, Any], list[BlindItem]]:
    hmap = handle_map(trajectory_ids)
    return hmap, [BlindItem(h, texts[t]) for h, t in hmap.items()]


def _label_jobs(
    s: Session,
    prep: Prepared,
    q: str,
    todo: list[CodebookBatch],
    modes: list[Mode],
    call: Callable[..., LLMResult[Any]],
    known: dict[str, str],
    version_id: int | None,
    pass_no: int,
) -> list[BatchJob]:
    """One job per batch of ``todo`` that labels its trajectories with ``modes`` (assign
    and arbitrate): ``call(question, modes, items, problem)``; the handle map and the mode
    ids stay with the job to read the reply."""
    texts = _texts(
        s, study_id=prep.study_id, known=known, ids=[t for r in todo for t in r.trajectory_ids]
    )
    mode_ids = {m.id for m in modes}
    jobs = []
    for row in todo:
        hmap, items = _items(texts, row.trajectory_ids)
        jobs.append(
            BatchJob(
                row.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                q,
                row.trajectory_ids,
                call=lambda i=items: call(q, modes, i, prep.questions.get(q)),  # type: ignore[misc]  # mypy cannot infer a lambda with a default argument
                version_id=version_id,
                pass_no=pass_no,
                context={"hmap": hmap, "mode_ids": mode_ids},
            )
        )
    return jobs


@dataclass(frozen=True)
class Prepared:
    study_id: int
    groups: dict[str, list[tuple[str, str]]]
    """question_id → accepted (trajectory_id, text), excluded trajectories left out"""
    questions: dict[str, str]
    """question_id → problem statement, where the study stores one"""
    excluded: frozenset[str]
    """trajectories a researcher excluded from the cycle"""


def _prepare(
    engine: Engine,
    backend: CodebookBackend,
    study: str,
    wanted: Iterable[str] | None = None,
    load: Sequence[str] | None = None,
) -> Prepared:
    """The study id, its accepted trajectories and question texts; installs the blinding
    scan (told which trajectory and question texts may explain a refused prompt) and
    refuses, before any call, a question text of the ``wanted`` questions (default: all)
    that holds a forbidden value. With ``load``, only those questions' trajectories are
    read (and scanned for): a chunk of a streaming stage."""
    with session_scope(engine) as s:
        st = require_study(s, name=study)
        assert st.id is not None
        groups = accepted_by_question(s, study_id=st.id, questions=load)
        questions = problem_texts(s, study_id=st.id)
        guard = study_guard(s, study_id=st.id, questions=load)
        only = set(wanted) if wanted is not None else None
        for q, rows in groups.items():
            guard.add_sources(q, dict(rows), questions.get(q))
            if q in questions and (only is None or q in only):
                guard.check_question(q, questions[q])
        backend.set_guard(guard)
        excluded = frozenset(excluded_trajectories(s, study_id=st.id))
        return Prepared(st.id, groups, questions, excluded)


def _record(
    engine: Engine, *, study_id: int, actor: str, report: StageReport, **extra: Any
) -> None:
    with session_scope(engine) as s:
        append_event(
            s,
            actor=actor,
            kind=events.codebook_stage(report.stage),
            study_id=study_id,
            payload={**report.to_dict(), **extra},
        )


def _select(groups: dict[str, Any], questions: Sequence[str] | None) -> list[str]:
    if questions is None:
        return sorted(groups)
    missing = [q for q in questions if q not in groups]
    if missing:
        raise CodebookStageError(f"no accepted trajectories for question(s) {missing}")
    return sorted(questions)


# --------------------------------------------------------------------------- induce


def induce(
    engine: Engine,
    *,
    study: str,
    backend: CodebookBackend,
    actor: str,
    batch_size: int = 12,
    seed: int = 0,
    sample_per_question: int | None = None,
    concurrency: int = 8,
    questions: Iterable[str] | None = None,
) -> StageReport:
    """Ask for candidate modes on blinded, shuffled chunks of each question's accepted
    trajectories (questions never mixed; ``sample_per_question`` caps how many of a
    question's trajectories are shown, drawn with ``seed``). Questions whose codebook is
    frozen are skipped: later trajectories reach them through NEW and extension review."""
    wanted = list(questions) if questions is not None else None
    prep = _prepare(engine, backend, study, wanted)
    study_id, groups = prep.study_id, prep.groups
    report = StageReport("induce")
    usage_before = backend.usage()
    frozen: list[str] = []
    specs = []
    with session_scope(engine) as s:
        versions = versions_by_question(s, study_id=study_id)
        for q in _select(groups, wanted):
            if q in versions:
                frozen.append(q)
                continue
            ids = sorted(t for t, _ in groups[q])
            if sample_per_question is not None and len(ids) > sample_per_question:
                ids = sorted(seeded_rng(seed, "induce-sample", q).sample(ids, sample_per_question))
            specs.append(PlanSpec(q, None, 0, ids, ("induce",)))
        plans = _plan(
            s, study_id=study_id, stage="induce", seed=seed, batch_size=batch_size, specs=specs
        )
        jobs = []
        for (q, _, _), rows in sorted(plans.items()):
            report.n_questions += 1
            texts = dict(groups[q])
            for row in _todo(report, rows, prep.excluded):
                _, items = _items(texts, row.trajectory_ids)
                jobs.append(
                    BatchJob(
                        row.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                        q,
                        row.trajectory_ids,
                        call=lambda q=q, items=items: backend.induce(  # type: ignore[misc]  # mypy cannot infer a lambda passed as a keyed sort/group callback
                            q, items, prep.questions.get(q)
                        ),
                    )
                )
    _execute(engine, jobs=jobs, concurrency=concurrency, persist=None, report=report)
    report.usage = backend.usage().minus(usage_before).to_dict()
    report.details["frozen_skipped"] = frozen
    _record(
        engine,
        study_id=study_id,
        actor=actor,
        report=report,
        backend=backend.describe(),
        seed=seed,
        batch_size=batch_size,
        sample_per_question=sample_per_question,
    )
    return report


# --------------------------------------------------------------------------- merge


def merge(
    engine: Engine,
    *,
    study: str,
    backend: CodebookBackend,
    actor: str,
    concurrency: int = 8,
    questions: Iterable[str] | None = None,
    redo: bool = False,
) -> StageReport:
    """Merge each question's candidates into a draft codebook (one call per question).

    Questions that already have a draft are skipped unless ``redo`` (never once frozen).
    A failed merge leaves no draft and no batch: the next run asks again (or build the
    draft by hand with ``edit add``).
    """
    wanted = set(questions) if questions is not None else None
    prep = _prepare(engine, backend, study, wanted)
    study_id = prep.study_id
    report = StageReport("merge")
    usage_before = backend.usage()
    jobs = []
    no_candidates = []
    with session_scope(engine) as s:
        drafts = {
            d.question_id: d
            for d in s.exec(select(CodebookDraft).where(CodebookDraft.study_id == study_id))
        }
        induced = s.exec(
            select(CodebookBatch)
            .where(
                CodebookBatch.study_id == study_id,
                CodebookBatch.stage == "induce",
                CodebookBatch.status == "done",
            )
            .order_by(CodebookBatch.question_id, CodebookBatch.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
        by_q: dict[str, list[CodebookBatch]] = {}
        for b in induced:
            by_q.setdefault(b.question_id, []).append(b)
        # A question with an induction batch that got no answer is not merged yet: its
        # draft would miss those candidates (the next induce retries the batch).
        unanswered = sorted(
            {
                b.question_id
                for b in s.exec(
                    select(CodebookBatch).where(
                        CodebookBatch.study_id == study_id,
                        CodebookBatch.stage == "induce",
                        CodebookBatch.status.in_(("planned", "failed")),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    )
                ).all()
                if b.status == "planned" or transport_failed(b)
            }
        )
        # Earlier merge rows are history of drafts already made (or being redone).
        s.execute(
            delete(CodebookBatch).where(
                CodebookBatch.study_id == study_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                CodebookBatch.stage == "merge",  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                CodebookBatch.status == "planned",  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
        )
        for q in sorted(set(by_q) | set(unanswered)):
            if wanted is not None and q not in wanted:
                continue
            report.n_questions += 1
            if q in unanswered:
                continue
            draft = drafts.get(q)
            if draft is not None and (draft.frozen_version_id is not None or not redo):
                report.n_skipped += 1
                continue
            replies = [
                (handle_map(b.trajectory_ids), InduceReply.model_validate(b.reply))
                for b in sorted(by_q[q], key=lambda b: b.batch_key)
            ]
            numbered = candidate_ids(candidates_from_induction(replies))
            if not numbered:
                no_candidates.append(q)
                continue
            report.n_batches += 1
            row = CodebookBatch(
                study_id=study_id,
                stage="merge",
                question_id=q,
                batch_key=batch_key(
                    "merge", q, time.time_ns(), [(c, x.name, x.criterion) for c, x in numbered]
                ),
                seed=0,
                trajectory_ids=sorted({t for _, c in numbered for t in c.examples}),
                status="planned",
            )
            s.add(row)
            s.flush()
            jobs.append(
                BatchJob(
                    row.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                    q,
                    row.trajectory_ids,
                    call=lambda q=q, n=numbered: backend.merge(q, n, prep.questions.get(q)),  # type: ignore[misc]  # mypy cannot infer a lambda passed as a keyed sort/group callback
                    context={"numbered": numbered},
                )
            )
    made: list[str] = []
    failed: dict[str, str] = {}
    no_answer: list[str] = []

    def persist(s: Session, done: Done) -> None:
        for job, result in done:
            if _unanswered(result):
                no_answer.append(job.question_id)
            try:
                if not result.ok:
                    raise ValueError(result.error or "failed")
                modes = modes_from_merge(job.context["numbered"], result.value)  # type: ignore[arg-type]  # result.value is set when result.ok (checked just above)
            except ValueError as exc:
                failed[job.question_id] = str(exc)
                s.execute(delete(CodebookBatch).where(CodebookBatch.id == job.row_id))  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                continue
            draft = s.exec(
                select(CodebookDraft).where(
                    CodebookDraft.study_id == study_id,
                    CodebookDraft.question_id == job.question_id,
                )
            ).first()
            if draft is None:
                draft = CodebookDraft(
                    study_id=study_id, question_id=job.question_id, updated_by=actor
                )
            draft.modes = modes_to_json(modes)
            draft.updated_by = actor
            draft.updated_at = utcnow()
            s.add(draft)
            made.append(job.question_id)

    _execute(engine, jobs=jobs, concurrency=concurrency, persist=persist, report=report)
    report.n_failed = len(failed)
    report.usage = backend.usage().minus(usage_before).to_dict()
    report.details = {
        "drafted": sorted(made),
        "failed": failed,
        "no_candidates": no_candidates,
        "induction_unanswered": [q for q in unanswered if wanted is None or q in wanted],
        "unanswered": sorted(no_answer),
    }
    _record(engine, study_id=study_id, actor=actor, report=report, backend=backend.describe())
    return report


# --------------------------------------------------------------------------- assign


def assign(
    engine: Engine,
    *,
    study: str,
    backend: CodebookBackend,
    actor: str,
    batch_size: int = 10,
    seed: int = 0,
    concurrency: int = 8,
    questions: Iterable[str] | None = None,
) -> StageReport:
    """Assign every target trajectory of each question's latest frozen codebook twice, in
    two passes with independently shuffled orders and batchings. A reply that is unusable
    for an item (failed call, malformed, unknown id, no answer) records ``INVALID``, which
    reconciliation picks up."""
    wanted = list(questions) if questions is not None else None
    report = StageReport("assign")
    usage_before = backend.usage()
    with session_scope(engine) as s:
        study_id = require_study(s, name=study).id
        assert study_id is not None
        sizes = accepted_sizes(s, study_id=study_id)
        versions = versions_by_question(s, study_id=study_id)
    selected = _select(sizes, wanted)
    missing = [q for q in selected if q not in versions]
    if wanted is not None and missing:
        raise CodebookStageError(f"no frozen codebook for question(s) {missing}: run freeze")
    chunks: list[list[str]] = [[]]
    n_chunk = 0
    for q in selected:
        if chunks[-1] and n_chunk + sizes[q] > ASSIGN_CHUNK:
            chunks.append([])
            n_chunk = 0
        chunks[-1].append(q)
        n_chunk += sizes[q]
    if len(chunks) > 1:  # every question text is scanned before the first call
        with session_scope(engine) as s:
            texts = problem_texts(s, study_id=study_id)
            for chunk in chunks:
                guard = study_guard(s, study_id=study_id, questions=chunk)
                for q in chunk:
                    if q in texts and (wanted is None or q in wanted):
                        guard.check_question(q, texts[q])
    for chunk in chunks:
        _assign_chunk(engine, backend, study, wanted, chunk, report, seed, batch_size, concurrency)
    report.details["missing_codebook"] = missing
    report.usage = backend.usage().minus(usage_before).to_dict()
    _record(
        engine,
        study_id=study_id,
        actor=actor,
        report=report,
        backend=backend.describe(),
        seed=seed,
        batch_size=batch_size,
    )
    return report


def _assign_chunk(
    engine: Engine,
    backend: CodebookBackend,
    study: str,
    wanted: list[str] | None,
    chunk: list[str],
    report: StageReport,
    seed: int,
    batch_size: int,
    concurrency: int,
) -> None:
    """Plan and run the assignment of the questions of ``chunk`` that have a frozen
    codebook, counting into ``report``."""
    prep = _prepare(engine, backend, study, wanted, load=chunk)
    study_id, groups = prep.study_id, prep.groups
    jobs = []
    with session_scope(engine) as s:
        versions = versions_by_question(s, study_id=study_id)
        latest = {q: versions[q][-1] for q in chunk if q in versions}
        passes = assigned_passes(s, version_ids=[v.id for v in latest.values()])  # type: ignore[misc]  # a stored row's id is set: SQLModel types every primary key Optional
        specs = []
        for q, v in latest.items():
            accepted = [t for t, _ in groups.get(q, [])]
            targets = version_targets(s, versions=versions[q], accepted_ids=accepted)[v.id]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
            for pass_no in (1, 2):
                specs.append(PlanSpec(q, v.id, pass_no, targets, (v.content_hash, pass_no)))
        plans = _plan(
            s, study_id=study_id, stage="assign", seed=seed, batch_size=batch_size, specs=specs
        )
        for (q, vid, pass_no), rows in sorted(plans.items(), key=lambda kv: (kv[0][2], kv[0][0])):
            v = latest[q]
            modes = modes_from_json(v.modes)
            todo = _todo(report, rows, prep.excluded)
            _forget_unanswered(s, todo, passes)
            jobs += _label_jobs(
                s, prep, q, todo, modes, backend.assign, dict(groups[q]), vid, pass_no
            )
        report.n_questions += len(latest)

    def persist(s: Session, done: Done) -> None:
        rows = []
        for job, result in done:
            have = passes.get(job.version_id, {})  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            for x in labels_from_reply(
                job.context["hmap"], result.value, job.context["mode_ids"], error=result.error
            ):
                if job.pass_no in have.get(x.trajectory_id, {}):
                    continue  # assigned by another plan already (e.g. a changed seed)
                rows.append(
                    {
                        "study_id": study_id,
                        "version_id": job.version_id,
                        "question_id": job.question_id,
                        "trajectory_id": x.trajectory_id,
                        "pass_no": job.pass_no,
                        "label": x.label,
                        "confidence": x.confidence,
                        "proposal": x.proposal,
                        "note": x.note,
                        "batch_id": job.row_id,
                    }
                )
        if rows:
            s.execute(insert(CodebookAssignment), rows)

    _execute(engine, jobs=jobs, concurrency=concurrency, persist=persist, report=report)


def _unanswered(result: LLMResult[Any]) -> bool:
    """A call that got no answer (endpoint unreachable, retries spent): not a reply."""
    return not result.ok and not (result.error or "").startswith(INVALID_REPLY)


def _forget_unanswered(
    session: Session,
    todo: Sequence[CodebookBatch],
    passes: dict[int, dict[str, dict[int, CodebookAssignment]]],
) -> None:
    """Before a batch that got no answer is asked again, drop the ``INVALID`` labels its
    failure recorded (from the store and from ``passes``), so that the retry's answer
    becomes the pass."""
    retried = {r.id for r in todo if r.status == "failed"}
    if not retried:
        return
    session.execute(
        delete(CodebookAssignment).where(CodebookAssignment.batch_id.in_(sorted(retried)))  # type: ignore[attr-defined, type-var]  # SQLModel types a column attribute as its Python value, not as the SQL column; a stored row's id is set: SQLModel types every primary key Optional
    )
    for by_tid in passes.values():
        for per_pass in by_tid.values():
            for pass_no in [n for n, a in per_pass.items() if a.batch_id in retried]:
                del per_pass[pass_no]


# --------------------------------------------------------------------------- reconcile


def _label(row: CodebookAssignment) -> ItemLabel:
    return ItemLabel(row.trajectory_id, row.label, row.confidence, row.proposal, row.note)


def open_disputes(
    session: Session,
    *,
    study_id: int,
    threshold: float,
    questions: Sequence[str] | None = None,
) -> tuple[int, int, int]:
    """Create a dispute for every trajectory of a latest version whose two passes do not
    settle it. Returns (n settled, n new disputes, n still missing a pass)."""
    versions = versions_by_question(session, study_id=study_id)
    groups = accepted_by_question(session, study_id=study_id)
    wanted = set(questions) if questions is not None else None
    latest = {q: vs[-1] for q, vs in versions.items() if wanted is None or q in wanted}
    passes = assigned_passes(session, version_ids=[v.id for v in latest.values()])  # type: ignore[misc]  # a stored row's id is set: SQLModel types every primary key Optional
    # An assignment recorded from a batch that got no answer is not a pass: the next
    # assign asks again (and replaces it); until then the trajectory misses that pass.
    unanswered = {
        b.id
        for b in session.exec(
            select(CodebookBatch).where(
                CodebookBatch.study_id == study_id,
                CodebookBatch.stage == "assign",
                CodebookBatch.status == "failed",
            )
        ).all()
        if transport_failed(b)
    }
    existing = {
        (d.version_id, d.trajectory_id)
        for d in session.exec(
            select(CodebookDispute).where(CodebookDispute.study_id == study_id)
        ).all()
    }
    settled = created = missing = 0
    new_rows = []
    for q, v in latest.items():
        accepted = [t for t, _ in groups.get(q, [])]
        targets = version_targets(session, versions=versions[q], accepted_ids=accepted)[v.id]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        got = passes.get(v.id, {})  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        for t in targets:
            p = {n: a for n, a in got.get(t, {}).items() if a.batch_id not in unanswered}
            if 1 not in p or 2 not in p:
                missing += 1
                continue
            reasons = dispute_reasons(_label(p[1]), _label(p[2]), threshold=threshold)
            if not reasons:
                settled += 1
            elif (v.id, t) not in existing:
                new_rows.append(
                    CodebookDispute(
                        study_id=study_id,
                        version_id=v.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                        question_id=q,
                        trajectory_id=t,
                        reasons=reasons,
                        status="open",
                    )
                )
                created += 1
    session.add_all(new_rows)
    session.flush()
    return settled, created, missing


def reconcile(
    engine: Engine,
    *,
    study: str,
    backend: CodebookBackend,
    actor: str,
    threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
    batch_size: int = 8,
    seed: int = 0,
    concurrency: int = 8,
    questions: Iterable[str] | None = None,
) -> StageReport:
    """Open disputes (passes disagree, NEW/NONE/invalid, or confidence below
    ``threshold``), then arbitrate the open ones in LLM batches: a confident existing mode
    settles a dispute, a confident NEW makes it a provisional NEW for extension review,
    anything else goes to the researcher queue."""
    wanted = list(questions) if questions is not None else None
    prep = _prepare(engine, backend, study, wanted)
    study_id, groups = prep.study_id, prep.groups
    report = StageReport("reconcile")
    usage_before = backend.usage()
    jobs = []
    with session_scope(engine) as s:
        settled, created, missing = open_disputes(
            s, study_id=study_id, threshold=threshold, questions=wanted
        )
        versions = {
            v.id: v
            for v in s.exec(select(CodebookVersion).where(CodebookVersion.study_id == study_id))
        }
        open_rows = s.exec(
            select(CodebookDispute).where(
                CodebookDispute.study_id == study_id, CodebookDispute.status == "open"
            )
        ).all()
        latest_ids = {vs[-1].id for vs in versions_by_question(s, study_id=study_id).values()}
        excluded = excluded_trajectories(s, study_id=study_id)
        by_v: dict[int, list[str]] = {}
        for d in open_rows:
            # A dispute of a superseded version is settled by reassignment under the new one.
            if d.trajectory_id in excluded:
                continue
            if d.version_id in latest_ids and (wanted is None or d.question_id in wanted):
                by_v.setdefault(d.version_id, []).append(d.trajectory_id)
        specs = [
            PlanSpec(versions[vid].question_id, vid, 3, tids, (versions[vid].content_hash,))
            for vid, tids in sorted(by_v.items())
        ]
        plans = _plan(
            s, study_id=study_id, stage="arbitrate", seed=seed, batch_size=batch_size, specs=specs
        )
        for (q, vid, _), rows in sorted(plans.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            modes = modes_from_json(versions[vid].modes)
            todo = _todo(report, rows, prep.excluded)
            if todo:
                report.n_questions += 1
            jobs += _label_jobs(
                s, prep, q, todo, modes, backend.arbitrate, dict(groups.get(q, [])), vid, 3
            )
    outcome: dict[str, int] = {"resolved": 0, "new": 0, "researcher": 0}
    who = f"arbitration:{backend.name}"

    def persist(s: Session, done: Done) -> None:
        tids = {t for job, _ in done for t in job.trajectory_ids}
        rows = {
            (d.version_id, d.trajectory_id): d
            for d in s.exec(
                select(CodebookDispute).where(
                    CodebookDispute.study_id == study_id,
                    CodebookDispute.trajectory_id.in_(tids),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
                )
            ).all()
        }
        for job, result in done:
            if _unanswered(result):
                continue  # the disputes stay open: the next reconcile asks again
            for lab in labels_from_reply(
                job.context["hmap"], result.value, job.context["mode_ids"], error=result.error
            ):
                d = rows.get((job.version_id, lab.trajectory_id))  # type: ignore[arg-type]  # a stored version's id is set: SQLModel types every primary key Optional
                if d is None or d.status != "open":
                    continue  # settled meanwhile (e.g. by a researcher)
                status = arbitration_status(lab, threshold=threshold)
                d.arbitration_label = lab.label
                d.arbitration_confidence = lab.confidence
                d.arbitration_note = lab.note or lab.rationale
                d.status = status
                if status == "resolved":
                    d.final_label, d.resolved_by, d.resolved_at = lab.label, who, utcnow()
                elif status == "new":
                    d.proposal = lab.proposal
                outcome[status] += 1
                s.add(d)

    _execute(engine, jobs=jobs, concurrency=concurrency, persist=persist, report=report)
    report.usage = backend.usage().minus(usage_before).to_dict()
    report.details = {
        "settled_by_passes": settled,
        "new_disputes": created,
        "missing_pass": missing,
        "arbitration": outcome,
    }
    _record(
        engine,
        study_id=study_id,
        actor=actor,
        report=report,
        backend=backend.describe(),
        threshold=threshold,
        seed=seed,
    )
    return report
