"""The report pages' read: the typed study report at the sidebar's settings."""

from __future__ import annotations

from rcea.app.view.data import engine
from rcea.study.report.build import build_report
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.schema import StudyReport
from rcea.study.settings import Settings
from rcea.study.store import session_scope


def report(
    study: str,
    settings: Settings | None = None,
    *,
    n_boot: int,
    seed: int = 0,
    k_min: int = 8,
) -> StudyReport:
    """``rcea.study.report.build.build_report`` of the study (the view uses a small ``n_boot``;
    the published report uses the full B): the typed report
    ``rcea.study.report.schema.StudyReport`` that the API returns and the bundle carries: the
    pages read its typed sections, never the raw JSON."""

    with session_scope(engine(settings)) as session:
        params = ReportParameters(seed=seed, n_boot=n_boot, k_min=k_min)
        return build_report(session, study=study, params=params)
