"""Annotator A attacks B's labels with everything A has — A's own browser session and A's
own API token, on A's server and on B's — against the real servers and the real API.
Nothing of it may reach a counted label or change the gate (docs/labelstudio.md: "Who can see and
change what"). Also: rcea's own admin changing a label, deletions, vanished projects."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from contextlib import closing

import httpx
import pytest
import sqlalchemy as sa

from rcea.annotation.client import http_client
from rcea.annotation.people import person_webhook_secret
from rcea.annotation.projects import WEBHOOK_SECRET_HEADER
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.store import list_events, session_scope
from tests.support.labelling_study import SECRET, Study, choice, through_front_door, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(params=["loopback", "front door"])
def study(  # type: ignore[no-untyped-def]
    request, tmp_path, labelstudio_pool, monkeypatch
) -> Iterator[Study]:
    """Every attack twice: on the servers' own loopback addresses, and through rcea's front
    door (HTTPS, a port per person; docs/team.md), as people on other machines reach them."""
    if request.param == "loopback":
        st = Study(tmp_path, labelstudio_pool)
        yield st
        st.engine.dispose()
        return
    with through_front_door(tmp_path, labelstudio_pool, monkeypatch) as public:
        st = Study(tmp_path, public)
        assert all(st.person(r).url.startswith("https://127.0.0.1:") for r in ("A", "B"))
        yield st
        st.engine.dispose()


def labelled(study: Study) -> dict[str, dict[int, int]]:
    """Push, then A and B label every pair ('same'); returns role → pair → annotation."""
    study.push()
    out: dict[str, dict[int, int]] = {}
    for role in ("A", "B"):
        tasks = study.tasks(role)
        ids = study.label_all(role, {t: "same" for t in tasks.values()})
        out[role] = dict(zip(tasks, ids, strict=True))
    if study.app is not None:
        study.drain()  # the live notifications first: the sync below then finds them all
    study.sync()
    return out


def counted(study: Study) -> list[tuple[str, int, str, str]]:
    return [r for r in study.labels() if r[2] == "counted"]


def a_token(study: Study) -> str:
    """A's own API token, as A can read it from A's account page."""
    with closing(study.session_of("A")) as web:
        resp = web.get("/api/current-user/token")
        assert resp.status_code == 200, resp.text
        return resp.json()["token"]


def test_a_cannot_reach_b_with_own_session_or_token(study: Study, api: str) -> None:
    anns = labelled(study)
    before_labels, before_gate = counted(study), study.gate()
    b_project = study.push()["projects"]["B"]["project_id"]
    b_task = next(iter(study.tasks("B").values()))
    b_ann = next(iter(anns["B"].values()))
    token = a_token(study)
    b_url = study.pool["B"].url

    attempts = [
        ("GET", "/api/projects/", None),
        ("GET", f"/api/projects/{b_project}/", None),
        ("GET", "/api/tasks/", {"project": b_project}),
        ("GET", f"/api/annotations/{b_ann}/", None),
        ("PATCH", f"/api/annotations/{b_ann}/", {"result": choice("different")}),
        ("POST", f"/api/tasks/{b_task}/annotations/", {"result": choice("different")}),
        ("DELETE", f"/api/annotations/{b_ann}/", None),
        ("GET", "/api/webhooks/", None),
        ("DELETE", f"/api/projects/{b_project}/", None),
    ]
    with closing(study.session_of("A")) as a_web:
        # A's session cookie and CSRF token, sent to B's server (same host, other port).
        cookies = dict(a_web.cookies)
        csrf = a_web.headers.get("X-CSRFToken", "")
    for creds in ("session", "token"):
        with http_client(b_url, follow_redirects=False) as web:
            if creds == "session":
                web.cookies.update(cookies)
                web.headers["X-CSRFToken"] = csrf
            else:
                web.headers["Authorization"] = f"Token {token}"
            for method, path, payload in attempts:
                if method == "GET":
                    resp = web.request(method, path, params=payload)
                else:
                    resp = web.request(method, path, json=payload)
                assert resp.status_code in (401, 403, 302), (creds, method, path, resp.text)
    assert study.sync()["changed"] == 0
    assert counted(study) == before_labels
    assert study.gate()["report"] == before_gate["report"]


def test_a_on_own_server_cannot_touch_b_labels(study: Study, api: str) -> None:
    """On A's own server A is a member: A sees A's webhook (and its secret), can post
    annotations claiming anyone, forge webhooks with that secret, disable the webhook.
    None of it changes a label of B's or counts for anyone but A."""
    anns = labelled(study)
    before_b = [r for r in counted(study) if r[0] == "B"]
    before_gate = study.gate()["report"]
    b_user = study.people.client(study.person("B")).users.whoami().id
    a = study.person("A")
    with closing(study.session_of("A")) as web:
        # (the pool server also hosts other tests' people: keep this study's hook)
        hooks = [h for h in web.get("/api/webhooks/").json() if h["url"].startswith(api)]
        assert len(hooks) == 1  # A's own project's webhook: A can read it
        a_secret = hooks[0]["headers"][WEBHOOK_SECRET_HEADER]
        assert a_secret == person_webhook_secret(SECRET, a.slug) != SECRET
        # post on A's own task claiming B's user id (on B's server) as author
        a_task = next(iter(study.tasks("A").values()))
        r = web.post(
            f"/api/tasks/{a_task}/annotations/",
            json={"result": choice("different"), "completed_by": b_user},
        )
        assert r.status_code == 201
        forged = r.json()["id"]
        # disable the webhook (labels then arrive by sync only)
        assert (
            web.patch(f"/api/webhooks/{hooks[0]['id']}/", json={"is_active": False}).status_code
            == 200
        )
    b = study.person("B")
    forged_bodies = [
        # A's secret on B's endpoint; A's secret on A's endpoint naming B's annotation id
        (b.slug, a_secret, next(iter(anns["B"].values()))),
        (a.slug, a_secret, next(iter(anns["B"].values()))),
        # the master secret is not a person's secret
        (b.slug, SECRET, next(iter(anns["B"].values()))),
    ]
    study.drain()  # what A's own notifications named is recorded (off the request path)
    events_before = len(list_events_all(study))
    for slug, secret, ann_id in forged_bodies:
        resp = httpx.post(
            f"{api}/{slug}",
            json={"action": "ANNOTATION_UPDATED", "project": 1, "annotation": {"id": ann_id}},
            headers={WEBHOOK_SECRET_HEADER: secret},
        )
        assert resp.status_code in (200, 401), resp.text
        if slug == b.slug:
            assert resp.status_code == 401
    study.drain()  # the accepted one is read back off the request path
    study.sync()
    assert [r for r in counted(study) if r[0] == "B"] == before_b
    assert study.gate()["report"] == before_gate
    # Label Studio stored the claimed author: on A's server that id is not A → never counted
    # (annotation ids are per server: B's server may hold an id equal to A's forged one)
    assert [r for r in study.labels() if r[:2] == ("A", forged)] == [
        ("A", forged, "wrong_user", "different")
    ]
    # the forged notifications and the sync found nothing new: not a single event
    assert len(list_events_all(study)) == events_before
    study.push()  # a re-push brings the webhook back
    with closing(study.session_of("A")) as web:
        hooks = [h for h in web.get("/api/webhooks/").json() if h["url"].startswith(api)]
        assert [h["is_active"] for h in hooks] == [True]


def list_events_all(study: Study) -> list:  # type: ignore[type-arg]
    with session_scope(study.engine) as s:
        return list_events(s)


def test_admin_change_delete_and_vanished_project(study: Study, api: str) -> None:
    """rcea's admin changing A's label → foreign_update (not counted); A deleting an
    annotation → deleted after the webhook and after sync; B deleting B's own project →
    reported by sync, B's labels stop counting."""
    anns = labelled(study)
    with session_scope(study.engine) as s:
        pairs = audit_pairs(s, audit_id=study.audit_id)
    p0, p1 = pairs[0].id, pairs[1].id
    admin = study.people.http(study.person("A"))
    with admin:
        r = admin.patch(f"/api/annotations/{anns['A'][p0]}/", json={"result": choice("different")})
        assert r.status_code == 200
    assert wait_for(lambda: ("A", anns["A"][p0], "foreign_update", "different") in study.labels())
    with closing(study.session_of("A")) as web:
        assert web.delete(f"/api/annotations/{anns['A'][p1]}/").status_code == 204
    assert wait_for(lambda: ("A", anns["A"][p1], "deleted", "same") in study.labels())
    res = study.sync()
    assert res["changed"] == 0  # the webhooks already did it
    progress = study.gate()["progress"]
    assert progress["A"] == len(pairs) - 2 and progress["B"] == len(pairs)

    b_project = study.push()["projects"]["B"]["project_id"]
    with closing(study.session_of("B")) as web:
        assert web.delete(f"/api/projects/{b_project}/").status_code == 204
    res = study.sync()
    assert res["missing_projects"] == [
        {"role": "B", "person": study.emails["B"], "project_id": b_project}
    ]
    assert res["changed_by_status"] == {"deleted": len(pairs)}
    assert study.gate()["progress"]["B"] == 0
    with pytest.raises(Exception, match="gone from"):
        study.push()  # never recreated silently


def test_person_webhook_secret_is_hmac_of_master() -> None:
    expected = hmac.new(b"m", b"slug-1", hashlib.sha256).hexdigest()
    assert person_webhook_secret("m", "slug-1") == expected
    assert person_webhook_secret("m", "slug-2") != expected


@pytest.mark.postgres
def test_nul_in_a_note_is_stored_and_later_labels_count_on_postgres(  # type: ignore[no-untyped-def]
    tmp_path, labelstudio_pool, store_url: str
) -> None:
    """A note with a NUL byte (PostgreSQL refuses NUL in text): stored safely by sync, and
    the labels made after it are still recorded and counted."""
    if not store_url.startswith("postgresql"):
        pytest.skip("the PostgreSQL case; SQLite stores NUL anyway")
    study = Study(tmp_path, labelstudio_pool, url=store_url)
    try:
        study.push()
        tasks = list(study.tasks("A").values())
        with closing(study.session_of("A")) as web:
            note = [{"from_name": "note", "to_name": "left", "type": "textarea",
                     "value": {"text": ["before\x00after"]}}]  # fmt: skip
            r = web.post(f"/api/tasks/{tasks[0]}/annotations/",
                         json={"result": choice("same") + note})  # fmt: skip
            assert r.status_code == 201, r.text
        first = study.sync()
        assert first["changed_by_status"] == {"counted": 1}
        study.label_all("A", {t: "different" for t in tasks[1:3]})
        assert study.sync()["changed_by_status"] == {"counted": 2}
        assert [r[2] for r in study.labels()] == ["counted"] * 3
        from rcea.study.store.models import AuditLabel

        with session_scope(study.engine) as s:
            notes = [n for n in s.exec(sa.select(AuditLabel.note)).scalars() if n]
        assert len(notes) == 1 and "\x00" not in notes[0]
        assert notes[0].startswith("before") and notes[0].endswith("after")
    finally:
        study.engine.dispose()
