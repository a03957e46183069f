"""Store queries shared by the codebook stages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, select

from rcea.pipeline.codebook import handles
from rcea.pipeline.codebook.model import CodebookError
from rcea.study import events
from rcea.study.pair_audit.freeze import accepted_trajectories
from rcea.study.store.models import (
    CodebookAssignment,
    CodebookExtension,
    CodebookVersion,
    Event,
    Trajectory,
)


class CodebookStageError(CodebookError):
    """A stage cannot run yet (missing earlier stage, stale request, unknown id...)."""


@dataclass
class StageReport:
    stage: str
    n_questions: int = 0
    n_batches: int = 0
    """batches planned"""
    n_skipped: int = 0
    """planned batches already finished by an earlier run (resume)"""
    n_run: int = 0
    n_failed: int = 0
    n_retried: int = 0
    """batches an earlier run recorded as failed for want of an answer (endpoint
    unreachable, retries spent) and run again by this one"""
    usage: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


EXCLUDE_EVENT = events.CODEBOOK_EXCLUDE
INVALID_REPLY = "invalid reply"
"""how :class:`rcea.pipeline.llm.LLMClient` starts the error of a call the endpoint answered"""


def transport_failed(row: Any) -> bool:
    """A batch recorded as failed without an answer (endpoint unreachable, HTTP error,
    retries spent): a rerun asks again. A batch failed on an invalid reply after the
    re-asks is an answer, and stays finished."""
    return (
        row.status == "failed"
        and row.reply is None
        and not (row.error or "").startswith(INVALID_REPLY)
    )


def excluded_trajectories(session: Session, *, study_id: int) -> dict[str, dict[str, Any]]:
    """trajectory_id → the ``codebook.exclude`` event payload (reason, actor, time) of
    every trajectory a researcher excluded from the codebook cycle."""
    rows = session.exec(
        select(Event)
        .where(Event.study_id == study_id, Event.kind == EXCLUDE_EVENT)
        .order_by(Event.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).all()
    return {
        str(e.payload["trajectory_id"]): {
            **e.payload,
            "actor": e.actor,
            "time": e.time.isoformat(),
        }
        for e in rows
    }


def accepted_by_question(
    session: Session,
    *,
    study_id: int,
    questions: Iterable[str] | None = None,
    include_excluded: bool = False,
) -> dict[str, list[tuple[str, str]]]:
    """question_id → [(trajectory_id, text)] of accepted trajectories (R = 1 and
    judge-accepted), ordered by trajectory id; without those a researcher excluded from
    the cycle (``rcea codebook exclude``) unless ``include_excluded``."""
    wanted = set(questions) if questions is not None else None
    excluded = set() if include_excluded else set(excluded_trajectories(session, study_id=study_id))
    out: dict[str, list[tuple[str, str]]] = {}
    if wanted is not None:  # only those questions' rows leave the store (bounded memory)
        ordered = sorted(wanted)
        for i in range(0, len(ordered), 500):
            rows = session.exec(
                _accepted_stmt(
                    study_id, Trajectory.question_id, Trajectory.trajectory_id, Trajectory.text
                ).where(Trajectory.question_id.in_(ordered[i : i + 500]))  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
            for q, tid, text in rows:
                if tid not in excluded:
                    out.setdefault(q, []).append((tid, text))
        return out
    for t in accepted_trajectories(session, study_id=study_id):
        if t.trajectory_id in excluded:
            continue
        if wanted is None or t.question_id in wanted:
            out.setdefault(t.question_id, []).append((t.trajectory_id, t.text))
    return out


def _accepted_stmt(study_id: int, *columns: Any) -> Any:
    """``accepted_trajectories``' rows (R = 1, judge-accepted), only ``columns``, in
    (question, trajectory) order."""
    return (
        select(*columns)
        .where(Trajectory.study_id == study_id, Trajectory.reward == 1)
        .where((Trajectory.validity.is_(None)) | (Trajectory.validity == 1))  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
        .order_by(Trajectory.question_id, Trajectory.trajectory_id)
    )


def accepted_sizes(session: Session, *, study_id: int) -> dict[str, int]:
    """question_id → its number of accepted trajectories a researcher did not exclude from
    the cycle (questions with none left out): the keys of :func:`accepted_by_question`
    without reading a text."""

    counted = _accepted_stmt(study_id, Trajectory.question_id, func.count()).order_by(None)
    sizes = dict(session.exec(counted.group_by(Trajectory.question_id)).all())
    excluded = sorted(excluded_trajectories(session, study_id=study_id))
    for i in range(0, len(excluded), 500):
        for q in session.exec(
            _accepted_stmt(study_id, Trajectory.question_id).where(
                Trajectory.trajectory_id.in_(excluded[i : i + 500])  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
        ):
            sizes[q] -= 1
    return {q: int(n) for q, n in sizes.items() if n > 0}


def versions_by_question(session: Session, *, study_id: int) -> dict[str, list[CodebookVersion]]:
    """question_id → frozen versions, oldest first."""
    rows = session.exec(
        select(CodebookVersion)
        .where(CodebookVersion.study_id == study_id)
        .order_by(CodebookVersion.question_id, CodebookVersion.version)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).all()
    out: dict[str, list[CodebookVersion]] = {}
    for r in rows:
        out.setdefault(r.question_id, []).append(r)
    return out


def handle_map(trajectory_ids: Sequence[str]) -> dict[str, str]:
    """Opaque per-batch handle → trajectory id (handles follow the batch's shuffled order)."""
    return dict(zip(handles(len(trajectory_ids)), trajectory_ids, strict=True))


def assigned_passes(
    session: Session, *, version_ids: Sequence[int]
) -> dict[int, dict[str, dict[int, CodebookAssignment]]]:
    """version_id → trajectory_id → pass_no → assignment row."""
    out: dict[int, dict[str, dict[int, CodebookAssignment]]] = {v: {} for v in version_ids}
    if not version_ids:
        return out
    rows = session.exec(
        select(CodebookAssignment).where(CodebookAssignment.version_id.in_(version_ids))  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).all()
    for r in rows:
        out[r.version_id].setdefault(r.trajectory_id, {})[r.pass_no] = r
    return out


def version_targets(
    session: Session,
    *,
    versions: Sequence[CodebookVersion],
    accepted_ids: Sequence[str],
    passes: dict[int, dict[str, dict[int, CodebookAssignment]]] | None = None,
) -> dict[int, list[str]]:
    """version_id → the trajectories that version assigns.

    Version 1 assigns every accepted trajectory of the question. A later version (made by
    an approved extension) assigns the trajectories that extension found unsettled, plus
    any accepted trajectory no earlier version assigned in both passes (new data).
    """
    if passes is None:
        passes = assigned_passes(session, version_ids=[v.id for v in versions])  # type: ignore[misc]  # a stored row's id is set: SQLModel types every primary key Optional
    out: dict[int, list[str]] = {}
    done_earlier: set[str] = set()
    for v in versions:
        if v.parent_id is None:
            targets = set(accepted_ids)
        else:
            ext = session.exec(
                select(CodebookExtension).where(CodebookExtension.new_version_id == v.id)
            ).first()
            affected = set(ext.affected_trajectory_ids) if ext else set()
            targets = affected | (set(accepted_ids) - done_earlier)
        out[v.id] = sorted(targets)  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        done_earlier |= {t for t, p in passes.get(v.id, {}).items() if 1 in p and 2 in p}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return out
