"""Serving an audit in Label Studio (push), pulling labels back (sync), and the
adjudication round. Blinding is enforced here: only pair keys and texts leave the store,
and every batch is scanned for provenance before it is sent."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlmodel import Session, select

from annotation.payloads import PayloadError, parse_annotation
from annotation.projects import create_project, ensure_webhook, export_tasks, import_tasks
from annotation.tasks import BlindingViolation, build_pair_task, pair_label_config, scan_for_leaks
from app.audit.labels import ADJUDICATOR, audit_rubric, current_labels, needs_adjudication
from app.audit.labels import record_annotations as record_many
from app.audit.sampling import audit_pairs
from app.store import append_event
from app.store.models import Audit, AuditPair, AuditTask, Trajectory

if TYPE_CHECKING:
    from label_studio_sdk import LabelStudio

ROLE_TITLES = {"A": "annotator A", "B": "annotator B", ADJUDICATOR: "adjudication"}


def _audited_rows(session: Session, audit: Audit, pairs: list[AuditPair]) -> list[Any]:
    """The audited trajectories (only the pairs' questions are read), one query."""
    ids = {p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs}
    questions = sorted({p.question_id for p in pairs})
    if not questions:
        return []
    rows = session.exec(
        select(
            Trajectory.trajectory_id,
            Trajectory.text,
            Trajectory.run,
            Trajectory.model,
            Trajectory.question_id,
            Trajectory.step,
            Trajectory.seed,
            Trajectory.mode,
        ).where(Trajectory.study_id == audit.study_id, Trajectory.question_id.in_(questions))  # type: ignore[attr-defined]
    ).all()
    return [r for r in rows if r.trajectory_id in ids]


def _texts(rows: list[Any]) -> dict[str, str]:
    return {r.trajectory_id: r.text for r in rows}


def forbidden_values(
    session: Session, audit: Audit, pairs: list[AuditPair], rows: list[Any] | None = None
) -> tuple[set[str], set[str]]:
    """What must never be sent about the audited trajectories: identifiers and provenance
    names (matched also as substrings), and short or natural-language values — question
    ids, steps, seeds, mode names — matched as whole values only."""
    rows = _audited_rows(session, audit, pairs) if rows is None else rows
    substr: set[str] = set()
    exact: set[str] = set()
    for t in rows:
        substr.update({t.trajectory_id, t.run, t.model})
        exact.update({t.question_id, str(t.step), str(t.seed)})
        if t.mode:
            exact.add(t.mode)
    return substr, exact


def _check_blinding(tasks: list[dict[str, Any]], forbidden: tuple[set[str], set[str]]) -> None:
    substr, exact = forbidden
    # Pair keys are ours and opaque; texts are the payload. Everything is scanned.
    leaks = scan_for_leaks(
        tasks,
        substr,
        forbidden_exact=exact,
        forbidden_keys=(
            "run",
            "model",
            "step",
            "seed",
            "trajectory_id",
            "question_id",
            "automatic",
            "mode",
            "predictions",
        ),
    )
    if leaks:
        raise BlindingViolation(f"refusing to send tasks that leak: {leaks[:5]}")


def _role_project(
    client: LabelStudio, audit: Audit, role: str, config: str, description: str
) -> int:
    roles = dict(audit.labelstudio.get("roles", {}))
    entry = dict(roles.get(role, {}))
    if not entry.get("project_id"):
        entry["project_id"] = create_project(
            client,
            title=f"RCEA pair audit {audit.id}: {ROLE_TITLES[role]}",
            label_config=config,
            description=description,
        )
        roles[role] = entry
        audit.labelstudio = {**audit.labelstudio, "roles": roles}
    return int(entry["project_id"])


def assign_role(audit: Audit, role: str, *, user_id: int, email: str) -> None:
    roles = dict(audit.labelstudio.get("roles", {}))
    entry = dict(roles.get(role, {}))
    entry.update({"user_id": user_id, "email": email})
    roles[role] = entry
    audit.labelstudio = {**audit.labelstudio, "roles": roles}


def _store_tasks(
    session: Session,
    audit: Audit,
    role: str,
    project_id: int,
    mapping: dict[str, int],
    left: dict[str, bool],
    pairs_by_key: dict[str, AuditPair],
) -> int:
    have = {
        t.pair_id
        for t in session.exec(
            select(AuditTask).where(AuditTask.audit_id == audit.id, AuditTask.role == role)
        ).all()
    }
    new = 0
    for key, task_id in mapping.items():
        pair = pairs_by_key.get(key)
        if pair is None or pair.id in have or key not in left:
            continue
        session.add(
            AuditTask(
                audit_id=audit.id,
                role=role,
                pair_id=pair.id,
                project_id=project_id,
                task_id=task_id,
                left_is_a=left[key],
            )
        )
        new += 1
    session.flush()
    return new


def push_audit(
    session: Session,
    audit: Audit,
    client: LabelStudio,
    *,
    webhook_url: str | None,
    webhook_secret: str | None,
    actor: str,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Create (once) the A and B projects and import every pair as a blinded task.

    Idempotent: pairs already in a project are not imported again."""
    spec = audit_rubric(session, audit)
    pairs = audit_pairs(session, audit_id=audit.id)
    rows = _audited_rows(session, audit, pairs)
    texts = _texts(rows)
    forbidden = forbidden_values(session, audit, pairs, rows)
    config = pair_label_config(spec.pairs.strategy_definition)
    by_key = {p.pair_key: p for p in pairs}
    out: dict[str, Any] = {"audit": audit.name, "projects": {}}
    built: dict[str, list[Any]] = {}
    for role in ("A", "B"):
        rng = random.Random(f"{audit.seed}:{audit.id}:{role}")
        built[role] = [
            build_pair_task(p.pair_key, texts[p.trajectory_a], texts[p.trajectory_b], rng=rng)
            for p in pairs
        ]
        # Checked before anything is created in Label Studio.
        _check_blinding([t.data for t in built[role]], forbidden)
    for role in ("A", "B"):
        project_id = _role_project(client, audit, role, config, spec.pairs.strategy_definition)
        data = [t.data for t in built[role]]
        left = {t.pair_key: t.left_is_a for t in built[role]}
        mapping = import_tasks(client, project_id, data, progress=progress)
        new = _store_tasks(session, audit, role, project_id, mapping, left, by_key)
        if webhook_url and webhook_secret:
            ensure_webhook(client, project_id=project_id, url=webhook_url, secret=webhook_secret)
        out["projects"][role] = {"project_id": project_id, "n_tasks": len(mapping), "n_new": new}
    session.add(audit)
    append_event(
        session,
        actor=actor,
        kind="audit.push",
        study_id=audit.study_id,
        payload={"audit_id": audit.id, **out},
    )
    return out


def sync_audit(session: Session, audit: Audit, client: LabelStudio) -> dict[str, Any]:
    """Pull every annotation of every role project (idempotent; catches missed webhooks)."""
    parsed = []
    seen = malformed = 0
    for _role, entry in sorted(audit.labelstudio.get("roles", {}).items()):
        project_id = entry.get("project_id")
        if not project_id:
            continue
        for task in export_tasks(client, int(project_id)):
            for ann in task.get("annotations") or []:
                seen += 1
                try:
                    parsed.append(
                        parse_annotation(ann, task_id=int(task["id"]), project_id=int(project_id))
                    )
                except PayloadError:
                    malformed += 1
    changed = record_many(session, audit, parsed, source="sync")
    return {
        "audit": audit.name,
        "annotations_seen": seen,
        "changed": changed,
        "malformed": malformed,
    }


def adjudicate(
    session: Session,
    audit: Audit,
    client: LabelStudio,
    *,
    actor: str,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
) -> dict[str, Any]:
    """Create/extend the adjudication project with every pair where A and B disagree and
    every pair whose agreed label differs from the automatic one. The adjudicator sees both
    texts, the strategy definition and the two human answers in random order; never who
    gave them and never the automatic label."""
    spec = audit_rubric(session, audit)
    pairs = audit_pairs(session, audit_id=audit.id)
    labels = current_labels(session, audit)
    todo = needs_adjudication(pairs, labels, spec.adjudication.scope)
    rows = _audited_rows(session, audit, todo)
    texts = _texts(rows)
    forbidden = forbidden_values(session, audit, todo, rows)
    config = pair_label_config(spec.pairs.strategy_definition, adjudication=True)
    project_id = _role_project(client, audit, ADJUDICATOR, config, spec.pairs.strategy_definition)
    rng = random.Random(f"{audit.seed}:{audit.id}:{ADJUDICATOR}")
    built = [
        build_pair_task(
            p.pair_key,
            texts[p.trajectory_a],
            texts[p.trajectory_b],
            rng=rng,
            answers=(labels["A"][p.id], labels["B"][p.id]),
        )
        for p in todo
    ]
    data = [t.data for t in built]
    _check_blinding(data, forbidden)
    mapping = import_tasks(client, project_id, data) if data else {}
    new = _store_tasks(
        session,
        audit,
        ADJUDICATOR,
        project_id,
        mapping,
        {t.pair_key: t.left_is_a for t in built},
        {p.pair_key: p for p in todo},
    )
    if webhook_url and webhook_secret:
        ensure_webhook(client, project_id=project_id, url=webhook_url, secret=webhook_secret)
    session.add(audit)
    out = {"audit": audit.name, "project_id": project_id, "n_pairs": len(todo), "n_new": new}
    append_event(
        session,
        actor=actor,
        kind="audit.adjudicate",
        study_id=audit.study_id,
        payload={"audit_id": audit.id, **out},
    )
    return out
