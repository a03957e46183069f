"""Entropy page: training entropy traces per objective on normalised progress (Figure 1/3
style), failed/successful token-entropy ratios with CIs per checkpoint (Figure 4/5 style)
the sequence-entropy decomposition table and the entropy–performance law per run with its
early prediction and the RQ1 ordering — all from ``build_report``."""

from __future__ import annotations

import streamlit as st

from rcea.app.view import charts, law_frames
from rcea.app.view import report_frames as rf
from rcea.app.view.state import report, selected_study
from rcea.app.view.tables import number_table
from rcea.study.report.entropy_law import law_summary

st.title("Entropy")
study = selected_study()
st.caption(
    "Pure entropy numbers: entropy-only (no audit) — they need neither a pair audit nor "
    "a calibrated judge."
)
rep = report(study)

st.subheader("Training entropy traces")
training = rf.training_frame(rep)
if training.empty:
    st.caption(
        "No training curve recorded for this study (`rcea train` records one per objective)."
    )
else:
    metrics = rf.training_metrics(training)
    if metrics:
        metric = st.selectbox("value", metrics, key="training_metric")
        trace = training[["run", "model", "series", "step", "progress", metric]].dropna()
        st.altair_chart(
            charts.entropy_traces(trace.rename(columns={metric: "value"}), title=metric),
            width="stretch",
        )
    st.caption("x = step / max_steps of each run, so objectives of any length compare.")

st.subheader("Failed / successful token-entropy ratio")
ratios = rf.ratio_frame(rep)
p = rep.parameters
if ratios.empty:
    st.caption("No checkpoint.")
else:
    with_ci = ratios.dropna(subset=["paired_ratio"])
    if with_ci.empty:
        st.caption(
            f"No checkpoint has a question with K₊ ≥ {p.k_min} and K₋ ≥ {p.k_min}: "
            "the paired ratio is undefined everywhere."
        )
    else:
        st.altair_chart(
            charts.ratio_with_ci(
                with_ci.rename(columns={"paired_ratio": "estimate"}),
                title="paired ratio H_tok,− / H_tok,+",
            ),
            width="stretch",
        )
    ratio_columns = ("paired_ratio", "ci_low", "ci_high", "broad_ratio", "direction_share")
    number_table(ratios, "%.3f", ratio_columns)
    st.caption(
        f"Paired: geometric mean over E = questions with K₊, K₋ ≥ {p.k_min}, 95% "
        f"hierarchical bootstrap CI (B = {p.n_boot}, seed {p.seed} — set in the "
        "sidebar; the published report uses B = 10,000). Broad: each outcome over its own "
        "questions. Direction share and one-sided sign test over E."
    )

st.subheader("Decomposition (Prop. 1)")
decomp = rf.decomposition_frame(rep)
residuals = ("max |residual|", "max |mixture residual|")
number_table(decomp, "%.2e", [c for c in residuals if c in decomp.columns])
st.caption(
    "Macro over questions, nats. H(Y|x) = −mean ℓ; H(Y|R=r,x) = −mean ℓ over outcome r + "
    "log p̂_r; the residual H(Y|x) − [h_b(p̂₊) + Σ p̂_r H(Y|R=r,x)] is a consistency check "
    "(≈ 0 up to rounding)."
)

st.subheader("Entropy–performance law R = −a·exp(H) + b")
law = law_frames.law_table(rep)
if law.empty:
    st.caption(
        "No training curve with entropy paired with an accuracy trace (record them with "
        "`rcea probe curves` and `rcea probe bench`, or bring a run in with "
        "`rcea import trainlog`)."
    )
else:
    sec = rep.entropy_law
    assert sec is not None
    points, curves = law_frames.law_frames(rep)
    if not points.empty:
        st.altair_chart(law_frames.law_panels(points, curves), width="stretch")
    number_table(law, "%.4f", ("a", "b", "r2", "rmse", "ceiling", "early_fit_rmse"))
    st.caption(
        f"OLS of R on exp(H); each validation point paired with the latest entropy logged "
        f"at or before its step. Dashed: the fit on the first {sec.fit_fraction:.0%} of steps "
        "(filled points) predicting the rest, with its 95% prediction band; ceiling = b − a."
    )
    for line in law_summary(sec.model_dump()):
        st.markdown(f"- {line}")
    scaling = law_frames.scaling_table(rep)
    if not scaling.empty:
        st.markdown("**Across model sizes** (a and b on log N_params; ≥ 3 sizes)")
        st.dataframe(scaling, hide_index=True, width="stretch")
    st.write(sec.comparison.sentence)
    order = law_frames.ordering_table(rep)
    if not order.empty:
        st.markdown("**Does endpoint global entropy order performance? (RQ1)**")
        st.dataframe(order, hide_index=True, width="stretch")
        if sec.ordering_sentence:
            st.caption(sec.ordering_sentence)
