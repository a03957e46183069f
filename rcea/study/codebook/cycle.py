"""The whole automatic codebook cycle in one call (``rcea codebook run``): induce → merge
→ freeze the drafts as they are → assign ×2 → reconcile → extension requests, stopping
where a researcher decides. Resumable like each stage: finished batches are not redone."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from rcea.pipeline.codebook.logic import DEFAULT_CONFIDENCE_THRESHOLD
from rcea.study.codebook.common import StageReport, transport_failed
from rcea.study.codebook.review import (
    freeze_codebooks,
    list_extensions,
    request_extensions,
    researcher_queue,
)
from rcea.study.codebook.stages import assign, induce, merge, reconcile
from rcea.study.store import require_study, session_scope
from rcea.study.store.models import CodebookBatch, CodebookVersion


def unanswered_batches(session: Session, *, study: str) -> int:
    """Batches of the study recorded as failed without an answer (a rerun retries them)."""
    st = require_study(session, name=study)
    rows = session.exec(
        select(CodebookBatch).where(
            CodebookBatch.study_id == st.id, CodebookBatch.status == "failed"
        )
    ).all()
    return sum(1 for r in rows if transport_failed(r))


@dataclass
class CycleResult:
    reports: list[StageReport] = field(default_factory=list)
    n_frozen: int = 0
    n_extensions: int = 0
    n_queue: int = 0
    n_unanswered: int = 0

    @property
    def waiting(self) -> str | None:
        """Why the cycle is not finished: ``unanswered`` (the endpoint did not answer some
        batches: rerun), ``researcher`` (queue items or extension requests wait), or None."""
        if self.n_unanswered:
            return "unanswered"
        if self.n_queue or self.n_extensions:
            return "researcher"
        return None

    def next_steps(self, study: str | None = None) -> list[str]:
        """The commands that apply now, in order (none but export when nothing waits);
        with ``study``, each names it (``--study S``)."""
        at = f" --study {shlex.quote(study)}" if study else ""
        if self.n_unanswered:
            return [f"rcea codebook run{at}  (retries the unanswered batches)"]
        steps = []
        if self.n_queue:
            steps.append(f"rcea codebook queue{at}, then rcea codebook resolve")
        if self.n_extensions:
            steps.append(f"rcea codebook extend{at}, then rcea codebook approve / reject")
        return steps or [f"rcea codebook export{at}"]

    def next_command(self, study: str) -> tuple[str, str]:
        """Where the cycle stands in words and the one command that advances it (what
        ``rcea status`` names; the same order as :meth:`next_steps`)."""
        at = f"--study {shlex.quote(study)}"
        if self.n_unanswered:
            return (
                f"{self.n_unanswered} batch(es) got no answer from the endpoint",
                f"rcea codebook run {at}",
            )
        if self.n_queue:
            return (
                f"{self.n_queue} item(s) wait in the researcher queue "
                "(then `rcea codebook resolve`)",
                f"rcea codebook queue {at}",
            )
        if self.n_extensions:
            return (
                f"{self.n_extensions} extension request(s) wait for review "
                "(then `rcea codebook approve` / `reject`)",
                f"rcea codebook extend {at}",
            )
        return "the cycle ran; nothing waits: export the partition", f"rcea codebook export {at}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "stages": [r.to_dict() for r in self.reports],
            "n_frozen_now": self.n_frozen,
            "pending_extensions": self.n_extensions,
            "researcher_queue": self.n_queue,
            "unanswered_batches": self.n_unanswered,
            "next": self.next_steps(),
        }


def run_cycle(
    engine: Engine,
    *,
    study: str,
    backend: Any,
    actor: str,
    seed: int = 0,
    induce_batch_size: int = 12,
    sample_per_question: int | None = None,
    assign_batch_size: int = 10,
    threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
    concurrency: int = 8,
) -> CycleResult:
    """Every automatic stage in order, then count what waits for a person."""
    kw = {"study": study, "backend": backend, "actor": actor, "concurrency": concurrency}
    out = CycleResult()
    out.reports.append(
        induce(
            engine,
            seed=seed,
            batch_size=induce_batch_size,
            sample_per_question=sample_per_question,
            **kw,
        )
    )
    out.reports.append(merge(engine, **kw))
    with session_scope(engine) as s:
        out.n_frozen = len(freeze_codebooks(s, study=study, actor=actor))
    out.reports.append(assign(engine, seed=seed, batch_size=assign_batch_size, **kw))
    out.reports.append(reconcile(engine, seed=seed, threshold=threshold, **kw))
    with session_scope(engine) as s:
        out.n_extensions = len(request_extensions(s, study=study, actor=actor))
        out.n_queue = len(researcher_queue(s, study=study))
        # merge keeps no batch row for a failed call: its unanswered ones are in its report
        out.n_unanswered = unanswered_batches(s, study=study) + sum(
            len(r.details.get("unanswered", [])) for r in out.reports if r.stage == "merge"
        )
    return out


def cycle_progress(session: Session, *, study: str) -> CycleResult | None:
    """The cycle's state read from the store alone (``rcea status``): what a researcher
    must decide and what the endpoint left unanswered, as :func:`run_cycle` counts it;
    ``None`` before any codebook stage ran."""
    st = require_study(session, name=study)
    started = (
        session.exec(
            select(CodebookBatch.id).where(CodebookBatch.study_id == st.id).limit(1)
        ).first()
        or session.exec(
            select(CodebookVersion.id).where(CodebookVersion.study_id == st.id).limit(1)
        ).first()
    )
    if started is None:
        return None
    out = CycleResult()
    out.n_unanswered = unanswered_batches(session, study=study)
    out.n_queue = len(researcher_queue(session, study=study))
    out.n_extensions = len(list_extensions(session, study=study, status="pending"))
    return out
