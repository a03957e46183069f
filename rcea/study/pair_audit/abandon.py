"""Abandoning a pair audit (docs/publication.md "Every attempt"): an attempt in progress
that the researcher stops, with a recorded reason, stays on the record as "abandoned".

The rule: only an audit with no recorded final gate can be abandoned (a decided attempt
keeps its outcome), the reason is required, and an abandoned audit gets no final gate
afterwards. Abandoning does not free an attempt: it still counts against the rubric's
``[reaudit] max_attempts`` and is listed in every report, view and bundle."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from rcea.study import events
from rcea.study.pair_audit.freeze import FreezeError
from rcea.study.store import append_event, list_events
from rcea.study.store.models import Audit


def abandon_record(session: Session, audit: Audit) -> dict[str, Any] | None:
    """The ``audit.abandon`` payload of ``audit`` (``None``: not abandoned)."""
    for ev in list_events(session, kind=events.AUDIT_ABANDON, study_id=audit.study_id):
        if ev.payload.get("audit_id") == audit.id:
            return {**ev.payload, "recorded_at": ev.time.isoformat(), "recorded_by": ev.actor}
    return None


def abandon_audit(session: Session, audit: Audit, *, reason: str, actor: str) -> dict[str, Any]:
    """Record ``audit`` as abandoned with ``reason`` (an ``audit.abandon`` event). Raises
    :class:`FreezeError` when the reason is empty, the audit has a final gate on record,
    or it is already abandoned."""
    if not reason or not reason.strip():
        raise FreezeError(f"abandoning audit {audit.name} needs a reason (--reason)")
    if abandon_record(session, audit) is not None:
        raise FreezeError(f"audit {audit.name} is already abandoned")
    decided = [
        ev
        for ev in list_events(session, kind=events.GATE_FINAL, study_id=audit.study_id)
        if ev.payload.get("audit_id") == audit.id
    ]
    if decided:
        raise FreezeError(
            f"audit {audit.name} has a final gate on record ({decided[0].payload.get('status')}"
            "): a decided attempt keeps its outcome and cannot be abandoned"
        )
    payload = {
        "audit_id": audit.id,
        "audit": audit.name,
        "rubric_hash": audit.rubric_hash,
        "partition_hash": audit.partition_hash,
        "reason": reason.strip(),
    }
    append_event(
        session, actor=actor, kind=events.AUDIT_ABANDON, study_id=audit.study_id, payload=payload
    )
    return payload
