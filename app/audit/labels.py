"""Recording annotations (webhook or sync) and computing the gate from stored labels.

An annotation counts as a label only if it belongs to a task of this audit, was made by
the user assigned to that task's project, was not cancelled and holds a same/different
choice. Everything else is stored with its status and never counted. Every new or changed
annotation is also appended to the event log, so replaced labels stay on record.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlmodel import Session, select

from annotation.payloads import ParsedAnnotation, annotation_status
from app.audit.freeze import FreezeError, rubric_spec
from app.audit.sampling import audit_pairs
from app.store import append_event
from app.store.models import (
    Audit,
    AuditLabel,
    AuditPair,
    AuditTask,
    Event,
    Partition,
    PartitionAssignment,
    utcnow,
)
from audits.gates import evaluate_gate

ROLES = ("A", "B")
ADJUDICATOR = "adjudicator"


def record_annotation(
    session: Session, audit: Audit, ann: ParsedAnnotation, *, source: str
) -> tuple[AuditLabel, bool]:
    """Insert or update the label of one annotation; returns ``(row, changed)``.

    Idempotent: the same annotation content arriving again (webhook then sync) changes
    nothing and writes no event.
    """
    task = session.exec(
        select(AuditTask).where(AuditTask.audit_id == audit.id, AuditTask.task_id == ann.task_id)
    ).first()
    row = session.exec(
        select(AuditLabel).where(
            AuditLabel.audit_id == audit.id, AuditLabel.annotation_id == ann.annotation_id
        )
    ).first()
    row, changed = _apply(session, audit, ann, task, row, source=source)
    session.flush()
    return row, changed


def record_annotations(
    session: Session, audit: Audit, anns: list[ParsedAnnotation], *, source: str
) -> int:
    """``record_annotation`` for many annotations at once (the sync path): tasks and
    existing labels are loaded once and the session is flushed once. Returns the number
    of new or changed labels."""
    tasks = {
        t.task_id: t
        for t in session.exec(select(AuditTask).where(AuditTask.audit_id == audit.id)).all()
    }
    rows = {
        r.annotation_id: r
        for r in session.exec(select(AuditLabel).where(AuditLabel.audit_id == audit.id)).all()
    }
    changed = 0
    for ann in anns:
        row, did = _apply(
            session, audit, ann, tasks.get(ann.task_id), rows.get(ann.annotation_id), source=source
        )
        rows[ann.annotation_id] = row
        changed += int(did)
    session.flush()
    return changed


def _apply(
    session: Session,
    audit: Audit,
    ann: ParsedAnnotation,
    task: AuditTask | None,
    row: AuditLabel | None,
    *,
    source: str,
) -> tuple[AuditLabel, bool]:
    role = task.role if task else None
    assigned = audit.labelstudio.get("roles", {}).get(role, {}).get("user_id") if role else None
    status = annotation_status(ann, known_task=task is not None, assigned_user=assigned)
    previous = None if row is None else (row.label, row.status, row.note)
    if previous == (ann.label, status, ann.note):
        return row, False  # type: ignore[return-value]
    if row is None:
        row = AuditLabel(
            audit_id=audit.id,
            annotation_id=ann.annotation_id,
            task_id=ann.task_id,
            project_id=ann.project_id or (task.project_id if task else 0),
            pair_id=task.pair_id if task else None,
            role=role,
            user_id=ann.user_id,
            label=ann.label,
            note=ann.note,
            status=status,
        )
    else:
        row.label, row.status, row.note, row.user_id = ann.label, status, ann.note, ann.user_id
        row.updated_at = utcnow()
    session.add(row)
    session.add(
        Event(
            actor=f"labelstudio-user:{ann.user_id}",
            study_id=audit.study_id,
            kind="annotation.updated" if previous else "annotation.created",
            payload={
                "audit_id": audit.id,
                "annotation_id": ann.annotation_id,
                "task_id": ann.task_id,
                "role": role,
                "label": ann.label,
                "status": status,
                "note": ann.note,
                "source": source,
                "previous_label": previous[0] if previous else None,
            },
        )
    )
    return row, True


def current_labels(session: Session, audit: Audit) -> dict[str, dict[int, str]]:
    """role → pair id → the label of that role's latest counted annotation."""
    rows = session.exec(
        select(AuditLabel)
        .where(AuditLabel.audit_id == audit.id, AuditLabel.status == "counted")
        .order_by(AuditLabel.updated_at, AuditLabel.annotation_id)
    ).all()
    out: dict[str, dict[int, str]] = defaultdict(dict)
    for r in rows:
        if r.role and r.pair_id is not None and r.label:
            out[r.role][r.pair_id] = r.label
    return out


def status_counts(session: Session, audit: Audit) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for r in session.exec(select(AuditLabel).where(AuditLabel.audit_id == audit.id)).all():
        counts[r.status] += 1
    return dict(counts)


def needs_adjudication(
    pairs: list[AuditPair],
    labels: dict[str, dict[int, str]],
    scope: str = "disagreements_and_automatic",
) -> list[AuditPair]:
    """Pairs where A and B disagree and, with the rubric's ``[adjudication] scope``
    ``disagreements_and_automatic`` (the default), pairs whose agreed label differs from
    the automatic label (those with an automatic label)."""
    wide = scope == "disagreements_and_automatic"
    out = []
    for p in pairs:
        a, b = labels.get("A", {}).get(p.id), labels.get("B", {}).get(p.id)
        if a is None or b is None:
            continue
        if a != b or (wide and p.automatic is not None and a != p.automatic):
            out.append(p)
    return out


def coverage(session: Session, audit: Audit) -> tuple[float, float | None]:
    """Automatic trajectory coverage over the whole locked partition, and over the
    audited questions."""
    part = session.get(Partition, audit.partition_id)
    assert part is not None
    overall = (part.n_accepted - part.n_uncertain) / part.n_accepted if part.n_accepted else 0.0
    questions = {p.question_id for p in audit_pairs(session, audit_id=audit.id)}
    rows = session.exec(
        select(PartitionAssignment).where(PartitionAssignment.partition_id == part.id)
    ).all()
    audited = [r for r in rows if r.question_id in questions]
    share = (sum(r.mode is not None for r in audited) / len(audited)) if audited else None
    return overall, share


def gate_status(session: Session, audit: Audit, *, final: bool) -> dict[str, Any]:
    """The preliminary or final gate of an audit as a JSON-ready dict.

    While A or B have not labelled every pair: ``status: pending`` with progress and the
    preliminary agreement over the pairs both have labelled. A final gate needs every pair
    that requires adjudication to be adjudicated.
    """
    pairs = audit_pairs(session, audit_id=audit.id)
    labels = current_labels(session, audit)
    spec = audit_rubric(session, audit)
    thresholds, scope = spec.gate, spec.adjudication.scope
    n = len(pairs)
    progress = {role: len(labels.get(role, {})) for role in ROLES}
    to_adjudicate = needs_adjudication(pairs, labels, scope)
    adjudicated = labels.get(ADJUDICATOR, {})
    overall, audited = coverage(session, audit)
    both = [p for p in pairs if p.id in labels.get("A", {}) and p.id in labels.get("B", {})]
    base: dict[str, Any] = {
        "audit": audit.name,
        "rubric_hash": audit.rubric_hash,
        "partition_hash": audit.partition_hash,
        "n_pairs": n,
        "progress": {**progress, ADJUDICATOR: len(adjudicated)},
        "n_needing_adjudication": len(to_adjudicate),
        "labels": status_counts(session, audit),
    }
    complete = all(progress[r] == n for r in ROLES) and n > 0
    if not both:
        return {**base, "status": "pending", "stage": "preliminary", "report": None}
    ids = [p.pair_key for p in both]
    a = [labels["A"][p.id] for p in both]
    b = [labels["B"][p.id] for p in both]
    auto = [p.automatic for p in both]
    if not final or not complete:
        if final:
            raise FreezeError(
                f"labelling is incomplete (A {progress['A']}/{n}, "
                f"B {progress['B']}/{n}): the final gate needs every pair"
            )
        report = evaluate_gate(
            ids,
            a,
            b,
            None,
            auto,
            overall,
            thresholds,
            audited_coverage=audited,
            rubric_hash=audit.rubric_hash,
            partition_hash=audit.partition_hash,
            stage="preliminary",
            adjudication_scope=scope,
        )
        status = "preliminary" if complete else "pending"
        return {**base, "status": status, "stage": "preliminary", "report": report.to_dict()}
    missing = [p.pair_key for p in to_adjudicate if p.id not in adjudicated]
    if missing:
        raise FreezeError(
            f"{len(missing)} pair(s) need adjudication and have none yet "
            f"(run `rcea audit adjudicate`, then sync): {missing[:10]}"
        )
    adj = {p.pair_key: adjudicated[p.id] for p in to_adjudicate}
    report = evaluate_gate(
        ids,
        a,
        b,
        adj,
        auto,
        overall,
        thresholds,
        audited_coverage=audited,
        rubric_hash=audit.rubric_hash,
        partition_hash=audit.partition_hash,
        stage="final",
        adjudication_scope=scope,
    )
    return {
        **base,
        "status": "passed" if report.passed else "failed",
        "stage": "final",
        "report": report.to_dict(),
    }


def audit_rubric(session: Session, audit: Audit):  # type: ignore[no-untyped-def]
    """The frozen rubric bound to the audit, verified against the bound hash."""
    from app.store.models import Rubric

    row = session.get(Rubric, audit.rubric_id)
    if row is None or row.content_hash != audit.rubric_hash:
        raise FreezeError(
            f"audit {audit.name}: its rubric (hash {audit.rubric_hash[:12]}…) is missing or changed"
        )
    return rubric_spec(row)


def record_final_gate(session: Session, audit: Audit, result: dict[str, Any], actor: str) -> None:
    append_event(
        session,
        actor=actor,
        kind="gate.final",
        study_id=audit.study_id,
        payload={
            "audit_id": audit.id,
            "audit": audit.name,
            "status": result["status"],
            "rubric_hash": audit.rubric_hash,
            "partition_hash": audit.partition_hash,
            "report": result["report"],
        },
    )
