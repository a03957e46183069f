"""Covariance page: predicted vs observed ΔH per transition with the identity line and
the fit statistics (Figure 6 / Table A7 style), and the reward-stratified q99 tail table
with its budget sensitivity — all from ``build_report``."""

from __future__ import annotations

import streamlit as st

from rcea.app.view import charts
from rcea.app.view import report_frames as rf
from rcea.app.view.state import report, selected_study
from rcea.app.view.tables import number_table

st.title("Covariance")
study = selected_study()
rep = report(study)

st.subheader("Exact covariance fit")
transitions = rf.transitions_frame(rep)
if transitions.empty:
    st.caption(
        "No covariance transition recorded (`rcea probe` records one per adjacent checkpoint pair)."
    )
else:
    st.altair_chart(charts.delta_h_scatter(transitions), width="stretch")
    excluded = rep.covariance.excluded_runs if rep.covariance else []
    if excluded:
        st.warning(f"Failed runs excluded from the fit (shown above): {', '.join(excluded)}")
    st.markdown("**Fit statistics** (observed on predicted)")
    st.dataframe(rf.fit_frame(rep), hide_index=True, width="stretch")
    st.dataframe(transitions, hide_index=True, width="stretch")

st.subheader("Training failure (per run and model)")
failure = rf.failure_frame(rep)
if failure.empty:
    st.caption("No accuracy trace recorded (`rcea probe bench` records one per run).")
else:
    st.dataframe(failure, hide_index=True, width="stretch")
    st.caption(
        "A failed (run, model) is reported at the latest milestone at or before the last "
        "step attaining its peak; the same run at another scale is unaffected. Window "
        "shares: completions in groups with non-zero reward variance, and updates whose "
        "covariance mask selected nothing (from the training curve)."
    )

st.subheader("Retention vs pass@k (exploratory, per model scale)")
assoc = rf.association_frame(rep)
if assoc.empty:
    st.caption("No association: needs retention and pass@k at the reported checkpoints.")
else:
    st.dataframe(assoc, hide_index=True, width="stretch")

st.subheader("Reward-stratified tail (q99)")
q99 = rf.q99_frame(rep)
if q99.empty:
    st.caption("No tail measurement recorded (`rcea probe` records one per endpoint).")
else:
    shares = ("success_share", "success_selected_fraction", "failure_share")
    number_table(q99, "%.3f", (*shares, "failure_selected_fraction", "gap_pp"))
    st.caption(
        "Share of each stratum's positive covariance mass in its own q99 tail (cutoff "
        "ties kept: see the selected fraction); failed runs are kept and marked."
    )
    st.markdown("**Equal-count budgets** (tie-robust sensitivity)")
    st.dataframe(rf.budget_frame(rep), hide_index=True, width="stretch")
    counts = rep.tail.direction_counts if rep.tail else None
    if counts is not None:
        st.markdown("**Direction counts** (endpoints whose failed stratum has the larger share)")
        st.dataframe(rf.direction_counts_frame(counts), hide_index=True, width="stretch")

st.subheader("Mode-stratified covariance (majority mode vs the others)")
mode_tail = rf.mode_tail_frame(rep)
if mode_tail.empty:
    st.caption(
        "No mode-stratified tail: it needs mode labels and a `tail_trajectories` "
        "measurement per endpoint (`rcea probe covariance` records one)."
    )
else:
    number_table(mode_tail, "%.3f", rf.MODE_TAIL_COLUMNS[2:])
    st.caption(
        "M = share of the accepted successes' positive covariance mass on each question's "
        "majority-mode tokens, T = their token share; M/T > 1: the updates that shrink "
        "entropy concentrate on the dominant strategy. Rests on the mode numbers' partition "
        "(audited only after its gate); failed runs are kept and marked."
    )

st.subheader("Exact covariance fit by mode group (item 16)")
mc_points, mc_fits = rf.mode_covariance_frames(rep)
if mc_points.empty:
    st.caption(
        "No fit by mode group: it needs mode labels and transitions recorded with "
        "per-trajectory sums (`rcea probe covariance` records them)."
    )
else:
    st.altair_chart(charts.delta_h_scatter(mc_points, color="group"), width="stretch")
    st.markdown("**Fit statistics by group** (observed on predicted, failed runs left out)")
    st.dataframe(mc_fits, hide_index=True, width="stretch")
    if rep.mode_covariance is not None:
        st.caption(
            rep.mode_covariance.sentence
            + " Each prefix takes the group of the trajectory it was sampled from at θ: "
            "that question's majority mode (most accepted successes at θ), another mode, "
            "or outside C. Rests on the mode numbers' partition (audited only after its gate)."
        )
