"""Reports of the validity checks (docs/estimators.md item 12) from the stored labels.

* :func:`calibration_report` — on the **held-out** split (default): judge verdicts bound at
  sampling vs the human labels, through :func:`rcea.audits.calibration.judge_calibration`
  (accuracy, macro-F1, accepted-valid precision, valid recall, coverage). While some
  held-out item has no label the status is ``pending`` (numbers over the labelled ones,
  marked preliminary). With two annotators per item (rubric ``[calibration]
  annotators_per_item = 2``) the human reference of an item is the agreed label, or the
  adjudicated one where A and B disagreed, and the report adds the A–B agreement and the
  progress of A, B and the adjudicator. When every held-out item has a reference the
  status is ``complete``, the report is held against the predeclared acceptance
  thresholds frozen into the check's plan (``acceptance``, ``outcome`` passed | failed;
  rcea/audits/acceptance.py) and a ``judge.calibration.completed`` event binds the report and
  its acceptance to the judge hash (once per identical report). ``split="development"``
  reports the development items labelled ``held_out: false``: it is never recorded as, or
  reported as, a held-out result.
* :func:`accepted_report` — accepted-valid precision of the judge's accepted set against
  each of the two annotators with exact binomial (Clopper–Pearson) intervals, over the
  items both have labelled (``complete`` when that is every item; then the lower bound of
  the 95% interval per annotator is held against the threshold, ``acceptance`` and
  ``outcome``, and a ``judge.accepted.completed`` event records both).
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from rcea.audits.acceptance import ACCEPTED_CONFIDENCE, accepted_acceptance, calibration_acceptance
from rcea.audits.calibration import (
    accepted_set_precision,
    calibration_figures,
    validity_agreement,
)
from rcea.study import events
from rcea.study.store import append_event, list_events
from rcea.study.store.models import JudgeVersion, ValidityCheck
from rcea.study.validity_audit.attempts import ALPHA, abandon_record
from rcea.study.validity_audit.checks import (
    ACCEPTED,
    CALIBRATION,
    DEVELOPMENT,
    HELD_OUT,
    bootstrap_settings,
    check_acceptance,
    check_items,
    population_counts,
)
from rcea.study.validity_audit.labelling import (
    ADJUDICATOR,
    current_labels,
    double_labelled,
    ensure_judge_frozen,
    human_reference,
    status_counts,
)
from rcea.study.validity_audit.status import CALIBRATION_COMPLETED_EVENT

ACCEPTED_COMPLETED_EVENT = events.ACCEPTED_COMPLETED
SPLITS = {"held-out": HELD_OUT, "held_out": HELD_OUT, "development": DEVELOPMENT}


def _record_once(
    session: Session, kind: str, study_id: int, actor: str, payload: dict[str, Any]
) -> None:
    """Append a ``kind`` event with ``payload`` unless the study's log holds the same one
    (a report recomputed on a decided check records its completion once)."""
    if payload not in [e.payload for e in list_events(session, kind=kind, study_id=study_id)]:
        append_event(session, actor=actor, kind=kind, study_id=study_id, payload=payload)


def _judge_info(session: Session, check: ValidityCheck) -> dict[str, Any]:
    row = ensure_judge_frozen(session, check)
    latest = session.exec(
        select(JudgeVersion)
        .where(JudgeVersion.name == row.name)
        .order_by(JudgeVersion.version.desc())  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
    ).first()
    return {
        "judge_name": row.name,
        "judge_version": row.version,
        "judge_hash": check.judge_hash,
        "judge_is_latest_version": latest is None or latest.id == row.id,
    }


def attempt_info(session: Session, check: ValidityCheck) -> dict[str, Any]:
    """Which attempt on the judge the check is, why it was drawn, the policy it ran under,
    the per-attempt α of its intervals, the thresholds it is judged against, and its
    abandon record (rcea/study/validity_audit/attempts.py; checks drawn before attempts
    were recorded: attempt ``None``, α 0.05)."""
    policy = check.plan.get("recalibration")
    return {
        "attempt": check.plan.get("attempt"),
        "reason": check.plan.get("reason"),
        "failed_before": check.plan.get("failed_before") or [],
        "policy": policy,
        "correction": (policy or {}).get("correction", "none"),
        "alpha": check.plan.get("alpha", ALPHA),
        "tighten_by": check.plan.get("tighten_by", 0.0),
        "thresholds": check_acceptance(check).to_dict(),
        "abandoned": abandon_record(session, check),
    }


def calibration_report(
    session: Session, check: ValidityCheck, *, split: str = "held-out", actor: str = "rcea"
) -> dict[str, Any]:
    """The calibration report of one split (see the module docstring)."""
    if check.kind != CALIBRATION:
        raise ValueError(f"{check.name} is an accepted-set check, not a calibration")
    if split not in SPLITS:
        raise ValueError(f"--split must be held-out or development, got {split!r}")
    part = SPLITS[split]
    items = [i for i in check_items(session, check_id=check.id) if i.split == part]  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    human_of = human_reference(session, check)
    done = [i for i in items if i.id in human_of]
    held_out = part == HELD_OUT
    complete = bool(items) and len(done) == len(items)
    base: dict[str, Any] = {
        "calibration": check.name,
        "split": part,
        "held_out": held_out,
        **_judge_info(session, check),
        "n_items": len(items),
        "n_labelled": len(done),
        "labels": status_counts(session, check),
        "status": "complete" if complete else "pending",
        "preliminary": not complete,
        "publishable": held_out and complete,
        "outcome": "undecided",
        **attempt_info(session, check),
    }
    if double_labelled(check):
        base.update(_two_annotators(session, check, items))
    if not held_out:
        base["note"] = (
            "development split: for improving the judge; never a held-out result and never "
            "recorded as a completed calibration"
        )
    if not done:
        return {**base, "report": None}
    report = calibration_figures(
        [human_of[i.id] for i in done],  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        [i.judge_verdict for i in done],
        population_counts(session, check),
        **bootstrap_settings(check),
    )
    out = {**base, "report": report}
    if base["abandoned"] is not None:  # stays on the record as abandoned, never decided
        out["outcome"] = "abandoned"
        return out
    if held_out and complete:  # decided: the predeclared acceptance thresholds apply
        acceptance = calibration_acceptance(report, check_acceptance(check))
        out["acceptance"] = acceptance
        out["outcome"] = "passed" if acceptance["passed"] else "failed"
        payload = {
            "judge_hash": check.judge_hash,
            "judge_name": base["judge_name"],
            "judge_version": base["judge_version"],
            "calibration": check.name,
            "split": HELD_OUT,
            "report": report,
            "acceptance": acceptance,
        }
        _record_once(session, CALIBRATION_COMPLETED_EVENT, check.study_id, actor, payload)
    return out


def _two_annotators(session: Session, check: ValidityCheck, items: list[Any]) -> dict[str, Any]:
    """Progress of A, B and the adjudicator on ``items``, and A–B agreement before
    adjudication (adjudication cannot change it)."""
    labels = current_labels(session, check)
    a, b, adj = labels.get("A", {}), labels.get("B", {}), labels.get(ADJUDICATOR, {})
    both = [i for i in items if i.id in a and i.id in b]
    disputed = [i for i in both if a[i.id] != b[i.id]]
    agreement = (
        validity_agreement([a[i.id] for i in both], [b[i.id] for i in both]).to_dict()
        if both
        else None
    )
    return {
        "annotators_per_item": 2,
        "progress": {
            "A": sum(i.id in a for i in items),
            "B": sum(i.id in b for i in items),
            "both": len(both),
            ADJUDICATOR: sum(i.id in adj for i in disputed),
        },
        "n_needing_adjudication": len(disputed),
        "human_agreement": agreement,
    }


def accepted_report(
    session: Session, check: ValidityCheck, *, confidence: float = 0.95, actor: str = "rcea"
) -> dict[str, Any]:
    """Accepted-set precision per annotator (see the module docstring)."""
    if check.kind != ACCEPTED:
        raise ValueError(f"{check.name} is a calibration, not an accepted-set check")
    items = check_items(session, check_id=check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    labels = current_labels(session, check)
    a, b = labels.get("A", {}), labels.get("B", {})
    both = [i for i in items if i.id in a and i.id in b]
    complete = bool(items) and len(both) == len(items)
    base: dict[str, Any] = {
        "check": check.name,
        **_judge_info(session, check),
        "n_items": len(items),
        "progress": {"A": len(a), "B": len(b), "both": len(both)},
        "labels": status_counts(session, check),
        "status": "complete" if complete else "pending",
        "preliminary": not complete,
        "outcome": "undecided",
        **attempt_info(session, check),
    }
    if not both:
        return {**base, "report": None}
    report = accepted_set_precision(
        [a[i.id] for i in both],  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        [b[i.id] for i in both],  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        confidence,
    ).to_dict()
    out: dict[str, Any] = {**base, "report": report}
    if base["abandoned"] is not None:  # stays on the record as abandoned, never decided
        out["outcome"] = "abandoned"
        return out
    if complete:  # decided: the lower 95% bound per annotator against the threshold
        at95 = accepted_set_precision(
            [a[i.id] for i in both],  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
            [b[i.id] for i in both],  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
            ACCEPTED_CONFIDENCE,
        ).to_dict()
        acceptance = accepted_acceptance(at95, check_acceptance(check))
        out["acceptance"] = acceptance
        out["outcome"] = "passed" if acceptance["passed"] else "failed"
        payload = {
            "judge_hash": check.judge_hash,
            "check": check.name,
            "report": report,
            "acceptance": acceptance,
        }
        _record_once(session, ACCEPTED_COMPLETED_EVENT, check.study_id, actor, payload)
    return out
