"""What the validity audit has established for a study, read from the event log.

The contract between the judge (writer) and reports/publishing (reader):

* ``judge.run`` events (payload ``judge_hash``, ``judge_name``, ``n_judged``) are appended
  whenever ``rcea judge run`` writes ``validity`` for a study; the latest one says which
  frozen judge the stored validity column comes from.
* ``judge.calibration.completed`` events (payload ``judge_hash``, ``calibration``,
  ``report``) are appended when a calibration's held-out report is complete.

Validity-dependent numbers are publishable only when the judge of the latest run has a
completed calibration bound to the same hash that meets the predeclared acceptance
thresholds (rcea/audits/acceptance.py) and a completed accepted-set check of it meets its
threshold too (docs/validity-audit.md "Acceptance").
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from rcea.audits.acceptance import JudgeAcceptance, calibration_acceptance
from rcea.study import events
from rcea.study.store.repository import list_events

JUDGE_RUN_EVENT = events.JUDGE_RUN
CALIBRATION_COMPLETED_EVENT = events.CALIBRATION_COMPLETED
ACCEPTED_COMPLETED_EVENT = events.ACCEPTED_COMPLETED


def validity_status(session: Session, *, study_id: int) -> dict[str, Any]:
    """``status`` is one of:

    * ``no-judge``: no ``rcea judge run`` for this study (validity, if any, came from the
      ingested files and is not audited);
    * ``uncalibrated``: the latest judge run's judge has no completed calibration;
    * ``calibrated``: it has one (``calibration`` and ``report`` are then filled), the
      report meets the predeclared acceptance thresholds (``acceptance``), and so does the
      latest completed accepted-set check of the judge (accepted-set precision against
      each annotator, lower 95% bound);
    * ``calibration-incomplete``: the held-out calibration passes but no completed
      accepted-set check of the judge is on record (``missing`` says so): validity-
      dependent numbers are refused at publish like a failed gate;
    * ``calibration-failed``: the latest completed calibration (or accepted-set check)
      misses a threshold (``failed_requirements`` names each): validity-dependent numbers
      are refused at publish like a failed pair gate.
    """
    runs = list_events(session, kind=JUDGE_RUN_EVENT, study_id=study_id)
    if not runs:
        return {"status": "no-judge", "judge_hash": None, "calibration": None, "report": None}
    judge_hash = runs[-1].payload.get("judge_hash")
    done = [
        e
        for e in list_events(session, kind=CALIBRATION_COMPLETED_EVENT, study_id=study_id)
        if e.payload.get("judge_hash") == judge_hash
    ]
    if not done:
        return {
            "status": "uncalibrated",
            "judge_hash": judge_hash,
            "judge_name": runs[-1].payload.get("judge_name"),
            "calibration": None,
            "report": None,
        }
    last = done[-1].payload
    acceptance = last.get("acceptance") or calibration_acceptance(
        last.get("report") or {}, JudgeAcceptance.from_dict(None)
    )  # recorded before thresholds existed: the documented defaults, on the balanced sample
    failed = [
        f"calibration {last.get('calibration')}: {r['name']} {_fmt(r['value'])} < {r['threshold']}"
        for r in acceptance["requirements"]
        if not r["passed"]
    ]
    accepted = [
        e.payload
        for e in list_events(session, kind=ACCEPTED_COMPLETED_EVENT, study_id=study_id)
        if e.payload.get("judge_hash") == judge_hash
    ]
    accepted_acc = accepted[-1].get("acceptance") if accepted else None
    if accepted_acc is not None:
        failed += [
            f"accepted-set check {accepted[-1].get('check')}: {r['name']} "
            f"{_fmt(r['value'])} < {r['threshold']}"
            for r in accepted_acc["requirements"]
            if not r["passed"]
        ]
    missing = []
    if accepted_acc is None:  # held-out calibration alone is not "calibrated"
        missing.append(
            f"no completed accepted-set check of judge {str(judge_hash)[:12]}… with its "
            "predeclared acceptance (`rcea judge accepted sample`, push, sync, report)"
        )
    return {
        "status": "calibration-failed"
        if failed
        else ("calibration-incomplete" if missing else "calibrated"),
        "missing": missing,
        "judge_hash": judge_hash,
        "judge_name": runs[-1].payload.get("judge_name"),
        "calibration": last.get("calibration"),
        "report": last.get("report"),
        "acceptance": acceptance,
        "accepted_check": accepted[-1].get("check") if accepted else None,
        "accepted_acceptance": accepted_acc,
        "failed_requirements": failed,
    }


def _fmt(x: Any) -> str:
    return "n/a" if x is None else f"{x:.4f}"
