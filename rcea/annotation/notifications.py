"""Label Studio webhook bodies read as what they are: notifications.

A body only tells which annotations of which project changed; nothing in it is trusted
as a label (the receiver reads each annotation back from the person's server). Parsing is
strict: every shape other than the documented one raises :class:`PayloadError`, which
the receiver answers with 422.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rcea.annotation.payloads import PayloadError

ID_MAX = 2**31 - 1  # Label Studio's ids are 32-bit; larger values are not ids
MAX_IDS = 10_000  # one bulk action never names more
SINGLE = ("ANNOTATION_CREATED", "ANNOTATION_UPDATED")
MANY = ("ANNOTATIONS_CREATED", "ANNOTATIONS_DELETED")


@dataclass(frozen=True)
class Notification:
    action: str
    project_id: int | None
    annotation_ids: list[int]

    @property
    def deleted(self) -> bool:
        return self.action == "ANNOTATIONS_DELETED"


def _id(value: Any, what: str) -> int:
    if isinstance(value, dict):
        value = value.get("id")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ID_MAX:
        raise PayloadError(f"{what} must be an id between 1 and {ID_MAX}")
    return value


def parse_notification(body: Any) -> Notification:
    """The action, project and annotation ids of a webhook body (no ids for other
    actions)."""
    if not isinstance(body, dict):
        raise PayloadError("webhook body must be a JSON object")
    action = body.get("action")
    if not isinstance(action, str):
        raise PayloadError("webhook body needs an 'action' string")
    project = body.get("project")
    project_id = None if project is None else _id(project, "project")
    if action in SINGLE:
        ann = body.get("annotation")
        if not isinstance(ann, dict):
            raise PayloadError(f"{action} needs an 'annotation' object")
        return Notification(action, project_id, [_id(ann.get("id"), "annotation.id")])
    if action in MANY:
        anns = body.get("annotations")
        if not isinstance(anns, list) or not anns or len(anns) > MAX_IDS:
            raise PayloadError(f"{action} needs a non-empty 'annotations' list")
        ids = []
        for i, ann in enumerate(anns):
            if not isinstance(ann, dict):
                raise PayloadError(f"annotations[{i}] must be an object")
            ids.append(_id(ann.get("id"), f"annotations[{i}].id"))
        return Notification(action, project_id, sorted(set(ids)))
    return Notification(action, project_id, [])
