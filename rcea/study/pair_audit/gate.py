"""The pair audit's gate, in one place: the gate itself (:func:`gate_status`, preliminary
or final), the decision sequence a researcher runs (:func:`decide_gate`: gate, the interim
look of a sequential plan, the final record) and the one reader of an audit's gate state
(:func:`audit_gate`) that the report, the view, the API and the demo share: the recorded
final gate when there is one, else the live preliminary gate (docs/publication.md)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from rcea.audits.gates import counted_adjudications, evaluate_gate
from rcea.audits.sequential import attach_interim, interim_decisions, planned_gate
from rcea.audits.thresholds import GATE_REQUIREMENTS
from rcea.study import events
from rcea.study.pair_audit.abandon import abandon_record
from rcea.study.pair_audit.freeze import FreezeError
from rcea.study.pair_audit.labels import (
    ADJUDICATOR,
    ROLES,
    audit_rubric,
    coverage,
    current_labels,
    needs_adjudication,
    status_counts,
)
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.pair_audit.sequential import record_interim
from rcea.study.store import append_event, list_events
from rcea.study.store.models import Audit

FINAL_EVENT = events.GATE_FINAL


def gate_status(session: Session, audit: Audit, *, final: bool) -> dict[str, Any]:
    """The preliminary or final gate of an audit as a JSON-ready dict.

    While A or B have not labelled every pair: ``status: pending`` with progress and the
    preliminary agreement over the pairs both have labelled. A final gate needs every pair
    that requires adjudication to be adjudicated.
    """
    pairs = audit_pairs(session, audit_id=audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
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
    a = [labels["A"][p.id] for p in both]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
    b = [labels["B"][p.id] for p in both]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
    auto = [p.automatic for p in both]
    interim = None
    if spec.sequential is not None:  # predeclared plan: interim decisions at the look
        interim = interim_decisions(
            [p.question_id for p in both],
            a,
            b,
            counted_adjudications(
                ids,
                a,
                b,
                auto,
                {p.pair_key: adjudicated.get(p.id) for p in both},  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                scope,
            ),
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
    data = planned_gate(  # with a plan, its boundary decides, not the fixed-sample rule
        ids,
        [p.question_id for p in both],
        a,
        b,
        {p.pair_key: adjudicated[p.id] for p in to_adjudicate},  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        auto,
        overall,
        thresholds,
        scope=scope,
        stage="final",
        plan=spec.sequential,
        n_planned=n,
        audited_coverage=audited,
        rubric_hash=audit.rubric_hash,
        partition_hash=audit.partition_hash,
    )
    if interim is not None:
        base["stopped_early"] = stop
    return {
        **base,
        "status": "passed" if data["passed"] else "failed",
        "stage": "final",
        "report": data,
    }


def record_final_gate(session: Session, audit: Audit, result: dict[str, Any], actor: str) -> None:
    append_event(
        session,
        actor=actor,
        kind=FINAL_EVENT,
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


def recorded_final_gate(session: Session, audit: Audit) -> dict[str, Any] | None:
    """The latest recorded final gate of ``audit`` (its ``gate.final`` payload with
    ``stage: final`` and ``recorded_at``), or None."""
    events = [
        e
        for e in list_events(session, kind=FINAL_EVENT, study_id=audit.study_id)
        if e.payload.get("audit_id") == audit.id
    ]
    if not events:
        return None
    last = events[-1]
    return {**last.payload, "stage": "final", "recorded_at": last.time.isoformat()}


def audit_gate(session: Session, audit: Audit, *, with_preliminary: bool = True) -> dict[str, Any]:
    """The gate state of ``audit`` as every reader shows it: the recorded final gate when
    one exists (the live preliminary gate beside it under ``preliminary`` unless
    ``with_preliminary`` is off), else the live preliminary gate (status pending or
    preliminary). A broken binding (rubric changed, missing) becomes ``status: error: …``."""
    final = recorded_final_gate(session, audit)
    if final is not None and not with_preliminary:
        return final
    try:
        live = gate_status(session, audit, final=False)
    except (FreezeError, ValueError) as exc:
        live = {"status": f"error: {exc}", "stage": None, "report": None}
    if final is None:
        return live
    return {**final, "preliminary": live}


def gate_requirements(session: Session, audit: Audit, gate: dict[str, Any]) -> list[dict[str, Any]]:
    """The requirement rows of ``gate`` (an :func:`audit_gate`): the final gate's as
    recorded; before that, the same rows with the values computed so far, the frozen
    rubric's thresholds and ``passed = None`` (the preliminary stage is reported, not
    gated); none when the rubric cannot be read."""

    report = gate.get("report") or {}
    if report.get("requirements"):
        return list(report["requirements"])
    try:
        thresholds = audit_rubric(session, audit).gate.to_dict()
    except FreezeError:
        return []
    return [
        {
            "name": name,
            "value": report.get(name),
            "threshold": thresholds[key],
            "comparator": comparator,
            "passed": None,
        }
        for name, key, comparator in GATE_REQUIREMENTS
    ]


def decide_gate(session: Session, audit: Audit, *, final: bool, actor: str) -> dict[str, Any]:
    """What ``rcea audit gate`` does: compute the gate, record the interim look of a
    sequential plan the first time it is reached, and record a final gate as an event.
    An abandoned audit (:mod:`rcea.study.pair_audit.abandon`) gets no final gate."""
    if final and abandon_record(session, audit) is not None:
        raise FreezeError(
            f"audit {audit.name} was abandoned ({abandon_record(session, audit)['reason']}): "  # type: ignore[index]  # an abandoned audit has its abandon record
            "it gets no final gate; draw a new audit (`rcea audit sample`)"
        )
    result = gate_status(session, audit, final=final)
    if result.get("sequential"):
        record_interim(session, audit, result["sequential"], actor)
    if final:
        record_final_gate(session, audit, result, actor)
    return result
