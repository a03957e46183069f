"""Audit page: pair-audit progress per annotator, the gate with its thresholds, confusion
matrices, the disagreement list with links to the Label Studio tasks, and the codebook
extension requests to approve or reject (the same domain calls as ``rcea codebook
approve`` / ``reject``: approval reassigns the affected trajectories)."""

from __future__ import annotations

import streamlit as st

from rcea.app.view import auth, charts
from rcea.app.view.data import audit as data
from rcea.app.view.state import audit_detail, selected_study
from rcea.study.codebook import CodebookStageError

# report key → (columns = compared labels, rows = reference, title); the gate report's
# ``confusion[reference][compared]`` comes from ``pair_agreement(compared, reference)``.
CONFUSIONS = {
    "human_human": ("annotator A", "annotator B", "A vs B (human–human)"),
    "automatic_vs_a": ("automatic", "annotator A", "automatic vs A"),
    "automatic_vs_b": ("automatic", "annotator B", "automatic vs B"),
    "automatic_vs_reference": ("automatic", "final reference", "automatic vs final reference"),
}


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


st.title("Audit")
study = selected_study()

st.header("Every attempt on the record")
attempts = data.attempts_frame(study)
if attempts.empty:
    st.caption("No pair audit, calibration or accepted-set check drawn yet.")
else:
    st.caption(
        "Every pair audit, calibration and accepted-set check drawn for this study, passed, "
        "failed or in progress (the report and the bundle list the same)."
    )
    st.dataframe(attempts, hide_index=True, width="stretch")

st.header("Pair audit")
names = data.audit_names(study)
if not names:
    st.caption("No pair audit yet: `rcea audit sample --study S --rubric NAME`.")
else:
    name = st.selectbox("Audit", names, key="audit")
    detail = audit_detail(study, name)
    gate, ov = detail["gate"], detail["overview"]
    cols = st.columns(4)
    cols[0].metric("status", gate.get("status", "pending"))
    cols[1].metric("pairs", ov["n_pairs"])
    cols[2].metric("questions", ov["n_questions"])
    dis_all = detail["disagreements"]
    waiting = int(dis_all["adjudicated"].isna().sum()) if not dis_all.empty else 0
    cols[3].metric(
        "need adjudication",
        waiting,
        help=f"{len(dis_all)} pair(s) go to adjudication; {len(dis_all) - waiting} decided",
    )
    st.caption(
        f"rubric sha256 {ov['rubric_hash'][:12]}…, partition sha256 "
        f"{ov['partition_hash'][:12]}…, seed {ov['seed']}; "
        f"{ov['n_uncertain_pairs']} pair(s) with an uncertain member (no automatic label)"
    )

    st.subheader("Progress per annotator")
    progress = detail["progress"]
    left, right = st.columns([2, 1])
    left.dataframe(
        progress,
        hide_index=True,
        width="stretch",
        column_config={"share": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0)},
    )
    bars = charts.progress_bars(progress)
    if bars is None:
        right.caption("No pair is labelled yet.")
    else:
        right.altair_chart(bars, width="stretch")
    if detail["label_statuses"]:
        st.caption(
            "Annotations by status: "
            + ", ".join(f"{k} {v}" for k, v in sorted(detail["label_statuses"].items()))
            + " (only `counted` ones are labels)."
        )

    if not detail["requirements"].empty:
        st.subheader(f"Gate ({gate.get('stage') or 'preliminary'})")
        st.dataframe(detail["requirements"], hide_index=True, width="stretch")
        report = gate.get("report") or {}
        if gate.get("stage") != "final" and report:
            st.caption(
                "Preliminary (reported, not gated): automatic vs A macro-F1 "
                f"{_fmt(report.get('automatic_vs_a_macro_f1'))}, automatic vs B "
                f"{_fmt(report.get('automatic_vs_b_macro_f1'))}. The automatic F1s, the "
                "gap and the different-class precision/recall need the final reference "
                "(after adjudication: `rcea audit gate --final`)."
            )

    seq = detail.get("sequential")
    if seq:
        summ = seq["summary"]
        plan = summ["plan"]
        st.subheader("Sequential plan (interim decisions)")
        cols = st.columns(4)
        cols[0].metric("look", f"{summ['look']}/{summ['n_looks']}")
        cols[1].metric("gate decision", summ["decision"])
        cols[2].metric("labelled by both", f"{summ['n_labelled']}/{summ['n_planned']}")
        more = summ.get("pairs_needed")
        cols[3].metric("≈ more pairs to settle", "—" if more is None else more)
        st.caption(
            f"Predeclared in the frozen rubric: looks {plan['looks']}, alpha {plan['alpha']} "
            f"per requirement and direction, {plan['spending']} spending; boundary at this "
            f"look z = {_fmt(summ['boundary'])}. A settled gate may stop labelling "
            "(`rcea audit gate --final`); see docs/sequential-gate.md."
        )
        st.dataframe(seq["requirements"], hide_index=True, width="stretch")
        if not seq["looks"].empty:
            st.caption("Looks recorded (`gate.interim` events)")
            st.dataframe(seq["looks"], hide_index=True, width="stretch")

    ann = detail.get("annotators")
    if ann is not None and not ann["people"].empty:
        st.subheader("Annotators")
        st.dataframe(ann["people"], hide_index=True, width="stretch")
        st.caption(
            "Per person and round: Label Studio lead times (median, p90, seconds), labels "
            "per active hour (Σ lead_time) and per wall-clock hour, agreement with the final "
            "reference per class (`rcea audit annotators`). Self-consistency: share of the "
            "hidden repeats (rubric `[annotators] repeat_share`) labelled the same both "
            "times, over n repeated pairs; repeats never count in the gate."
        )
        left, right = st.columns([2, 1])
        line = charts.rolling_agreement(ann["rolling"])
        if line is None:
            left.caption("Rolling agreement needs a full window of labels with a reference.")
        else:
            left.altair_chart(line, width="stretch")
        hot = ann["hotspots"]
        right.markdown("**Disagreement hotspots (A vs B)**")
        right.dataframe(hot.head(10), hide_index=True, width="stretch")

    st.subheader("Confusion matrices")
    if not detail["confusions"]:
        st.caption("No pair is labelled by both A and B yet.")
    else:
        cols = st.columns(len(detail["confusions"]))  # type: ignore[assignment]  # st.columns gives a list; the name first held a fixed tuple
        for col, (key, conf) in zip(cols, detail["confusions"].items(), strict=True):
            x_title, y_title, title = CONFUSIONS[key]
            col.markdown(f"**{title}**")
            col.altair_chart(charts.confusion_heatmap(conf, x_title=x_title, y_title=y_title))

    st.subheader("Disagreements")
    dis = detail["disagreements"]
    if dis.empty:
        st.caption("No pair needs adjudication.")
    else:
        st.dataframe(
            dis,
            hide_index=True,
            width="stretch",
            # fits the page width (no sideways scroll); the trajectory ids stay in the frame
            column_order=[
                "pair_key",
                "question_id",
                "A",
                "B",
                "automatic",
                "why",
                "adjudicated",
                "adjudication_task",
                "task_A",
                "task_B",
            ],
            column_config={
                "adjudication_task": st.column_config.LinkColumn(
                    "adjudication task", display_text="open in Label Studio"
                ),
                "task_A": st.column_config.LinkColumn("A's task", display_text="open"),
                "task_B": st.column_config.LinkColumn("B's task", display_text="open"),
            },
        )
        st.caption(
            "Pairs where A and B disagree, or agree against the automatic label. Without "
            "an adjudication task yet: `rcea audit adjudicate`. (This researcher view shows "
            "provenance and automatic labels; the adjudication tasks themselves are blinded.)"
        )

st.header("Validity calibration")
calibrations = data.calibration_progress(study)
if calibrations.empty:
    st.caption(
        "No validity calibration yet: `rcea judge calibrate sample --study S --judge J` "
        "then `rcea judge calibrate push`."
    )
else:
    st.dataframe(
        calibrations,
        hide_index=True,
        width="stretch",
        column_config={"share": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0)},
    )
    st.caption(
        "Held-out items with a human reference (the agreed or adjudicated label); "
        "`rcea judge calibrate report` records the calibration once every one has one."
    )
    figures = data.calibration_figures(study)
    if not figures.empty:
        st.subheader("Calibration figures: balanced sample and population")
        st.dataframe(figures, hide_index=True, width="stretch")
        st.caption(
            "The calibration sample is stratified by the judge's verdict, so its raw "
            "figures describe that balanced sample; the population figures weight each "
            "stratum by its share of the whole judged population (95% stratified-bootstrap "
            "interval low–high). The predeclared thresholds apply to the basis shown."
        )

st.header("Codebook extension requests")
done = st.session_state.pop("decided", None)
if done and done["status"] == "approved":
    st.success(
        f"approved #{done['extension_id']}: {done['question_id']} refrozen as "
        f"v{done['version']} (sha256 {done['content_hash'][:12]}…); its "
        f"{done['n_affected']} affected trajectories were reassigned and reconciled "
        f"({done.get('assign', {}).get('n_run', 0)} assignment batch(es) run)."
    )
elif done:
    st.success(
        f"rejected #{done['extension_id']}: its trajectories moved to the researcher "
        "queue (`rcea codebook queue`)."
    )
requests = data.extension_requests(study)
if not requests:
    st.caption("No extension request: `rcea codebook extend --study S` groups provisional NEW.")
for req in requests:
    head = f"#{req['extension_id']} · {req['question_id']} · {req['status']}"
    with st.expander(head, expanded=req["status"] == "pending"):
        for p in req["proposals"]:
            st.markdown(
                f"**+ {p['name']}** ({p['n_trajectories']} trajectories) — {p['criterion']}"
            )
            for ex in p["examples"]:
                st.caption(
                    f"{ex['trajectory_id']} · run {ex.get('run')} · model {ex.get('model')} "
                    f"· step {ex.get('step')} · seed {ex.get('seed')}"
                )
                st.code(ex.get("text", "(missing)"), language=None, wrap_lines=True)
        if req["status"] != "pending":
            st.caption(f"decided by {req['decided_by']}: {req['reason'] or '(no reason)'}")
            continue
        ext_id = req["extension_id"]
        reason = st.text_input("reason (recorded)", key=f"reason-{ext_id}")
        approve_col, reject_col = st.columns(2)
        decision = None
        if approve_col.button("Approve (refreeze)", key=f"approve-{ext_id}", type="primary"):
            decision = True
        if reject_col.button("Reject", key=f"reject-{ext_id}"):
            decision = False
        if decision is not None:
            try:
                out = data.decide_extension_request(
                    study,
                    ext_id,
                    approve=decision,
                    actor=auth.current_researcher(),
                    reason=reason,
                )
            except (CodebookStageError, ValueError) as exc:  # a backend not configured too
                st.error(str(exc))
            else:
                st.session_state["decided"] = out
                st.rerun()
