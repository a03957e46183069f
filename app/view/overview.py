"""Streamlit entry page: studies, checkpoints and verifier accuracy per run."""

from __future__ import annotations

import streamlit as st

from app.view.data import audits_frame, checkpoints_frame, studies_frame

st.set_page_config(page_title="RCEA Audit", layout="wide")
st.title("RCEA Audit — overview")

studies = studies_frame()
if studies.empty:
    st.info(
        "No studies yet. Ingest records with `rcea ingest FILE --study NAME` or run `make demo`."
    )
    st.stop()

st.subheader("Studies")
st.dataframe(studies, hide_index=True, width="stretch")

name = st.selectbox("Study", list(studies["study"]))
checkpoints = checkpoints_frame(name)
st.subheader(f"Checkpoints of {name}")
st.dataframe(checkpoints, hide_index=True, width="stretch")
st.caption("Verifier accuracy per checkpoint (pure verifier outcome; no audit needed).")
chart = checkpoints.pivot_table(index="step", columns="run", values="accuracy")
st.line_chart(chart)

st.subheader(f"Pair audits of {name}")
audits = audits_frame(name)
if audits.empty:
    st.caption("No pair audit yet: `rcea audit sample --study S --rubric NAME`.")
else:
    st.dataframe(audits, hide_index=True, width="stretch")
    st.caption(
        "Status: pending (labelling incomplete), preliminary (labelled, not gated), "
        "passed / failed (final gate recorded). Retention and mode numbers may only be "
        "published on a passed final gate."
    )
