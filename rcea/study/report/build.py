"""``build_report`` (``rcea report build``, the API, the view): the report of one study
from the store — :mod:`rcea.study.report.inputs` reads it, :mod:`rcea.study.report.compute`
computes it. The keys are those of the typed report
``rcea.study.report.schema.StudyReport`` (its field descriptions generate
docs/report-keys.md and the JSON Schema docs/report.schema.json).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session

from rcea.study.report.compute import compute_report_from
from rcea.study.report.inputs import gather_meta
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.schema import StudyReport


def build_report(
    session: Session,
    *,
    study: str,
    params: ReportParameters | None = None,
    include_draws: bool = False,
    progress: bool = False,
    **overrides: Any,
) -> StudyReport:
    """Assemble the report of ``study`` (keys in the module docstring) under ``params``
    (:class:`~rcea.study.report.parameters.ReportParameters`, with keyword ``overrides`` of its
    fields applied; given estimator settings that
    differ from the bound rubric are listed in ``parameters.deviations_from_rubric``).
    ``progress`` shows a tqdm bar over checkpoints; ``include_draws`` keeps the
    rarefaction draws in each retention result (the bundle does).
    """
    params = ReportParameters.of(params, **overrides)
    meta, source = gather_meta(session, study=study, params=params)
    return with_time(
        compute_report_from(meta, source, include_draws=include_draws, progress=progress)
    )


def with_time(report: StudyReport) -> StudyReport:
    """``report`` with ``generated_at`` (UTC now)."""
    report.generated_at = datetime.now(UTC).isoformat(timespec="seconds")
    return report
