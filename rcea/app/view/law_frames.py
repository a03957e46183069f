"""Frames and the chart of the Entropy page's entropy–performance law (docs/estimators.md
item 18), cut from the report's ``entropy_law`` section. The drawn curves come from
:func:`rcea.study.report.entropy_law.law_curves` (the section's own fits on its points)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from rcea.study.report.entropy_law import law_curves
from rcea.study.report.schema import StudyReport

LAW_COLUMNS = ["run", "entropy", "a", "b", "r2", "rmse", "n", "ceiling", "early_fit_rmse"]
KIND_ORDER = ["global", "success", "failure"]


def law_table(report: StudyReport) -> pd.DataFrame:
    """One row per run and logged entropy: a, b, R², RMSE, n, ceiling, early-fit RMSE."""
    sec = report.entropy_law
    rows = []
    for r in sec.runs if sec else []:
        for kind in KIND_ORDER:
            law = r.entropies.get(kind)
            if law is not None:
                rows.append(
                    {"run": r.label, "entropy": kind, "a": law.a, "b": law.b, "r2": law.r2,
                     "rmse": law.rmse, "n": law.n, "ceiling": law.ceiling,
                     "early_fit_rmse": law.early_fit_rmse}
                )  # fmt: skip
    return pd.DataFrame(rows, columns=LAW_COLUMNS)


def law_frames(report: StudyReport) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(points, curves): :func:`law_curves` of the report's section as frames."""
    sec = report.entropy_law
    points, curves = law_curves(sec.model_dump() if sec else None)
    return (
        pd.DataFrame(points, columns=["series", "entropy", "step", "H", "R", "window"]),
        pd.DataFrame(curves, columns=["series", "entropy", "H", "fitted", "early", "low", "high"]),
    )


def ordering_table(report: StudyReport) -> pd.DataFrame:
    """RQ1: one row per model and metric (τ-b, permutation p, n, excluded runs)."""
    sec = report.entropy_law
    cols = ["model", "metric", "kendall_tau", "p_value", "p_method", "n", "excluded"]
    if sec is None or sec.ordering is None:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame(
        [
            {"model": model, "metric": m.metric, "kendall_tau": m.kendall_tau,
             "p_value": m.p_value, "p_method": m.p_method, "n": m.n,
             "excluded": ", ".join(res.excluded)}
            for model, res in sec.ordering.by_model.items()
            for m in res.metrics
        ],
        columns=cols,
    )  # fmt: skip


SCALING_COLUMNS = [
    "run", "sizes", "a_slope", "a_intercept", "b_slope", "b_intercept", "largest",
    "predicted_ceiling", "fitted_ceiling", "ceiling_error", "reason",
]  # fmt: skip


def scaling_table(report: StudyReport) -> pd.DataFrame:
    """One row per (run, seed) with runs at several sizes: a and b on log N, the largest
    size's ceiling predicted from the others against its own, or why undefined."""
    sec = report.entropy_law
    rows = []
    for e in sec.scaling if sec else []:
        rows.append(
            {"run": e.run if e.seed is None else f"{e.run}:seed{e.seed}",
             "sizes": ", ".join(f"{lab} ({n:,.0f})" for lab, n in zip(e.labels, e.n_params,
                                                                     strict=True)),
             "a_slope": e.a_fit.slope, "a_intercept": e.a_fit.intercept,
             "b_slope": e.b_fit.slope, "b_intercept": e.b_fit.intercept, "largest": e.largest,
             "predicted_ceiling": e.predicted_ceiling, "fitted_ceiling": e.fitted_ceiling,
             "ceiling_error": e.ceiling_error, "reason": e.reason}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=SCALING_COLUMNS)


def law_panels(points: pd.DataFrame, curves: pd.DataFrame) -> alt.FacetChart:
    """R against H, one panel per entropy (global, success, failure): the paired points
    (filled: the early window), the fitted law (solid), the early fit's prediction (dashed)
    and its 95 % prediction band (shaded), one colour per run."""
    data = pd.concat([points.assign(layer="point"), curves.assign(layer="curve")])
    base = alt.Chart().encode(
        x=alt.X("H:Q", title="entropy H (nats)", scale=alt.Scale(zero=False)),
        color=alt.Color("series:N", title="run"),
    )
    band = (
        base.transform_filter(alt.datum.layer == "curve")
        .mark_area(opacity=0.15)
        .encode(y=alt.Y("low:Q", title="accuracy R"), y2="high:Q")
    )
    fitted = base.transform_filter(alt.datum.layer == "curve").mark_line().encode(y="fitted:Q")
    early = (
        base.transform_filter(alt.datum.layer == "curve")
        .mark_line(strokeDash=[4, 3])
        .encode(y="early:Q")
    )
    dots = (
        base.transform_filter(alt.datum.layer == "point")
        .mark_point(filled=True)
        .encode(
            y="R:Q",
            shape=alt.Shape("window:N", title="fit window"),
            tooltip=[
                "series",
                "entropy",
                "step",
                alt.Tooltip("H:Q", format=".4f"),
                alt.Tooltip("R:Q", format=".4f"),
                "window",
            ],
        )  # fmt: skip
    )
    return alt.layer(band, fitted, early, dots, data=data).facet(
        column=alt.Column("entropy:N", title=None, sort=KIND_ORDER)
    )
