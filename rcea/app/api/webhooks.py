"""The Label Studio webhook receiver: ``POST /webhooks/label-studio/{person}``.

Each person's server posts to its own path with its own secret (HMAC of the master
secret and the person's slug: a secret read on one server opens no other person's
endpoint). The body is a notification only: the named annotations are read back from
that person's server with rcea's admin token (one listing call per bound project) and
recorded through the one status rule (:mod:`rcea.study.labelling`) — a forged or replayed
body can at most make rcea look again at what the server really holds. Malformed bodies
get 422, oversized ones 413; replays change nothing and add no events.

The route never reads back itself: it validates the notification, hands its ids to the
API process's read-back queue (:mod:`rcea.study.labelling.readback`) and answers at once. A
notification is a bounded hint: it may name at most :data:`MAX_NOTIFY_IDS` annotations,
and a person may have at most :data:`MAX_PENDING_IDS` ids waiting; beyond either it gets
429 and nothing is queued (Label Studio does not retry: the next sync reconciles what it
named). One person's flood therefore costs no request worker and no store connection on
the request path: other people's labels and ``/health`` are not held up
(docs/labelstudio.md, "Webhooks").
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Request

from rcea.annotation.notifications import parse_notification
from rcea.annotation.payloads import PayloadError, decode_body
from rcea.annotation.people import People, person_webhook_secret
from rcea.annotation.projects import WEBHOOK_SECRET_HEADER
from rcea.study.labelling.readback import MAX_NOTIFY_IDS, MAX_PENDING_IDS, QueueFull, ReadBackQueue

router = APIRouter(tags=["webhooks"])
MAX_BODY = 1 << 20  # 1 MiB; Label Studio's annotation notifications are a few kB
__all__ = ["MAX_BODY", "MAX_NOTIFY_IDS", "MAX_PENDING_IDS", "router"]


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
    queue: ReadBackQueue = request.app.state.readback
    try:
        queued = queue.offer(found, note.annotation_ids, note.project_id)
    except QueueFull as exc:
        raise HTTPException(429, str(exc)) from exc
    return {
        "ok": True,
        "action": note.action,
        "received": len(note.annotation_ids),
        "queued": queued,
    }
