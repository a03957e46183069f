"""The Modes page's reads: each question's codebook and its versions, the mode names, and
the mode counts per checkpoint the report's mode numbers use."""

from __future__ import annotations

from typing import Any

import pandas as pd

from rcea.app.view.data import engine, example
from rcea.app.view.report_frames import checkpoint_label
from rcea.study.codebook import get_draft
from rcea.study.codebook.common import versions_by_question
from rcea.study.codebook.review import codebook_list
from rcea.study.report.estimates import UNCERTAIN
from rcea.study.report.inputs import mode_labels
from rcea.study.settings import Settings
from rcea.study.store import require_study, session_scope
from rcea.study.store.repository import trajectories_by_id

CODEBOOK_COLUMNS = [
    "question_id", "status", "version", "n_versions", "n_modes", "content_hash", "frozen_at",
]  # fmt: skip


def codebooks_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per question with a codebook (:func:`rcea.study.codebook.review.codebook_list`,
    which ``rcea codebook show`` prints): the latest frozen version (or ``draft``), its
    hash, how many versions and modes."""

    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        rows = codebook_list(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    for r in rows:
        r["n_modes"] = len(r["modes"])
        r["content_hash"] = r["content_hash"][:12] if r["content_hash"] else None
    return pd.DataFrame(rows, columns=CODEBOOK_COLUMNS)


def codebook_versions(
    study: str, question_id: str, settings: Settings | None = None
) -> list[dict[str, Any]]:
    """The versions of one question's codebook, newest first (the draft alone when none is
    frozen): hash, parent version, reason, who froze it, and each mode's definition with
    its example trajectories (text and provenance)."""

    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        vs = versions_by_question(session, study_id=st.id).get(question_id, [])  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        by_id = {v.id: v for v in vs}
        entries: list[dict[str, Any]] = [
            {
                "label": f"v{v.version}",
                "version": v.version,
                "content_hash": v.content_hash,
                "parent_version": by_id[v.parent_id].version if v.parent_id in by_id else None,
                "reason": v.reason,
                "frozen_by": v.frozen_by,
                "frozen_at": v.frozen_at,
                "prompts": v.prompts,
                "modes": v.modes,
            }
            for v in reversed(vs)
        ]
        if not entries:
            draft = get_draft(session, study_id=st.id, question_id=question_id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            if draft is not None:
                entries.append({"label": "draft", "version": None, "modes": draft.modes})
        ids = [t for e in entries for m in e["modes"] for t in m.get("examples", [])]
        rows = trajectories_by_id(session, study_id=st.id, ids=ids)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        for e in entries:
            e["modes"] = [
                {
                    **m,
                    "example_trajectories": [
                        example(rows.get(t), t) for t in m.get("examples", [])
                    ],
                }
                for m in e["modes"]
            ]
        return entries


def mode_names(study: str, settings: Settings | None = None) -> dict[str, dict[str, str]]:
    """question id → mode id → the mode's name in the question's latest frozen codebook
    (the partition labels trajectories by id: ``m1``, ``m2`` …)."""

    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        return {
            q: {str(m["id"]): str(m["name"]) for m in vs[-1].modes if "id" in m and "name" in m}
            for q, vs in versions_by_question(session, study_id=st.id).items()  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            if vs
        }


def mode_distribution(
    study: str, pair: dict[str, Any], settings: Settings | None = None
) -> pd.DataFrame:
    """Mode counts per (question, checkpoint) of the trajectories the report's mode numbers
    use: R = 1, judge-accepted, labelled by the partition in ``pair`` (the report's
    ``audits.pair``; the ``mode`` column when it names none); ``uncertain`` counted but
    excluded from ``share``. Columns: question_id, checkpoint, run, model, step, mode,
    count, share.

    Reads through the report's own selection (``rcea.study.report.build``), so the bars are of
    exactly the labels its retention and mode entropy are computed from."""

    with session_scope(engine(settings)) as session:
        modes = mode_labels(session, study_id=require_study(session, name=study).id, pair=pair)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    out = []
    for (run, model, step), by_q in sorted(modes.items(), key=lambda kv: kv[0]):
        for q, labels in sorted(by_q.items()):
            n_incl = sum(m != UNCERTAIN for m in labels)
            for mode in sorted(set(labels)):
                count = labels.count(mode)
                out.append(
                    {
                        "question_id": q,
                        "checkpoint": checkpoint_label(run, model, step),
                        "run": run,
                        "model": model,
                        "step": step,
                        "mode": mode,
                        "count": count,
                        "share": None if mode == UNCERTAIN or not n_incl else count / n_incl,
                    }
                )
    return pd.DataFrame(
        out,
        columns=["question_id", "checkpoint", "run", "model", "step", "mode", "count", "share"],
    )
