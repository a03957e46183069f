"""The Label Studio webhook receiver: stores annotations as they are made.

Requests must carry the shared secret in ``X-RCEA-Webhook-Secret`` (401 otherwise);
malformed bodies get 422 and store nothing. Storage is idempotent, so a webhook and a
later ``rcea audit sync`` of the same annotation never double count.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Request
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from annotation.payloads import PayloadError, parse_webhook
from annotation.projects import WEBHOOK_SECRET_HEADER
from app.audit.labels import record_annotation
from app.store import append_event
from app.store.models import Audit, AuditTask

router = APIRouter(tags=["webhooks"])


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
    try:
        body = json.loads(await request.body())
        annotations = parse_webhook(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPException(422, f"body is not JSON: {exc}") from exc
    except PayloadError as exc:
        raise HTTPException(422, str(exc)) from exc
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
