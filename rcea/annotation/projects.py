"""Label Studio projects for the pair audit: one project per role (annotator A, annotator
B, adjudicator), bulk task import, full exports for sync, and webhooks."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from label_studio_sdk import LabelStudio

WEBHOOK_SECRET_HEADER = "X-RCEA-Webhook-Secret"
# Created, changed and deleted annotations; the receiver reads each one back.
WEBHOOK_ACTIONS = [
    "ANNOTATION_CREATED",
    "ANNOTATIONS_CREATED",
    "ANNOTATION_UPDATED",
    "ANNOTATIONS_DELETED",
]
IMPORT_BATCH = 2_000


def create_project(
    client: LabelStudio, *, title: str, label_config: str, description: str = ""
) -> int:
    project = client.projects.create(
        title=title,
        label_config=label_config,
        description=description,
        show_skip_button=False,
        maximum_annotations=1,
    )
    return int(project.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


def export_tasks(client: LabelStudio, project_id: int) -> list[dict[str, Any]]:
    """Every task of the project with its annotations, as Label Studio stores them."""
    chunks = client.projects.exports.download_sync(
        project_id, export_type="JSON", download_all_tasks=True
    )
    raw = b"".join(chunks)
    data = json.loads(raw or b"[]")
    if not isinstance(data, list):
        raise RuntimeError(f"unexpected export of project {project_id}: {str(data)[:200]}")
    return data


def task_ids_by_key(tasks: Sequence[dict[str, Any]], key: str = "pair") -> dict[str, int]:
    """data[key] → task id (the first task wins when a key repeats)."""
    out: dict[str, int] = {}
    for t in sorted(tasks, key=lambda t: int(t["id"])):
        data = t.get("data") or {}
        if key in data:
            out.setdefault(str(data[key]), int(t["id"]))
    return out


def import_tasks(
    client: LabelStudio,
    project_id: int,
    tasks: Sequence[dict[str, Any]],
    *,
    key: str = "pair",
    batch: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Import task data dicts not yet in the project (by ``data[key]``) in bulk batches;
    return key → task id for every task of the project afterwards.

    The new ids come from the import answers (``return_task_ids``: Label Studio Community
    imports synchronously and lists the ids in request order); only when an answer lacks
    them (an asynchronous import) is the project exported again to learn them."""
    batch = batch or IMPORT_BATCH
    present = task_ids_by_key(export_tasks(client, project_id), key)
    todo = [t for t in tasks if str(t[key]) not in present]
    mapping = dict(present)
    ids_known = True
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        answer = client.projects.import_tasks(
            project_id,
            request=[{"data": t} for t in chunk],  # type: ignore[misc]  # the SDK validates plain dicts into ImportApiRequest (pydantic)
            return_task_ids=True,
        )
        ids = getattr(answer, "task_ids", None)
        if isinstance(ids, list) and len(ids) == len(chunk):
            mapping.update((str(t[key]), int(i)) for t, i in zip(chunk, ids, strict=True))
        else:
            ids_known = False
        if progress:
            progress(len(chunk))
    if todo and not ids_known:
        return task_ids_by_key(export_tasks(client, project_id), key)
    return mapping


def ensure_webhook(client: LabelStudio, *, project_id: int, url: str, secret: str) -> int:
    """One webhook per project to our receiver, carrying the person's secret header; an
    existing one is brought back to our settings (a person may have edited or disabled
    it: that delays labels until the next sync, it never makes one count)."""
    for hook in client.webhooks.list(project=project_id):
        if hook.url == url and getattr(hook, "project", project_id) == project_id:
            if not hook.is_active or sorted(hook.actions or []) != sorted(WEBHOOK_ACTIONS):
                client.webhooks.update(
                    id=int(hook.id),
                    url=url,
                    is_active=True,
                    send_payload=True,
                    send_for_all_actions=False,
                    actions=WEBHOOK_ACTIONS,
                    headers={WEBHOOK_SECRET_HEADER: secret},
                )
            return int(hook.id)
    hook = client.webhooks.create(
        url=url,
        project=project_id,
        send_payload=True,
        send_for_all_actions=False,
        actions=WEBHOOK_ACTIONS,
        headers={WEBHOOK_SECRET_HEADER: secret},
        is_active=True,
    )
    return int(hook.id)
