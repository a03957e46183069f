"""Seeds page: the report's ``replicates`` section (docs/estimators.md item 17). Per
estimator the section lists (ρ_H, retention, W, pass@k, and any it adds) and per (run,
model, step): each training seed's estimate and the across-seed mean with its hierarchical
bootstrap interval, as one chart and one table; with fewer than two seeds, the section's
words."""

from __future__ import annotations

import streamlit as st

from rcea.app.view import charts
from rcea.app.view import report_frames as rf
from rcea.app.view.state import report, selected_study
from rcea.app.view.tables import number_table

st.title("Seeds")
study = selected_study()
rep = report(study)
sec = rep.replicates

if sec is None or not sec.runs:
    st.caption(
        "No run of this study carries a training seed (the records' `train_seed`; "
        "`--train-seed N` on `rcea ingest` and the imports)."
    )
else:
    st.caption(
        "Each training seed is its own run on the other pages ("
        + ", ".join(f"`{r.label}`" for r in sec.runs)
        + "); seeds are never pooled."
    )
if sec is not None and sec.sentence:
    st.info(sec.sentence[0].upper() + sec.sentence[1:] + ".")

points, table = rf.seed_frames(rep)
if not table.empty:
    if (points["kind"] == "mean").any():
        st.altair_chart(charts.seed_spread(points), width="stretch")
    order = [c for c in table.columns if c not in ("run", "model", "step")]
    number_table(
        table, "%.4f", ("mean", "between_seed_sd", "ci_low", "ci_high"), column_order=order
    )
    p = rep.parameters
    st.caption(
        "Per (run, model, step): each seed's estimate is the report's own number for that "
        "seed's run; the mean, the between-seed SD (n − 1) and a hierarchical bootstrap "
        f"{p.confidence:.0%} interval (seeds, then questions within seed; B = {p.n_boot}, "
        "sidebar). Retention and W rest on the partition: their label says whether its "
        "gate passed."
    )
