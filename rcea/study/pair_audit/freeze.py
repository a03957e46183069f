"""Freezing rubrics and automatic partitions: content-hashed, immutable, evented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import insert
from sqlmodel import Session, select

from rcea.audits.inputs import read_text
from rcea.audits.partition import partition_hash
from rcea.audits.rubric import Rubric as RubricSpec
from rcea.audits.rubric import load_rubric, rubric_from_dict
from rcea.study import events
from rcea.study.store import Study, Trajectory, append_event, require_study
from rcea.study.store.models import Partition, PartitionAssignment, Rubric
from rcea.study.store.widths import check_stored


class FreezeError(ValueError):
    """A freeze request that would change a frozen object, or lacks what it needs."""


def freeze_rubric(
    session: Session, *, path: Path, actor: str, check: dict[str, Any] | None = None
) -> tuple[Rubric, bool]:
    """Store the rubric at ``path`` frozen with its content hash.

    Returns ``(row, created)``. Freezing identical content again is a no-op. A different
    content under an existing ``name``/``version`` is refused: a change is a new version,
    which records the latest earlier version of the same name as its parent. ``check``
    (what the plans give on a study, and a forced freeze's reason) goes into the
    ``rubric.freeze`` event.
    """
    spec = load_rubric(path)
    # the store's widths, on every engine (the loader also serves commands with no store)
    check_stored(spec.name, Rubric.name, option=f"{path}: [rubric] name")
    check_stored(str(spec.version), Rubric.version, option=f"{path}: [rubric] version")
    digest = spec.content_hash()
    existing = session.exec(
        select(Rubric).where(Rubric.name == spec.name, Rubric.version == spec.version)
    ).first()
    if existing is not None:
        if existing.content_hash == digest:
            return existing, False
        raise FreezeError(
            f"rubric {spec.name!r} version {spec.version} is frozen with hash "
            f"{existing.content_hash[:12]}…; {path} differs (hash {digest[:12]}…). "
            "A change must be a new version: bump [rubric] version."
        )
    parent = session.exec(
        select(Rubric).where(Rubric.name == spec.name).order_by(Rubric.id.desc())  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).first()
    row = Rubric(
        name=spec.name,
        version=spec.version,
        content_hash=digest,
        content=spec.to_dict(),
        source_text=read_text(path),  # the text load_rubric just read, checked as it was
        parent_id=parent.id if parent else None,
        frozen_by=actor,
    )
    session.add(row)
    session.flush()
    append_event(
        session,
        actor=actor,
        kind=events.RUBRIC_FREEZE,
        payload={
            "rubric_id": row.id,
            "name": row.name,
            "version": row.version,
            "content_hash": digest,
            "parent_id": row.parent_id,
            "source": str(path),
            **({"check": check} if check is not None else {}),
        },
    )
    return row, True


def get_rubric(session: Session, *, name: str, version: str | None = None) -> Rubric:
    stmt = select(Rubric).where(Rubric.name == name)
    if version is not None:
        stmt = stmt.where(Rubric.version == str(version))
    row = session.exec(stmt.order_by(Rubric.id.desc())).first()  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
    if row is None:
        known = sorted({f"{r.name} v{r.version}" for r in session.exec(select(Rubric)).all()})
        raise FreezeError(
            f"no frozen rubric named {name!r}"
            + (f" version {version}" if version else "")
            + f" (frozen rubrics: {', '.join(known) or 'none'}); "
            "run `rcea audit rubric freeze RUBRIC.toml` first"
        )
    return row


def list_rubrics(session: Session) -> list[Rubric]:
    """Every frozen rubric version, oldest first."""
    return list(session.exec(select(Rubric).order_by(Rubric.id)).all())  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column


def rubric_spec(row: Rubric) -> RubricSpec:
    """The validated rubric of a frozen row (re-checked against its stored hash)."""
    spec = rubric_from_dict(row.content)
    if spec.content_hash() != row.content_hash:
        raise FreezeError(
            f"rubric {row.name} v{row.version}: stored content does not match its frozen hash"
        )
    return spec


def accepted_trajectories(session: Session, *, study_id: int) -> list[Trajectory]:
    """R = 1 and judge-accepted (validity 1, or no judge verdict stored)."""
    stmt = (
        select(Trajectory)
        .where(Trajectory.study_id == study_id, Trajectory.reward == 1)
        .where((Trajectory.validity.is_(None)) | (Trajectory.validity == 1))  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
        .order_by(Trajectory.question_id, Trajectory.trajectory_id)
    )
    return list(session.exec(stmt).all())


def freeze_partition_from_modes(
    session: Session, *, study: str, actor: str, source: str = "mode-column"
) -> tuple[Partition, bool]:
    """Freeze the study's ``mode`` column as the automatic partition of its accepted
    trajectories (missing or ``uncertain`` mode = uncertain). Identical content to the
    latest partition is a no-op."""
    st: Study = require_study(session, name=study)
    rows = accepted_trajectories(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if not rows:
        raise FreezeError(f"study {study!r} has no accepted trajectories (R=1, judge-accepted)")
    triples = [
        (t.question_id, t.trajectory_id, None if t.mode in (None, "", "uncertain") else t.mode)
        for t in rows
    ]
    return store_partition(session, study_id=st.id, triples=triples, source=source, actor=actor)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


def store_partition(
    session: Session,
    *,
    study_id: int,
    triples: list[tuple[str, str, str | None]],
    source: str,
    actor: str,
) -> tuple[Partition, bool]:
    """Freeze ``(question_id, trajectory_id, mode or None)`` triples as the study's
    partition, content-hashed, with a ``partition.freeze`` event. Identical content to the
    latest partition is a no-op that returns it. Every producer of partitions (the mode
    column, the codebook export) goes through here."""
    digest = partition_hash(triples)
    latest = session.exec(
        select(Partition).where(Partition.study_id == study_id).order_by(Partition.id.desc())  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).first()
    if latest is not None and latest.content_hash == digest:
        return latest, False
    n_uncertain = sum(1 for _, _, m in triples if m is None)
    part = Partition(
        study_id=study_id,
        source=source,
        content_hash=digest,
        n_accepted=len(triples),
        n_uncertain=n_uncertain,
        frozen_by=actor,
    )
    session.add(part)
    session.flush()
    session.execute(
        insert(PartitionAssignment),
        [
            {"partition_id": part.id, "question_id": q, "trajectory_id": t, "mode": m}
            for q, t, m in triples
        ],
    )
    append_event(
        session,
        actor=actor,
        kind=events.PARTITION_FREEZE,
        study_id=study_id,
        payload={
            "partition_id": part.id,
            "content_hash": digest,
            "source": source,
            "n_accepted": len(triples),
            "n_uncertain": n_uncertain,
        },
    )
    return part, True


def latest_partition(session: Session, *, study_id: int) -> Partition:
    part = session.exec(
        select(Partition).where(Partition.study_id == study_id).order_by(Partition.id.desc())  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).first()
    if part is None:
        raise FreezeError(
            "no frozen partition for this study: run "
            "`rcea audit partition freeze --study S` (or the codebook export)"
        )
    return part


def partition_modes(session: Session, *, partition_id: int) -> dict[str, tuple[str, str | None]]:
    """trajectory_id → (question_id, mode or None)."""
    rows = session.exec(
        select(PartitionAssignment).where(PartitionAssignment.partition_id == partition_id)
    ).all()
    return {r.trajectory_id: (r.question_id, r.mode) for r in rows}
