"""The view's covariance and tail tables read ``rcea/audits/`` results that are report
sections as they stand (``CovarianceFit``, ``TailDirectionSummary``): each table holds the
report JSON's numbers, for every scope and selection."""

from __future__ import annotations

import math
from pathlib import Path

from rcea.app.view import report_frames as rf
from rcea.audits.covariance import CovarianceFit
from rcea.audits.tail import TailDirectionSummary
from rcea.study.report.build import build_report
from rcea.study.report.schema import report_json
from rcea.study.store import session_scope
from tests.support.report_study import N_BOOT, make_report_study


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b)
    return a == b or (a is None and isinstance(b, float) and math.isnan(b))


def test_fit_and_direction_tables_hold_the_reports_numbers(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    make_report_study(engine, tmp_path)
    with session_scope(engine) as s:
        rep = build_report(s, study="rep", n_boot=N_BOOT)
    js = report_json(rep)
    assert rep.covariance is not None and rep.tail is not None
    assert isinstance(rep.covariance.pooled, CovarianceFit)
    assert isinstance(rep.tail.direction_counts, TailDirectionSummary)

    fits = rf.fit_frame(rep)
    want = [("pooled (non-failed)", js["covariance"]["pooled"])]
    want += sorted(js["covariance"]["groups"].items())
    assert fits["scope"].tolist() == [w[0] for w in want]
    for (_, fit), row in zip(want, fits.to_dict("records"), strict=True):
        assert all(_same(fit[k], row[k]) for k in rf.FIT_COLUMNS), (fit, row)

    counts = rf.direction_counts_frame(rep.tail.direction_counts)
    dc = js["tail"]["direction_counts"]
    rows = [dc["quantile_tail"], *dc["budgets"]]
    assert counts["selection"].tolist() == [r["selection"] for r in rows]
    assert counts["failure_greater"].tolist() == [r["failure_greater"] for r in rows]
    assert counts["undefined_endpoints"].tolist() == [
        ", ".join(r["undefined_endpoints"]) for r in rows
    ]
