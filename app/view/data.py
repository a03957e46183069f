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
