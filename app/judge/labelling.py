"""Serving a validity check in Label Studio (push) and pulling labels back (sync).

* Calibration: the items are split (seeded) among one or more annotators, one project
  each; every item is labelled by exactly one person.
* Accepted-set check: two annotators (roles ``A`` and ``B``) label every item, each in
  their own project and their own random order.

Tasks carry only an opaque item key, the problem and the solution text; every batch is
scanned for provenance, ids, verdicts and rationales before anything is created in Label
Studio. An annotation counts only if it is on a task of this check, by the annotator
assigned to that project, not cancelled and with a choice; anything else is stored with
its status and never counted. Every new or changed label is appended to the event log.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sqlmodel import Session, select

from annotation.payloads import PayloadError, annotation_status
from annotation.projects import create_project, export_tasks
from annotation.validity_tasks import (
    build_validity_task,
    check_blinding,
    import_validity_tasks,
    parse_validity_annotation,
    validity_label_config,
)
from app.judge.checks import ACCEPTED, CALIBRATION, check_items
from app.judge.problems import problems_for
from app.judge.versions import JudgeError, judge_spec
from app.store import append_event
from app.store.models import (
    Event,
    JudgeVerdict,
    JudgeVersion,
    Trajectory,
    ValidityCheck,
    ValidityItem,
    ValidityLabel,
    ValidityTask,
    utcnow,
)
from pipeline.judge import INVALID, UNPARSEABLE, VALID

if TYPE_CHECKING:
    from label_studio_sdk import LabelStudio


def roles_for(check: ValidityCheck, n_annotators: int) -> list[str]:
    if check.kind == ACCEPTED:
        if n_annotators != 2:
            raise JudgeError("the accepted-set check needs exactly two annotators (A and B)")
        return ["A", "B"]
    if n_annotators < 1:
        raise JudgeError("a calibration needs at least one annotator")
    return [f"annotator-{i + 1}" for i in range(n_annotators)]


def _trajectories(session: Session, check: ValidityCheck, ids: set[str]) -> list[Any]:
    rows = session.exec(
        select(
            Trajectory.trajectory_id,
            Trajectory.question_id,
            Trajectory.text,
            Trajectory.run,
            Trajectory.model,
            Trajectory.step,
            Trajectory.seed,
            Trajectory.mode,
        ).where(
            Trajectory.study_id == check.study_id,
            Trajectory.trajectory_id.in_(sorted(ids)),  # type: ignore[attr-defined]
        )
    ).all()
    return list(rows)


def forbidden_values(
    session: Session, check: ValidityCheck, items: Sequence[ValidityItem], rows: list[Any]
) -> tuple[set[str], set[str]]:
    """Ids and provenance names (also as substrings) and whole values that must never be
    sent: question ids, steps, seeds, modes, verdict words and the judge's rationales."""
    substr: set[str] = set()
    exact: set[str] = {VALID, INVALID, UNPARSEABLE}
    names = session.exec(
        select(Trajectory.run, Trajectory.model)
        .where(Trajectory.study_id == check.study_id)
        .distinct()
    ).all()
    for run, model in names:
        substr.update((run, model))
    for r in rows:
        substr.add(r.trajectory_id)
        exact.update({r.question_id, str(r.step), str(r.seed)})
        if r.mode:
            exact.add(r.mode)
    ids = sorted({i.trajectory_id for i in items})
    for rationale, location in session.exec(
        select(JudgeVerdict.rationale, JudgeVerdict.error_location).where(
            JudgeVerdict.judge_id == check.judge_id,
            JudgeVerdict.study_id == check.study_id,
            JudgeVerdict.trajectory_id.in_(ids),  # type: ignore[attr-defined]
        )
    ).all():
        exact.update(x for x in (rationale, location) if x)
    return substr, exact


def _assignment(check: ValidityCheck, items: list[ValidityItem], roles: list[str]) -> dict:  # type: ignore[type-arg]
    rng = random.Random(f"{check.seed}:{check.id}:push")
    if check.kind == ACCEPTED:
        out = {}
        for role in roles:
            order = list(items)
            random.Random(f"{check.seed}:{check.id}:{role}").shuffle(order)
            out[role] = order
        return out
    order = list(items)
    rng.shuffle(order)
    return {role: order[i :: len(roles)] for i, role in enumerate(roles)}


def push_check(
    session: Session,
    check: ValidityCheck,
    client: LabelStudio,
    *,
    annotators: Sequence[tuple[str, int]],
    actor: str,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Create (once) one project per annotator and import the blinded tasks.

    ``annotators``: (e-mail, Label Studio user id) in role order. Idempotent: pushing
    again with the same annotators adds nothing."""
    emails = [e.lower() for e, _ in annotators]
    if len(set(emails)) != len(emails):
        raise JudgeError("each annotator must be a different person")
    roles = roles_for(check, len(annotators))
    known = check.labelstudio.get("roles", {})
    if known and [known.get(r, {}).get("email") for r in roles] != emails:
        raise JudgeError(
            f"check {check.name} was pushed to "
            + ", ".join(f"{r}: {e.get('email')}" for r, e in sorted(known.items()))
            + "; push again with the same annotators in the same order"
        )
    items = check_items(session, check_id=check.id)  # type: ignore[arg-type]
    rows = _trajectories(session, check, {i.trajectory_id for i in items})
    texts = {r.trajectory_id: r for r in rows}
    problems = problems_for(session, study_id=check.study_id)
    missing = sorted({i.question_id for i in items if i.question_id not in problems})
    if missing:
        raise JudgeError(
            f"no problem text for {len(missing)} question(s) ({', '.join(missing[:5])}): "
            "load them with `rcea judge problems`"
        )
    forbidden = forbidden_values(session, check, items, rows)
    plan = _assignment(check, items, roles)
    built = {
        role: [
            build_validity_task(i.item_key, problems[i.question_id], texts[i.trajectory_id].text)
            for i in plan[role]
        ]
        for role in roles
    }
    for tasks in built.values():  # checked before anything is created in Label Studio
        check_blinding(tasks, *forbidden)
    config = validity_label_config()
    by_key = {i.item_key: i for i in items}
    roles_state = dict(known)
    out: dict[str, Any] = {"check": check.name, "kind": check.kind, "projects": {}}
    for (email, user_id), role in zip(annotators, roles, strict=True):
        entry = dict(roles_state.get(role, {}))
        if not entry.get("project_id"):
            entry["project_id"] = create_project(
                client,
                title=f"RCEA validity {check.kind} {check.id}: {role}",
                label_config=config,
                description="Is each solution process-valid? (blinded validity audit)",
            )
        entry.update({"email": email.lower(), "user_id": user_id})
        roles_state[role] = entry
        check.labelstudio = {**check.labelstudio, "roles": dict(roles_state)}
        project_id = int(entry["project_id"])
        mapping = import_validity_tasks(client, project_id, built[role], progress=progress)
        have = {
            t.item_id
            for t in session.exec(
                select(ValidityTask).where(
                    ValidityTask.check_id == check.id, ValidityTask.role == role
                )
            ).all()
        }
        wanted = {t["item"] for t in built[role]}
        new = 0
        for key, task_id in mapping.items():
            item = by_key.get(key)
            if item is None or key not in wanted or item.id in have:
                continue
            session.add(
                ValidityTask(
                    check_id=check.id,  # type: ignore[arg-type]
                    role=role,
                    item_id=item.id,  # type: ignore[arg-type]
                    project_id=project_id,
                    task_id=task_id,
                )
            )
            new += 1
        session.flush()
        out["projects"][role] = {
            "project_id": project_id,
            "email": email.lower(),
            "n_tasks": len(built[role]),
            "n_new": new,
        }
    session.add(check)
    append_event(
        session,
        actor=actor,
        kind=f"judge.{check.kind}.push",
        study_id=check.study_id,
        payload=out,
    )
    return out


def ensure_judge_frozen(session: Session, check: ValidityCheck) -> JudgeVersion:
    """The bound judge version, re-verified against the hash bound at sampling: labels
    (held-out ones above all) are only ever recorded against a frozen, unchanged judge."""
    row = session.get(JudgeVersion, check.judge_id)
    if row is None or row.content_hash != check.judge_hash:
        raise JudgeError(
            f"check {check.name}: its judge (hash {check.judge_hash[:12]}…) is missing or "
            "changed; a changed judge needs a new calibration"
        )
    judge_spec(row)
    return row


def sync_check(session: Session, check: ValidityCheck, client: LabelStudio) -> dict[str, Any]:
    """Pull every annotation of every role project (idempotent)."""
    ensure_judge_frozen(session, check)
    tasks = {
        t.task_id: t
        for t in session.exec(select(ValidityTask).where(ValidityTask.check_id == check.id)).all()
    }
    rows = {
        r.annotation_id: r
        for r in session.exec(select(ValidityLabel).where(ValidityLabel.check_id == check.id)).all()
    }
    roles = check.labelstudio.get("roles", {})
    seen = changed = malformed = 0
    for _role, entry in sorted(roles.items()):
        project_id = entry.get("project_id")
        if not project_id:
            continue
        for task in export_tasks(client, int(project_id)):
            for raw in task.get("annotations") or []:
                seen += 1
                try:
                    ann = parse_validity_annotation(
                        raw, task_id=int(task["id"]), project_id=int(project_id)
                    )
                except PayloadError:
                    malformed += 1
                    continue
                t = tasks.get(ann.task_id)
                assigned = roles.get(t.role, {}).get("user_id") if t else None
                status = annotation_status(ann, known_task=t is not None, assigned_user=assigned)
                row = rows.get(ann.annotation_id)
                previous = None if row is None else (row.label, row.status, row.note)
                if previous == (ann.label, status, ann.note):
                    continue
                if row is None:
                    row = ValidityLabel(
                        check_id=check.id,  # type: ignore[arg-type]
                        annotation_id=ann.annotation_id,
                        task_id=ann.task_id,
                        project_id=int(project_id),
                        item_id=t.item_id if t else None,
                        role=t.role if t else None,
                        user_id=ann.user_id,
                        label=ann.label,
                        note=ann.note,
                        status=status,
                    )
                    rows[ann.annotation_id] = row
                else:
                    row.label, row.status, row.note = ann.label, status, ann.note
                    row.user_id, row.updated_at = ann.user_id, utcnow()
                session.add(row)
                session.add(
                    Event(
                        actor=f"labelstudio-user:{ann.user_id}",
                        study_id=check.study_id,
                        kind="judge.annotation.updated" if previous else "judge.annotation.created",
                        payload={
                            "check": check.name,
                            "annotation_id": ann.annotation_id,
                            "task_id": ann.task_id,
                            "role": row.role,
                            "label": ann.label,
                            "status": status,
                            "note": ann.note,
                            "previous_label": previous[0] if previous else None,
                        },
                    )
                )
                changed += 1
    session.flush()
    return {
        "check": check.name,
        "kind": check.kind,
        "annotations_seen": seen,
        "changed": changed,
        "malformed": malformed,
    }


def current_labels(session: Session, check: ValidityCheck) -> dict[str, dict[int, str]]:
    """role → item id → the label of that role's latest counted annotation."""
    rows = session.exec(
        select(ValidityLabel)
        .where(ValidityLabel.check_id == check.id, ValidityLabel.status == "counted")
        .order_by(ValidityLabel.updated_at, ValidityLabel.annotation_id)
    ).all()
    out: dict[str, dict[int, str]] = defaultdict(dict)
    for r in rows:
        if r.role and r.item_id is not None and r.label:
            out[r.role][r.item_id] = r.label
    return out


def status_counts(session: Session, check: ValidityCheck) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for r in session.exec(select(ValidityLabel).where(ValidityLabel.check_id == check.id)).all():
        counts[r.status] += 1
    return dict(counts)


__all__ = [
    "CALIBRATION",
    "current_labels",
    "ensure_judge_frozen",
    "forbidden_values",
    "push_check",
    "status_counts",
    "sync_check",
]
