"""The judge's calibration figures of a study as rows (docs/validity-audit.md
"Population-weighted figures"): for every completed held-out calibration on record, each
figure on the balanced sample and on the population (with its interval), and the
predeclared threshold on the basis it applies to — what the view's audit page shows."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from rcea.audits.acceptance import CALIBRATION_FIELDS
from rcea.study import events
from rcea.study.store.repository import list_events


def calibration_figure_rows(session: Session, *, study_id: int) -> list[dict[str, Any]]:
    """One row per (completed calibration, figure), in the order recorded: ``calibration``,
    ``outcome``, ``basis``, ``figure``, ``balanced``, ``population``, ``low``, ``high``,
    ``threshold``, ``passed``. A calibration recorded twice (an identical report is
    recorded once) shows its latest record."""
    latest: dict[str, dict[str, Any]] = {}
    for e in list_events(session, kind=events.CALIBRATION_COMPLETED, study_id=study_id):
        latest[str(e.payload.get("calibration"))] = e.payload
    rows: list[dict[str, Any]] = []
    for name, p in latest.items():
        rep = p.get("report") or {}
        pop = rep.get("population") or {}
        acc = p.get("acceptance") or {}
        reqs = {r["name"]: r for r in acc.get("requirements") or []}
        outcome = "recorded" if not acc else ("passed" if acc.get("passed") else "failed")
        for k in CALIBRATION_FIELDS:
            band = (pop.get("intervals") or {}).get(k) or [None, None]
            req = reqs.get(k) or {}
            rows.append(
                {
                    "calibration": name,
                    "outcome": outcome,
                    "basis": acc.get("basis") or "balanced",
                    "figure": k,
                    "balanced": rep.get(k),
                    "population": pop.get(k),
                    "low": band[0],
                    "high": band[1],
                    "threshold": req.get("threshold"),
                    "passed": req.get("passed"),
                }
            )
    return rows
