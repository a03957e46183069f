"""The Label Studio webhook receiver: secret, malformed bodies, idempotency, concurrency."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from app.api import create_app
from app.settings import Settings
from app.store import session_scope
from app.store.models import AuditLabel, Event
from tests.helpers import audit_study, draw_test_audit, fake_tasks

SECRET = "hook-secret"
HEADER = {"X-RCEA-Webhook-Secret": SECRET}


def _payload(
    annotation_id: int, task_id: int, user: int, label: str, action: str = "ANNOTATION_CREATED"
) -> dict:
    return {
        "action": action,
        "project": {"id": 1},
        "annotation": {
            "id": annotation_id,
            "task": task_id,
            "completed_by": user,
            "was_cancelled": False,
            "result": [
                {
                    "from_name": "strategy",
                    "to_name": "left",
                    "type": "choices",
                    "value": {"choices": [label]},
                }
            ],
        },
    }


@pytest.fixture
def setup(engine, tmp_path: Path):  # type: ignore[no-untyped-def]
    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    tasks = fake_tasks(engine, audit_id)
    settings = Settings(data_dir=tmp_path / "d", api_token="t", webhook_secret=SECRET)
    return engine, TestClient(create_app(settings, engine=engine)), tasks


def _count(engine, table) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()


def test_bad_secret_and_malformed_bodies_store_nothing(setup) -> None:  # type: ignore[no-untyped-def]
    engine, client, tasks = setup
    task = next(iter(tasks["A"].values()))
    body = _payload(1, task, 11, "same")
    assert client.post("/webhooks/label-studio", json=body).status_code == 401
    assert (
        client.post(
            "/webhooks/label-studio", json=body, headers={"X-RCEA-Webhook-Secret": "nope"}
        ).status_code
        == 401
    )
    # The API bearer token is not a webhook secret.
    assert (
        client.post(
            "/webhooks/label-studio", json=body, headers={"Authorization": "Bearer t"}
        ).status_code
        == 401
    )
    assert (
        client.post("/webhooks/label-studio", content=b"{not json", headers=HEADER).status_code
        == 422
    )
    bad = {"action": "ANNOTATION_CREATED", "annotation": {"id": "x", "task": task}}
    assert client.post("/webhooks/label-studio", json=bad, headers=HEADER).status_code == 422
    assert _count(engine, AuditLabel) == 0


def test_created_then_updated_then_replayed(setup) -> None:  # type: ignore[no-untyped-def]
    engine, client, tasks = setup
    task = next(iter(tasks["A"].values()))
    r = client.post("/webhooks/label-studio", json=_payload(5, task, 11, "same"), headers=HEADER)
    assert r.status_code == 200 and r.json()["stored"] == 1
    upd = _payload(5, task, 11, "different", action="ANNOTATION_UPDATED")
    assert client.post("/webhooks/label-studio", json=upd, headers=HEADER).json()["stored"] == 1
    # The same content again (a retried webhook, or a sync) changes nothing.
    assert client.post("/webhooks/label-studio", json=upd, headers=HEADER).json()["stored"] == 0
    with session_scope(engine) as s:
        rows = s.exec(sa.select(AuditLabel)).scalars().all()
        assert [(r.label, r.status) for r in rows] == [("different", "counted")]
        kinds = [
            e.kind
            for e in s.exec(sa.select(Event).order_by(Event.id)).scalars()
            if e.kind.startswith("annotation")
        ]
        assert kinds == ["annotation.created", "annotation.updated"]


def test_other_actions_are_ignored(setup) -> None:  # type: ignore[no-untyped-def]
    engine, client, _ = setup
    r = client.post("/webhooks/label-studio", json={"action": "PROJECT_UPDATED"}, headers=HEADER)
    assert r.status_code == 200 and r.json()["received"] == 0


def test_concurrent_webhooks_from_two_annotators_lose_nothing(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path
) -> None:
    """Real uvicorn server, two annotators posting at once (threads), SQLite and PostgreSQL."""
    import uvicorn

    from tests.helpers import free_port

    audit_study(engine, tmp_path)
    audit_id = draw_test_audit(engine, tmp_path)
    tasks = fake_tasks(engine, audit_id)
    settings = Settings(data_dir=tmp_path / "d", api_token="t", webhook_secret=SECRET)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, engine=engine), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{port}/webhooks/label-studio"
        for _ in range(200):
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                threading.Event().wait(0.05)
        bodies = {"A": [], "B": []}
        for role, user, base in (("A", 11, 10_000), ("B", 12, 20_000)):
            for i, task in enumerate(tasks[role].values()):
                bodies[role].append(
                    _payload(base + i, task, user, "same" if i % 3 else "different")
                )
        errors: list[str] = []

        def post_all(role: str) -> None:
            with httpx.Client(timeout=30) as c:
                for body in bodies[role]:
                    r = c.post(url, content=json.dumps(body), headers=HEADER)
                    if r.status_code != 200:
                        errors.append(f"{r.status_code} {r.text}")

        threads = [threading.Thread(target=post_all, args=(r,)) for r in ("A", "B")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        n = len(bodies["A"]) + len(bodies["B"])
        assert _count(engine, AuditLabel) == n
        # Replaying everything (what a full sync amounts to) changes nothing.
        with httpx.Client(timeout=30) as c:
            stored = sum(
                c.post(url, content=json.dumps(b), headers=HEADER).json()["stored"]
                for role in ("A", "B")
                for b in bodies[role]
            )
        assert stored == 0 and _count(engine, AuditLabel) == n
    finally:
        server.should_exit = True
        thread.join(timeout=10)
