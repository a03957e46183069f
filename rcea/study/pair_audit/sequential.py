"""The sequential plan on the store (docs/sequential-gate.md): the audit's current look
and the ``gate.interim`` event. The math, and what a gate dict says when the frozen rubric
predeclares a ``[sequential]`` table (:func:`rcea.audits.sequential.attach_interim`), are in
:mod:`rcea.audits.sequential`:

* every requirement carries ``decision`` (``settled_pass`` / ``settled_fail`` /
  ``undecided``), its interval at the look (``lower``, ``upper``) and ``pairs_needed``;
  the gate carries ``decision`` and the whole interim report under ``sequential``;
* a gate evaluated as final follows the plan's boundary, not the fixed-sample rule:
  ``passed`` is ``decision == "settled_pass"`` once the gate is settled or the last look
  is reached (undecided at the last look does not pass); before that the stage is
  ``interim`` and ``passed`` is ``None``. The fixed-sample outcome stays visible as
  ``fixed_sample_passed``.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from rcea.study import events
from rcea.study.store import append_event
from rcea.study.store.models import Audit, Event

__all__ = ["INTERIM_EVENT", "record_interim"]

INTERIM_EVENT = events.GATE_INTERIM


def last_recorded_look(session: Session, audit: Audit) -> int:
    """The latest look a ``gate.interim`` event recorded for the audit (0: none)."""
    rows = session.exec(
        select(Event).where(Event.kind == INTERIM_EVENT, Event.study_id == audit.study_id)
    ).all()
    looks = [
        int(e.payload.get("look", 0))
        for e in rows
        if isinstance(e.payload, dict) and e.payload.get("audit_id") == audit.id
    ]
    return max(looks, default=0)


def record_interim(session: Session, audit: Audit, interim: dict[str, Any], actor: str) -> bool:
    """Append one ``gate.interim`` event the first time a look is reached; ``True`` if
    one was written."""
    look = int(interim["look"])
    if look == 0 or look <= last_recorded_look(session, audit):
        return False
    append_event(
        session,
        actor=actor,
        kind=INTERIM_EVENT,
        study_id=audit.study_id,
        payload={
            "audit_id": audit.id,
            "audit": audit.name,
            "look": look,
            "n_looks": interim["n_looks"],
            "n_labelled": interim["n_labelled"],
            "n_planned": interim["n_planned"],
            "boundary": interim["boundary"],
            "decision": interim["decision"],
            "rubric_hash": audit.rubric_hash,
            "requirements": [
                {k: r[k] for k in ("name", "value", "lower", "upper", "decision")}
                for r in interim["requirements"]
            ],
        },
    )
    return True
