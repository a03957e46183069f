"""Excluding a trajectory from the codebook cycle (``rcea codebook exclude``).

An exclusion is a ``codebook.exclude`` event (trajectory id, question id, reason, actor):
the event log is append-only, so the decision and its reason stay on record. Excluded
trajectories are left out of every later plan, prompt, dispute and export; the export
lists them as excluded. The way out for a trajectory whose text the leak guard refuses,
without re-ingesting the study.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from rcea.study.codebook.common import EXCLUDE_EVENT, CodebookStageError, excluded_trajectories
from rcea.study.store import append_event, require_study
from rcea.study.store.models import Trajectory


def exclude_trajectory(
    session: Session, *, study: str, trajectory_id: str, reason: str, actor: str
) -> dict[str, Any]:
    """Record the exclusion (a no-op, ``created`` False, when already excluded)."""
    if not reason.strip():
        raise CodebookStageError("--reason: say why the trajectory is excluded")
    st = require_study(session, name=study)
    question_id = session.exec(
        select(Trajectory.question_id).where(
            Trajectory.study_id == st.id, Trajectory.trajectory_id == trajectory_id
        )
    ).first()
    if question_id is None:
        raise CodebookStageError(f"study {study!r} has no trajectory {trajectory_id!r}")
    prior = excluded_trajectories(session, study_id=st.id).get(trajectory_id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if prior is not None:
        return {**prior, "created": False}
    payload = {"trajectory_id": trajectory_id, "question_id": question_id, "reason": reason}
    append_event(session, actor=actor, kind=EXCLUDE_EVENT, study_id=st.id, payload=payload)
    return {**payload, "actor": actor, "created": True}
