"""Recording annotations: the one status rule and the one upsert for webhook and sync.

An annotation counts only when it was read back from the person's own server with rcea's
admin token (never from a webhook body), sits in that person's project on one of our
tasks, was created **and last changed** by that person, is not cancelled and holds a
valid choice. Everything else is stored with its status and never counted; an
annotation that disappeared from Label Studio becomes ``deleted``. Every new or changed
row is appended to the event log, so the history stays; repeating the same content
(replays, webhook then sync) changes nothing and writes no event.

A label follows the task it sits on: every read-back compares the annotation's task with
the stored row, and an annotation moved to another task of the project (Label Studio
allows ``PATCH /api/annotations/{id}`` with a new ``task``) is re-keyed to that task's
unit, with an ``<prefix>.moved`` event; one moved off our tasks stops counting
(``unknown_task``). One label per person and task: of the annotations that would count
on one task, the earliest (lowest id) counts and every other is ``duplicate``.

Events store what changed: the note only when it is new or differs from the stored one
(notes are bounded when parsed: :data:`rcea.annotation.payloads.MAX_NOTE`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from sqlalchemy import false
from sqlmodel import Session, select

from rcea.annotation.payloads import ParsedAnnotation
from rcea.study import events
from rcea.study.labelling.bindings import LabellingError, bindings
from rcea.study.labelling.families import Family
from rcea.study.store.models import Event, LabellingProject, utcnow

COUNTED = "counted"
STATUSES = (
    COUNTED,
    "wrong_project",  # not in the person's bound project
    "unknown_task",  # not one of our tasks of that project
    "wrong_user",  # created by someone else
    "foreign_update",  # created by the person, last changed by someone else
    "cancelled",
    "no_label",
    "deleted",  # gone from Label Studio
    "duplicate",  # a second annotation by the person on one task (the first counts)
)


def label_status(ann: ParsedAnnotation, binding: LabellingProject, *, known_task: bool) -> str:
    """Why an annotation read back from the person's server counts, or why not."""
    if ann.project_id is not None and ann.project_id != binding.project_id:
        return "wrong_project"
    if not known_task:
        return "unknown_task"
    if ann.user_id != binding.user_id:
        return "wrong_user"
    if ann.updated_by is not None and ann.updated_by != binding.user_id:
        return "foreign_update"
    if ann.cancelled:
        return "cancelled"
    if ann.label is None:
        return "no_label"
    return COUNTED


class Recorder:
    """Loads the round's tasks and labels of one binding once; records many annotations."""

    def __init__(self, session: Session, family: Family, owner: Any, binding: LabellingProject):
        self.session, self.family, self.owner, self.binding = session, family, owner, binding
        f = family
        owner_col = getattr(f.task_model, f.owner_field)
        self.tasks = {
            t.task_id: t
            for t in session.exec(
                select(f.task_model).where(owner_col == owner.id, f.task_model.role == binding.role)
            ).all()
        }
        label_owner = getattr(f.label_model, f.owner_field)
        self.rows = {
            r.annotation_id: r
            for r in session.exec(
                select(f.label_model).where(
                    label_owner == owner.id, f.label_model.role == binding.role
                )
            ).all()
        }

    def record(self, ann: ParsedAnnotation, *, source: str) -> str | None:
        """Store one annotation read back from the server; the new status if it changed
        (or ``"moved"`` when only its task changed)."""
        task = self.tasks.get(ann.task_id)
        status = label_status(ann, self.binding, known_task=task is not None)
        row = self.rows.get(ann.annotation_id)
        previous = None if row is None else (row.label, row.status, row.note, row.user_id)
        note_before = None if row is None else row.note
        if row is not None and row.status == "duplicate" and status == COUNTED:
            status = "duplicate"  # settled below against the task's other annotations
        moved_from = None if row is None or row.task_id == ann.task_id else row.task_id
        if moved_from is None and previous == (ann.label, status, ann.note, ann.user_id):
            if row is not None and self._timing(row, ann):  # Label Studio adds lead_time
                self.session.add(row)
            return None
        unit = getattr(task, self.family.unit_field) if task is not None else None
        if row is None:
            # a hidden repeat's label stays marked as one (never counted in the gate)
            repeat = {"repeat": bool(task.repeat)} if hasattr(task, "repeat") else {}  # type: ignore[union-attr]  # guarded by hasattr on the same line
            row = self.family.label_model(
                **{self.family.owner_field: self.owner.id, self.family.unit_field: unit},
                **repeat,
                annotation_id=ann.annotation_id,
                task_id=ann.task_id,
                project_id=ann.project_id or self.binding.project_id or 0,
                role=self.binding.role,
                user_id=ann.user_id,
                label=ann.label,
                note=ann.note,
                status=status,
            )
            self.rows[ann.annotation_id] = row
        else:
            row.label, row.status, row.note, row.user_id = ann.label, status, ann.note, ann.user_id
            if moved_from is not None:  # the label follows its task (re-keyed)
                row.task_id = ann.task_id
                setattr(row, self.family.unit_field, unit)
                if hasattr(row, "repeat"):
                    row.repeat = bool(getattr(task, "repeat", False))
            if ann.project_id is not None:
                row.project_id = ann.project_id
            row.updated_at = utcnow()
        self._timing(row, ann)
        note_changed = previous is None or note_before != ann.note
        self._log(
            ann.annotation_id,
            ann.task_id,
            ann.user_id,
            ann.label,
            ann.note if note_changed else None,
            status,
            previous,
            source,
            moved_from=moved_from,
            note_changed=note_changed,
        )
        self.session.add(row)
        for task_id in {ann.task_id, moved_from} - {None}:
            self._settle(task_id, source=source)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        if moved_from is not None and row.status == (previous[1] if previous else None):
            return "moved"
        return row.status  # type: ignore[no-any-return]  # the row's status is a str column (the model reads it as Any)

    def _settle(self, task_id: int, *, source: str) -> None:
        """One label per person and task: of the task's annotations that count (or
        counted before another came first), the earliest counts, the others are
        ``duplicate``; each change is logged."""
        rows = sorted(
            (r for r in self.rows.values() if r.task_id == task_id) if task_id is not None else (),
            key=lambda r: r.annotation_id,
        )
        candidates = [r for r in rows if r.status in (COUNTED, "duplicate")]
        for n, r in enumerate(candidates):
            want = COUNTED if n == 0 else "duplicate"
            if r.status == want:
                continue
            previous = (r.label, r.status, r.note, r.user_id)
            r.status, r.updated_at = want, utcnow()
            self._log(r.annotation_id, r.task_id, r.user_id, r.label, None, want, previous, source)
            self.session.add(r)

    @staticmethod
    def _timing(row: Any, ann: ParsedAnnotation) -> bool:
        """Copy Label Studio's timing onto a label model that stores it (the pair
        audit's); ``True`` if it changed."""
        if not hasattr(row, "lead_time"):
            return False
        new = (ann.lead_time, ann.created_at)
        if (row.lead_time, row.annotated_at) == new or new == (None, None):
            return False
        row.lead_time, row.annotated_at = new
        return True

    def mark_deleted(self, annotation_id: int, *, source: str) -> str | None:
        """An annotation we stored is gone from Label Studio: it stops counting."""
        row = self.rows.get(annotation_id)
        if row is None or row.status == "deleted":
            return None
        previous = (row.label, row.status, row.note, row.user_id)
        row.status, row.updated_at = "deleted", utcnow()
        self._log(
            annotation_id,
            row.task_id,
            row.user_id,
            row.label,
            None,
            "deleted",
            previous,
            source,
        )
        self.session.add(row)
        self._settle(row.task_id, source=source)  # a duplicate behind it may count now
        return "deleted"

    def _log(
        self,
        annotation_id: int,
        task_id: int,
        user_id: int | None,
        label: str | None,
        note: str | None,
        status: str,
        previous: tuple[Any, ...] | None,
        source: str,
        *,
        moved_from: int | None = None,
        note_changed: bool = False,
    ) -> None:
        if status == "deleted":
            verb = "deleted"
        elif moved_from is not None:
            verb = "moved"
        else:
            verb = "updated" if previous else "created"
        payload = {
            f"{self.family.owner_label}_id": self.owner.id,
            self.family.owner_label: self.owner.name,
            "role": self.binding.role,
            "annotation_id": annotation_id,
            "task_id": task_id,
            "user_id": user_id,
            "label": label,
            "status": status,
            "source": source,
            "previous_label": previous[0] if previous else None,
            "previous_status": previous[1] if previous else None,
        }
        if note_changed:  # what changed only: an unchanged note is not copied again
            payload["note"] = note
        if moved_from is not None:
            payload["previous_task_id"] = moved_from
        self.session.add(
            Event(
                actor=f"labelstudio:{self.binding.person}",
                study_id=self.owner.study_id,
                kind=events.label_change(self.family.event_prefix, verb),
                payload=payload,
            )
        )


def _originals(family: Family) -> list[Any]:
    """The condition leaving out hidden repeats' labels (families that have them)."""
    m = family.label_model
    return [m.repeat == False] if hasattr(m, "repeat") else []  # noqa: E712


def current_labels(
    session: Session, family: Family, owner_id: int, *, repeats: bool = False
) -> dict[str, dict[int, str]]:
    """role → unit id (pair / item) → the label of that role's latest counted annotation.
    Hidden repeats (pair audit) are left out; with ``repeats`` only they are read."""
    m = family.label_model
    if repeats:
        only = [m.repeat == True] if hasattr(m, "repeat") else [false()]  # noqa: E712
    else:
        only = _originals(family)
    rows = session.exec(
        select(m)
        .where(getattr(m, family.owner_field) == owner_id, m.status == COUNTED, *only)
        .order_by(m.updated_at, m.annotation_id)
    ).all()
    out: dict[str, dict[int, str]] = defaultdict(dict)
    for r in rows:
        unit = getattr(r, family.unit_field)
        if r.role and unit is not None and r.label:
            out[r.role][unit] = r.label
    return out


def status_counts(session: Session, family: Family, owner_id: int) -> dict[str, int]:
    """Labels per status (hidden repeats left out: they never count)."""
    m = family.label_model
    counts: dict[str, int] = defaultdict(int)
    owner = getattr(m, family.owner_field) == owner_id
    for status in session.exec(select(m.status).where(owner, *_originals(family))):
        counts[status] += 1
    return dict(counts)


def record_for_project(
    session: Session, family: Family, owner: Any, ann: ParsedAnnotation, *, source: str
) -> tuple[Any, bool]:
    """Record an annotation already read back from its server, finding its binding by
    the project it sits in (tests and benchmarks; the webhook and sync know the person)."""

    bound = bindings(session, family, owner.id)
    if ann.project_id is None:  # no project given: the role whose task it is
        m = family.task_model
        roles = set(
            session.exec(
                select(m.role).where(
                    getattr(m, family.owner_field) == owner.id, m.task_id == ann.task_id
                )
            ).all()
        )
        found = [b for b in bound if b.role in roles]
        if len(found) == 1:
            ann = replace(ann, project_id=found[0].project_id)
    else:
        found = [b for b in bound if b.project_id == ann.project_id]
    if len(found) != 1:
        raise LabellingError(
            f"annotation {ann.annotation_id}: project {ann.project_id} is bound to "
            f"{len(found)} roles of {family.owner_label} {owner.name}, not exactly one"
        )
    rec = Recorder(session, family, owner, found[0])
    status = rec.record(ann, source=source)
    session.flush()
    return rec.rows[ann.annotation_id], status is not None
