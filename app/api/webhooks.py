"""The Label Studio webhook receiver: ``POST /webhooks/label-studio/{person}``.

Each person's server posts to its own path with its own secret (HMAC of the master
secret and the person's slug: a secret read on one server opens no other person's
endpoint). The body is a notification only: the named annotations are read back from
that person's server with rcea's admin token (one listing call per bound project) and
recorded through the one status rule (:mod:`study.labelling`) — a forged or replayed
body can at most make rcea look again at what the server really holds. Malformed bodies
get 422, oversized ones 413; replays change nothing and add no events.

A notification is a bounded hint: one person's server may name at most
:data:`MAX_NOTIFY_IDS` annotations in one notification and have at most
:data:`MAX_CONCURRENT` notifications being read back at once; beyond either it gets 429
at once and nothing is read (Label Studio does not retry: the next ``audit sync``
reconciles what it named). One person's flood therefore holds at most
:data:`MAX_CONCURRENT` workers and store connections: other people's labels and
``/health`` are not held up.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Request
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from annotation.notifications import parse_notification
from annotation.payloads import PayloadError, decode_body
from annotation.people import People, person_webhook_secret
from annotation.projects import WEBHOOK_SECRET_HEADER
from study.labelling import LabellingError, notify

router = APIRouter(tags=["webhooks"])
MAX_BODY = 1 << 20  # 1 MiB; Label Studio's annotation notifications are a few kB
MAX_NOTIFY_IDS = 100  # annotations one notification may name (a bulk action of more: 429)
MAX_CONCURRENT = 2  # notifications of one person read back at once (more: 429)


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise HTTPException(413, f"body larger than {MAX_BODY} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise HTTPException(413, f"body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


@router.post("/webhooks/label-studio/{person}", status_code=200)
async def label_studio_webhook(
    person: str,
    request: Request,
    secret: str | None = Header(None, alias=WEBHOOK_SECRET_HEADER),
) -> dict[str, Any]:
    people: People = request.app.state.people
    found = people.by_slug(person) if len(person) <= 64 else None
    expected = person_webhook_secret(request.app.state.webhook_secret, person)
    if not secret or not secrets.compare_digest(secret.encode(), expected.encode()):
        raise HTTPException(401, "missing or wrong webhook secret")
    if found is None:
        raise HTTPException(404, "no such person")
    raw = await _body(request)
    try:
        note = parse_notification(decode_body(raw))
    except PayloadError as exc:
        raise HTTPException(422, str(exc)) from exc
    if not note.annotation_ids:
        return {"ok": True, "action": note.action, "received": 0}
    if len(note.annotation_ids) > MAX_NOTIFY_IDS:
        raise HTTPException(
            429,
            f"a notification may name at most {MAX_NOTIFY_IDS} annotations; "
            "the next sync reconciles these",
        )
    inflight: dict[str, int] = request.app.state.__dict__.setdefault("webhook_inflight", {})
    if inflight.get(found.slug, 0) >= MAX_CONCURRENT:
        raise HTTPException(
            429,
            f"{MAX_CONCURRENT} notifications of this person are being read back; "
            "the next sync reconciles this one",
        )

    # counted on the event loop (one thread): no lock needed
    inflight[found.slug] = inflight.get(found.slug, 0) + 1
    try:
        counts = await run_in_threadpool(
            _store, request.app.state.engine, people, found, note.annotation_ids, note.project_id
        )
    except LabellingError as exc:
        raise HTTPException(502, str(exc)) from exc
    finally:
        inflight[found.slug] -= 1
    return {"ok": True, "action": note.action, "received": len(note.annotation_ids), **counts}


def _store(engine: Any, people: People, person: Any, ids: list[int], project: int | None) -> dict:  # type: ignore[type-arg]
    """Read back and record in a worker thread (concurrent webhooks really are concurrent;
    two notifications of one annotation may race on insert: the loser retries)."""
    for attempt in range(3):
        try:
            with Session(engine, expire_on_commit=False) as session:
                counts = notify(session, people, person, ids, project)
                session.commit()
                return counts
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
