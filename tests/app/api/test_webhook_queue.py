"""The webhook route only queues: read-backs run on the API process's read-back workers
(docs/labelstudio.md, "Webhooks"). Annotator A's server stalls every read-back (A cannot
make Label Studio slow for everyone, but a slow or loaded server of A's must not cost
anyone else): A's notifications are still answered at once, ``/health`` answers, another
person's notification is read back meanwhile, A's queue is bounded (429), and the API
shuts down cleanly."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from rcea.annotation.people import People, person_webhook_secret
from rcea.annotation.projects import WEBHOOK_SECRET_HEADER
from rcea.app.api import create_app
from rcea.app.api.webhooks import MAX_NOTIFY_IDS, MAX_PENDING_IDS
from rcea.study.settings import Settings
from rcea.study.store.models import LabellingProject
from tests.support.helpers import serve_http
from tests.support.labelling_study import SECRET, Study, wait_for

RELEASE = threading.Event()


class _Stall(BaseHTTPRequestHandler):
    """A person's server that takes every request and answers only once released."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).seen.append(self.path.split("?")[0])
        RELEASE.wait(60)
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stalling_server() -> Iterator[str]:
    RELEASE.clear()
    _Stall.seen = []
    with serve_http(_Stall) as url:
        try:
            yield url
        finally:
            RELEASE.set()  # let stalled requests end before the server shuts down


def _bind(engine: Any, person: Any, project_id: int) -> None:
    """A bound project of ``person`` (read-backs go to their server for it)."""
    with Session(engine) as s:
        s.add(
            LabellingProject(
                family="pair",
                owner_id=1,
                role="A",
                person=person.email,
                person_slug=person.slug,
                server_url=person.url,
                user_id=1,
                project_id=project_id,
                marker="m",
                state="created",
            )
        )
        s.commit()


def _body(first: int, n: int, project: int = 1) -> dict[str, Any]:
    return {"action": "ANNOTATIONS_DELETED", "project": project, "annotations": [
        {"id": first + i} for i in range(n)
    ]}  # fmt: skip


def test_read_back_runs_off_the_request_path(engine, tmp_path: Path, stalling_server: str) -> None:  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "d"
    people = People(data_dir, "http://127.0.0.1:1")
    a = people.add("a@x.test", url=stalling_server, token="tok123456")
    b = people.add("b@x.test", url="http://127.0.0.1:9", token="tok123456")  # no project
    _bind(engine, a, 1)
    settings = Settings(data_dir=data_dir, api_token="t", webhook_secret=SECRET)
    app = create_app(settings, engine=engine)
    queue = app.state.readback
    with TestClient(app) as client:
        hook = {WEBHOOK_SECRET_HEADER: person_webhook_secret(SECRET, a.slug)}
        began = time.monotonic()
        r = client.post(
            f"/webhooks/label-studio/{a.slug}", json=_body(1, MAX_NOTIFY_IDS), headers=hook
        )
        took = time.monotonic() - began
        # answered while A's server still holds the read-back (on the request path it
        # would take the read-back's 30 s timeout)
        assert r.status_code == 200 and took < 1.0, (r.status_code, took)
        assert r.json()["queued"] == MAX_NOTIFY_IDS
        assert wait_for(lambda: _Stall.seen == ["/api/tasks/"], timeout=5), _Stall.seen
        # more of A's ids wait (merged, bounded); beyond the bound: 429 at once
        for k in range(MAX_PENDING_IDS // MAX_NOTIFY_IDS):
            r = client.post(
                f"/webhooks/label-studio/{a.slug}",
                json=_body(10_000 * (k + 1), MAX_NOTIFY_IDS),
                headers=hook,
            )
            assert r.status_code == 200, r.text
        began = time.monotonic()
        r = client.post(f"/webhooks/label-studio/{a.slug}", json=_body(90_000, 1), headers=hook)
        assert r.status_code == 429 and time.monotonic() - began < 1.0
        # a replay of waiting ids adds nothing and is not refused
        r = client.post(f"/webhooks/label-studio/{a.slug}", json=_body(10_000, 5), headers=hook)
        assert (r.status_code, r.json()["queued"]) == (200, 0)
        began = time.monotonic()
        assert client.get("/health").status_code == 200 and time.monotonic() - began < 1.0
        # B's notification is read back while A's read-back is still held
        r = client.post(
            f"/webhooks/label-studio/{b.slug}",
            json=_body(5, 1),
            headers={WEBHOOK_SECRET_HEADER: person_webhook_secret(SECRET, b.slug)},
        )
        assert r.status_code == 200
        assert wait_for(lambda: queue.rounds[b.slug] == 1, timeout=5), queue.rounds
        assert queue.rounds[a.slug] == 0 and len(_Stall.seen) == 1  # A: one read-back at once
        RELEASE.set()  # A's server answers (503): logged, A's waiting ids are read back next
        assert wait_for(lambda: queue.rounds[a.slug] == 2, timeout=10), queue.rounds
    # lifespan ended: the workers are gone, nothing more is taken
    assert queue.alive() == 0


def test_shutdown_drops_waiting_ids_and_stops_the_workers(  # type: ignore[no-untyped-def]
    engine, tmp_path: Path, stalling_server: str
) -> None:
    data_dir = tmp_path / "d"
    people = People(data_dir, "http://127.0.0.1:1")
    a = people.add("a@x.test", url=stalling_server, token="tok123456")
    _bind(engine, a, 1)
    app = create_app(
        Settings(data_dir=data_dir, api_token="t", webhook_secret=SECRET), engine=engine
    )
    queue = app.state.readback
    hook = {WEBHOOK_SECRET_HEADER: person_webhook_secret(SECRET, a.slug)}
    with TestClient(app) as client:
        for k in range(2):
            r = client.post(
                f"/webhooks/label-studio/{a.slug}", json=_body(1000 * k + 1, 3), headers=hook
            )
            assert r.status_code == 200
        assert wait_for(lambda: len(_Stall.seen) == 1, timeout=5)
        RELEASE.set()  # the running read-back ends; the waiting one may or may not start
    assert queue.alive() == 0
    assert not queue.drain(timeout=0.1) or queue.rounds[a.slug] >= 1
    with pytest.raises(Exception, match="shutting down"):
        queue.offer(a, [1], 1)


@pytest.mark.slow
def test_b_is_recorded_live_while_as_server_stalls(
    study: Study, tmp_path: Path, stalling_server: str
) -> None:
    """On real Label Studio servers: A's read-backs stall (A's registry entry points at a
    server that never answers) and A floods A's path, while B labels on B's own server;
    each of B's labels is recorded from B's notification within seconds and ``/health``
    answers within 1 s throughout."""
    study.push()
    a, b = study.person("A"), study.person("B")
    data_dir = tmp_path / "api"
    people = People(data_dir, "http://127.0.0.1:1")
    people.add(a.email, url=stalling_server, token="tok123456")
    people.add(b.email, url=b.url, token=study.people.admin_token(b))
    app = create_app(
        Settings(data_dir=data_dir, api_token="t", webhook_secret=SECRET), engine=study.engine
    )
    with TestClient(app) as client:
        hook_a = {WEBHOOK_SECRET_HEADER: person_webhook_secret(SECRET, a.slug)}
        # A's project as A's server numbered it (the session's pool servers hold other
        # tests' projects too): a notification naming another project is ignored unread
        with Session(study.engine) as s:
            binding = s.query(LabellingProject).filter_by(person=a.email).one()

        def flood(k: int) -> int:
            return client.post(
                f"/webhooks/label-studio/{a.slug}",
                json=_body(1_000_000 + 1000 * k, MAX_NOTIFY_IDS, binding.project_id),
                headers=hook_a,
            ).status_code

        codes = [flood(0)]
        # A's first read-back is held by A's server before the rest arrive
        assert wait_for(lambda: len(_Stall.seen) == 1, timeout=10), _Stall.seen
        codes += [flood(k) for k in range(1, 40)]
        assert codes.count(429) >= 1 and set(codes) <= {200, 429}, codes
        b_tasks = list(study.tasks("B").values())[:3]
        ids = study.label_all("B", {t: "same" for t in b_tasks})
        hook_b = {WEBHOOK_SECRET_HEADER: person_webhook_secret(SECRET, b.slug)}
        health = []
        for ann in ids:  # what B's server posts for each label
            body = {"action": "ANNOTATION_CREATED", "annotation": {"id": ann}}
            assert (
                client.post(
                    f"/webhooks/label-studio/{b.slug}", json=body, headers=hook_b
                ).status_code
                == 200
            )
            began = time.monotonic()
            assert client.get("/health").status_code == 200
            health.append(time.monotonic() - began)
        assert wait_for(
            lambda: all(("B", i, "counted", "same") in study.labels() for i in ids), timeout=10
        ), study.labels()
        assert max(health) < 1.0, health
        assert len(_Stall.seen) == 1  # A's first read-back still held all along
        RELEASE.set()
