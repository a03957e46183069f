"""Reconciling a round with Label Studio, both ways, and the webhook as a notification.

``sync_round`` reads every bound project in full from its person's server with rcea's
admin token: annotations found there are recorded through the one status rule; stored
annotations no longer there become ``deleted``; a project that is gone, or tasks that are
gone from it, are reported (never silently ignored). ``notify`` handles a webhook: the
body only says *which* annotations changed; each is read back from the server.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlmodel import Session, select

from annotation.payloads import PayloadError
from annotation.people import People, Person
from annotation.projects import export_tasks
from app.labelling.bindings import LabellingError, bindings
from app.labelling.families import FAMILIES, Family
from app.labelling.record import Recorder
from app.store.models import LabellingProject


@dataclass
class SyncResult:
    owner: str
    annotations_seen: int = 0
    changed: Counter[str] = field(default_factory=Counter)  # new status → count
    malformed: int = 0
    missing_projects: list[dict[str, Any]] = field(default_factory=list)
    missing_tasks: dict[str, int] = field(default_factory=dict)  # role → count

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "annotations_seen": self.annotations_seen,
            "changed": sum(self.changed.values()),
            "changed_by_status": dict(sorted(self.changed.items())),
            "malformed": self.malformed,
            "missing_projects": self.missing_projects,
            "missing_tasks": self.missing_tasks,
        }


def _export(people: People, person: Person, project_id: int) -> list[dict[str, Any]] | None:
    """The project's tasks with annotations, or None when the project is gone."""
    from label_studio_sdk.core.api_error import ApiError

    try:
        return export_tasks(people.client(person), project_id)
    except ApiError as exc:
        if exc.status_code == 404:
            return None
        raise


def sync_binding(
    session: Session,
    people: People,
    family: Family,
    owner: Any,
    binding: LabellingProject,
    result: SyncResult,
) -> None:
    if binding.project_id is None:
        return
    person = people.require(binding.person)
    recorder = Recorder(session, family, owner, binding)
    tasks = _export(people, person, binding.project_id)
    if tasks is None:
        result.missing_projects.append(
            {"role": binding.role, "person": binding.person, "project_id": binding.project_id}
        )
        tasks = []
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
    for annotation_id in list(recorder.rows):
        if annotation_id not in seen:
            status = recorder.mark_deleted(annotation_id, source="sync")
            if status:
                result.changed[status] += 1
    gone = [t for t in recorder.tasks if t not in present_tasks]
    if gone:
        result.missing_tasks[binding.role] = len(gone)


def sync_round(session: Session, people: People, family: Family, owner: Any) -> SyncResult:
    """Reconcile every bound project of the round (idempotent)."""
    result = SyncResult(owner=owner.name)
    for binding in bindings(session, family, owner.id):
        sync_binding(session, people, family, owner, binding, result)
    session.flush()
    return result


# --------------------------------------------------------------------------- webhooks


def read_back(people: People, person: Person, annotation_id: int) -> dict[str, Any] | None:
    """The annotation as the person's server has it (admin token), None when gone."""
    with people.http(person) as http:
        resp = http.get(f"/api/annotations/{annotation_id}/")
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    body = resp.json()
    if not isinstance(body, dict):
        raise LabellingError(f"{person.url} answered a non-object for annotation {annotation_id}")
    return body


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
            recorders[b.id] = Recorder(session, family, owner, b)  # type: ignore[index]
        return recorders[b.id]  # type: ignore[index]

    for annotation_id in annotation_ids:
        try:
            raw = read_back(people, person, annotation_id)
        except httpx.HTTPError as exc:
            raise LabellingError(
                f"could not read annotation {annotation_id} back from {person.url}: {exc}"
            ) from exc
        changed = False
        handled = False
        for b in bound:
            rec = recorder_for(b)
            if raw is None:
                handled = handled or annotation_id in rec.rows
                changed |= rec.mark_deleted(annotation_id, source="webhook") is not None
                continue
            if int(raw.get("project") or -1) != b.project_id:
                continue
            family = FAMILIES[b.family]
            try:
                ann = family.parse(raw, project_id=b.project_id)
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
