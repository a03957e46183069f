"""Data the view shows, as plain pandas frames (kept apart from Streamlit for testing)."""

from __future__ import annotations

import pandas as pd

from app.settings import Settings
from app.store import list_studies, open_store, session_scope, study_summary


def studies_frame(settings: Settings | None = None) -> pd.DataFrame:
    """One row per study with its counts."""
    engine = open_store(settings)
    rows = []
    with session_scope(engine) as session:
        for st in list_studies(session):
            summ = study_summary(session, study_id=st.id)
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
    from app.store import require_study

    engine = open_store(settings)
    with session_scope(engine) as session:
        summ = study_summary(session, study_id=require_study(session, name=study).id)
    df = pd.DataFrame(
        summ["groups"], columns=["run", "model", "step", "n", "n_success", "n_failure"]
    )
    df["accuracy"] = df["n_success"] / df["n"].where(df["n"] > 0)
    return df


def audits_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per pair audit of the study: labelling progress and gate status
    (pending / preliminary / passed / failed) with the gate values."""
    from sqlmodel import select

    from app.audit.freeze import FreezeError
    from app.audit.labels import gate_status
    from app.store import list_events, require_study
    from app.store.models import Audit

    engine = open_store(settings)
    rows = []
    with session_scope(engine) as session:
        st = require_study(session, name=study)
        finals = {
            e.payload.get("audit_id"): e.payload
            for e in list_events(session, kind="gate.final", study_id=st.id)
        }
        for audit in session.exec(
            select(Audit).where(Audit.study_id == st.id).order_by(Audit.id)
        ).all():
            try:
                res = finals.get(audit.id) or gate_status(session, audit, final=False)
                report = res.get("report") or {}
                status = res.get("status", "pending")
            except (FreezeError, ValueError) as exc:
                report, status = {}, f"error: {exc}"
            rows.append(
                {
                    "audit": audit.name,
                    "status": status,
                    "pairs": _n_pairs(session, audit.id),
                    "human_human_macro_f1": report.get("human_human_macro_f1"),
                    "automatic_macro_f1": report.get("automatic_macro_f1"),
                    "gap": report.get("gap"),
                    "different_precision": report.get("different_precision"),
                    "different_recall": report.get("different_recall"),
                    "automatic_coverage": report.get("automatic_coverage"),
                    "rubric_hash": audit.rubric_hash[:12],
                    "partition_hash": audit.partition_hash[:12],
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "audit",
            "status",
            "pairs",
            "human_human_macro_f1",
            "automatic_macro_f1",
            "gap",
            "different_precision",
            "different_recall",
            "automatic_coverage",
            "rubric_hash",
            "partition_hash",
        ],
    )


def _n_pairs(session, audit_id: int) -> int:  # type: ignore[no-untyped-def]
    from app.audit.sampling import audit_pairs

    return len(audit_pairs(session, audit_id=audit_id))
