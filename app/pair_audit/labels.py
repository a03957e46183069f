"""The pair audit's labels and gate: labels come from the labelling core
(:mod:`app.labelling`: verified, one status rule for every round); this module holds
what is the pair audit's own — who needs adjudication, coverage and the gate."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from annotation.payloads import ParsedAnnotation
from app.labelling import PAIR
from app.labelling import current_labels as core_current_labels
from app.labelling import status_counts as core_status_counts
from app.labelling.record import record_for_project
from app.pair_audit.freeze import FreezeError, rubric_spec
from app.pair_audit.sampling import audit_pairs
from app.pair_audit.sequential import attach_interim
from app.store import append_event
from app.store.models import (
    Audit,
    AuditLabel,
    AuditPair,
    Partition,
    PartitionAssignment,
)
from audits.gates import evaluate_gate
from audits.sequential import interim_decisions

ROLES = ("A", "B")
ADJUDICATOR = "adjudicator"


def record_annotation(
    session: Session, audit: Audit, ann: ParsedAnnotation, *, source: str
) -> tuple[AuditLabel, bool]:
    """Record one annotation that was read back from its person's server (tests, bench:
    the webhook and sync go through :mod:`app.labelling.sync`). The role comes from the
    binding whose project holds the annotation."""
    row, changed = record_for_project(session, PAIR, audit, ann, source=source)
    return row, changed


def current_labels(session: Session, audit: Audit) -> dict[str, dict[int, str]]:
    """role → pair id → the label of that role's latest counted annotation."""
    return core_current_labels(session, PAIR, audit.id)


def status_counts(session: Session, audit: Audit) -> dict[str, int]:
    return core_status_counts(session, PAIR, audit.id)


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
    interim = None
    if spec.sequential is not None:  # predeclared plan: interim decisions at the look
        interim = interim_decisions(
            [p.question_id for p in both],
            a,
            b,
            {
                p.pair_key: adjudicated[p.id]
                for p, x, y in zip(both, a, b, strict=True)
                if p.id in adjudicated and (x != y or scope != "disagreements")
            },
            auto,
            overall,
            thresholds,
            spec.sequential,
            n,
            pair_ids=ids,
        ).to_dict()
        base["sequential"] = interim
        base["decision"] = interim["decision"]
    stop = interim is not None and interim["decision"] != "undecided" and not complete
    if not final or not (complete or stop):
        if final:
            why = (
                f"; the sequential plan is undecided at look {interim['look']}/{interim['n_looks']}"
                if interim is not None
                else ""
            )
            raise FreezeError(
                f"labelling is incomplete (A {progress['A']}/{n}, "
                f"B {progress['B']}/{n}): the final gate needs every pair{why}"
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
        data = report.to_dict()
        if interim is not None:
            attach_interim(data, interim)
        return {**base, "status": status, "stage": "preliminary", "report": data}
    if stop:  # stopping early: the labelled pairs are the audit's sample
        labelled = {p.id for p in both}
        to_adjudicate = [p for p in to_adjudicate if p.id in labelled]
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
    data = report.to_dict()
    if interim is not None:  # the plan's boundary, not the fixed-sample rule
        attach_interim(data, interim)
        base["stopped_early"] = stop
    return {
        **base,
        "status": "passed" if data["passed"] else "failed",
        "stage": "final",
        "report": data,
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
            **({"stopped_early": result["stopped_early"]} if "stopped_early" in result else {}),
        },
    )
