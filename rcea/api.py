"""The Python API: read a study, a report or a published bundle as pandas DataFrames.

Read-only, for notebooks (docs/notebook.md)::

    from rcea import api

    rep = api.open_bundle("rcea-data/reports/my-study-20261206T101500Z")  # verified first
    rep.checkpoints      # one row per (run, model, step): accuracy, entropies, validity, modes
    rep.estimates        # every labelled number: value, CI, label (audited / unaudited / …)
    rep.gates            # the pair audit's gate requirements and the validity calibration
    rep.attempts         # every audit and calibration attempt on the record
    rep.passk            # pass@k per checkpoint, benchmark and k
    rep.trajectories     # every trajectory's sufficient statistics (no texts)

``open_study(name)`` builds the same object from the store (``RCEA_DATABASE_URL`` /
``RCEA_DATA_DIR``, or ``store_url=``); ``open_report(path)`` reads a report JSON written by
``rcea report build --out``. Nothing here writes to the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from rcea.study.report.build import build_report
from rcea.study.report.inputs import gather_inputs
from rcea.study.report.schema import report_json
from rcea.study.report.sources import ReportSourceError, bundle_rows, report_from_path
from rcea.study.settings import Settings
from rcea.study.store import make_engine, session_scope

__all__ = ["Report", "ReportSourceError", "open_bundle", "open_report", "open_study"]

CHECKPOINT_KEYS = ("run", "model", "step")


@dataclass(frozen=True)
class Report:
    """A report and its DataFrames (computed on first access)."""

    report: dict[str, Any]
    source: str
    _rows: Callable[[], list[dict[str, Any]]] | None = field(default=None, repr=False)

    @property
    def study(self) -> str:
        return str(self.report["study"])

    @cached_property
    def checkpoints(self) -> pd.DataFrame:
        """One row per checkpoint; nested sections flattened as ``entropy.paired_ratio``."""
        rows = [
            {k: v for k, v in c.items() if not isinstance(v, list)}
            for c in self.report.get("checkpoints") or []
        ]
        return pd.json_normalize(rows, max_level=1) if rows else pd.DataFrame()

    @cached_property
    def estimates(self) -> pd.DataFrame:
        """Every labelled quantity (the list the publish gate and ``verify`` use)."""
        rows = [
            {**q, "depends_on": ",".join(q.get("depends_on") or [])}
            for q in self.report.get("quantities") or []
        ]
        return pd.DataFrame(rows)

    @cached_property
    def gates(self) -> pd.DataFrame:
        """Every requirement of the pair gate, the validity calibration and the accepted-set
        check: value, comparator, threshold, passed."""
        rows: list[dict[str, Any]] = []
        audits = self.report.get("audits") or {}
        gate = (audits.get("pair") or {}).get("gate") or {}
        for r in gate.get("requirements") or []:
            rows.append({"audit": "pair", "stage": gate.get("stage"), **r})
        validity = audits.get("validity") or {}
        for check, key in (("calibration", "acceptance"), ("accepted set", "accepted_acceptance")):
            for r in (validity.get(key) or {}).get("requirements") or []:
                rows.append({"audit": f"validity {check}", "stage": validity.get("status"), **r})
        return pd.DataFrame(rows)

    @cached_property
    def attempts(self) -> pd.DataFrame:
        """Every audit and calibration attempt (failed and abandoned ones too)."""
        rows = [
            {k: v for k, v in a.items() if k != "values"} for a in self.report.get("attempts") or []
        ]
        return pd.DataFrame(rows)

    @cached_property
    def passk(self) -> pd.DataFrame:
        """pass@k long: one row per checkpoint, benchmark and k."""
        rows = [
            {
                **{k: p[k] for k in (*CHECKPOINT_KEYS, "benchmark")},
                "k": int(name.rsplit("_", 1)[1]),
                "pass_at_k": v,
            }
            for p in self.report.get("passk") or []
            for name, v in p["pass_at_k"].items()
            if name.rsplit("_", 1)[-1].isdigit()
        ]
        return pd.DataFrame(rows)

    @cached_property
    def trajectories(self) -> pd.DataFrame:
        """Every trajectory's sufficient statistics (reward, entropies, validity, mode, …)."""
        if self._rows is None:
            raise ReportSourceError(
                f"{self.source}: a report file carries no trajectories; open the bundle or the "
                "study instead"
            )
        return pd.DataFrame(self._rows())


def open_bundle(path: str | Path, *, verify: bool = True) -> Report:
    """A published bundle, re-derived first (``verify=False`` skips that)."""
    bundle = Path(path)
    report = report_from_path(bundle, verify=verify)
    return Report(report, str(bundle), lambda: bundle_rows(bundle))


def open_report(path: str | Path) -> Report:
    """A report JSON from ``rcea report build --out`` (or a bundle's ``report.json``)."""
    return Report(report_from_path(Path(path), verify=False), str(path))


def open_study(study: str, *, store_url: str | None = None, **params: Any) -> Report:
    """The report of ``study`` built from the store, as ``rcea report build`` builds it
    (``params``: the same estimator settings, e.g. ``seed=``, ``n_boot=``)."""
    url = store_url or Settings().resolved_database_url
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            report = report_json(build_report(session, study=study, **params))
            rows = gather_inputs(session, study=study, **params)["rows"]
    finally:
        engine.dispose()
    return Report(report, f"study {study}", lambda: rows)
