"""The webhook receiver's refusals pinned exactly (docs/mutation.md): each
status with its detail, the secret checked before the person is looked up, the body limit
at its edge (declared and streamed), and the answer to an id-less notification. The
route is decorated, so mutmut leaves it alone: these tests were checked against the
hand-made mutations listed in docs/mutation.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rcea.annotation.people import People, person_webhook_secret
from rcea.app.api import create_app
from rcea.app.api.webhooks import MAX_BODY
from rcea.study.settings import Settings
from tests.support.labelling_study import SECRET

HEADER = "X-RCEA-Webhook-Secret"
WRONG_SECRET = {"detail": "missing or wrong webhook secret"}
TOO_BIG = {"detail": f"body larger than {MAX_BODY} bytes"}


@pytest.fixture
def receiver(engine, tmp_path: Path):  # type: ignore[no-untyped-def]
    data_dir = tmp_path / "d"
    person = People(data_dir, "http://127.0.0.1:1").add(
        "a@x.test", url="http://127.0.0.1:9", token="tok123456"
    )
    settings = Settings(data_dir=data_dir, api_token="t", webhook_secret=SECRET)
    client = TestClient(create_app(settings, engine=engine))
    url = f"/webhooks/label-studio/{person.slug}"
    return client, url, {HEADER: person_webhook_secret(SECRET, person.slug)}


def test_limit_is_one_mebibyte() -> None:
    assert MAX_BODY == 1_048_576


def test_secret_refusals_say_why(receiver) -> None:  # type: ignore[no-untyped-def]
    client, url, good = receiver
    body = {"action": "PROJECT_UPDATED"}
    for headers in ({}, {HEADER: ""}, {HEADER: good[HEADER][:-1]}, {HEADER: good[HEADER] + "0"}):
        r = client.post(url, json=body, headers=headers)
        assert (r.status_code, r.json()) == (401, WRONG_SECRET)
    # the secret is checked first: an unknown person with a wrong secret learns nothing
    r = client.post("/webhooks/label-studio/nobody", json=body, headers=good)
    assert (r.status_code, r.json()) == (401, WRONG_SECRET)
    for slug in ("nobody", "n" * 64, "n" * 65, "n" * 300):
        ok = {HEADER: person_webhook_secret(SECRET, slug)}
        r = client.post(f"/webhooks/label-studio/{slug}", json=body, headers=ok)
        assert (r.status_code, r.json()) == (404, {"detail": "no such person"}), slug


def test_id_less_notification_is_acknowledged(receiver) -> None:  # type: ignore[no-untyped-def]
    client, url, good = receiver
    r = client.post(url, json={"action": "PROJECT_UPDATED", "project": 4}, headers=good)
    assert (r.status_code, r.json()) == (
        200,
        {"ok": True, "action": "PROJECT_UPDATED", "received": 0},
    )


def test_payload_error_is_422_with_the_parsers_message(receiver) -> None:  # type: ignore[no-untyped-def]
    client, url, good = receiver
    r = client.post(url, json={"action": "ANNOTATION_CREATED", "annotation": 5}, headers=good)
    assert (r.status_code, r.json()) == (
        422,
        {"detail": "ANNOTATION_CREATED needs an 'annotation' object"},
    )


def _padded(size: int) -> bytes:
    """A valid id-less notification of exactly ``size`` bytes."""
    head, tail = b'{"action": "X", "pad": "', b'"}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_body_limit_edge_declared(receiver) -> None:  # type: ignore[no-untyped-def]
    client, url, good = receiver
    r = client.post(url, content=_padded(MAX_BODY), headers=good)
    assert (r.status_code, r.json()) == (200, {"ok": True, "action": "X", "received": 0})
    r = client.post(url, content=_padded(MAX_BODY + 1), headers=good)
    assert (r.status_code, r.json()) == (413, TOO_BIG)


def _chunks(body: bytes, size: int = 65536) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


def test_body_limit_edge_streamed(receiver) -> None:  # type: ignore[no-untyped-def]
    """Without a Content-Length (chunked), the limit holds on the bytes read."""
    client, url, good = receiver
    r = client.post(url, content=_chunks(_padded(MAX_BODY)), headers=good)
    assert (r.status_code, r.json()) == (200, {"ok": True, "action": "X", "received": 0})
    r = client.post(url, content=_chunks(_padded(MAX_BODY + 1)), headers=good)
    assert (r.status_code, r.json()) == (413, TOO_BIG)


@pytest.mark.parametrize("declared", ["abc", "-1", "1e3", str(MAX_BODY + 1)])
def test_declared_length_not_a_small_number_is_413(receiver, declared: str) -> None:  # type: ignore[no-untyped-def]
    client, url, good = receiver
    r = client.post(url, content=b"{}", headers={**good, "Content-Length": declared})
    assert (r.status_code, r.json()) == (413, TOO_BIG)
