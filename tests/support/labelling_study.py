"""A pair audit on real Label Studio servers, one per person (A, B, adjudicator on the
session pool), with the real rcea API as webhook receiver: shared by the labelling tests."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from rcea.annotation.accounts import login_session
from rcea.annotation.people import People
from rcea.app.api import create_app
from rcea.study.labelling import WebhookTarget
from rcea.study.pair_audit.gate import gate_status
from rcea.study.pair_audit.push import push_audit, sync_audit
from rcea.study.settings import Settings
from rcea.study.store import make_engine, session_scope, upgrade
from rcea.study.store.models import Audit, AuditLabel, AuditTask
from tests.support.helpers import audit_study, draw_test_audit, free_port
from tests.support.labelstudio_fixture import LabelStudioHandle, register_people

SECRET = "pair-audit-hook-secret"
PASSWORD = "annot-pass-123"
ROLES = ("A", "B", "adjudicator")


def choice(label: str) -> list[dict]:
    return [
        {
            "from_name": "strategy",
            "to_name": "left",
            "type": "choices",
            "value": {"choices": [label]},
        }
    ]


def wait_for(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


class Study:
    """An audit in a fresh store, its people on the pool servers, and the real API."""

    def __init__(
        self, tmp_path: Path, pool: list[LabelStudioHandle], url: str | None = None
    ) -> None:
        self.data_dir = tmp_path / "data"  # the data dir the CLI reads in tests (conftest)
        self.engine = make_engine(url or f"sqlite:///{tmp_path / 'audit.db'}")
        upgrade(self.engine)
        audit_study(self.engine, tmp_path)
        self.audit_id = draw_test_audit(self.engine, tmp_path)
        tag = uuid.uuid4().hex[:8]
        self.emails = {r: f"{r.lower()}-{tag}@rcea.test" for r in ROLES}
        self.pool = dict(zip(ROLES, pool, strict=True))
        self.people: People = register_people(self.data_dir, pool, [self.emails[r] for r in ROLES])
        self.hook_base = ""
        self.app: FastAPI | None = None  # the API serve_api runs (its read-back queue)

    def person(self, role: str):  # type: ignore[no-untyped-def]
        return self.people.require(self.emails[role])

    def session_of(self, role: str) -> httpx.Client:
        return login_session(self.pool[role].url, self.emails[role], PASSWORD)

    def push(self) -> dict:  # type: ignore[type-arg]
        with session_scope(self.engine) as s:
            return push_audit(
                s,
                s.get(Audit, self.audit_id),
                self.people,
                annotators={r: self.emails[r] for r in ("A", "B")},
                passwords={"A": PASSWORD, "B": PASSWORD},
                webhook=WebhookTarget(self.hook_base, SECRET) if self.hook_base else None,
                actor="test",
            )

    def sync(self) -> dict:  # type: ignore[type-arg]
        with session_scope(self.engine) as s:
            return sync_audit(s, s.get(Audit, self.audit_id), self.people)

    def tasks(self, role: str) -> dict[int, int]:
        with session_scope(self.engine) as s:
            rows = s.exec(
                sa.select(AuditTask).where(
                    AuditTask.audit_id == self.audit_id, AuditTask.role == role
                )
            ).scalars()
            return {r.pair_id: r.task_id for r in rows}

    def label_all(self, role: str, task_labels: dict[int, str]) -> list[int]:
        ids = []
        with closing(self.session_of(role)) as web:
            for task_id, label in task_labels.items():
                r = web.post(
                    f"/api/tasks/{task_id}/annotations/",
                    json={"result": choice(label), "lead_time": 1.0},
                )
                assert r.status_code == 201, r.text
                ids.append(r.json()["id"])
        return ids

    def labels(self) -> list[tuple[str, int, str, str]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    AuditLabel.role, AuditLabel.annotation_id, AuditLabel.status, AuditLabel.label
                )
            ).all()
        return sorted(tuple(r) for r in rows)

    def drain(self) -> None:
        """Wait until the API's read-back queue has recorded every accepted notification."""
        assert self.app is not None and self.app.state.readback.drain(), "read-backs pending"

    def gate(self) -> dict:  # type: ignore[type-arg]
        with session_scope(self.engine) as s:
            return gate_status(s, s.get(Audit, self.audit_id), final=False)


@contextlib.contextmanager
def through_front_door(
    tmp_path: Path, pool: list[LabelStudioHandle], monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[LabelStudioHandle]]:
    """rcea's front door (real nginx, a local CA made for 127.0.0.1) in front of the pool
    servers; yields the pool with each server's public HTTPS address instead of its own.
    Every HTTP client of the test (httpx, the Label Studio SDK) trusts the CA through
    ``SSL_CERT_FILE``: a study on these handles reaches Label Studio only through the door."""
    from dataclasses import replace

    from rcea.annotation.frontdoor import FrontDoor
    from rcea.annotation.team_door import DoorSettings, open_door
    from tests.support.helpers import free_port_run, nginx_executable

    nginx_executable()
    door_data = tmp_path / "front-door"
    people = register_people(door_data, pool, [f"pool-{i}@rcea.test" for i in range(len(pool))])
    base = free_port_run(len(pool) + 2)
    cfg = DoorSettings("127.0.0.1", base, "127.0.0.1", view_url="http://127.0.0.1:9",
                       api_url="http://127.0.0.1:9")  # fmt: skip
    status = open_door(people, cfg)
    try:
        assert status.state is not None and status.state.ca is not None
        monkeypatch.setenv("SSL_CERT_FILE", status.state.ca)
        slug = {p.url: p.slug for p in people.all()}
        yield [
            replace(handle, url=status.state.public_url(slug[handle.url]))  # type: ignore[arg-type]
            for handle in pool
        ]
    finally:
        FrontDoor(door_data).stop()


@pytest.fixture
def study(tmp_path: Path, labelstudio_pool: list[LabelStudioHandle]) -> Iterator[Study]:
    st = Study(tmp_path, labelstudio_pool)
    yield st
    st.engine.dispose()


@contextlib.contextmanager
def serve_api(study: Study, *, sync_interval_s: float = 0.0) -> Iterator[str]:
    """The real rcea API (webhook receiver) under uvicorn on a free loopback port, on the
    study's store and people registry; yields the webhook base URL. With
    ``sync_interval_s`` > 0 the API's background sync runs (as under ``rcea serve``)."""
    import uvicorn

    settings = Settings(
        data_dir=study.data_dir,
        api_token="t",
        webhook_secret=SECRET,
        sync_interval_s=sync_interval_s,
    )
    port = free_port()
    study.app = create_app(settings, engine=study.engine, background_sync=sync_interval_s > 0)
    server = uvicorn.Server(
        uvicorn.Config(
            study.app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
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
    study.hook_base = f"http://127.0.0.1:{port}/webhooks/label-studio"
    try:
        yield study.hook_base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def api(study: Study) -> Iterator[str]:
    with serve_api(study) as url:
        yield url
