"""The Audit page's reads: the study's attempts, one pair audit in detail (progress, gate,
sequential looks, annotators, disagreements with Label Studio links), the validity
calibrations and the codebook extension requests awaiting a decision."""

from __future__ import annotations

from typing import Any

import pandas as pd
from sqlmodel import Session

from rcea.app.view.data import engine, example
from rcea.study.codebook import decide_extension, list_extensions
from rcea.study.codebook.approval import (
    approve_extensions,
    backend_from_settings,
    decision_summary,
)
from rcea.study.labelling import PAIR, bindings
from rcea.study.pair_audit.annotators import annotator_quality
from rcea.study.pair_audit.gate import audit_gate, gate_requirements
from rcea.study.pair_audit.labels import (
    ADJUDICATOR,
    audit_rubric,
    current_labels,
    needs_adjudication,
    status_counts,
)
from rcea.study.pair_audit.sampling import (
    audit_overview,
    audit_pairs,
    audit_tasks,
    get_audit,
    study_audits,
)
from rcea.study.pair_audit.sequential import INTERIM_EVENT
from rcea.study.progress import read_calibration
from rcea.study.report.attempt_labels import attempt_labels
from rcea.study.report.attempts import AUDIT_EVENT_KINDS, attempts
from rcea.study.report.html import changes_text
from rcea.study.settings import Settings, get_settings
from rcea.study.store import list_events, require_study, session_scope
from rcea.study.store.repository import trajectories_by_id
from rcea.study.validity_audit.checks import study_checks
from rcea.study.validity_audit.figures import calibration_figure_rows

ROLES = ("A", "B", "adjudicator")


def attempts_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """Every pair audit, calibration and accepted-set check of the study with its outcome
    and labels counted (``rcea.study.report.attempts``: the report's ``attempts`` from the same
    events and labels)."""

    with session_scope(engine(settings)) as session:
        sid = require_study(session, name=study).id
        records = [
            {"id": e.id, "time": e.time.isoformat(), "actor": e.actor, "kind": e.kind,
             "payload": e.payload}
            for e in list_events(session, study_id=sid)
            if e.kind in AUDIT_EVENT_KINDS
        ]  # fmt: skip
        labels = attempt_labels(session, study_id=sid)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    rows = attempts(records, labels)
    for r in rows:
        failed = [v["name"] for v in r.pop("values") if v.get("passed") is False]
        r["failed requirements"] = ", ".join(str(x) for x in failed)
        r["labels counted"] = r.pop("n_labels")
        r["abandon reason"] = r.pop("abandon_reason")
        r["changed after a failed attempt"] = changes_text(r)
        r.pop("changed_after_failure")
        r["thresholds"] = ", ".join(
            f"{k} {v}" for k, v in (r.pop("thresholds") or {}).items() if k != "basis"
        )
    return pd.DataFrame(rows)


def audit_names(study: str, settings: Settings | None = None) -> list[str]:
    """The study's pair audits, newest first."""

    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        return [a.name for a in reversed(study_audits(session, study_id=st.id))]  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


def task_url(base: str, project_id: int, task_id: int) -> str:
    """The Label Studio data-manager URL that opens one task."""
    return f"{base.rstrip('/')}/projects/{project_id}/data?task={task_id}"


SEQUENTIAL_COLUMNS = [
    "name", "value", "lower", "upper", "comparator", "threshold", "decision", "pairs_needed",
    "settles_by_look",
]  # fmt: skip


def _sequential_view(session: Session, audit: Any, gate: dict[str, Any]) -> dict[str, Any] | None:
    """The sequential plan's interim decisions for the Audit page (``None`` without a
    ``[sequential]`` table): ``summary`` (look, boundary, gate decision…),
    ``requirements`` (frame, one row per requirement) and ``looks`` (frame of the
    ``gate.interim`` events recorded for the audit)."""

    seq = gate.get("sequential") or (gate.get("report") or {}).get("sequential")
    if not seq:
        return None
    looks = [
        {k: e.payload.get(k) for k in ("look", "n_labelled", "n_planned", "boundary", "decision")}
        | {"time": e.time}
        for e in list_events(session, kind=INTERIM_EVENT, study_id=audit.study_id)
        if e.payload.get("audit_id") == audit.id
    ]
    return {
        "summary": {k: v for k, v in seq.items() if k != "requirements"},
        "requirements": pd.DataFrame(seq["requirements"], columns=SEQUENTIAL_COLUMNS),
        "looks": pd.DataFrame(
            looks, columns=["look", "n_labelled", "n_planned", "boundary", "decision", "time"]
        ),
    }


ANNOTATOR_COLUMNS = [
    "round", "person", "labels", "lead_time_median_s", "lead_time_p90_s",
    "labels_per_active_hour", "labels_per_hour", "accuracy", "f1_same", "f1_different",
    "self_consistency", "self_consistency_n",
]  # fmt: skip


def annotators_view(session: Session, audit: Any) -> dict[str, pd.DataFrame]:
    """``rcea.study.pair_audit.annotators.annotator_quality`` as frames: ``people`` (one row per
    person and round, with ``self_consistency`` / ``self_consistency_n`` on hidden
    repeats), ``rolling`` (round, upto, agreement) and ``hotspots``."""

    out = annotator_quality(session, audit)
    people, rolling = [], []
    for p in out["annotators"]:
        vs = p["vs_reference"] or {}
        pc = vs.get("per_class", {})
        people.append(
            {k: p[k] for k in ANNOTATOR_COLUMNS[:7]}
            | {
                "accuracy": vs.get("accuracy"),
                "f1_same": pc.get("same", {}).get("f1"),
                "f1_different": pc.get("different", {}).get("f1"),
                # hidden repeats (rubric [annotators] repeat_share): same label both times
                "self_consistency": (p.get("self_consistency") or {}).get("share"),
                "self_consistency_n": (p.get("self_consistency") or {}).get("n"),
            }
        )
        rolling += [{"round": p["round"], **r} for r in p["rolling"]]
    return {
        "people": pd.DataFrame(people, columns=ANNOTATOR_COLUMNS),
        "rolling": pd.DataFrame(rolling, columns=["round", "upto", "agreement"]),
        "hotspots": pd.DataFrame(
            out["hotspots"],
            columns=["question_id", "pairs_both", "disagreements", "disagreement_share"],
        ),
    }


def audit_detail(audit: str, settings: Settings | None = None) -> dict[str, Any]:
    """Everything the Audit page shows of one pair audit.

    Keys: ``overview`` (``audit_overview``), ``gate`` (the live gate: final if recorded,
    else preliminary), ``progress`` (frame: role, user_id, project_id, labelled, of,
    share; the adjudicator's ``of`` is the number of pairs needing adjudication),
    ``label_statuses`` (status → count), ``requirements`` (frame: name, value,
    comparator, threshold, passed — see ``gate_requirements_frame``), ``confusions``
    (name → ``confusion[ref][pred]`` from the gate report: human_human = A vs B,
    automatic_vs_a / _b, and automatic_vs_reference once final), ``disagreements``
    (frame, one row per pair needing adjudication, with Label Studio links).
    """

    with session_scope(engine(settings)) as session:
        row = get_audit(session, name=audit)
        gate_res = audit_gate(session, row, with_preliminary=False)
        pairs = audit_pairs(session, audit_id=row.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        labels = current_labels(session, row)
        tasks = {
            (t.role, t.pair_id): t
            for t in audit_tasks(session, audit_id=row.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            if not t.repeat  # a hidden repeat is not the pair's task
        }
        to_adj = needs_adjudication(pairs, labels, audit_rubric(session, row).adjudication.scope)
        roles = {b.role: b for b in bindings(session, PAIR, row.id)}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        progress = []
        for role in ROLES:
            of = len(to_adj) if role == ADJUDICATOR else len(pairs)
            done = len(labels.get(role, {}))
            progress.append(
                {
                    "role": role,
                    "person": roles[role].person if role in roles else None,
                    "user_id": roles[role].user_id if role in roles else None,
                    "project_id": roles[role].project_id if role in roles else None,
                    "labelled": done,
                    "of": of,
                    "share": done / of if of else None,
                }
            )
        disagreements = []
        for p in to_adj:
            a, b = labels.get("A", {}).get(p.id), labels.get("B", {}).get(p.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            links = {}
            for role in ROLES:
                t = tasks.get((role, p.id))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                server = roles[role].server_url if role in roles else None
                links[role] = task_url(server, t.project_id, t.task_id) if t and server else None
            disagreements.append(
                {
                    "pair_key": p.pair_key,
                    "question_id": p.question_id,
                    "trajectory_a": p.trajectory_a,
                    "trajectory_b": p.trajectory_b,
                    "A": a,
                    "B": b,
                    "automatic": p.automatic or "uncertain",
                    "why": "A ≠ B" if a != b else "humans ≠ automatic",
                    "adjudicated": labels.get(ADJUDICATOR, {}).get(p.id),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                    "adjudication_task": links[ADJUDICATOR],
                    "task_A": links["A"],
                    "task_B": links["B"],
                }
            )
        report = gate_res.get("report") or {}
        return {
            "overview": audit_overview(session, row),
            "gate": gate_res,
            "sequential": _sequential_view(session, row, gate_res),
            "annotators": annotators_view(session, row),
            "progress": pd.DataFrame(
                progress, columns=["role", "user_id", "project_id", "labelled", "of", "share"]
            ),
            "label_statuses": status_counts(session, row),
            "requirements": pd.DataFrame(
                gate_requirements(session, row, gate_res),
                columns=["name", "value", "comparator", "threshold", "passed"],
            ),
            "confusions": {
                name: report[name]["confusion"]
                for name in (
                    "human_human",
                    "automatic_vs_a",
                    "automatic_vs_b",
                    "automatic_vs_reference",
                )
                if report.get(name)
            },
            "disagreements": pd.DataFrame(
                disagreements,
                columns=[
                    "pair_key",
                    "question_id",
                    "trajectory_a",
                    "trajectory_b",
                    "A",
                    "B",
                    "automatic",
                    "why",
                    "adjudicated",
                    "adjudication_task",
                    "task_A",
                    "task_B",
                ],
            ),
        }


def calibration_progress(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per validity calibration of the study: held-out items with a human
    reference (``labelled`` of ``of``), A–B disagreements still waiting for adjudication
    (two-annotator plans) and whether it is recorded as completed (the same reading as
    ``rcea demo status``, :func:`rcea.study.progress.read_calibration`)."""

    rows = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        for check in study_checks(session, study_id=st.id, kind="calibration"):  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            cp = read_calibration(session, check.name)
            if cp is None:
                rows.append({"calibration": check.name, "status": "not pushed"})
                continue
            rows.append(
                {
                    "calibration": check.name,
                    "status": "completed" if cp.completed else "labelling",
                    "labelled": cp.n_reference,  # type: ignore[dict-item]  # one row of the view's mixed-type table; mypy infers str values from the first entry
                    "of": cp.n_items,  # type: ignore[dict-item]  # one row of the view's mixed-type table; mypy infers str values from the first entry
                    "share": cp.n_reference / cp.n_items if cp.n_items else None,  # type: ignore[dict-item]  # one row of the view's mixed-type table; mypy infers str values from the first entry
                    "awaiting adjudication": cp.n_needing_adjudication - cp.n_adjudicated,  # type: ignore[dict-item]  # one row of the view's mixed-type table; mypy infers str values from the first entry
                }
            )
    return pd.DataFrame(
        rows,
        columns=["calibration", "status", "labelled", "of", "share", "awaiting adjudication"],
    )


CALIBRATION_FIGURE_COLUMNS = [
    "calibration", "outcome", "basis", "figure", "balanced", "population", "low", "high",
    "threshold", "passed",
]  # fmt: skip


def calibration_figures(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """Every completed calibration's figures on the balanced sample and on the population
    (with its interval) beside the threshold of the declared basis
    (:func:`rcea.study.validity_audit.figures.calibration_figure_rows`)."""

    with session_scope(engine(settings)) as session:
        sid = require_study(session, name=study).id
        rows = calibration_figure_rows(session, study_id=sid)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return pd.DataFrame(rows, columns=CALIBRATION_FIGURE_COLUMNS)


def extension_requests(
    study: str, settings: Settings | None = None, *, n_examples: int = 3
) -> list[dict[str, Any]]:
    """Every extension request of the study (pending first, then by id): proposals with
    their criterion, trajectory count and up to ``n_examples`` example trajectories."""

    out = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        exts = list_extensions(session, study=study)
        ids = [
            t for e in exts for p in e.proposals for t in p.get("trajectory_ids", [])[:n_examples]
        ]
        texts = trajectories_by_id(session, study_id=st.id, ids=ids)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        for e in sorted(exts, key=lambda e: (e.status != "pending", e.id)):
            out.append(
                {
                    "extension_id": e.id,
                    "question_id": e.question_id,
                    "status": e.status,
                    "base_version_id": e.base_version_id,
                    "new_version_id": e.new_version_id,
                    "decided_by": e.decided_by,
                    "reason": e.reason,
                    "proposals": [
                        {
                            "name": p["name"],
                            "criterion": p.get("criterion", ""),
                            "n_trajectories": len(p.get("trajectory_ids", [])),
                            "examples": [
                                example(texts.get(t), t)
                                for t in p.get("trajectory_ids", [])[:n_examples]
                            ],
                        }
                        for p in e.proposals
                    ],
                }
            )
    return out


def decide_extension_request(
    study: str,
    extension_id: int,
    *,
    approve: bool,
    actor: str,
    reason: str = "",
    settings: Settings | None = None,
) -> dict[str, Any]:
    """Approve or reject a pending extension request — the domain calls of ``rcea codebook
    approve`` / ``rcea codebook reject``. Approval refreezes the question's codebook as a
    new version and reassigns the affected trajectories like the CLI does, with the
    codebook backend of the settings ``RCEA_CODEBOOK_*`` (``backend_from_settings``);
    a backend that cannot be built refuses the approval before anything is written.
    Raises ``CodebookStageError`` (or ``ValueError`` for the backend) otherwise."""

    if approve:
        cfg = settings or get_settings()
        backend, seed, threshold = backend_from_settings(cfg)
        res = approve_extensions(
            engine(settings),
            study=study,
            extension_ids=[extension_id],
            actor=actor,
            reason=reason,
            backend=backend,
            seed=seed,
            threshold=threshold,
        )
        return {**res["approved"][0], **{k: res[k] for k in ("assign", "reconcile") if k in res}}
    with session_scope(engine(settings)) as session:
        ext, v = decide_extension(
            session,
            study=study,
            extension_id=extension_id,
            approve=approve,
            actor=actor,
            reason=reason,
        )
        return decision_summary(ext, v)
