"""Calibration and accepted-set attempts under a predeclared policy (docs/validity-audit.md
"Attempts"): a FAILED calibration binds the frozen judge (and a failed accepted-set check
does likewise for accepted-set checks).

* Another check of the same kind on the same judge is refused unless the failed check's
  plan carries a ``[recalibration]`` policy (frozen from its rubric when it was drawn)
  that allows more attempts, the new check uses that same rubric, attempts remain and a
  reason is recorded. The refusal names the remedy: a new judge version.
* Attempt k > 1 is judged against the rubric's thresholds tightened by
  ``(k − 1) · tighten``; its items are disjoint from every earlier attempt's, drawn with a
  seed derived from the rubric seed and the attempt (:func:`attempt_seed`); under
  ``correction = "bonferroni"`` its intervals are at confidence 1 − α / max_attempts.
* Any check with no decided record can be abandoned with a reason
  (:func:`abandon_check`); it stays on the record and still counts as an attempt.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from rcea.audits.rubric import RecalibrationPolicy
from rcea.audits.sampling import attempt_seed
from rcea.study import events
from rcea.study.store import append_event, list_events
from rcea.study.store.models import ValidityCheck
from rcea.study.validity_audit.versions import JudgeError

#: the nominal error rate of every interval before a multiplicity correction
ALPHA = 0.05
_COMPLETED = {"calibration": events.CALIBRATION_COMPLETED, "accepted": events.ACCEPTED_COMPLETED}
_ABANDON = {"calibration": events.CALIBRATION_ABANDON, "accepted": events.ACCEPTED_ABANDON}
_NAME_KEY = {"calibration": "calibration", "accepted": "check"}
__all__ = [
    "ALPHA",
    "abandon_check",
    "attempt_check",
    "attempt_seed",
    "current_check",
    "prior_checks",
]


def attempt_alpha(policy: dict[str, Any] | None) -> float:
    """The per-attempt α under the predeclared correction (Bonferroni: α / max_attempts)."""
    if policy and policy.get("correction") == "bonferroni":
        return ALPHA / int(policy.get("max_attempts", 1))
    return ALPHA


def abandon_record(session: Session, check: ValidityCheck) -> dict[str, Any] | None:
    """The abandon event payload of ``check`` (``None``: not abandoned)."""
    for ev in list_events(session, kind=_ABANDON[check.kind], study_id=check.study_id):
        if ev.payload.get("check_id") == check.id:
            return {**ev.payload, "recorded_at": ev.time.isoformat(), "recorded_by": ev.actor}
    return None


def current_check(
    session: Session, *, study_id: int, kind: str, judge_hash: str | None
) -> tuple[ValidityCheck | None, list[str]]:
    """The latest check of ``kind`` on the judge that is not abandoned (``None``: none),
    and the names of the abandoned ones drawn after it: an abandoned attempt stays on the
    record but is no study's current state (``rcea status``, the demo's progress)."""
    abandoned: list[str] = []
    for check in reversed(
        prior_checks(session, study_id=study_id, judge_hash=str(judge_hash), kind=kind)
    ):
        if abandon_record(session, check) is None:
            return check, abandoned
        abandoned.append(check.name)
    return None, abandoned


def decided_outcome(session: Session, check: ValidityCheck) -> str | None:
    """``passed`` | ``failed`` from the check's latest completed record with acceptance
    (``None``: none yet)."""
    key = _NAME_KEY[check.kind]
    out = None
    for ev in list_events(session, kind=_COMPLETED[check.kind], study_id=check.study_id):
        acc = ev.payload.get("acceptance")
        if ev.payload.get(key) == check.name and acc is not None:
            out = "passed" if acc.get("passed") else "failed"
    return out


def abandon_check(
    session: Session, check: ValidityCheck, *, reason: str, actor: str
) -> dict[str, Any]:
    """Record ``check`` as abandoned with ``reason``. Refused without a reason, when it
    is already abandoned, or when it has a decided record (a decided attempt keeps its
    outcome)."""
    what = "calibration" if check.kind == "calibration" else "accepted-set check"
    if not reason or not reason.strip():
        raise JudgeError(f"abandoning {what} {check.name} needs a reason (--reason)")
    if abandon_record(session, check) is not None:
        raise JudgeError(f"{what} {check.name} is already abandoned")
    outcome = decided_outcome(session, check)
    if outcome is not None:
        raise JudgeError(
            f"{what} {check.name} is decided ({outcome}): a decided attempt keeps its "
            "outcome and cannot be abandoned"
        )
    payload = {
        "check_id": check.id,
        _NAME_KEY[check.kind]: check.name,
        "judge_hash": check.judge_hash,
        "reason": reason.strip(),
    }
    append_event(
        session, actor=actor, kind=_ABANDON[check.kind], study_id=check.study_id, payload=payload
    )
    return payload


def prior_checks(
    session: Session, *, study_id: int, judge_hash: str, kind: str
) -> list[ValidityCheck]:
    """Every earlier check of ``kind`` on the judge in the study, in the order drawn."""
    return list(
        session.exec(
            select(ValidityCheck)
            .where(
                ValidityCheck.study_id == study_id,
                ValidityCheck.judge_hash == judge_hash,
                ValidityCheck.kind == kind,
            )
            .order_by(col(ValidityCheck.id))
        ).all()
    )


def attempt_check(
    session: Session,
    *,
    study_id: int,
    judge_hash: str,
    kind: str,
    rubric_hash: str | None,
    policy: RecalibrationPolicy,
    reason: str | None,
) -> dict[str, Any]:
    """Whether another check of ``kind`` may be drawn on the judge (see the module
    docstring). Returns ``attempt`` (its number), ``failed_before`` (names), ``policy``
    (the binding one, or the rubric's for a first attempt), ``tighten_by`` and ``alpha``;
    raises :class:`JudgeError` naming the remedy."""
    prior = prior_checks(session, study_id=study_id, judge_hash=judge_hash, kind=kind)
    failed = [c for c in prior if decided_outcome(session, c) == "failed"]
    attempt = len(prior) + 1
    out: dict[str, Any] = {
        "attempt": attempt,
        "failed_before": [c.name for c in failed],
        "policy": policy.to_dict() if policy.allows_recalibration else None,
        "tighten_by": 0.0,
        "alpha": attempt_alpha(policy.to_dict()),
    }
    if not failed:
        return out
    first = failed[0]
    what = "calibration" if kind == "calibration" else "accepted-set check"
    cmd = "calibrate" if kind == "calibration" else "accepted"
    instead = (
        "a failed check binds its frozen judge. Instead freeze a new judge version "
        "(`rcea judge freeze` with the changed template, model or settings), run it "
        "(`rcea judge run`) and calibrate that; the failed attempt stays on the record"
    )
    where = f"judge {judge_hash[:12]}…: {what} {first.name} FAILED"
    bound = first.plan.get("recalibration")
    bound_policy = RecalibrationPolicy(**bound) if bound else RecalibrationPolicy()
    if not bound_policy.allows_recalibration:
        raise JudgeError(
            f"refusing another {what} of {where} and its frozen rubric predeclared no "
            f"re-calibration policy ([recalibration] max_attempts > 1); {instead}"
        )
    if rubric_hash != first.plan.get("rubric_hash"):
        raise JudgeError(
            f"refusing another {what} of {where}: a re-calibration must use the rubric that "
            f"predeclared it ({str(first.plan.get('rubric_hash'))[:12]}…), not "
            f"{str(rubric_hash)[:12]}…; {instead}"
        )
    if len(prior) >= bound_policy.max_attempts:
        raise JudgeError(
            f"refusing another {what} of {where}: the rubric's [recalibration] max_attempts "
            f"= {bound_policy.max_attempts} are spent ({len(prior)} attempts); {instead}"
        )
    if not reason:
        raise JudgeError(
            f"another {what} of {where}: the rubric allows {bound_policy.max_attempts} "
            f"attempts (thresholds +{bound_policy.tighten} each, correction "
            f"{bound_policy.correction}), but a re-calibration needs a recorded reason "
            f"(`rcea judge {cmd} sample --reason ...`)"
        )
    out["policy"] = bound_policy.to_dict()
    out["tighten_by"] = round(bound_policy.tighten * (attempt - 1), 12)
    out["alpha"] = attempt_alpha(out["policy"])
    return out
