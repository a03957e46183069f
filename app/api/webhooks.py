"""The Label Studio webhook receiver: stores annotations as they are made.

Requests must carry the shared secret in ``X-RCEA-Webhook-Secret`` (401 otherwise);
bodies over :data:`MAX_BODY_BYTES` get 413, malformed ones 422, and both store nothing.
Storage is idempotent, so a webhook and a later ``rcea audit sync`` of the same
annotation never double count.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Request
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from annotation.payloads import PayloadError, decode_body, parse_webhook
from annotation.projects import WEBHOOK_SECRET_HEADER
from app.audit.labels import record_annotation
from app.store import append_event
from app.store.models import Audit, AuditTask

router = APIRouter(tags=["webhooks"])
MAX_BODY_BYTES = 1 << 20  # 1 MiB; an annotation refused here still arrives by sync


async def _body(request: Request) -> bytes:
    """The request body, or 413 as soon as it is known to exceed MAX_BODY_BYTES."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise HTTPException(413, f"body over {MAX_BODY_BYTES} bytes")
    return bytes(body)


def _audit_for(session: Session, project_id: int | None, task_id: int) -> Audit | None:
    stmt = select(AuditTask).where(AuditTask.task_id == task_id)
    if project_id is not None:
        stmt = stmt.where(AuditTask.project_id == project_id)
    task = session.exec(stmt).first()
    if task is not None:
        return session.get(Audit, task.audit_id)
    if project_id is None:
        return None
    # A task we did not create, in one of our projects: recorded, never counted.
    for audit in session.exec(select(Audit)).all():
        for entry in audit.labelstudio.get("roles", {}).values():
            if entry.get("project_id") == project_id:
                return audit
    return None


@router.post("/webhooks/label-studio", status_code=200)
async def label_studio_webhook(
    request: Request,
    secret: str | None = Header(None, alias=WEBHOOK_SECRET_HEADER),
) -> dict[str, Any]:
    expected: str = request.app.state.webhook_secret
    if not secret or not secrets.compare_digest(secret.encode(), expected.encode()):
        raise HTTPException(401, "missing or wrong webhook secret")
    raw = await _body(request)
    try:
        annotations = parse_webhook(decode_body(raw))
    except PayloadError as exc:
        raise HTTPException(422, str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a parse error is the sender's, never a 500
        raise HTTPException(422, f"malformed webhook body ({type(exc).__name__})") from None
    from starlette.concurrency import run_in_threadpool

    stored = await run_in_threadpool(_store, request.app.state.engine, annotations)
    return {"ok": True, "received": len(annotations), "stored": stored}


def _store(engine: Any, annotations: list[Any]) -> int:
    """Store annotations in a worker thread (concurrent webhooks really are concurrent)."""
    stored = 0
    for ann in annotations:
        for attempt in range(3):  # two webhooks for one annotation may race on insert
            try:
                with Session(engine, expire_on_commit=False) as session:
                    audit = _audit_for(session, ann.project_id, ann.task_id)
                    if audit is None:
                        append_event(
                            session,
                            actor="labelstudio",
                            kind="annotation.unknown",
                            payload={
                                "annotation_id": ann.annotation_id,
                                "task_id": ann.task_id,
                                "project_id": ann.project_id,
                            },
                        )
                    else:
                        _, changed = record_annotation(session, audit, ann, source="webhook")
                        stored += int(changed)
                    session.commit()
                break
            except IntegrityError:
                if attempt == 2:
                    raise
    return stored
