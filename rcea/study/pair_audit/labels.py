"""The pair audit's labels and gate: labels come from the labelling core
(:mod:`rcea.study.labelling`: verified, one status rule for every round); this module holds
what is the pair audit's own — who needs adjudication, coverage and the gate."""

from __future__ import annotations

from sqlmodel import Session, select

from rcea.annotation.payloads import ParsedAnnotation
from rcea.audits.gates import needs_adjudication as pure_needs_adjudication
from rcea.audits.rubric import Rubric as RubricSpec
from rcea.study.labelling import PAIR
from rcea.study.labelling import current_labels as core_current_labels
from rcea.study.labelling import status_counts as core_status_counts
from rcea.study.labelling.record import record_for_project
from rcea.study.pair_audit.freeze import FreezeError, rubric_spec
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.store.models import (
    Audit,
    AuditLabel,
    AuditPair,
    Partition,
    PartitionAssignment,
    Rubric,
)

ROLES = ("A", "B")
ADJUDICATOR = "adjudicator"


def record_annotation(
    session: Session, audit: Audit, ann: ParsedAnnotation, *, source: str
) -> tuple[AuditLabel, bool]:
    """Record one annotation that was read back from its person's server (tests, bench:
    the webhook and sync go through :mod:`rcea.study.labelling.sync`). The role comes from the
    binding whose project holds the annotation."""
    row, changed = record_for_project(session, PAIR, audit, ann, source=source)
    return row, changed


def current_labels(session: Session, audit: Audit) -> dict[str, dict[int, str]]:
    """role → pair id → the label of that role's latest counted annotation."""
    return core_current_labels(session, PAIR, audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


def status_counts(session: Session, audit: Audit) -> dict[str, int]:
    return core_status_counts(session, PAIR, audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


def needs_adjudication(
    pairs: list[AuditPair],
    labels: dict[str, dict[int, str]],
    scope: str = "disagreements_and_automatic",
) -> list[AuditPair]:
    """Pairs where A and B disagree and, with the rubric's ``[adjudication] scope``
    ``disagreements_and_automatic`` (the default), pairs whose agreed label differs from
    the automatic label (those with an automatic label)."""
    out = []
    for p in pairs:
        a, b = labels.get("A", {}).get(p.id), labels.get("B", {}).get(p.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        if a is not None and b is not None and pure_needs_adjudication(a, b, p.automatic, scope):
            out.append(p)
    return out


def coverage(session: Session, audit: Audit) -> tuple[float, float | None]:
    """Automatic trajectory coverage over the whole locked partition, and over the
    audited questions."""
    part = session.get(Partition, audit.partition_id)
    assert part is not None
    overall = (part.n_accepted - part.n_uncertain) / part.n_accepted if part.n_accepted else 0.0
    questions = {p.question_id for p in audit_pairs(session, audit_id=audit.id)}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    rows = session.exec(
        select(PartitionAssignment).where(PartitionAssignment.partition_id == part.id)
    ).all()
    audited = [r for r in rows if r.question_id in questions]
    share = (sum(r.mode is not None for r in audited) / len(audited)) if audited else None
    return overall, share


def audit_rubric(session: Session, audit: Audit) -> RubricSpec:
    """The frozen rubric bound to the audit, verified against the bound hash."""

    row = session.get(Rubric, audit.rubric_id)
    if row is None or row.content_hash != audit.rubric_hash:
        raise FreezeError(
            f"audit {audit.name}: its rubric (hash {audit.rubric_hash[:12]}…) is missing or changed"
        )
    return rubric_spec(row)
