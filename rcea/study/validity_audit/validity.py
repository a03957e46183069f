"""The validity rate v̂₊(x) and h_b(v̂₊) per checkpoint for the entropy report
(docs/estimators.md item 4), from the verdicts of the study's production judge.

The production judge is the judge of the latest ``judge.run`` event. For each
(run, model, step) group, :func:`rcea.audits.validity.validity_rate` gets every trajectory with
its reward and the judge's verdict: ``valid`` → 1, ``invalid`` → 0, ``unparseable`` →
``"unparseable"``, and no verdict yet → ``None`` (both count against judge coverage and
never as acceptances). The result carries
:func:`rcea.study.validity_audit.status.validity_status` so a
reader knows whether the numbers are backed by a completed calibration.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from rcea.audits.validity import validity_groups
from rcea.study.store.models import JudgeVerdict, Trajectory
from rcea.study.validity_audit.checks import production_judge
from rcea.study.validity_audit.status import validity_status


def validity_by_checkpoint(
    session: Session,
    *,
    study_id: int,
    k_min: int = 8,
    include_questions: bool = True,
    rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``{"status": validity_status(...), "judge": ..., "groups": [{run, model, step,
    **ValidityResult.to_dict()}]}``. ``rows`` (dicts with run, model, step, question_id,
    reward, trajectory_id) are the study's trajectories when the caller has already read
    them (the report); otherwise they are read here."""
    status = validity_status(session, study_id=study_id)
    if status["status"] == "no-judge":
        return {"validity_status": status, "judge": None, "groups": []}
    judge = production_judge(session, study_id=study_id)
    verdicts = production_verdicts(session, study_id=study_id, judge=judge)
    if rows is None:
        cols = ("run", "model", "step", "question_id", "reward", "trajectory_id")
        rows = [
            dict(zip(cols, r, strict=True))
            for r in session.exec(
                select(*(getattr(Trajectory, c) for c in cols)).where(
                    Trajectory.study_id == study_id
                )
            ).all()
        ]
    out = validity_groups(rows, verdicts, k_min=k_min, include_questions=include_questions)
    return {
        "validity_status": status,
        "judge": {"name": judge.name, "version": judge.version, "judge_hash": judge.content_hash},
        "groups": out,
    }


def production_verdicts(session: Session, *, study_id: int, judge: Any = None) -> dict[str, str]:
    """Trajectory id → verdict (``valid``/``invalid``/``unparseable``) of the study's
    production judge (raises ``JudgeError`` when the latest judge run names no stored
    judge)."""
    judge = judge if judge is not None else production_judge(session, study_id=study_id)
    return dict(
        session.exec(
            select(JudgeVerdict.trajectory_id, JudgeVerdict.verdict).where(
                JudgeVerdict.judge_id == judge.id, JudgeVerdict.study_id == study_id
            )
        ).all()
    )
