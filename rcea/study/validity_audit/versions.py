"""Freezing validity judges: content-hashed, immutable, evented (docs/publication.md). A
judge is (backend, model, prompt template, decoding settings)."""

from __future__ import annotations

from sqlmodel import Session, select

from rcea.audits.inputs import invisible_character
from rcea.pipeline.judge import JudgeSpec
from rcea.study import events
from rcea.study.store import append_event
from rcea.study.store.models import JudgeVersion
from rcea.study.store.widths import check_stored

FREEZE_EVENT = events.JUDGE_FREEZE


class JudgeError(ValueError):
    """A judge request the store refuses (unknown judge, changed frozen content, ...)."""


def freeze_judge(
    session: Session, *, name: str, spec: JudgeSpec, actor: str, reason: str = ""
) -> tuple[JudgeVersion, bool]:
    """Store ``spec`` as the next version of judge ``name``; returns ``(row, created)``.

    Freezing the content of the latest version again is a no-op. Different content
    becomes version n+1 with the latest version as its parent (and ``reason``)."""
    if not name.strip():
        raise JudgeError("a judge needs a non-empty --name")
    check_stored(name, JudgeVersion.name, option="--name")  # the store's width, on every engine
    why = invisible_character(name)
    if why:
        raise JudgeError(f"--name {why}")
    digest = spec.content_hash()
    latest = session.exec(
        select(JudgeVersion).where(JudgeVersion.name == name).order_by(JudgeVersion.version.desc())  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).first()
    if latest is not None and latest.content_hash == digest:
        return latest, False
    row = JudgeVersion(
        name=name,
        version=1 if latest is None else latest.version + 1,
        content_hash=digest,
        content=spec.to_dict(),
        parent_id=None if latest is None else latest.id,
        reason=reason,
        frozen_by=actor,
    )
    session.add(row)
    session.flush()
    append_event(
        session,
        actor=actor,
        kind=FREEZE_EVENT,
        payload={
            "judge_id": row.id,
            "judge_name": name,
            "version": row.version,
            "judge_hash": digest,
            "parent_id": row.parent_id,
            "reason": reason,
            "template_id": spec.template.id,
            "model": spec.model,
            "backend": spec.backend,
        },
    )
    return row, True


def get_judge(session: Session, *, name: str, version: int | None = None) -> JudgeVersion:
    """The latest (or the given) frozen version of judge ``name``."""
    stmt = select(JudgeVersion).where(JudgeVersion.name == name)
    if version is not None:
        stmt = stmt.where(JudgeVersion.version == version)
    row = session.exec(stmt.order_by(JudgeVersion.version.desc())).first()  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
    if row is None:
        known = sorted({r.name for r in session.exec(select(JudgeVersion)).all()})
        raise JudgeError(
            f"no frozen judge named {name!r}"
            + (f" version {version}" if version is not None else "")
            + f" (frozen judges: {', '.join(known) or 'none'}); run `rcea judge freeze` first"
        )
    return row


def judge_spec(row: JudgeVersion) -> JudgeSpec:
    """The spec of a frozen row, re-checked against its stored hash."""
    spec = JudgeSpec.from_dict(row.content)
    if spec.content_hash() != row.content_hash:
        raise JudgeError(f"judge {row.name} v{row.version}: stored content does not match its hash")
    return spec


def list_judges(session: Session) -> list[JudgeVersion]:
    return list(
        session.exec(select(JudgeVersion).order_by(JudgeVersion.name, JudgeVersion.version)).all()  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    )


def describe(row: JudgeVersion) -> dict[str, object]:
    c = row.content
    return {
        "name": row.name,
        "version": row.version,
        "judge_hash": row.content_hash,
        "backend": c["backend"],
        "model": c["model"],
        "template_id": c["template_id"],
        "template_hash": c["template_hash"],
        "decoding": c["decoding"],
        "parent_id": row.parent_id,
        "reason": row.reason,
        "frozen_by": row.frozen_by,
        "frozen_at": row.frozen_at.isoformat(),
    }
