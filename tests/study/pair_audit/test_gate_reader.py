"""The one reader of an audit's gate state (``rcea.study.pair_audit.gate.audit_gate``) and the
readers built on it: the API's gate route returns the recorded final gate once there is
one, with the live preliminary gate beside it; the decision sequence records the final."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from rcea.annotation.payloads import ParsedAnnotation
from rcea.app.api import create_app
from rcea.study.pair_audit.gate import audit_gate, decide_gate, recorded_final_gate
from rcea.study.pair_audit.labels import record_annotation
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.settings import Settings
from rcea.study.store import list_events, session_scope
from rcea.study.store.models import Audit
from tests.support.helpers import audit_study, draw_test_audit, fake_tasks


def _label_all(engine, audit_id: int) -> None:  # type: ignore[no-untyped-def]
    """A and B agree on every pair (the automatic label, ``same`` when uncertain)."""
    tasks = fake_tasks(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        ann = 1
        for role, user in (("A", 11), ("B", 12)):
            for p in audit_pairs(s, audit_id=audit_id):
                parsed = ParsedAnnotation(
                    ann, tasks[role][p.id], None, user, p.automatic or "same", None, False
                )
                record_annotation(s, audit, parsed, source="test")
                ann += 1


def test_reader_before_and_after_the_final_gate(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        assert recorded_final_gate(s, audit) is None
        assert audit_gate(s, audit)["status"] == "pending"
    _label_all(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        assert audit_gate(s, audit)["stage"] == "preliminary"
        res = decide_gate(s, audit, final=True, actor="r")
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        (event,) = list_events(s, kind="gate.final")
        assert event.payload["status"] == res["status"] == "passed"
        state = audit_gate(s, audit)
        assert state["stage"] == "final" and state["status"] == "passed"
        assert state["report"] == res["report"]
        assert state["preliminary"]["stage"] == "preliminary"
        assert "preliminary" not in audit_gate(s, audit, with_preliminary=False)


def test_api_gate_route_returns_the_recorded_final_gate(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Before this was fixed the route always answered the live preliminary gate, even
    after a final gate had been recorded."""
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    _label_all(engine, audit_id)
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        study_id, name = audit.study_id, audit.name
    client = TestClient(create_app(Settings(data_dir=tmp_path / "d", api_token="t"), engine=engine))
    url = f"/api/studies/{study_id}/audits/{name}/gate"
    auth = {"Authorization": "Bearer t"}
    before = client.get(url, headers=auth).json()
    assert before["stage"] == "preliminary" and "preliminary" not in before
    with session_scope(engine) as s:
        decide_gate(s, s.get(Audit, audit_id), final=True, actor="r")
    after = client.get(url, headers=auth).json()
    assert after["stage"] == "final" and after["status"] == "passed"
    assert after["report"]["stage"] == "final"
    assert after["preliminary"]["stage"] == "preliminary"
