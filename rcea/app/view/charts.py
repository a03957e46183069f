"""Altair chart builders for the view. Each takes a tidy frame (column names in the
docstring) and returns an ``alt.Chart``/``alt.LayerChart``; none reads the store."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

LABELS = ("same", "different")


def accuracy_by_step(df: pd.DataFrame) -> alt.Chart:
    """Verifier accuracy per checkpoint: columns ``run``, ``model``, ``step``, ``accuracy``."""
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("step:Q", title="step"),
            y=alt.Y("accuracy:Q", title="verifier accuracy", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("run:N"),
            strokeDash=alt.StrokeDash("model:N"),
            tooltip=["run", "model", "step", "n", alt.Tooltip("accuracy:Q", format=".3f")],
        )
    )


def entropy_traces(df: pd.DataFrame, *, title: str = "entropy") -> alt.Chart:
    """Training traces on normalised progress (Figure 1/3 style): columns ``run``
    (objective), ``model``, ``series`` (one line per (run, model)), ``step``,
    ``progress`` (step / max_steps, 0–1) and ``value`` (the logged quantity named
    ``title``; renamed so that any logged key, dots included, is safe as a Vega-Lite
    field)."""
    return (
        alt.Chart(df)
        .mark_line()
        .encode(
            x=alt.X("progress:Q", title="training progress", axis=alt.Axis(format="%")),
            y=alt.Y("value:Q", title=title),
            color=alt.Color("series:N", title="objective · model"),
            tooltip=[
                "run",
                "model",
                "step",
                alt.Tooltip("progress:Q", format=".0%"),
                alt.Tooltip("value:Q", title=title),
            ],
        )
    )


def checkpoint_order(df: pd.DataFrame) -> list[str]:
    """The checkpoints in the frame's order (the pages sort by run, model, step), once."""
    return [str(c) for c in dict.fromkeys(df["checkpoint"])] if len(df) else []


def checkpoint_axis(df: pd.DataFrame, *, title: str = "checkpoint") -> alt.X:
    """An explicit ordinal x axis with a label for every checkpoint: the order is given
    (not left to Vega-Lite) and overlapping labels are never dropped (the default hides
    every other one when they crowd, e.g. the step-50 checkpoints)."""
    order = checkpoint_order(df)
    axis = alt.Axis(labelAngle=-40, labelLimit=320, labelOverlap=False, values=order)
    return alt.X("checkpoint:O", title=title, sort=order, axis=axis)


def ratio_with_ci(df: pd.DataFrame, *, title: str = "failed / successful") -> alt.LayerChart:
    """Point estimate with 95% CI error bars per checkpoint and the line y = 1 (Figure 4/5
    style): columns ``checkpoint``, ``estimate``, ``ci_low``, ``ci_high`` (CI may be
    missing, then only the point is drawn)."""
    base = alt.Chart(df).encode(x=checkpoint_axis(df))
    points = base.mark_point(filled=True, size=80).encode(
        y=alt.Y("estimate:Q", title=title, scale=alt.Scale(zero=False)),
        tooltip=[
            "checkpoint",
            alt.Tooltip("estimate:Q", format=".3f"),
            alt.Tooltip("ci_low:Q", format=".3f"),
            alt.Tooltip("ci_high:Q", format=".3f"),
        ],
    )
    bars = base.mark_errorbar(ticks=True).encode(
        y=alt.Y("ci_low:Q", title=title), y2=alt.Y2("ci_high:Q")
    )
    one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4]).encode(y="y:Q")
    return alt.layer(bars, points, one)  # type: ignore[return-value]  # altair's stubs widen a layered chart with .properties() to LayerChart | FacetChart


def delta_h_scatter(df: pd.DataFrame, color: str = "run") -> alt.LayerChart:
    """Predicted vs observed ΔH per transition with the identity line y = x (Figure 6
    style): columns ``predicted``, ``observed``, ``run``, ``model``, ``transition`` (and
    ``color``'s column: item 16's fit by mode group colours by ``group``)."""
    values = pd.concat([df["predicted"], df["observed"]]).astype(float)
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (-1.0, 1.0)
    pad = (hi - lo) * 0.05 or 0.01
    ident = pd.DataFrame({"x": [lo - pad, hi + pad], "y": [lo - pad, hi + pad]})
    scale = alt.Scale(domain=[lo - pad, hi + pad])
    points = (
        alt.Chart(df)
        .mark_point(filled=True, size=60)
        .encode(
            x=alt.X("predicted:Q", title="predicted ΔH = −Cov(log π, Δz)", scale=scale),
            y=alt.Y("observed:Q", title="observed ΔH", scale=scale),
            color=alt.Color(f"{color}:N"),
            shape=alt.Shape("model:N"),
            tooltip=list(
                dict.fromkeys([color, "run", "model", "transition", "predicted", "observed"])
            ),
        )
    )
    line = alt.Chart(ident).mark_line(strokeDash=[4, 4], color="gray").encode(x="x:Q", y="y:Q")
    return alt.layer(line, points)  # type: ignore[return-value]  # altair's stubs widen a layered chart with .properties() to LayerChart | FacetChart


def mode_label(mode: str, names: dict[str, str]) -> str:
    """``name (id)`` for a mode id the codebook names (``m1`` → ``direct (m1)``); other
    labels (already names, ``uncertain``) unchanged."""
    name = names.get(mode)
    return f"{name} ({mode})" if name and name != mode else mode


def mode_distribution(df: pd.DataFrame) -> alt.Chart:
    """Mode shares of one question, base vs checkpoint side by side: columns ``mode``,
    ``checkpoint``, ``share``, ``count``."""
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("mode:N", title="mode"),
            xOffset=alt.XOffset("checkpoint:N", sort=None),
            y=alt.Y("share:Q", title="share of included trajectories", axis=alt.Axis(format="%")),
            color=alt.Color("checkpoint:N", sort=None),
            tooltip=["mode", "checkpoint", "count", alt.Tooltip("share:Q", format=".1%")],
        )
    )


def confusion_frame(confusion: dict[str, dict[str, int]]) -> pd.DataFrame:
    """``confusion[reference][predicted]`` → long frame (reference, predicted, count)."""
    return pd.DataFrame(
        [
            {"reference": ref, "predicted": pred, "count": int(confusion[ref][pred])}
            for ref in LABELS
            for pred in LABELS
        ]
    )


def confusion_heatmap(
    confusion: dict[str, dict[str, int]], *, x_title: str, y_title: str
) -> alt.LayerChart:
    """2×2 heatmap with counts: rows = reference (``y_title``), columns = compared labels
    (``x_title``)."""
    df = confusion_frame(confusion)
    order: list[Any] = list(LABELS)
    base = alt.Chart(df).encode(
        x=alt.X("predicted:N", title=x_title, sort=order),
        y=alt.Y("reference:N", title=y_title, sort=order),
    )
    rect = base.mark_rect().encode(
        color=alt.Color("count:Q", scale=alt.Scale(scheme="blues"), legend=None),
        tooltip=["reference", "predicted", "count"],
    )
    text = base.mark_text(fontSize=16).encode(text="count:Q")
    return alt.layer(rect, text).properties(width=220, height=180)  # type: ignore[return-value]  # altair's stubs widen a layered chart with .properties() to LayerChart | FacetChart


def progress_bars(df: pd.DataFrame) -> alt.Chart | None:
    """Labelling progress per role: columns ``role``, ``labelled``, ``of``; the x scale
    runs from 0 to the largest ``of``. None before any label (a chart of zeros has a
    degenerate axis)."""
    if df.empty or int(df["labelled"].fillna(0).sum()) == 0:
        return None
    top = max(int(df["of"].fillna(0).max()), int(df["labelled"].max()), 1)
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y("role:N", sort=None),
            x=alt.X(
                "labelled:Q",
                title="pairs labelled",
                scale=alt.Scale(domain=[0, top]),
                axis=alt.Axis(format="d", tickMinStep=1),
            ),
            tooltip=["role", "labelled", "of"],
        )
    )


def rolling_agreement(df: pd.DataFrame) -> alt.Chart | None:
    """Agreement with the final reference over a rolling window of labels, one line per
    round (columns ``round``, ``upto``, ``agreement``); None without any window."""
    if df.empty:
        return None
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("upto:Q", title="labels so far", axis=alt.Axis(format="d")),
            y=alt.Y("agreement:Q", title="rolling agreement", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("round:N"),
            tooltip=["round", "upto", alt.Tooltip("agreement:Q", format=".2f")],
        )
    )


def entropy_split(df: pd.DataFrame) -> alt.FacetChart:
    """Global token entropy next to the successful/failed split, one panel per run: columns
    ``series`` (objective · model), ``step``, ``progress``, ``quantity`` and ``value``."""
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("progress:Q", title="training progress", axis=alt.Axis(format="%")),
            y=alt.Y("value:Q", title="token entropy (nats)"),
            color=alt.Color("quantity:N", title="completions"),
            tooltip=["series", "step", "quantity", alt.Tooltip("value:Q", format=".4f")],
        )
        .facet(row=alt.Row("series:N", title=None))
    )


def mode_split(df: pd.DataFrame) -> alt.Chart:
    """Between-mode vs within-mode entropy per checkpoint (docs/estimators.md item 15),
    bars side by side: columns ``checkpoint``, ``part`` and ``value`` (nats)."""
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            # its own axis title: the page's retention chart is the one titled "checkpoint"
            x=checkpoint_axis(df, title="checkpoint (accepted, assigned successes)"),
            xOffset=alt.XOffset("part:N"),
            y=alt.Y("value:Q", title="entropy of accepted successes (nats)"),
            color=alt.Color("part:N", title="part of Ĥ(Y|C,x)"),
            tooltip=["checkpoint", "part", alt.Tooltip("value:Q", format=".4f")],
        )
    )


def seed_spread(df: pd.DataFrame) -> alt.FacetChart:
    """Each training seed's estimate (coloured by seed) and the across-seed mean (black
    diamond) with its interval per (run, model, step) (docs/estimators.md item 17), one row
    of panels per estimator, each on its own y scale: columns ``checkpoint``,
    ``estimator``, ``kind`` (``seed`` / ``mean``), ``train_seed``, ``value``, ``ci_low``,
    ``ci_high``, ``n``."""
    base = alt.Chart().encode(x=checkpoint_axis(df, title="run · model @ step"))
    tip = ["checkpoint", "estimator", alt.Tooltip("value:Q", format=".4g"), "n"]
    seeds = (
        base.transform_filter(alt.datum.kind == "seed")
        .mark_point(size=70)
        .encode(
            y=alt.Y("value:Q", title="estimate", scale=alt.Scale(zero=False)),
            color=alt.Color("train_seed:N", title="training seed"),
            tooltip=["train_seed", *tip],
        )
    )
    mean = base.transform_filter(alt.datum.kind == "mean")
    means = mean.mark_point(shape="diamond", filled=True, size=110, color="black").encode(
        y=alt.Y("value:Q", title="estimate"),
        tooltip=[
            *tip,
            alt.Tooltip("ci_low:Q", format=".4g"),
            alt.Tooltip("ci_high:Q", format=".4g"),
        ],
    )
    bars = mean.mark_errorbar(ticks={"size": 14}, color="black").encode(
        y=alt.Y("ci_low:Q", title="estimate"), y2=alt.Y2("ci_high:Q")
    )
    order = list(dict.fromkeys(df["estimator"]))
    # a faceted chart does not stretch to the page: each panel gets its own size
    width = max(320, 110 * len(checkpoint_order(df)))
    header = alt.Header(labelAngle=0, labelAlign="left", labelFontSize=13, labelPadding=8)
    return (
        alt.layer(bars, seeds, means, data=df)
        .properties(width=width, height=170)
        .facet(row=alt.Row("estimator:N", title=None, sort=order, header=header))
        .resolve_scale(y="independent")
    )
