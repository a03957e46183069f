"""Modes page: rarefied retention with CIs (Table 1/A6 style) and mode entropy per
checkpoint from ``build_report``, per-question mode distributions base vs checkpoint, and
the codebook browser (versions, definitions, example trajectories with provenance: this
is the researcher's view)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from rcea.app.view import charts
from rcea.app.view import report_frames as rf
from rcea.app.view.data import modes as data
from rcea.app.view.state import mode_distribution, report, selected_study
from rcea.app.view.tables import number_table

st.title("Modes")
study = selected_study()
rep = report(study)
pair = rep.audits.pair.model_dump(mode="json")  # a plain dict: the cached read's key
base_step = rep.parameters.base_step

if pair.get("blocked_by"):
    st.warning(f"Not publishable: {pair['blocked_by']}")
else:
    st.success(
        f"Audited: partition {str(pair.get('partition_hash'))[:12]}… passed the final gate "
        f"of audit {pair.get('audit')}."
    )
# the mode numbers rest on the partition, and on the judge when its verdicts filter them
notes = rf.changed_notes(rep)
for dep in ("partition", "validity") if rep.audits.validity.filter == "judge" else ("partition",):
    if notes.get(dep):
        st.warning(
            f"Mode numbers audited, {notes[dep]}. Each carries this mark in the report, "
            "the bundle and the labels below."
        )
for failed in pair.get("failures_on_partition") or []:
    st.error(
        f"A failed attempt is on the record of this partition: the final gate of audit "
        f"{failed['audit']} FAILED (recorded {failed['recorded_at']} by {failed['recorded_by']})."
    )
st.caption(
    f"Partition: {pair.get('partition_source')}"
    + (f", sha256 {pair['partition_hash'][:12]}…" if pair.get("partition_hash") else "")
)

st.subheader("Rarefied mode retention")
retention = rf.retention_frame(rep)
if retention.empty:
    st.caption(f"No checkpoint with mode labels besides the base (step {base_step}).")
else:
    shown = retention.dropna(subset=["retention"])
    if not shown.empty:
        st.altair_chart(
            charts.ratio_with_ci(
                shown.rename(columns={"retention": "estimate"}), title="retention vs base"
            ),
            width="stretch",
        )
    shown_columns = ("retention", "ci_low", "ci_high", "mean_n_eff_base", "mean_n_eff_checkpoint")
    number_table(retention, "%.3f", shown_columns)
    p = rep.parameters
    st.caption(
        f"Ret_t = mean over eligible questions (n(x) ≥ {p.n_min} at both checkpoints) of "
        f"N̄_eff,t / N̄_eff,0 with {p.n_draws} stored draws; question-bootstrap 95% CI, "
        f"B = {p.n_boot} (sidebar)."
    )

st.subheader("Mode entropy per checkpoint")
st.dataframe(rf.mode_entropy_frame(rep), hide_index=True, width="stretch")

st.subheader("Between-mode vs within-mode entropy")
realization = rf.realization_frame(rep)
if realization.empty:
    st.caption(
        "No checkpoint with mode labels, sequence log-probabilities and token entropies "
        "(docs/estimators.md item 15)."
    )
else:
    split = rf.realization_split_frame(realization)
    if not split.empty:
        st.altair_chart(charts.mode_split(split), width="stretch")
    number_table(realization, "%.4f", [c for c in rf.REALIZATION_COLUMNS if c != "n_eligible"])
    st.caption(
        f"Ĥ(Y|C,x) = Ĥ(Z|C,x) + W(x) over the accepted, assigned successes C: which "
        f"strategy vs how it is worded. Macro over questions with K_C ≥ {rep.parameters.k_min}; "
        "realization retention = mean W_t(x)/W_0(x) against the base of the same model. "
        "Rests on the same partition as the mode numbers (audited only after its gate)."
    )

st.subheader("Labels of the mode numbers")
labelled = rf.labelled_frame(rep, rf.MODE_SECTIONS)
if labelled.empty:
    st.caption("No mode number in the report yet.")
else:
    st.dataframe(labelled, hide_index=True, width="stretch")
    st.caption(
        "Every mode, retention, realization, tail and association number of the report "
        "with its label as the published report shows it."
    )

st.subheader("Mode distribution per question")
dist = mode_distribution(study, pair)
if dist.empty:
    st.caption("No included trajectory carries a mode yet.")
else:
    left, right = st.columns(2)
    question = left.selectbox("question", sorted(dist["question_id"].unique()), key="mode_q")
    of_q = dist[dist["question_id"] == question]
    later = [
        c
        for c in of_q["checkpoint"].unique()
        if of_q[of_q["checkpoint"] == c]["step"].iloc[0] != base_step
    ]
    if not later:
        st.caption(f"Question {question} has mode labels at the base only.")
    else:
        ckpt = right.selectbox("checkpoint", later, key="mode_ckpt")
        row = of_q[of_q["checkpoint"] == ckpt].iloc[0]
        base = of_q[
            (of_q["step"] == base_step)
            & (of_q["run"] == row["run"])
            & (of_q["model"] == row["model"])
        ]
        if base.empty:  # no own base: the pooled base, as retention uses
            base = of_q[of_q["step"] == base_step]
            base = base.groupby("mode", as_index=False)["count"].sum()
            n_incl = base.loc[base["mode"] != "uncertain", "count"].sum()
            base["share"] = base["count"] / n_incl if n_incl else None
        shown = pd.concat(
            [
                base.assign(checkpoint=f"base (step {base_step})"),
                of_q[of_q["checkpoint"] == ckpt],
            ]
        )
        names = data.mode_names(study).get(question, {})
        shown = shown.assign(mode=[charts.mode_label(m, names) for m in shown["mode"]])
        st.altair_chart(
            charts.mode_distribution(shown[shown["mode"] != "uncertain"]), width="stretch"
        )
        st.dataframe(
            shown[["checkpoint", "mode", "count", "share"]], hide_index=True, width="stretch"
        )

st.header("Codebooks")
books = data.codebooks_frame(study)
if books.empty:
    st.caption("No codebook: `rcea codebook run --study S` (or induce → merge → freeze).")
else:
    st.dataframe(books, hide_index=True, width="stretch")
    question = st.selectbox("codebook of question", books["question_id"].tolist(), key="cb_q")
    versions = data.codebook_versions(study, question)
    label = st.radio(
        "version", [v["label"] for v in versions], horizontal=True, key=f"cb_v_{question}"
    )
    v = next(v for v in versions if v["label"] == label)
    if v["version"] is None:
        st.caption("Draft (not frozen): editable with `rcea codebook edit ...`.")
    else:
        st.caption(
            f"v{v['version']} · sha256 {v['content_hash']} · parent "
            f"{'v' + str(v['parent_version']) if v['parent_version'] else '—'} · "
            f"{v['reason']} · frozen by {v['frozen_by']} at {v['frozen_at']:%Y-%m-%d %H:%M} · "
            f"prompts {v['prompts']}"
        )
    for m in v["modes"]:
        with st.expander(f"{m['id']} — {m['name']}"):
            st.markdown(m.get("criterion") or "_no criterion_")
            if m.get("note"):
                st.caption(m["note"])
            for ex in m["example_trajectories"]:
                if ex.get("missing"):
                    st.caption(f"{ex['trajectory_id']} (not in the store)")
                    continue
                st.caption(
                    f"{ex['trajectory_id']} · run {ex['run']} · model {ex['model']} · "
                    f"step {ex['step']} · seed {ex['seed']} · R = {ex['reward']}"
                )
                st.code(ex["text"], language=None, wrap_lines=True)
