"""The Label Studio webhook receiver: per-person secrets, every malformed shape → 422
(nothing stored, no event), body limit, read-back of what changed, replays, and
concurrent labelling by two people on their own servers (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import threading
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from rcea.annotation.people import People, person_webhook_secret
from rcea.app.api import create_app
from rcea.app.api.webhooks import MAX_BODY
from rcea.study.settings import Settings
from rcea.study.store import session_scope
from rcea.study.store.models import AuditLabel, Event
from tests.support.labelling_study import SECRET, Study, choice, serve_api, wait_for
from tests.support.labelstudio_fixture import LabelStudioHandle

HEADER = "X-RCEA-Webhook-Secret"


@pytest.fixture
def receiver(engine, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The app with one registered person whose server is never contacted (every body
    below is refused before any read-back)."""
    data_dir = tmp_path / "d"
    person = People(data_dir, "http://127.0.0.1:1").add(
        "a@x.test", url="http://127.0.0.1:9", token="tok123456"
    )
    settings = Settings(data_dir=data_dir, api_token="t", webhook_secret=SECRET)
    client = TestClient(create_app(settings, engine=engine))
    return engine, client, person


def _count(engine, table) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()


def test_secrets(receiver) -> None:  # type: ignore[no-untyped-def]
    engine, client, person = receiver
    url = f"/webhooks/label-studio/{person.slug}"
    body = {"action": "PROJECT_UPDATED"}
    good = person_webhook_secret(SECRET, person.slug)
    assert client.post(url, json=body).status_code == 401
    assert client.post(url, json=body, headers={HEADER: "nope"}).status_code == 401
    assert client.post(url, json=body, headers={HEADER: SECRET}).status_code == 401  # master
    assert client.post(url, json=body, headers={"Authorization": "Bearer t"}).status_code == 401
    assert client.post(url, json=body, headers={HEADER: good}).status_code == 200
    other = "b-00000000"
    assert (
        client.post(
            f"/webhooks/label-studio/{other}",
            json=body,
            headers={HEADER: good},  # a's secret does not open another path
        ).status_code
        == 401
    )
    ghost = person_webhook_secret(SECRET, other)
    assert (
        client.post(f"/webhooks/label-studio/{other}", json=body, headers={HEADER: ghost})
    ).status_code == 404
    # the old shared endpoint is gone
    assert client.post(
        "/webhooks/label-studio", json=body, headers={HEADER: SECRET}
    ).status_code in (
        404,
        405,
    )


MALFORMED: dict[str, bytes] = {
    "not json": b"{not json",
    "not utf-8": b'{"action": "\xff"}',
    "a list": b"[]",
    "a number": b"5",
    "action missing": json.dumps({"annotation": {"id": 1}}).encode(),
    "action not a string": json.dumps({"action": 5}).encode(),
    "annotation missing": json.dumps({"action": "ANNOTATION_CREATED"}).encode(),
    "annotation a number": json.dumps({"action": "ANNOTATION_CREATED", "annotation": 5}).encode(),
    "annotation a list": json.dumps({"action": "ANNOTATION_UPDATED", "annotation": [[1]]}).encode(),
    "id a string": json.dumps({"action": "ANNOTATION_CREATED", "annotation": {"id": "x"}}).encode(),
    "id a bool": json.dumps({"action": "ANNOTATION_CREATED", "annotation": {"id": True}}).encode(),
    "id a float": json.dumps({"action": "ANNOTATION_CREATED", "annotation": {"id": 1.5}}).encode(),
    "id 0": json.dumps({"action": "ANNOTATION_CREATED", "annotation": {"id": 0}}).encode(),
    "id negative": json.dumps({"action": "ANNOTATION_CREATED", "annotation": {"id": -3}}).encode(),
    "id 2**31": json.dumps({"action": "ANNOTATION_CREATED", "annotation": {"id": 2**31}}).encode(),
    "id nested": json.dumps(
        {"action": "ANNOTATION_CREATED", "annotation": {"id": {"id": {"id": 1}}}}
    ).encode(),
    "project a string": json.dumps(
        {"action": "ANNOTATION_CREATED", "project": "x", "annotation": {"id": 1}}
    ).encode(),
    "project 2**40": json.dumps(
        {"action": "ANNOTATION_CREATED", "project": {"id": 2**40}, "annotation": {"id": 1}}
    ).encode(),
    "annotations an object": json.dumps(
        {"action": "ANNOTATIONS_DELETED", "annotations": {"id": 1}}
    ).encode(),
    "annotations empty": json.dumps({"action": "ANNOTATIONS_DELETED", "annotations": []}).encode(),
    "annotations of numbers": json.dumps(
        {"action": "ANNOTATIONS_CREATED", "annotations": [5]}
    ).encode(),
    "id of 5000 digits": b'{"action": "ANNOTATION_CREATED", "annotation": {"id": '
    + b"9" * 5000
    + b"}}",
    "id NaN": b'{"action": "ANNOTATION_CREATED", "annotation": {"id": NaN}}',
    "id Infinity": b'{"action": "ANNOTATION_CREATED", "annotation": {"id": Infinity}}',
    "deep nesting": b'{"action": "ANNOTATION_CREATED", "annotation": '
    + b"[" * 100_000
    + b"]" * 100_000
    + b"}",
}


@pytest.mark.parametrize("shape", list(MALFORMED))
def test_every_malformed_shape_is_422_and_stores_nothing(receiver, shape: str) -> None:  # type: ignore[no-untyped-def]
    engine, client, person = receiver
    url = f"/webhooks/label-studio/{person.slug}"
    headers = {HEADER: person_webhook_secret(SECRET, person.slug)}
    events = _count(engine, Event)
    for _ in range(3):  # replays too
        r = client.post(url, content=MALFORMED[shape], headers=headers)
        assert r.status_code == 422, r.text
    assert _count(engine, AuditLabel) == 0 and _count(engine, Event) == events


def test_body_over_the_limit_is_413(receiver) -> None:  # type: ignore[no-untyped-def]
    engine, client, person = receiver
    headers = {HEADER: person_webhook_secret(SECRET, person.slug)}
    big = b'{"action": "X", "pad": "' + b"x" * MAX_BODY + b'"}'
    r = client.post(f"/webhooks/label-studio/{person.slug}", content=big, headers=headers)
    assert r.status_code == 413 and _count(engine, Event) == 0


@pytest.mark.slow
def test_read_back_replay_and_update(study: Study, api: str) -> None:
    """A label arrives through the webhook (read back from A's server); replaying the
    notification adds no row and no event; A's own change is recorded once."""
    study.push()
    task = next(iter(study.tasks("A").values()))
    (ann_id,) = study.label_all("A", {task: "same"})
    assert wait_for(lambda: ("A", ann_id, "counted", "same") in study.labels())
    a = study.person("A")
    body = {"action": "ANNOTATION_CREATED", "annotation": {"id": ann_id}}
    headers = {HEADER: person_webhook_secret(SECRET, a.slug)}
    import httpx

    with session_scope(study.engine) as s:
        n_events = len(s.exec(sa.select(Event)).all())
    readback = study.app.state.readback  # type: ignore[union-attr]
    study.drain()
    unchanged = readback.counts["unchanged"]
    for _ in range(3):
        r = httpx.post(f"{api}/{a.slug}", json=body, headers=headers)
        assert r.status_code == 200 and r.json()["received"] == 1
        study.drain()  # each replay is read back (queued once it has been taken)
    assert readback.counts["unchanged"] == unchanged + 3
    with session_scope(study.engine) as s:
        assert len(s.exec(sa.select(Event)).all()) == n_events
    with closing(study.session_of("A")) as web:
        assert (
            web.patch(
                f"/api/annotations/{ann_id}/", json={"result": choice("different")}
            ).status_code
            == 200
        )
    assert wait_for(lambda: ("A", ann_id, "counted", "different") in study.labels())
    with session_scope(study.engine) as s:
        kinds = [e.kind for e in s.exec(sa.select(Event).order_by(Event.id)).scalars()]
    assert kinds.count("annotation.created") == 1 and kinds.count("annotation.updated") == 1


@pytest.mark.slow
def test_concurrent_labelling_by_two_people_is_counted_per_person(  # type: ignore[no-untyped-def]
    store_url: str, tmp_path: Path, labelstudio_pool: list[LabelStudioHandle]
) -> None:
    """A and B label at once (threads, their own sessions and servers) with live webhooks
    into the real API: each person's counted labels are exactly what that person chose,
    on SQLite and PostgreSQL, and a full sync afterwards changes nothing."""
    study = Study(tmp_path, labelstudio_pool, url=store_url)
    try:
        with serve_api(study):
            study.push()
            chosen = {
                role: {
                    t: ("same" if (i % 3) else "different") if role == "A" else "different"
                    for i, t in enumerate(study.tasks(role).values())
                }
                for role in ("A", "B")
            }
            made: dict[str, list[int]] = {}
            errors: list[BaseException] = []

            def label(role: str) -> None:
                try:
                    made[role] = study.label_all(role, chosen[role])
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=label, args=(r,)) for r in ("A", "B")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert errors == []
            n = sum(len(v) for v in chosen.values())
            assert wait_for(lambda: len(study.labels()) == n, timeout=60)
            expected = sorted(
                (role, ann, "counted", chosen[role][task])
                for role in ("A", "B")
                for task, ann in zip(chosen[role], made[role], strict=True)
            )
            assert study.labels() == expected
            assert study.sync()["changed"] == 0
            assert study.labels() == expected
    finally:
        study.engine.dispose()
