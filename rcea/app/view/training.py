"""Training page: the ``rcea/`` numbers logged live during training (docs/training-live.md),
read from the runs' TensorBoard event files — global token entropy next to the successful /
failed split, and the outcome entropy, per objective and model (the paper's Figure 1
argument, while training runs)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from rcea.app.view import charts
from rcea.app.view import training_runs as tr
from rcea.study.settings import get_settings

st.title("Training")
root = get_settings().data_dir
st.caption(
    f"Training runs with TensorBoard event files under `{root}` (the shipped configs and "
    "the demo train there), and any run directory listed below. The page rereads the files "
    "on every run, so a run in progress shows its steps so far."
)
extra = st.text_area("more run directories (one per line)", key="training_dirs")
dirs = tr.run_dirs(root)
for line in extra.splitlines():
    if line.strip() and Path(line.strip()) not in dirs:
        dirs.append(Path(line.strip()))
try:
    frame = tr.live_frame(dirs)
except RuntimeError as exc:  # event files but no tensorboard to read them
    st.error(str(exc))
    st.stop()
if frame.empty:
    st.info(
        "No event files yet. `rcea train run` writes them beside the checkpoints "
        '(`[training] report_to = ["tensorboard"]`, the default).'
    )
    st.stop()

st.subheader("Token entropy: global and by outcome")
split = tr.split_frame(frame)
if split.empty:
    st.caption("No entropy logged yet.")
else:
    st.altair_chart(charts.entropy_split(split), width="stretch")
st.caption(
    "Successful / failed: within each prompt group first, then averaged over the groups "
    "with both outcomes; a step without such groups is undefined (a gap, never 0)."
)

st.subheader("Outcome entropy h_b(p̂₊)")
if "rcea/outcome_entropy" in frame.columns:
    trace = frame[["run", "model", "series", "step", "progress", "rcea/outcome_entropy"]]
    trace = trace.rename(columns={"rcea/outcome_entropy": "value"}).dropna(subset=["value"])
    st.altair_chart(charts.entropy_traces(trace, title="outcome entropy (nats)"), width="stretch")
else:
    st.caption("No rcea/ numbers in these runs (trained with `live_metrics = false`?).")

CEILING = "rcea/entropy_law_ceiling"
if CEILING in frame.columns and frame[CEILING].notna().any():
    st.subheader("Predicted accuracy ceiling — a prediction")
    trace = frame[["run", "model", "series", "step", "progress", CEILING]]
    trace = trace.rename(columns={CEILING: "value"}).dropna(subset=["value"])
    st.altair_chart(
        charts.entropy_traces(trace, title="predicted ceiling b − a (prediction)"),
        width="stretch",
    )
    st.caption(
        "Not a measurement: the ceiling b − a of R = −a·exp(H) + b fitted on the run so far "
        "(validation reward when the trainer evaluates, else the batch success rate), "
        "logged once 5 points exist (docs/training-live.md)."
    )

st.subheader("Latest step")
st.dataframe(tr.latest_frame(frame), hide_index=True, width="stretch")
