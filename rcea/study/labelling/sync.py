"""Reconciling a round with Label Studio, both ways, and the webhook as a notification.

``sync_round`` reads the bound projects from each person's server with rcea's admin
token: annotations found there are recorded through the one status rule; stored
annotations no longer there become ``deleted``; a project that is gone, or tasks that are
gone from it, are reported (never silently ignored).

A **full** sync exports each project whole. An **incremental** sync (the default once a
project has been synced) lists only the tasks whose ``updated_at`` is later than the
project's cursor minus :data:`OVERLAP`: Label Studio bumps a task's ``updated_at``
whenever one of its annotations is saved or deleted, so new, changed and deleted
annotations are all found, per task. The cursor is the server's own clock (its ``Date``
header) when the previous sync of that project began, never this machine's. Tasks
deleted from Label Studio are only noticed by a full sync (``--full``).

``notify`` handles a webhook: the body only says *which* annotations changed; they are
read back from the server in one listing call per bound project (:func:`read_back_many`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
from label_studio_sdk.core.api_error import ApiError
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from rcea.annotation.payloads import PayloadError
from rcea.annotation.people import People, Person
from rcea.annotation.projects import export_tasks
from rcea.study.labelling.bindings import LabellingError, bindings
from rcea.study.labelling.families import FAMILIES, Family
from rcea.study.labelling.record import Recorder
from rcea.study.store.db import session_scope
from rcea.study.store.models import LabellingProject

OVERLAP = timedelta(seconds=10)
"""Tasks changed this long before the cursor are read again (recording is idempotent):
covers saves that commit after a later one, and the ``Date`` header's whole seconds."""
PAGE_SIZE = 1000


@dataclass
class SyncResult:
    owner: str
    annotations_seen: int = 0
    changed: Counter[str] = field(default_factory=Counter)  # new status → count
    malformed: int = 0
    missing_projects: list[dict[str, Any]] = field(default_factory=list)
    missing_tasks: dict[str, int] = field(default_factory=dict)  # role → count
    full: bool = True
    """every project was read whole (False: at least one was read incrementally)"""
    tasks_read: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "mode": "full" if self.full else "incremental",
            "tasks_read": self.tasks_read,
            "annotations_seen": self.annotations_seen,
            "changed": sum(self.changed.values()),
            "changed_by_status": dict(sorted(self.changed.items())),
            "malformed": self.malformed,
            "missing_projects": self.missing_projects,
            "missing_tasks": self.missing_tasks,
        }


def _export(people: People, person: Person, project_id: int) -> list[dict[str, Any]] | None:
    """The project's tasks with annotations, or None when the project is gone."""

    try:
        return export_tasks(people.client(person), project_id)
    except ApiError as exc:
        if exc.status_code == 404:
            return None
        raise


def _server_now(people: People, person: Person, project_id: int) -> datetime | None | bool:
    """The server's clock (its ``Date`` header, in UTC) on a request for the project;
    False when the project is gone; None when the server sent no usable ``Date``."""
    with people.http(person) as http:
        resp = http.get(f"/api/projects/{project_id}/")
    if resp.status_code == 404:
        return False
    resp.raise_for_status()
    try:
        when = parsedate_to_datetime(resp.headers["date"])
    except (KeyError, TypeError, ValueError):
        return None
    return when.astimezone(UTC)


def changed_tasks(
    people: People, person: Person, project_id: int, since: datetime
) -> list[dict[str, Any]]:
    """The project's tasks (with their annotations) whose ``updated_at`` is later than
    ``since`` (server clock; naive means UTC), through the Data Manager's task list."""
    aware = since if since.utcoffset() is not None else since.replace(tzinfo=UTC)
    value = aware.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    query = {
        "filters": {
            "conjunction": "and",
            "items": [
                {
                    "filter": "filter:tasks:updated_at",
                    "operator": "greater",
                    "type": "Datetime",
                    "value": value,
                }
            ],
        },
        "ordering": ["tasks:id"],
    }
    out: list[dict[str, Any]] = []
    with people.http(person, timeout=120.0) as http:
        page = 1
        while True:
            resp = http.get(
                "/api/tasks/",
                params={
                    "project": project_id,
                    "fields": "all",
                    "query": json.dumps(query),
                    "page": page,
                    "page_size": PAGE_SIZE,
                },
            )
            if resp.status_code == 404 and page > 1:
                break  # past the last page
            resp.raise_for_status()
            body = resp.json()
            tasks = body.get("tasks") if isinstance(body, dict) else None
            if not isinstance(tasks, list):
                raise LabellingError(
                    f"{person.url} answered an unexpected task list for project {project_id}"
                )
            out.extend(tasks)
            if not tasks or len(out) >= int(body.get("total") or 0):
                break
            page += 1
    return out


def sync_binding(
    session: Session,
    people: People,
    family: Family,
    owner: Any,
    binding: LabellingProject,
    result: SyncResult,
    *,
    full: bool = False,
) -> None:
    """Reconcile one bound project: whole (``full``, or never synced) or only the tasks
    changed since its cursor."""
    if binding.project_id is None:
        return
    person = people.require(binding.person)
    recorder = Recorder(session, family, owner, binding)
    now = _server_now(people, person, binding.project_id)
    incremental = not full and binding.synced_until is not None and now is not False
    if now is False:
        tasks = None
    elif incremental:
        assert binding.synced_until is not None
        tasks = changed_tasks(people, person, binding.project_id, binding.synced_until - OVERLAP)
    else:
        tasks = _export(people, person, binding.project_id)
    if tasks is None:
        result.missing_projects.append(
            {"role": binding.role, "person": binding.person, "project_id": binding.project_id}
        )
        tasks = []
    result.full = result.full and not incremental
    result.tasks_read += len(tasks)
    seen: set[int] = set()
    present_tasks: set[int] = set()
    for task in tasks:
        present_tasks.add(int(task["id"]))
        for raw in task.get("annotations") or []:
            result.annotations_seen += 1
            try:
                ann = family.parse(raw, task_id=int(task["id"]), project_id=binding.project_id)
            except PayloadError:
                result.malformed += 1
                continue
            seen.add(ann.annotation_id)
            status = recorder.record(ann, source="sync")
            if status:
                result.changed[status] += 1
    for annotation_id, row in list(recorder.rows.items()):
        # Incrementally, only the tasks read can tell that an annotation is gone.
        if annotation_id not in seen and (not incremental or row.task_id in present_tasks):
            status = recorder.mark_deleted(annotation_id, source="sync")
            if status:
                result.changed[status] += 1
    if not incremental:
        gone = [t for t in recorder.tasks if t not in present_tasks]
        if gone:
            result.missing_tasks[binding.role] = len(gone)
    if now:  # a datetime: the next sync reads what changed from here on
        binding.synced_until = now  # type: ignore[assignment]  # now is the sync's datetime here (the if above); True only marks a full sync
        session.add(binding)


def sync_round(
    session: Session, people: People, family: Family, owner: Any, *, full: bool = False
) -> SyncResult:
    """Reconcile every bound project of the round (idempotent): each project whole when
    ``full`` or never synced, otherwise only the tasks changed since its last sync."""
    result = SyncResult(owner=owner.name)
    for binding in bindings(session, family, owner.id):
        sync_binding(session, people, family, owner, binding, result, full=full)
    session.flush()
    return result


def sync_all(session: Session, people: People) -> list[SyncResult]:
    """An incremental sync of every round with a bound project (the API's background
    sync: it recovers the notifications Label Studio dropped or answered 429)."""
    owners = sorted(
        {
            (b.family, b.owner_id)
            for b in session.exec(select(LabellingProject)).all()
            if b.project_id is not None
        }
    )
    out = []
    for family_name, owner_id in owners:
        family = FAMILIES[family_name]
        owner = session.get(family.owner_model, owner_id)
        if owner is not None:
            out.append(sync_round(session, people, family, owner))
    return out


def sync_everything(engine: Engine, people: People, attempts: int = 3) -> list[SyncResult]:
    """:func:`sync_all` in one transaction of its own (the API's background round). A
    webhook's read-back (:mod:`rcea.study.labelling.readback`) may record the same
    annotation between this round's read and its insert: the round then rolls back and
    runs again, and finds the row (the read-back retries the same way)."""
    for attempt in range(attempts):
        try:
            with session_scope(engine) as session:
                return sync_all(session, people)
        except IntegrityError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- webhooks


def read_back_many(
    people: People, person: Person, project_id: int, annotation_ids: list[int]
) -> dict[int, tuple[dict[str, Any], int]]:
    """The named annotations as the person's server holds them in ``project_id``: one
    listing of the tasks holding any of them (Data Manager filter on annotation ids, admin
    token), instead of one call per id. annotation id → (annotation, task id); ids absent
    are gone from that project."""
    wanted = set(annotation_ids)
    query = {
        "filters": {
            "conjunction": "and",
            "items": [
                {
                    "filter": "filter:tasks:annotations_ids",
                    "operator": "contains",
                    "type": "String",
                    "value": ",".join(str(i) for i in sorted(wanted)),
                }
            ],
        },
        "ordering": ["tasks:id"],
    }
    out: dict[int, tuple[dict[str, Any], int]] = {}
    with people.http(person) as http:
        resp = http.get(
            "/api/tasks/",
            params={
                "project": project_id,
                "fields": "all",
                "query": json.dumps(query),
                "page": 1,
                "page_size": len(wanted) + 1,  # a task per annotation at most
            },
        )
    if resp.status_code == 404:
        return out
    resp.raise_for_status()
    body = resp.json()
    tasks = body.get("tasks") if isinstance(body, dict) else None
    if not isinstance(tasks, list):
        raise LabellingError(f"{person.url} answered an unexpected task list for {project_id}")
    for task in tasks:
        for raw in task.get("annotations") or []:
            if isinstance(raw, dict) and raw.get("id") in wanted:
                out[int(raw["id"])] = (raw, int(task["id"]))
    return out


def notify(
    session: Session,
    people: People,
    person: Person,
    annotation_ids: list[int],
    project_id: int | None,
) -> dict[str, int]:
    """A webhook from ``person``'s server says these annotations changed: read each back
    and record it (or mark it deleted) in every round bound to that project.

    Returns counts: ``recorded`` (changed rows), ``unchanged``, ``ignored`` (not in a
    bound project). Replays change nothing and write no event."""
    stmt = select(LabellingProject).where(LabellingProject.person == person.email)
    if project_id is not None:
        stmt = stmt.where(LabellingProject.project_id == project_id)
    bound = [b for b in session.exec(stmt).all() if b.project_id is not None]
    counts = Counter({"recorded": 0, "unchanged": 0, "ignored": 0})
    if not bound:
        counts["ignored"] += len(annotation_ids)
        return dict(counts)
    recorders: dict[int, Recorder] = {}

    def recorder_for(b: LabellingProject) -> Recorder:
        if b.id not in recorders:
            family = FAMILIES[b.family]
            owner = session.get(family.owner_model, b.owner_id)
            recorders[b.id] = Recorder(session, family, owner, b)  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        return recorders[b.id]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional

    found: dict[int, dict[int, tuple[dict[str, Any], int]]] = {}  # binding → id → raw
    for b in bound:
        try:
            found[b.id] = read_back_many(people, person, b.project_id, annotation_ids)  # type: ignore[arg-type, index]  # a stored row's id is set: SQLModel types every primary key Optional
        except httpx.HTTPError as exc:
            raise LabellingError(
                f"could not read annotations back from {person.url}: {exc}"
            ) from exc
    for annotation_id in annotation_ids:
        changed = False
        handled = False
        for b in bound:
            rec = recorder_for(b)
            hit = found[b.id].get(annotation_id)  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
            if hit is None:  # gone from this project (deleted, or moved out of it)
                handled = handled or annotation_id in rec.rows
                changed |= rec.mark_deleted(annotation_id, source="webhook") is not None
                continue
            raw, task_id = hit
            family = FAMILIES[b.family]
            try:
                ann = family.parse(raw, task_id=task_id, project_id=b.project_id)
            except PayloadError:
                continue
            handled = True
            changed |= rec.record(ann, source="webhook") is not None
        if changed:
            counts["recorded"] += 1
        elif handled:
            counts["unchanged"] += 1
        else:
            counts["ignored"] += 1
    session.flush()
    return dict(counts)
