"""The one push: a round's blinded tasks into the person's own project, crash-safe.

Order of a push (each step idempotent):

1. the tasks are built and scanned for leaks by the caller *before* anything exists in
   Label Studio (:mod:`rcea.study.labelling.blinding`);
2. the binding row (state ``intent``, with a random ``marker``) is committed;
3. the project is found by its marker on the person's server (an earlier push that died
   after creating it) and adopted, or created with the marker in its description; its id
   is committed (state ``created``);
4. the tasks the store owns in the project are re-checked by their stored ids: one whose
   key was edited in Label Studio (its person may edit task data) is reported under
   ``rekeyed`` and its data set back from the store, so it is never imported twice;
   then only the tasks whose key is not in the project yet are imported; task rows for
   every task of the project are stored, each with the hash of what it shows
   (``render_sha256``); a stored task whose hash differs from the one built now is
   reported under ``render_changed`` and keeps its hash;
5. the person's webhook (own URL path, own secret; created, updated and deleted
   annotations) is ensured.

A re-run after a crash at any point therefore ends with exactly one project per person
and round and every task present once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlmodel import Session, select

from rcea.annotation.people import People, person_webhook_secret, person_webhook_url
from rcea.annotation.projects import (
    WEBHOOK_SECRET_HEADER,
    create_project,
    ensure_webhook,
    export_tasks,
    import_tasks,
)
from rcea.annotation.tasks import SHOWN_KEY
from rcea.study.labelling.bindings import LabellingError, Member, bind, ensure_member
from rcea.study.labelling.families import Family
from rcea.study.store.models import LabellingProject, utcnow

TITLE_MAX = 50  # Label Studio's project title limit


@dataclass(frozen=True)
class BuiltTask:
    key: str  # the opaque unit key (pair key / item key), also in ``data``
    unit_id: int  # AuditPair.id / ValidityItem.id
    data: dict[str, Any]
    row: dict[str, Any] = field(default_factory=dict)  # extra task-row fields (left_is_a,
    # repeat: a hidden repeat of the unit, pair audit)


@dataclass(frozen=True)
class WebhookTarget:
    """Where Label Studio notifies rcea: ``<base_url>/<person slug>`` with the person's own
    secret (derived from ``master_secret``)."""

    base_url: str
    master_secret: str
    check: bool = True
    """check that this study's receiver answers before registering (``check_receiver``);
    off only where the caller starts that receiver itself afterwards (``rcea demo``, or
    ``--no-receiver-check``)"""


def shown_manifest(tasks: Sequence[BuiltTask]) -> str:
    """SHA-256 over ``<key> <shown_sha256>`` lines (sorted by key) of ``tasks``: one
    digest of everything a project's annotators see, recorded in the push's event (each
    task's own ``shown_sha256`` travels in its Label Studio data)."""
    lines = sorted(f"{t.key} {t.data.get(SHOWN_KEY, '')}" for t in tasks)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def render_changes(
    rows: Sequence[Any], tasks: Sequence[BuiltTask], unit_field: str
) -> list[dict[str, Any]]:
    """The stored task rows whose recorded render hash (``render_sha256``) differs from
    the hash of the task built now (its data's ``shown_sha256``): what the annotator saw is
    not what this push would show (the renderer or a text changed). Rows pushed before the
    hash was recorded (None) are not compared. The stored hash is never replaced
    (docs/labelstudio.md "What a task shows")."""
    built = {(t.unit_id, bool(t.row.get("repeat", False))): t for t in tasks}
    out: list[dict[str, Any]] = []
    for r in rows:
        b = built.get((getattr(r, unit_field), bool(getattr(r, "repeat", False))))
        if b is None or r.render_sha256 is None or r.render_sha256 == b.data.get(SHOWN_KEY):
            continue
        out.append(
            {
                "task_id": r.task_id,
                "key": b.key,
                "stored": r.render_sha256,
                "now": b.data.get(SHOWN_KEY),
            }
        )
    return sorted(out, key=lambda x: x["task_id"])


def webhook_target(settings: Any, *, check: bool = True) -> WebhookTarget:
    """The receiver of the configured API (``rcea.study.settings.Settings``)."""
    return WebhookTarget(
        settings.resolved_webhook_url,
        settings.ensure_webhook_secret().get_secret_value(),
        check=check,
    )


#: The path segment the receiver check posts to: no person has it (slugs come from
#: e-mail addresses), so this study's receiver answers 404 "no such person" after
#: accepting the derived secret, and a receiver with another secret answers 401.
RECEIVER_CHECK_SLUG = "rcea-receiver-check"


class ReceiverError(RuntimeError):
    """The webhook receiver at the configured address is not this study's."""


def check_receiver(target: WebhookTarget, *, client: Any = None, timeout: float = 5.0) -> None:
    """Refuse (``ReceiverError``) unless this data dir's webhook receiver answers at
    ``target.base_url``: a POST with the secret derived for :data:`RECEIVER_CHECK_SLUG`
    must be accepted (anything but 401) and answered by rcea's receiver (404 "no such
    person"). On a shared machine another user's ``rcea serve`` on the same port answers
    401: registering webhooks there would send annotators' labels to that user."""

    url = person_webhook_url(target.base_url, RECEIVER_CHECK_SLUG)
    how = (
        "start `rcea serve` with this data dir (same RCEA_DATA_DIR), or point "
        "RCEA_API_HOST/RCEA_API_PORT (or RCEA_WEBHOOK_URL) at a receiver that is yours — "
        "on a shared machine pick a free port and use it for both `rcea serve` and the "
        "push — or `rcea audit push --no-webhook` and collect labels with `rcea audit sync`"
    )
    headers = {
        WEBHOOK_SECRET_HEADER: person_webhook_secret(target.master_secret, RECEIVER_CHECK_SLUG)
    }
    own = client is None
    http = client or httpx.Client(timeout=timeout)
    try:
        resp = http.post(url, json={"action": "RCEA_RECEIVER_CHECK"}, headers=headers)
    except httpx.HTTPError as exc:
        raise ReceiverError(
            f"no webhook receiver answers at {target.base_url} ({type(exc).__name__}): {how}"
        ) from None
    finally:
        if own:
            http.close()
    if resp.status_code == 401:
        raise ReceiverError(
            f"the webhook receiver at {target.base_url} refuses this study's secret: it "
            f"belongs to another rcea data dir (another user?); {how}"
        )
    try:
        detail = str(resp.json().get("detail", ""))
    except ValueError:
        detail = ""
    if resp.status_code != 404 or detail != "no such person":
        raise ReceiverError(
            f"{target.base_url} did not answer as an rcea webhook receiver "
            f"(HTTP {resp.status_code}); {how}"
        )


def project_title(text: str) -> str:
    return text if len(text) <= TITLE_MAX else text[: TITLE_MAX - 1] + "…"


#: Length of the longest title :func:`round_title` makes for ids below 1000
#: (``Validity 999 · annotator B``); a Label Studio 1.23 project card shows it whole
#: (checked in a real browser: tests/annotation/test_browser_labelling.py).
TITLE_SHOWN = 26


def person_role(role: str) -> str:
    """The person's role as every project title names it: ``annotator A`` / ``annotator B``
    (the A and B of a doubly labelled round, and the 1st, 2nd, ... annotator of a singly
    labelled calibration alike) or ``adjudicator``."""
    if role in ("A", "B"):
        return f"annotator {role}"
    if role.startswith("annotator-") and role.removeprefix("annotator-").isdigit():
        i = int(role.removeprefix("annotator-")) - 1
        return f"annotator {chr(ord('A') + i) if i < 26 else i + 1}"
    return role


def round_title(kind: str, number: int, role: str) -> str:
    """``Pairs 3 · annotator A``, ``Validity 4 · adjudicator``: which round (``pairs`` or
    ``validity`` and the store's number of the audit or check, never its researcher-chosen
    name) and whose project, short enough for a project card (:data:`TITLE_SHOWN`)."""
    return f"{kind.capitalize()} {number} · {person_role(role)}"


def _marker(binding: LabellingProject) -> str:
    return f"[rcea:{binding.marker}]"


def _project_exists(people: People, binding: LabellingProject) -> bool:
    person = people.require(binding.person)
    with people.http(person) as http:
        resp = http.get(f"/api/projects/{binding.project_id}/")
    if resp.status_code == 404:
        return False
    resp.raise_for_status()
    return True


def _find_by_marker(people: People, binding: LabellingProject) -> int | None:
    person = people.require(binding.person)
    marker = _marker(binding)
    page = 1
    with people.http(person) as http:
        while True:
            resp = http.get("/api/projects/", params={"page": page, "page_size": 100})
            if resp.status_code == 404:
                return None
            resp.raise_for_status()
            body = resp.json()
            items = body.get("results", []) if isinstance(body, dict) else body
            for p in items:
                if marker in (p.get("description") or ""):
                    return int(p["id"])
            if not isinstance(body, dict) or not body.get("next"):
                return None
            page += 1


def ensure_project(
    session: Session,
    people: People,
    binding: LabellingProject,
    *,
    title: str,
    description: str,
    label_config: str,
) -> int:
    """The bound project: adopted by marker, or created; its id committed before tasks."""
    if binding.project_id is not None:
        if not _project_exists(people, binding):
            raise LabellingError(
                f"project {binding.project_id} of {binding.person} ({binding.role}) is gone "
                f"from {binding.server_url}: it was deleted in Label Studio. Its labels stop "
                "counting at the next sync; nothing is recreated silently"
            )
        return binding.project_id
    project_id = _find_by_marker(people, binding)
    if project_id is None:
        project_id = create_project(
            people.client(people.require(binding.person)),
            title=project_title(title),
            label_config=label_config,
            description=f"{description}\n\n{_marker(binding)}",
        )
    binding.project_id, binding.state, binding.updated_at = project_id, "created", utcnow()
    session.add(binding)
    session.commit()
    return project_id


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 64 else text[:61] + "..."


def recheck_owned(
    session: Session,
    people: People,
    family: Family,
    owner: Any,
    role: str,
    member: Member,
    project_id: int,
    tasks: Sequence[BuiltTask],
) -> list[dict[str, Any]]:
    """Re-check the project's tasks the store owns (by stored task id): each whose key
    is not the stored unit's gets its data back from the store; those are returned."""

    owner_col = getattr(family.task_model, family.owner_field)
    rows = session.exec(
        select(family.task_model).where(owner_col == owner.id, family.task_model.role == role)
    ).all()
    if not rows:
        return []
    built = {(t.unit_id, bool(t.row.get("repeat", False))): t for t in tasks}
    present = {
        int(t["id"]): t.get("data") or {}
        for t in export_tasks(people.client(member.person), project_id)
    }
    key = family.unit_data_key
    out: list[dict[str, Any]] = []
    with people.http(member.person) as http:
        for r in rows:
            b = built.get((getattr(r, family.unit_field), bool(getattr(r, "repeat", False))))
            data = present.get(r.task_id)
            if b is None or data is None or str(data.get(key)) == b.key:
                continue
            resp = http.patch(f"/api/tasks/{r.task_id}/", json={"data": b.data})
            resp.raise_for_status()
            out.append({"task_id": r.task_id, "key": b.key, "found": _short(data.get(key))})
    return out


def push_tasks(
    session: Session,
    people: People,
    family: Family,
    owner: Any,
    role: str,
    member: Member,
    tasks: Sequence[BuiltTask],
    *,
    title: str,
    description: str,
    label_config: str,
    webhook: WebhookTarget | None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Push ``tasks`` (already leak-scanned) to ``member``'s project for ``role``."""
    binding = bind(session, family, owner, role, member)
    session.commit()  # the intent is on record before anything is created
    project_id = ensure_project(
        session, people, binding, title=title, description=description, label_config=label_config
    )
    rekeyed = recheck_owned(session, people, family, owner, role, member, project_id, tasks)
    client = people.client(member.person)
    mapping = import_tasks(
        client,
        project_id,
        [t.data for t in tasks],
        key=family.unit_data_key,
        progress=progress,
    )
    by_key = {t.key: t for t in tasks}
    owner_col = getattr(family.task_model, family.owner_field)
    # a unit may have a second, hidden-repeat task (pair audit): (unit, repeat) is the key
    stored = session.exec(
        select(family.task_model).where(owner_col == owner.id, family.task_model.role == role)
    ).all()
    have = {(getattr(t, family.unit_field), bool(getattr(t, "repeat", False))) for t in stored}
    render_changed = render_changes(stored, tasks, family.unit_field)
    new = 0
    for key, task_id in mapping.items():
        built = by_key.get(key)
        if built is None or (built.unit_id, bool(built.row.get("repeat", False))) in have:
            continue
        session.add(
            family.task_model(
                **{family.owner_field: owner.id, family.unit_field: built.unit_id},
                role=role,
                project_id=project_id,
                task_id=task_id,
                render_sha256=built.data.get(SHOWN_KEY),
                **built.row,
            )
        )
        new += 1
    session.flush()
    if webhook is not None:
        # Registered only where this study's receiver answers (a shared machine's port
        # may be someone else's); the push is idempotent, so a refused one resumes.
        if webhook.check:
            check_receiver(webhook)
        ensure_webhook(
            client,
            project_id=project_id,
            url=person_webhook_url(webhook.base_url, member.person.slug),
            secret=person_webhook_secret(webhook.master_secret, member.person.slug),
        )
    return {
        "project_id": project_id,
        "email": member.email,
        "url": member.person.url,
        "n_tasks": len(tasks),
        "n_new": new,
        "rekeyed": rekeyed,
        "render_changed": render_changed,
        "shown_sha256": shown_manifest(tasks),
    }


def push_roles(
    session: Session,
    people: People,
    family: Family,
    owner: Any,
    rounds: dict[str, tuple[str, Sequence[BuiltTask], dict[str, str]]],
    *,
    label_config: str,
    webhook: WebhookTarget | None,
    passwords: dict[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The one push sequence for the roles of a round: ``rounds`` maps role → (e-mail,
    leak-scanned tasks, shown title/description). Each person gets an account on their own
    server (new passwords returned once under ``new_accounts``) and their project."""

    out: dict[str, Any] = {"projects": {}, "new_accounts": {}}
    for role, (email, tasks, shown) in rounds.items():
        member = ensure_member(people, email, (passwords or {}).get(role))
        if member.new_password:
            out["new_accounts"][role] = {"email": member.email, "password": member.new_password}
        out["projects"][role] = push_tasks(
            session,
            people,
            family,
            owner,
            role,
            member,
            tasks,
            title=shown["title"],
            description=shown["description"],
            label_config=label_config,
            webhook=webhook,
            progress=progress,
        )
    return out
