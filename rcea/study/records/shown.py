"""What the annotators are shown of a trajectory: its text, or, for a multi-turn
transcript (the stored ``turns``, ``rcea import verl --multi-turn transcript``), its turns
as ``(role, content)`` pairs that the Label Studio tasks render one block per turn
(:data:`rcea.annotation.tasks.Shown`, docs/how-to-verl.md)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlmodel import Session

from rcea.annotation.tasks import Shown
from rcea.pipeline.transcript import turns_or_none
from rcea.study.store.models import Trajectory


def shown_solutions(
    session: Session, *, study_id: int, trajectory_ids: Iterable[str]
) -> dict[str, Shown]:
    """trajectory_id → its text, or its turns when it is a multi-turn transcript."""
    ids = sorted(set(trajectory_ids))
    if not ids:
        return {}
    rows = session.execute(
        select(Trajectory.trajectory_id, Trajectory.text, Trajectory.turns).where(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
            Trajectory.study_id == study_id,
            Trajectory.trajectory_id.in_(ids),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
        )
    ).all()
    out: dict[str, Shown] = {}
    for tid, text, blob in rows:
        turns = turns_or_none(blob)
        out[tid] = turns if turns else text
    return out
