"""A note with NUL and other control characters, as Label Studio hands it back (webhook
or export), parses into text both stores accept: the label row and the event log hold
the same visible ``⟨U+0000⟩`` form on SQLite and PostgreSQL. (Independent of how the
labelling core records labels: it stores what ``parse_annotation`` returns.)"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from rcea.annotation.payloads import parse_annotation
from rcea.study.store import append_event, session_scope
from rcea.study.store.models import AuditLabel, Event
from tests.support.helpers import audit_study, draw_test_audit

RAW_NOTE = "first\x00 second \x1b[31m\ttab\r\nline \ud800 end"
SHOWN = "first⟨U+0000⟩ second ⟨U+001B⟩[31m\ttab\r\nline ⟨U+D800⟩ end"


def test_note_with_nul_is_stored_alike_on_both_stores(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    ann = parse_annotation(
        {
            "id": 41,
            "task": 7,
            "project": 3,
            "completed_by": 11,
            "result": [
                {"from_name": "strategy", "value": {"choices": ["same"]}},
                {"from_name": "note", "value": {"text": [RAW_NOTE]}},
            ],
        }
    )
    assert ann.note == SHOWN
    with session_scope(engine) as s:
        s.add(
            AuditLabel(
                audit_id=audit_id,
                annotation_id=ann.annotation_id,
                task_id=ann.task_id,
                project_id=ann.project_id or 0,
                user_id=ann.user_id,
                label=ann.label,
                note=ann.note,
                status="counted",
            )
        )
        append_event(s, actor="test", kind="annotation.created", payload={"note": ann.note})
    with session_scope(engine) as s:
        row = s.exec(sa.select(AuditLabel)).scalars().one()
        event = s.exec(sa.select(Event).where(Event.kind == "annotation.created")).scalars().one()
        assert (row.note, row.label, event.payload["note"]) == (SHOWN, "same", SHOWN)
