"""``rcea judge run``: the frozen judge over a study's verifier successes (R = 1 only).

Resumable: a verdict row per (judge version, trajectory) is stored as results arrive
(committed every ``COMMIT_EVERY``); a rerun judges only trajectories without one. A
trajectory whose call failed after every retry (429/5xx/timeouts) gets no verdict row and
is asked again by the next run. When the run ends, the study's ``validity`` column is
rewritten for every R = 1 trajectory from this judge's verdicts: ``valid`` → 1, and
``invalid``, ``unparseable`` or still pending → 0 (never accepted without a verdict), and
a ``judge.run`` event records the judge hash, name and counts (the contract of
:mod:`rcea.study.validity_audit.status`).

Every prompt passes the study's provenance scan (run/model names, the question's
trajectory ids) before it is sent; a hit stops the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import case, tuple_, update
from sqlalchemy import select as sa_select
from sqlalchemy.engine import Engine
from sqlmodel import Session, func, select

from rcea.pipeline.judge import (
    UNPARSEABLE,
    VALID,
    JudgeOutcome,
    JudgeSpec,
    OpenAIJudge,
    OracleJudge,
)
from rcea.pipeline.llm import LLMClient, ResponseCache, run_jobs
from rcea.pipeline.transcript import solution_text
from rcea.study.codebook.backend import BackendOptions, llm_config, load_strategy_fn
from rcea.study.codebook.blinding import PromptBlindingGuard, extend_guard, study_guard
from rcea.study.settings import Settings
from rcea.study.store import append_event, require_study, session_scope
from rcea.study.store.models import JudgeVerdict, JudgeVersion, Trajectory
from rcea.study.validity_audit.problems import problems_for
from rcea.study.validity_audit.status import JUDGE_RUN_EVENT
from rcea.study.validity_audit.versions import JudgeError, get_judge, judge_spec

COMMIT_EVERY = 200
PAGE = 10_000
"""successes read per store query (bounded memory at 10^6 trajectories)"""


@dataclasses.dataclass(frozen=True)
class RunOptions:
    backend: str | None = None
    """must match the frozen judge's backend when given"""
    oracle: str | None = None
    """must match the frozen judge's oracle (its model) when given"""
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 5
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0


def make_judge(
    settings: Settings, spec: JudgeSpec, opts: RunOptions, guard: Any = None
) -> OpenAIJudge | OracleJudge:
    """The backend of a frozen judge; a ``--backend``/``--oracle`` that contradicts the
    frozen content is refused (a different model is a different judge)."""
    if opts.backend and opts.backend != spec.backend:
        raise JudgeError(
            f"the frozen judge uses backend {spec.backend!r}, not {opts.backend!r}: "
            "freeze a new judge version to change it"
        )
    if spec.backend == "oracle":
        if opts.oracle and opts.oracle != spec.model:
            raise JudgeError(
                f"the frozen judge's oracle is {spec.model!r}, not {opts.oracle!r}: "
                "freeze a new judge version to change it"
            )
        return OracleJudge(load_strategy_fn(spec.model), label=spec.model)  # type: ignore[arg-type]  # not checked by hand yet: mypy sees a str-returning strategy function where a verdict is typed
    cfg = llm_config(
        settings.model_copy(update={"llm_model": spec.model}),
        BackendOptions(
            kind="openai",
            concurrency=opts.concurrency,
            timeout_s=opts.timeout_s,
            max_retries=opts.max_retries,
            price_input_per_mtok=opts.price_input_per_mtok,
            price_output_per_mtok=opts.price_output_per_mtok,
            seed=spec.seed,
        ),
    )
    cfg = dataclasses.replace(cfg, temperature=spec.temperature, max_tokens=spec.max_tokens)
    client = LLMClient(cfg, cache=ResponseCache(settings.data_dir / "llm-cache"))
    return OpenAIJudge(client, spec.template, guard=guard)


def _store(session: Session, judge: JudgeVersion, study_id: int, batch: list[Any]) -> None:
    for (tid, qid, _text), out in batch:
        session.add(
            JudgeVerdict(
                judge_id=judge.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                study_id=study_id,
                trajectory_id=tid,
                question_id=qid,
                verdict=out.verdict,
                rationale=out.rationale,
                error_location=out.error_location,
                error=out.error,
                request_hash=out.request_hash,
                usage=out.usage,
            )
        )
    session.flush()


def verdict_counts(session: Session, *, judge_id: int, study_id: int) -> dict[str, int]:
    rows = session.exec(
        select(JudgeVerdict.verdict, func.count())
        .where(JudgeVerdict.judge_id == judge_id, JudgeVerdict.study_id == study_id)
        .group_by(JudgeVerdict.verdict)
    ).all()
    return {str(v): int(n) for v, n in rows}


def write_validity(session: Session, *, judge_id: int, study_id: int) -> None:
    """validity = 1 for this judge's ``valid`` verdicts, 0 for every other R = 1 row.

    One UPDATE with a correlated ``EXISTS`` on the verdict's unique index: the database
    never materialises the set of valid ids (an ``IN (subquery)`` did on SQLite)."""
    is_valid = (
        sa_select(JudgeVerdict.id)  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
        .where(
            JudgeVerdict.judge_id == judge_id,
            JudgeVerdict.study_id == study_id,
            JudgeVerdict.trajectory_id == Trajectory.trajectory_id,
            JudgeVerdict.verdict == VALID,
        )
        .exists()
    )
    session.execute(
        update(Trajectory)
        .where(Trajectory.study_id == study_id, Trajectory.reward == 1)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        .values(validity=case((is_valid, 1), else_=0))
    )


def _targets(study_id: int, *, pending_for: int | None = None) -> Any:
    """The study's verifier successes (``trajectory_id, question_id, text, turns``); with
    ``pending_for`` only those without a verdict of that judge version."""
    stmt = sa_select(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
        Trajectory.trajectory_id, Trajectory.question_id, Trajectory.text, Trajectory.turns
    ).where(Trajectory.study_id == study_id, Trajectory.reward == 1)
    if pending_for is not None:
        judged = (
            sa_select(JudgeVerdict.id)  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
            .where(
                JudgeVerdict.judge_id == pending_for,
                JudgeVerdict.study_id == study_id,
                JudgeVerdict.trajectory_id == Trajectory.trajectory_id,
            )
            .exists()
        )
        stmt = stmt.where(~judged)
    return stmt


def _count(session: Session, stmt: Any) -> int:
    return int(session.execute(sa_select(func.count()).select_from(stmt.subquery())).scalar_one())


def _pending(
    engine: Engine, *, study_id: int, judge_id: int, guard: PromptBlindingGuard | None
) -> Iterator[tuple[str, str, str]]:
    """The successes without a verdict of ``judge_id``, in (question, trajectory) order,
    read in keyset pages of ``PAGE`` rows (memory bounded by the page, not the study).
    Before a page's jobs are handed out, ``guard`` learns the trajectory ids of the page's
    questions and forgets those of questions two pages back (their calls are done: the
    jobs in flight are far fewer than a page)."""
    after: tuple[str, str] | None = None
    previous: set[str] = set()
    while True:
        stmt = _targets(study_id, pending_for=judge_id)
        if after is not None:
            stmt = stmt.where(
                tuple_(Trajectory.question_id, Trajectory.trajectory_id) > tuple_(*after)
            )
        stmt = stmt.order_by(Trajectory.question_id, Trajectory.trajectory_id).limit(PAGE)
        with session_scope(engine) as s:
            # a multi-turn transcript reaches the judge one block per turn, its role named
            # (rcea.pipeline.transcript.solution_text; docs/how-to-verl.md)
            page = [(t, q, solution_text(x, turns)) for t, q, x, turns in s.execute(stmt).all()]
            current = {q for _, q, _ in page}
            if guard is not None and page:
                guard.retain(current | previous)
                extend_guard(s, guard, study_id=study_id, questions=current - previous)
        if not page:
            return
        yield from page
        previous = current
        after = (page[-1][1], page[-1][0])


def run_judge(
    engine: Engine,
    *,
    study: str,
    judge: str,
    settings: Settings,
    actor: str,
    version: int | None = None,
    options: RunOptions | None = None,
    impl: OpenAIJudge | OracleJudge | None = None,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Judge every not-yet-judged verifier success of ``study``; see the module docstring."""
    opts = options or RunOptions()
    with session_scope(engine) as s:
        st = require_study(s, name=study)
        row = get_judge(s, name=judge, version=version)
        spec = judge_spec(row)
        study_id = st.id
        assert study_id is not None and row.id is not None
        n_targets = _count(s, _targets(study_id))
        n_done = _count(
            s,
            sa_select(JudgeVerdict.id).where(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
                JudgeVerdict.judge_id == row.id, JudgeVerdict.study_id == study_id
            ),
        )
        n_todo = _count(s, _targets(study_id, pending_for=row.id))
        problems = problems_for(s, study_id=study_id)
        guard = (
            study_guard(s, study_id=study_id, questions=()) if spec.backend == "openai" else None
        )
        if spec.backend == "openai":
            todo_questions = s.execute(
                _targets(study_id, pending_for=row.id)
                .with_only_columns(Trajectory.question_id)
                .distinct()
            ).scalars()
            missing = sorted({q for q in todo_questions if q not in problems})
            if missing:
                raise JudgeError(
                    f"no problem text for {len(missing)} question(s) ({', '.join(missing[:5])}): "
                    "ingest records with a `question` field, or load them with "
                    "`rcea judge problems --study S FILE.jsonl|MODULE:FUNCTION`"
                )
    if impl is None:
        impl = make_judge(settings, spec, opts, guard)
    if on_total:
        on_total(n_todo)
    buffer: list[Any] = []
    failed: list[str] = []
    todo = _pending(engine, study_id=study_id, judge_id=row.id, guard=guard)

    def flush() -> None:
        if buffer:
            with session_scope(engine) as s2:
                _store(s2, s2.get(JudgeVersion, row.id), study_id, buffer)  # type: ignore[arg-type]  # the judge version was stored in this run (same id)
            buffer.clear()

    def work(job: tuple[str, str, str]) -> JudgeOutcome:
        tid, qid, text = job
        return impl.judge(qid, problems.get(qid, ""), text)

    def on_result(job: tuple[str, str, str], out: JudgeOutcome) -> None:
        if out.verdict is None:
            failed.append(job[0])
        else:
            buffer.append((job, out))
            if len(buffer) >= COMMIT_EVERY:
                flush()
        if progress:
            progress(1)

    try:
        n_delivered = run_jobs(todo, work, concurrency=opts.concurrency, on_result=on_result)
    finally:
        flush()
    with session_scope(engine) as s:
        write_validity(s, judge_id=row.id, study_id=study_id)
        counts = verdict_counts(s, judge_id=row.id, study_id=study_id)
        n_judged = sum(counts.values())
        parseable = n_judged - counts.get(UNPARSEABLE, 0)
        out = {
            "study": study,
            "judge_name": row.name,
            "judge_version": row.version,
            "judge_hash": row.content_hash,
            "backend": spec.backend,
            "model": spec.model,
            "seed": spec.seed,
            "temperature": spec.temperature,
            "n_successes": n_targets,
            "n_already_judged": n_done,
            "n_new": n_delivered - len(failed),
            "n_failed": len(failed),
            "failed_trajectory_ids": failed[:20],
            "n_judged": n_judged,
            "n_valid": counts.get(VALID, 0),
            "n_invalid": counts.get("invalid", 0),
            "n_unparseable": counts.get(UNPARSEABLE, 0),
            "coverage": parseable / n_judged if n_judged else None,
            "complete": not failed and n_judged == n_targets,
            "usage": impl.usage(),
        }
        append_event(s, actor=actor, kind=JUDGE_RUN_EVENT, study_id=study_id, payload=out)
    return out
