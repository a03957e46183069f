"""Overview page: studies, checkpoints with verifier accuracy, the CONSORT-style flow of
each checkpoint (from the report), the validity audit's state and every pair audit's
status with its gate values against the rubric's thresholds."""

from __future__ import annotations

import streamlit as st

from rcea.app.view import charts
from rcea.app.view import report_frames as rf
from rcea.app.view.data import overview as data
from rcea.app.view.state import report, selected_study
from rcea.app.view.tables import number_table

AUDIT_NUMBERS = {
    "human_human_macro_f1": "A–B F1",
    "automatic_macro_f1": "auto F1",
    "gap": "gap",
    "different_precision": "diff. prec.",
    "different_recall": "diff. rec.",
    "automatic_coverage": "coverage",
}
AUDIT_SHOWN = ["audit", "status", "stage", "pairs", *AUDIT_NUMBERS]

st.title("RCEA Audit — overview")

studies = data.studies_frame()
st.subheader("Studies")
st.dataframe(studies, hide_index=True, width="stretch")
name = selected_study()

checkpoints = data.checkpoints_frame(name)
st.subheader(f"Checkpoints of {name}")
st.dataframe(checkpoints, hide_index=True, width="stretch")
if not checkpoints.empty:
    st.altair_chart(charts.accuracy_by_step(checkpoints), width="stretch")
st.caption("Verifier accuracy per checkpoint (pure verifier outcome; no audit needed).")

st.subheader("Flow per checkpoint")
flow = rf.flow_frame(report(name))
if flow.empty:
    st.caption("No checkpoint yet.")
else:
    st.dataframe(flow, hide_index=True, width="stretch")
    st.caption(
        'CONSORT-style (docs/reports.md "Flow"): trajectories / questions imported → '
        "verifier successes (R = 1) → judged → accepted → assigned a mode other than "
        "uncertain, then the questions each number rests on (its n; below the rubric's "
        "floor a number is labelled insufficient evidence)."
    )

st.subheader("Validity audit")
validity = data.validity_frame(name)
st.markdown(
    {
        "no-judge": "**no judge run**: validity (if any) comes from the ingested files and "
        "is not audited.",
        "uncalibrated": f"**uncalibrated**: judge `{validity.get('judge_name')}` "
        f"(sha256 {str(validity.get('judge_hash'))[:12]}…) has no completed calibration.",
        "calibrated": f"**calibrated**: judge `{validity.get('judge_name')}` "
        f"(sha256 {str(validity.get('judge_hash'))[:12]}…), calibration "
        f"`{validity.get('calibration')}`.",
        "calibration-incomplete": f"**calibration incomplete**: judge "
        f"`{validity.get('judge_name')}` (sha256 {str(validity.get('judge_hash'))[:12]}…) "
        "passed its held-out calibration; " + "; ".join(validity.get("missing") or []) + ".",
        "calibration-failed": f"**calibration FAILED**: judge `{validity.get('judge_name')}` "
        f"(sha256 {str(validity.get('judge_hash'))[:12]}…) misses its predeclared acceptance "
        "thresholds: " + "; ".join(validity.get("failed_requirements") or []) + ".",
    }.get(validity["status"], validity["status"])
)
validity_notes = rf.changed_notes(report(name))
if validity_notes.get("validity"):
    st.warning(
        f"Validity numbers audited, {validity_notes['validity']}. Each carries this mark "
        "in the report, the bundle and the table below."
    )
validity_numbers = rf.labelled_frame(report(name), rf.VALIDITY_SECTIONS)
if not validity_numbers.empty:
    st.markdown("**Validity numbers and their labels**")
    st.dataframe(validity_numbers, hide_index=True, width="stretch")

st.subheader(f"Pair audits of {name}")
audits = data.audits_frame(name)
if audits.empty:
    st.caption("No pair audit yet: `rcea audit sample --study S --rubric NAME`.")
else:
    st.dataframe(
        audits,
        hide_index=True,
        width="stretch",
        # short headers and 3 decimals so the summary fits the page (no sideways scroll);
        # the hashes stay in the frame (Audit page: the full ones)
        column_order=[c for c in AUDIT_SHOWN if c in audits.columns],
        column_config={
            name: st.column_config.NumberColumn(label, format="%.3f", help=name)
            for name, label in AUDIT_NUMBERS.items()
        },
    )
    st.caption(
        "Status: pending (labelling incomplete), preliminary (labelled, not gated), "
        "passed / failed (final gate recorded). Retention and mode numbers may only be "
        "published on a passed final gate."
    )
    reqs = data.gate_requirements_frame(name)
    if not reqs.empty:
        st.markdown("**Gate values against the frozen rubric's thresholds**")
        number_table(reqs, "%.3f", ("value", "threshold"))
