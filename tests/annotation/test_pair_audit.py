"""The pair audit end to end against the real Label Studio server: push (blinded,
idempotent), annotators labelling in their own sessions, live webhooks into the real API,
sync, adjudication, the final gate, and a Label Studio restart mid-audit."""

from __future__ import annotations

import json
import threading
import time
import uuid
from contextlib import closing
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sklearn.metrics import f1_score

from annotation.accounts import create_annotator, login_session
from annotation.client import make_client
from annotation.projects import export_tasks
from app.api import create_app
from app.audit.labels import gate_status
from app.audit.push import adjudicate, assign_role, forbidden_values, push_audit, sync_audit
from app.audit.sampling import audit_pairs
from app.settings import Settings
from app.store import list_events, make_engine, session_scope, upgrade
from app.store.models import Audit, AuditLabel, AuditTask, Trajectory
from tests.helpers import audit_study, draw_test_audit, free_port
from tests.labelstudio_fixture import LabelStudioHandle

pytestmark = pytest.mark.slow
SECRET = "pair-audit-hook-secret"
PASSWORD = "annot-pass-123"


def _choice(label: str) -> list[dict]:
    return [
        {
            "from_name": "strategy",
            "to_name": "left",
            "type": "choices",
            "value": {"choices": [label]},
        }
    ]


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{tmp_path / 'audit.db'}")
    upgrade(engine)
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    yield engine, audit_id
    engine.dispose()


@pytest.fixture
def api_server(store, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The real rcea API (webhook receiver) on a free loopback port."""
    import uvicorn

    engine, _ = store
    settings = Settings(data_dir=tmp_path / "d", api_token="t", webhook_secret=SECRET)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, engine=engine), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/webhooks/label-studio"
    server.should_exit = True
    thread.join(timeout=10)


def _person(ls: LabelStudioHandle, tag: str) -> tuple[int, str]:
    email = f"{tag}-{uuid.uuid4().hex[:8]}@rcea.test"
    return create_annotator(ls.url, ls.token, email, PASSWORD).id, email


def _label_all(ls: LabelStudioHandle, email: str, task_labels: dict[int, str]) -> None:
    with closing(login_session(ls.url, email, PASSWORD)) as session:
        for task_id, label in task_labels.items():
            r = session.post(
                f"/api/tasks/{task_id}/annotations/",
                json={"result": _choice(label), "lead_time": 1.0},
            )
            assert r.status_code == 201, r.text


def _tasks(engine, audit_id: int, role: str) -> dict[int, int]:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        rows = (
            s.exec(
                sa.select(AuditTask).where(AuditTask.audit_id == audit_id, AuditTask.role == role)
            )
            .scalars()
            .all()
        )
        return {r.pair_id: r.task_id for r in rows}


def _other(label: str) -> str:
    return "different" if label == "same" else "same"


def _n_labels(engine) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(AuditLabel)).scalar()


def test_pair_audit_in_label_studio(
    labelstudio: LabelStudioHandle,
    store,  # type: ignore[no-untyped-def]
    api_server: str,
) -> None:
    engine, audit_id = store
    client = make_client(labelstudio.url, labelstudio.token)
    people = {role: _person(labelstudio, role.lower()) for role in ("A", "B", "adjudicator")}

    # --- push, twice: the second push adds nothing
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        for role in ("A", "B"):
            assign_role(audit, role, user_id=people[role][0], email=people[role][1])
        first = push_audit(
            s, audit, client, webhook_url=api_server, webhook_secret=SECRET, actor="test"
        )
    with session_scope(engine) as s:
        again = push_audit(
            s,
            s.get(Audit, audit_id),
            client,
            webhook_url=api_server,
            webhook_secret=SECRET,
            actor="test",
        )
        pairs = audit_pairs(s, audit_id=audit_id)
        substr, exact = forbidden_values(s, s.get(Audit, audit_id), pairs)
        steps_seeds = {
            str(v) for t in s.exec(sa.select(Trajectory)).scalars() for v in (t.step, t.seed)
        }
    n = len(pairs)
    for role in ("A", "B"):
        assert first["projects"][role]["n_tasks"] == n == first["projects"][role]["n_new"]
        assert again["projects"][role]["n_new"] == 0
        assert len(export_tasks(client, first["projects"][role]["project_id"])) == n

    # --- leak test: everything Label Studio actually stores for the annotators
    from annotation.tasks import scan_for_leaks

    stored = [
        t
        for role in ("A", "B")
        for t in export_tasks(client, first["projects"][role]["project_id"])
    ]
    assert all(set(t["data"]) == {"pair", "left", "right"} for t in stored)
    assert all(not t.get("predictions") for t in stored)
    sent = [{"data": t["data"], "meta": t.get("meta")} for t in stored]
    assert scan_for_leaks(sent, substr, forbidden_exact=exact | steps_seeds) == []
    assert scan_for_leaks(sent, set(), forbidden_exact={"same", "different"}) == []
    project_titles = [p.title for p in client.projects.list()]
    assert not any(v in title for v in substr for title in project_titles)

    # --- annotators label in their own sessions; webhooks arrive live
    tasks_a, tasks_b = _tasks(engine, audit_id, "A"), _tasks(engine, audit_id, "B")
    truth = {p.id: p.automatic or "same" for p in pairs}
    flipped = pairs[0].id
    _label_all(labelstudio, people["A"][1], {tasks_a[p]: truth[p] for p in truth})
    b_labels = {tasks_b[p]: truth[p] for p in truth}
    b_labels[tasks_b[flipped]] = "different" if truth[flipped] == "same" else "same"
    _label_all(labelstudio, people["B"][1], b_labels)
    # The admin (not the assigned annotator) also labels one of A's tasks.
    admin_ann = client.annotations.create(id=tasks_a[pairs[1].id], result=_choice("same"))
    deadline = time.monotonic() + 20
    while _n_labels(engine) < 2 * n + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    via_webhooks = _n_labels(engine)
    assert via_webhooks > 0, "no webhook reached the API"

    with session_scope(engine) as s:
        synced = sync_audit(s, s.get(Audit, audit_id), client)
    assert synced["annotations_seen"] == 2 * n + 1
    assert synced["changed"] == 2 * n + 1 - via_webhooks
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=False)
        assert res["status"] == "preliminary"
        assert res["progress"]["A"] == n and res["progress"]["B"] == n
        assert res["labels"] == {"counted": 2 * n, "wrong_user": 1}
        assert res["n_needing_adjudication"] == 1
        wrong = (
            s.exec(sa.select(AuditLabel).where(AuditLabel.annotation_id == admin_ann.id))
            .scalars()
            .one()
        )
        assert wrong.status == "wrong_user"

    # --- adjudication: only the disagreement; answers shown, automatic label never
    with session_scope(engine) as s:
        audit = s.get(Audit, audit_id)
        assign_role(
            audit, "adjudicator", user_id=people["adjudicator"][0], email=people["adjudicator"][1]
        )
        adj = adjudicate(
            s, audit, client, actor="test", webhook_url=api_server, webhook_secret=SECRET
        )
    assert adj["n_pairs"] == 1
    adj_tasks = export_tasks(client, adj["project_id"])
    assert len(adj_tasks) == 1
    data = adj_tasks[0]["data"]
    assert set(data) == {"pair", "left", "right", "answer_1", "answer_2"}
    assert sorted([data["answer_1"], data["answer_2"]]) == ["different", "same"]
    assert scan_for_leaks([data], substr, forbidden_exact=exact) == []
    with session_scope(engine) as s:
        from app.audit.freeze import FreezeError

        with pytest.raises(FreezeError, match="need adjudication"):
            gate_status(s, s.get(Audit, audit_id), final=True)
    _label_all(labelstudio, people["adjudicator"][1], {adj_tasks[0]["id"]: truth[flipped]})

    # --- Label Studio restarts mid-audit: sync resumes, nothing is duplicated
    labelstudio.server.stop()
    labelstudio.server.start(timeout=300)
    before = _n_labels(engine)
    with session_scope(engine) as s:
        synced = sync_audit(s, s.get(Audit, audit_id), client)
    with session_scope(engine) as s:
        again = sync_audit(s, s.get(Audit, audit_id), client)
    assert again["changed"] == 0
    assert _n_labels(engine) == max(before, 2 * n + 2)
    with session_scope(engine) as s:
        res = gate_status(s, s.get(Audit, audit_id), final=True)
        from app.audit.labels import record_final_gate

        record_final_gate(s, s.get(Audit, audit_id), res, "test")
    # deterministic: B disagrees with A (= the automatic labels) on one pair, adjudicated
    # to A's label; F1_HH by sklearn over the pairs with an automatic label, then pinned
    ev = [p for p in pairs if p.automatic is not None]
    b_truth = {p.id: truth[p.id] if p.id != flipped else _other(truth[p.id]) for p in ev}
    hh = f1_score([truth[p.id] for p in ev], [b_truth[p.id] for p in ev], average="macro")
    rep = res["report"]
    assert (res["stage"], res["status"], rep["passed"]) == ("final", "passed", True)
    assert rep["automatic_macro_f1"] == pytest.approx(1.0)
    assert rep["human_human_macro_f1"] == pytest.approx(hh, abs=1e-12)
    assert rep["human_human_macro_f1"] == pytest.approx(0.939799331103679, abs=1e-12)
    assert rep["gap"] == pytest.approx(hh - 1.0, abs=1e-12)
    assert [r["name"] for r in rep["requirements"] if not r["passed"]] == []
    with session_scope(engine) as s:
        gates = list_events(s, kind="gate.final")
        assert gates[-1].payload["partition_hash"] == res["partition_hash"]
        assert json.dumps(gates[-1].payload)  # JSON-serialisable record
