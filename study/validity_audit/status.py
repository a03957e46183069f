"""What the validity audit has established for a study, read from the event log.

The contract between the judge (writer) and reports/publishing (reader):

* ``judge.run`` events (payload ``judge_hash``, ``judge_name``, ``n_judged``) are appended
  whenever ``rcea judge run`` writes ``validity`` for a study; the latest one says which
  frozen judge the stored validity column comes from.
* ``judge.calibration.completed`` events (payload ``judge_hash``, ``calibration``,
  ``report``) are appended when a calibration's held-out report is complete.

Validity-dependent numbers are publishable only when the judge of the latest run has a
completed calibration bound to the same hash.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from study import events
from study.store.repository import list_events

JUDGE_RUN_EVENT = events.JUDGE_RUN
CALIBRATION_COMPLETED_EVENT = events.CALIBRATION_COMPLETED


def validity_status(session: Session, *, study_id: int) -> dict[str, Any]:
    """``status`` is one of:

    * ``no-judge``: no ``rcea judge run`` for this study (validity, if any, came from the
      ingested files and is not audited);
    * ``uncalibrated``: the latest judge run's judge has no completed calibration;
    * ``calibrated``: it has one (``calibration`` and ``report`` are then filled).
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
    return {
        "status": "calibrated",
        "judge_hash": judge_hash,
        "judge_name": runs[-1].payload.get("judge_name"),
        "calibration": last.get("calibration"),
        "report": last.get("report"),
    }
