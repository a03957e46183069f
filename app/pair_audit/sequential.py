"""The sequential plan in the shell (issue 19; docs/sequential-gate.md): interim decisions
merged into a gate dict, the audit's current look, and the ``gate.interim`` event.

The math is :mod:`audits.sequential`; this module only decides what a gate dict says
when the frozen rubric predeclares a ``[sequential]`` table:

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

from app.store import append_event
from app.store.models import Audit, Event

__all__ = ["INTERIM_EVENT", "attach_interim", "plan_passed", "record_interim"]

INTERIM_EVENT = "gate.interim"


def plan_passed(interim: dict[str, Any]) -> bool | None:
    """The gate outcome under the plan: ``None`` while undecided before the last look."""
    if interim["decision"] == "settled_pass":
        return True
    if interim["decision"] == "settled_fail":
        return False
    return False if interim["final_look"] else None


def attach_interim(data: dict[str, Any], interim: dict[str, Any]) -> dict[str, Any]:
    """Merge an interim report (``InterimReport.to_dict()``) into a gate dict, in place."""
    data["sequential"] = interim
    data["decision"] = interim["decision"]
    data["gate_rule"] = "sequential"
    by_name = {r["name"]: r for r in interim["requirements"]}
    extra = ("decision", "lower", "upper", "se", "pairs_needed", "settles_by_look")
    if data.get("requirements"):
        for r in data["requirements"]:
            seq = by_name.get(r["name"])
            if seq is not None:
                r.update({k: seq[k] for k in extra})
    else:
        data["requirements"] = [
            {
                "name": r["name"],
                "value": r["value"],
                "threshold": r["threshold"],
                "comparator": r["comparator"],
                "passed": None,
                **{k: r[k] for k in extra},
            }
            for r in interim["requirements"]
        ]
    outcome = plan_passed(interim)
    if data.get("stage") == "final":
        data["fixed_sample_passed"] = data.get("passed")
        data["passed"] = outcome
        if outcome is None:
            data["stage"] = "interim"
    elif data.get("stage") == "provisional":
        data["fixed_sample_provisional_passed"] = data.get("provisional_passed")
        data["provisional_passed"] = outcome
    return data


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
