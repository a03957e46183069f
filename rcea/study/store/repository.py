"""Store operations used by the CLI, the service and later the domain packages.

Functions take a session and keyword-only arguments; they do not commit (the caller's
``session_scope`` does), so several operations form one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, select

from rcea.audits.inputs import invisible_character
from rcea.pipeline.records import forbidden_character
from rcea.study.store.models import (
    Event,
    Ingest,
    JudgeProblem,
    Measurement,
    Question,
    Study,
    Trajectory,
)
from rcea.study.store.widths import WidthError, check_stored, limit_of


class StoreError(ValueError):
    """A request the store refuses (unknown study, duplicate ids, ...)."""


def get_study(session: Session, *, name: str) -> Study | None:
    return session.exec(select(Study).where(Study.name == name)).first()


def require_study(session: Session, *, name: str) -> Study:
    study = get_study(session, name=name)
    if study is None:
        known = ", ".join(s.name for s in session.exec(select(Study)).all()) or "none"
        raise StoreError(f"no study named {name!r} (known studies: {known})")
    return study


#: The store's width of a study name (``Study.name``), read from the store's own column.
STUDY_NAME_WIDTH = limit_of(Study.name).width


def check_study_name(name: str) -> str:
    """``name`` if a study may be called so: not blank, at most :data:`STUDY_NAME_WIDTH`
    characters, no control, invisible or bidirectional character; ``StoreError`` else."""
    if not isinstance(name, str) or not name.strip():
        raise StoreError(f"--study must be a non-empty name, got {name!r}")
    if name != name.strip():
        raise StoreError(f"--study {name!r}: remove the spaces around the name")
    try:
        check_stored(name, Study.name, option="--study")
    except WidthError as exc:
        raise StoreError(str(exc)) from None
    why = invisible_character(name) or forbidden_character(name)
    if why:
        raise StoreError(f"--study: {why}")
    return name


def get_or_create_study(session: Session, *, name: str, description: str = "") -> Study:
    study = get_study(session, name=name)
    if study is None:
        check_study_name(name)  # a new name only: an existing study stays reachable
        study = Study(name=name, description=description)
        session.add(study)
        session.flush()
    return study


def list_studies(session: Session) -> list[Study]:
    return list(session.exec(select(Study).order_by(Study.id)).all())  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column


def study_by_id(session: Session, study_id: int) -> Study | None:
    return session.get(Study, study_id)


def store_stamp(session: Session, *, study: str | None) -> tuple[int, int, int, int]:
    """A cheap stamp that changes whenever anything of ``study`` may have changed: the
    latest event id (freezes, labels, codebook decisions, ingests), the trajectory count,
    and the measurement count and latest id (zeros without the study)."""

    last_event = session.exec(select(func.max(Event.id))).one() or 0
    st = get_study(session, name=study) if study else None
    if st is None:
        return (int(last_event), 0, 0, 0)
    n_traj = session.exec(select(func.count()).where(Trajectory.study_id == st.id)).one()
    n_meas, last_meas = session.exec(
        select(func.count(), func.max(Measurement.id)).where(Measurement.study_id == st.id)
    ).one()
    return (int(last_event), int(n_traj), int(n_meas), int(last_meas or 0))


def trajectories_by_id(
    session: Session, *, study_id: int, ids: Iterable[str]
) -> dict[str, Trajectory]:
    """trajectory_id → the study's stored row, for those of ``ids`` that exist."""

    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = session.exec(
        select(Trajectory).where(
            Trajectory.study_id == study_id,
            Trajectory.trajectory_id.in_(wanted),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
        )
    ).all()
    return {r.trajectory_id: r for r in rows}


def study_trajectories(session: Session, *, study_id: int) -> list[Trajectory]:
    """The study's trajectories in ingest order (the order the report reads them in)."""
    return list(
        session.exec(
            select(Trajectory).where(Trajectory.study_id == study_id).order_by(Trajectory.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
    )


def append_event(
    session: Session,
    *,
    actor: str,
    kind: str,
    payload: dict[str, Any] | None = None,
    study_id: int | None = None,
) -> Event:
    """Append one event to the audit log (the table rejects updates and deletes)."""
    if not actor or not kind:
        raise StoreError("an event needs an actor and a kind")
    event = Event(actor=actor, kind=kind, payload=payload or {}, study_id=study_id)
    session.add(event)
    session.flush()
    return event


def list_events(
    session: Session, *, kind: str | None = None, study_id: int | None = None
) -> list[Event]:
    stmt = select(Event).order_by(Event.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    if kind is not None:
        stmt = stmt.where(Event.kind == kind)
    if study_id is not None:
        stmt = stmt.where(Event.study_id == study_id)
    return list(session.exec(stmt).all())


def payloads(
    session: Session, kind: str, study_id: int | None, **match: Any
) -> list[dict[str, Any]]:
    """The payloads of ``kind`` (:mod:`rcea.study.events`) for the study, oldest first,
    whose fields equal ``match``."""
    return [
        e.payload
        for e in list_events(session, kind=kind, study_id=study_id)
        if all(e.payload.get(k) == v for k, v in match.items())
    ]


def latest_payload(
    session: Session, kind: str, study_id: int | None, **match: Any
) -> dict[str, Any]:
    """The newest payload of ``kind`` matching ``match``; ``{}`` when there is none."""
    hits = payloads(session, kind, study_id, **match)
    return hits[-1] if hits else {}


def study_summary(session: Session, *, study_id: int) -> dict[str, Any]:
    """Counts of trajectories by run, step and reward, plus totals."""
    study = session.get(Study, study_id)
    if study is None:
        raise StoreError(f"no study with id {study_id}")
    rows = session.exec(
        select(Trajectory.run, Trajectory.model, Trajectory.step, Trajectory.reward, func.count())  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
        .where(Trajectory.study_id == study_id)
        .group_by(Trajectory.run, Trajectory.model, Trajectory.step, Trajectory.reward)
        .order_by(Trajectory.run, Trajectory.model, Trajectory.step, Trajectory.reward)
    ).all()
    groups: dict[tuple[str, str, int], dict[str, Any]] = {}
    for run, model, step, reward, count in rows:
        g = groups.setdefault(
            (run, model, step),
            {"run": run, "model": model, "step": step, "n": 0, "n_success": 0, "n_failure": 0},
        )
        g["n"] += count
        g["n_success" if reward == 1 else "n_failure"] += count
    n_questions = session.exec(
        select(func.count()).select_from(Question).where(Question.study_id == study_id)
    ).one()
    n_ingests = session.exec(
        select(func.count()).select_from(Ingest).where(Ingest.study_id == study_id)
    ).one()
    total = sum(g["n"] for g in groups.values())
    return {
        "study": study.name,
        "study_id": study.id,
        "n_trajectories": total,
        "n_questions": int(n_questions),
        "n_ingests": int(n_ingests),
        "groups": list(groups.values()),
    }


def question_texts(session: Session, *, study_id: int) -> dict[str, str]:
    """question_id -> problem statement, for the study's questions ingested with one."""
    rows = session.exec(
        select(Question.question_id, Question.text).where(
            Question.study_id == study_id,
            Question.text.is_not(None),  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
        )
    ).all()
    return {q: t for q, t in rows if t}


def problem_texts(session: Session, *, study_id: int) -> dict[str, str]:
    """question_id -> the problem statement shown to annotators, the judge and the
    codebook prompts: the ingested ``question``, overridden by a text loaded with
    ``rcea judge problems`` (the way to correct a stored text)."""

    out = question_texts(session, study_id=study_id)
    for p in session.exec(select(JudgeProblem).where(JudgeProblem.study_id == study_id)).all():
        out[p.question_id] = p.text
    return out
