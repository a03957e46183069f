"""The labels behind every attempt on the record, read from the store (docs/publication.md
"Every attempt"): for each pair audit its pairs with the A, B, adjudicated and automatic
labels, the coverages its gate used and its frozen rubric; for each calibration its
held-out items (human reference, judge verdict) and the thresholds frozen into its plan;
for each accepted-set check its items labelled by both annotators and its thresholds.

The bundle carries this map (``inputs.json`` ``attempt_labels``) so that ``rcea report
verify`` re-derives each attempt's outcome and gate values from that attempt's own labels
(:func:`rcea.study.report.attempts.rederive`), and the report counts each attempt's labels."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from rcea.study.pair_audit.freeze import rubric_spec
from rcea.study.pair_audit.labels import ADJUDICATOR, coverage
from rcea.study.pair_audit.labels import current_labels as pair_labels
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.report.attempts import ACCEPTED_KIND, CALIBRATION_KIND, PAIR_KIND, label_key
from rcea.study.store.models import Audit, Rubric, ValidityCheck
from rcea.study.validity_audit.checks import (
    HELD_OUT,
    bootstrap_settings,
    check_acceptance,
    check_items,
    population_counts,
)
from rcea.study.validity_audit.labelling import current_labels as validity_labels
from rcea.study.validity_audit.labelling import human_reference


def pair_audit_labels(session: Session, audit: Audit) -> dict[str, Any]:
    """The audited pairs of ``audit`` with their labels, the coverages and its rubric."""
    rubric = session.get(Rubric, audit.rubric_id)
    return {
        **audited_pairs(session, audit),
        "rubric_toml": rubric_spec(rubric).to_toml() if rubric is not None else None,
    }


def audited_pairs(session: Session, audit: Audit) -> dict[str, Any]:
    """The audited pairs of ``audit`` with A, B, adjudicated and automatic labels and the
    coverages its gate uses (also the bundle's ``inputs.json`` ``audit`` section)."""
    labels = pair_labels(session, audit)
    overall, audited = coverage(session, audit)
    return {
        "audit": audit.name,
        "automatic_coverage": overall,
        "audited_coverage": audited,
        "pairs": [
            {
                "pair_key": p.pair_key,
                "question_id": p.question_id,
                "automatic": p.automatic,
                "A": labels.get("A", {}).get(p.id),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                "B": labels.get("B", {}).get(p.id),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                "adjudicated": labels.get(ADJUDICATOR, {}).get(p.id),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            }
            for p in audit_pairs(session, audit_id=audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        ],
    }


def calibration_labels(session: Session, check: ValidityCheck) -> dict[str, Any]:
    """Held-out items with the human reference label, the frozen thresholds, and the
    population's verdict counts and bootstrap settings of the population figures."""
    human = human_reference(session, check)
    items = [i for i in check_items(session, check_id=check.id) if i.split == HELD_OUT]  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return {
        "thresholds": check_acceptance(check).to_dict(),
        "population": population_counts(session, check),
        "bootstrap": bootstrap_settings(check),
        "n_items": len(items),
        "items": [
            {"item_key": i.item_key, "human": human.get(i.id), "judge": i.judge_verdict}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            for i in items
        ],
    }


def accepted_labels(session: Session, check: ValidityCheck) -> dict[str, Any]:
    """Every item with annotator A's and B's label, and the frozen thresholds."""
    labels = validity_labels(session, check)
    a, b = labels.get("A", {}), labels.get("B", {})
    items = check_items(session, check_id=check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return {
        "thresholds": check_acceptance(check).to_dict(),
        "n_items": len(items),
        "items": [{"item_key": i.item_key, "A": a.get(i.id), "B": b.get(i.id)} for i in items],  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    }


def attempt_labels(session: Session, *, study_id: int) -> dict[str, dict[str, Any]]:
    """:func:`rcea.study.report.attempts.label_key` → the labels of every pair audit,
    calibration and accepted-set check of the study."""
    out: dict[str, dict[str, Any]] = {}
    for audit in session.exec(
        select(Audit).where(Audit.study_id == study_id).order_by(Audit.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).all():
        out[label_key(PAIR_KIND, audit.name)] = pair_audit_labels(session, audit)
    for check in session.exec(
        select(ValidityCheck).where(ValidityCheck.study_id == study_id).order_by(ValidityCheck.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).all():
        if check.kind == "accepted":
            out[label_key(ACCEPTED_KIND, check.name)] = accepted_labels(session, check)
        else:
            out[label_key(CALIBRATION_KIND, check.name)] = calibration_labels(session, check)
    return out
