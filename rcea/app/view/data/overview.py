"""The Overview page's reads: the studies, a study's checkpoints, its pair audits with their
gates and requirements, and its validity audit."""

from __future__ import annotations

from typing import Any

import pandas as pd
from sqlmodel import Session

from rcea.app.view.data import engine
from rcea.study.pair_audit.gate import audit_gate, gate_requirements
from rcea.study.pair_audit.sampling import audit_pairs, study_audits
from rcea.study.settings import Settings
from rcea.study.store import list_studies, require_study, session_scope, study_summary
from rcea.study.validity_audit.status import validity_status

AUDIT_COLUMNS = [
    "audit",
    "status",
    "stage",
    "pairs",
    "human_human_macro_f1",
    "automatic_macro_f1",
    "gap",
    "different_precision",
    "different_recall",
    "automatic_coverage",
    "rubric_hash",
    "partition_hash",
]


def studies_frame(settings: Settings | None = None) -> pd.DataFrame:
    """One row per study with its counts."""
    rows = []
    with session_scope(engine(settings)) as session:
        for st in list_studies(session):
            summ = study_summary(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            rows.append(
                {
                    "study": st.name,
                    "trajectories": summ["n_trajectories"],
                    "questions": summ["n_questions"],
                    "ingests": summ["n_ingests"],
                    "created": st.created_at,
                }
            )
    return pd.DataFrame(rows, columns=["study", "trajectories", "questions", "ingests", "created"])


def checkpoints_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per (run, model, step) with sample counts and verifier accuracy."""
    with session_scope(engine(settings)) as session:
        summ = study_summary(session, study_id=require_study(session, name=study).id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    df = pd.DataFrame(
        summ["groups"], columns=["run", "model", "step", "n", "n_success", "n_failure"]
    )
    df["accuracy"] = df["n_success"] / df["n"].where(df["n"] > 0)
    return df


def _audit_gates(session: Session, study_id: int) -> list[tuple[Any, dict[str, Any]]]:
    """(audit, gate) per audit of the study, oldest first (``audit_gate``: the recorded
    final gate, else the live preliminary one)."""

    return [
        (a, audit_gate(session, a, with_preliminary=False))
        for a in study_audits(session, study_id=study_id)
    ]


def audits_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per pair audit of the study: gate status (pending / preliminary / passed /
    failed) and the gate values of the recorded final gate, else of the live preliminary
    gate."""

    rows = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        for audit, res in _audit_gates(session, st.id):  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            report = res.get("report") or {}
            rows.append(
                {
                    "audit": audit.name,
                    "status": res.get("status", "pending"),
                    "stage": res.get("stage"),
                    "pairs": len(audit_pairs(session, audit_id=audit.id)),
                    **{k: report.get(k) for k in AUDIT_COLUMNS[4:10]},
                    "rubric_hash": audit.rubric_hash[:12],
                    "partition_hash": audit.partition_hash[:12],
                }
            )
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


def gate_requirements_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per (audit, gate requirement): value, comparator, the rubric's threshold and
    pass/fail (``None`` until a final gate is recorded)."""
    rows = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        for audit, res in _audit_gates(session, st.id):  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            for req in gate_requirements(session, audit, res):
                rows.append(
                    {
                        "audit": audit.name,
                        "stage": res.get("stage"),
                        "requirement": req["name"],
                        "value": req["value"],
                        "comparator": req["comparator"],
                        "threshold": req["threshold"],
                        "passed": req["passed"],
                    }
                )
    return pd.DataFrame(
        rows,
        columns=["audit", "stage", "requirement", "value", "comparator", "threshold", "passed"],
    )


def validity_frame(study: str, settings: Settings | None = None) -> dict[str, Any]:
    """The validity audit's state (``rcea.study.validity_audit.status.validity_status``)."""

    with session_scope(engine(settings)) as session:
        return validity_status(session, study_id=require_study(session, name=study).id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
