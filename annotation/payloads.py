"""Parsing Label Studio annotation JSON (webhook bodies and API exports)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from annotation.tasks import NOTE_FIELD, PAIR_CHOICE

LABELS = ("same", "different")
WEBHOOK_ACTIONS = ("ANNOTATION_CREATED", "ANNOTATION_UPDATED", "ANNOTATIONS_CREATED")


class PayloadError(ValueError):
    """A Label Studio payload without the fields we need."""


@dataclass(frozen=True)
class ParsedAnnotation:
    annotation_id: int
    task_id: int
    project_id: int | None
    user_id: int | None
    label: str | None  # None: no (valid) choice in the result
    note: str | None
    cancelled: bool
    updated_by: int | None = None  # who changed it last (Label Studio's ``updated_by``)


def _int(value: Any, what: str) -> int:
    if isinstance(value, dict):
        value = value.get("id")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(f"{what} must be an integer id, got {value!r}")
    return value


def parse_annotation(
    ann: dict[str, Any],
    *,
    task_id: int | None = None,
    project_id: int | None = None,
    choice_field: str = PAIR_CHOICE,
    choices: Mapping[str, str] | None = None,
    note_field: str = NOTE_FIELD,
) -> ParsedAnnotation:
    """Extract id, task, annotator, the choice of ``choice_field`` (mapped through
    ``choices``: Label Studio value → stored label; default the pair audit's
    same/different), the text of ``note_field`` and the cancel flag."""
    if not isinstance(ann, dict):
        raise PayloadError("annotation must be a JSON object")
    allowed = choices if choices is not None else {v: v for v in LABELS}
    label: str | None = None
    note: str | None = None
    for item in ann.get("result") or []:
        if not isinstance(item, dict):
            continue
        value = item.get("value") or {}
        if item.get("from_name") == choice_field:
            picked = value.get("choices") or []
            if len(picked) == 1 and picked[0] in allowed:
                label = allowed[picked[0]]
        elif item.get("from_name") == note_field:
            text = value.get("text") or []
            note = "\n".join(str(t) for t in text) or None
    task = ann.get("task") if ann.get("task") is not None else task_id
    project = ann.get("project") if ann.get("project") is not None else project_id
    return ParsedAnnotation(
        annotation_id=_int(ann.get("id"), "annotation.id"),
        task_id=_int(task, "annotation.task"),
        project_id=None if project is None else _int(project, "annotation.project"),
        user_id=None
        if ann.get("completed_by") is None
        else _int(ann.get("completed_by"), "annotation.completed_by"),
        label=label,
        note=note,
        cancelled=bool(ann.get("was_cancelled")),
        updated_by=None
        if ann.get("updated_by") is None
        else _int(ann.get("updated_by"), "annotation.updated_by"),
    )


def parse_webhook(body: Any) -> list[ParsedAnnotation]:
    """Annotations carried by an ANNOTATION_CREATED/UPDATED webhook body ([] for other
    actions). Raises ``PayloadError`` on a malformed annotation event."""
    if not isinstance(body, dict):
        raise PayloadError("webhook body must be a JSON object")
    action = body.get("action")
    if action not in WEBHOOK_ACTIONS:
        return []
    project = body.get("project")
    project_id = _int(project, "project") if project is not None else None
    anns = body.get("annotations") if action == "ANNOTATIONS_CREATED" else [body.get("annotation")]
    if not isinstance(anns, list) or not anns:
        raise PayloadError(f"{action} without annotation data")
    task = body.get("task")
    task_id = _int(task, "task") if task is not None else None
    return [parse_annotation(a, task_id=task_id, project_id=project_id) for a in anns]
