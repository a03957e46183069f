"""What the view shows, as plain pandas frames and dicts (kept apart from Streamlit so the
reads are testable without it). Every function opens its own session and reads through
the domain/service functions the CLI and the API use; page scripts never touch SQL.

``settings=None`` means the process settings (``RCEA_*`` environment / ``.env``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from rcea.app.view.report_frames import checkpoint_label
from rcea.audits.thresholds import GATE_REQUIREMENTS
from rcea.study.codebook import decide_extension, get_draft, list_extensions
from rcea.study.codebook.approval import (
    approve_extensions,
    backend_from_settings,
    decision_summary,
)
from rcea.study.codebook.common import versions_by_question
from rcea.study.labelling import PAIR, bindings
from rcea.study.pair_audit.annotators import annotator_quality
from rcea.study.pair_audit.freeze import FreezeError
from rcea.study.pair_audit.gate import audit_gate
from rcea.study.pair_audit.labels import (
    ADJUDICATOR,
    audit_rubric,
    current_labels,
    needs_adjudication,
    status_counts,
)
from rcea.study.pair_audit.sampling import audit_overview, audit_pairs, get_audit
from rcea.study.pair_audit.sequential import INTERIM_EVENT
from rcea.study.progress import read_calibration
from rcea.study.report.attempt_labels import attempt_labels
from rcea.study.report.attempts import AUDIT_EVENT_KINDS, attempts
from rcea.study.report.build import build_report, mode_labels
from rcea.study.report.estimates import UNCERTAIN
from rcea.study.report.html import changes_text
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.schema import StudyReport
from rcea.study.settings import Settings, get_settings
from rcea.study.store import (
    list_events,
    list_studies,
    open_store,
    require_study,
    session_scope,
    study_summary,
)
from rcea.study.store.models import (
    Audit,
    AuditTask,
    CodebookDraft,
    Event,
    Measurement,
    Study,
    Trajectory,
    ValidityCheck,
)
from rcea.study.validity_audit.figures import calibration_figure_rows
from rcea.study.validity_audit.status import validity_status

if TYPE_CHECKING:
    from rcea.study.report.schema import StudyReport

ROLES = ("A", "B", "adjudicator")
AUDIT_COLUMNS = [
    "audit",
    "status",
    "stage",
    "pairs",
    "human_human_macro_f1",
    "automatic_macro_f1",
    "gap",
    "different_precision",
    "different_recall",
    "automatic_coverage",
    "rubric_hash",
    "partition_hash",
]

_ENGINES: dict[str, Engine] = {}


def engine(settings: Settings | None = None) -> Engine:
    """One migrated engine per database URL for the life of the process (the view reruns
    its scripts on every interaction; migrating each time would dominate)."""
    settings = settings or get_settings()
    url = settings.resolved_database_url
    if url not in _ENGINES:
        _ENGINES[url] = open_store(settings)
    return _ENGINES[url]


def database_key(settings: Settings | None = None) -> str:
    """The database URL, for cache keys (two stores never share a cached value)."""
    return (settings or get_settings()).resolved_database_url


def version_stamp(study: str | None, settings: Settings | None = None) -> tuple[int, ...]:
    """A cheap stamp that changes whenever anything the view shows of ``study`` may have
    changed: the latest event id (freezes, labels, codebook decisions, ingests), the
    trajectory count, and the measurement count and latest id. A measurement replaced in
    place keeps its id, so cached reads also expire after a short TTL."""

    with session_scope(engine(settings)) as s:
        last_event = s.exec(select(func.max(Event.id))).one() or 0
        st = s.exec(select(Study).where(Study.name == study)).first() if study else None
        if st is None:
            return (int(last_event), 0, 0, 0)
        n_traj = s.exec(select(func.count()).where(Trajectory.study_id == st.id)).one()
        n_meas, last_meas = s.exec(
            select(func.count(), func.max(Measurement.id)).where(Measurement.study_id == st.id)
        ).one()
        return (int(last_event), int(n_traj), int(n_meas), int(last_meas or 0))


# --------------------------------------------------------------------------- overview


def studies_frame(settings: Settings | None = None) -> pd.DataFrame:
    """One row per study with its counts."""
    rows = []
    with session_scope(engine(settings)) as session:
        for st in list_studies(session):
            summ = study_summary(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            rows.append(
                {
                    "study": st.name,
                    "trajectories": summ["n_trajectories"],
                    "questions": summ["n_questions"],
                    "ingests": summ["n_ingests"],
                    "created": st.created_at,
                }
            )
    return pd.DataFrame(rows, columns=["study", "trajectories", "questions", "ingests", "created"])


def checkpoints_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per (run, model, step) with sample counts and verifier accuracy."""
    with session_scope(engine(settings)) as session:
        summ = study_summary(session, study_id=require_study(session, name=study).id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    df = pd.DataFrame(
        summ["groups"], columns=["run", "model", "step", "n", "n_success", "n_failure"]
    )
    df["accuracy"] = df["n_success"] / df["n"].where(df["n"] > 0)
    return df


def _audit_gates(session: Session, study_id: int) -> list[tuple[Any, dict[str, Any]]]:
    """(audit, gate) per audit of the study, oldest first (``audit_gate``: the recorded
    final gate, else the live preliminary one)."""

    audits = session.exec(select(Audit).where(Audit.study_id == study_id).order_by(Audit.id))  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
    return [(a, audit_gate(session, a, with_preliminary=False)) for a in audits.all()]


def audits_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per pair audit of the study: gate status (pending / preliminary / passed /
    failed) and the gate values of the recorded final gate, else of the live preliminary
    gate."""

    rows = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        for audit, res in _audit_gates(session, st.id):  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            report = res.get("report") or {}
            rows.append(
                {
                    "audit": audit.name,
                    "status": res.get("status", "pending"),
                    "stage": res.get("stage"),
                    "pairs": len(audit_pairs(session, audit_id=audit.id)),
                    **{k: report.get(k) for k in AUDIT_COLUMNS[4:10]},
                    "rubric_hash": audit.rubric_hash[:12],
                    "partition_hash": audit.partition_hash[:12],
                }
            )
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


def _requirements(session: Session, audit: Any, gate: dict[str, Any]) -> list[dict[str, Any]]:
    """The final gate's requirement rows as recorded; before that, the same rows with the
    values computed so far, the frozen rubric's thresholds and ``passed = None`` (the
    preliminary stage is reported, not gated)."""

    report = gate.get("report") or {}
    if report.get("requirements"):
        return list(report["requirements"])
    try:
        thresholds = audit_rubric(session, audit).gate.to_dict()
    except FreezeError:
        return []
    return [
        {
            "name": name,
            "value": report.get(name),
            "threshold": thresholds[key],
            "comparator": comparator,
            "passed": None,
        }
        for name, key, comparator in GATE_REQUIREMENTS
    ]


def gate_requirements_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per (audit, gate requirement): value, comparator, the rubric's threshold and
    pass/fail (``None`` until a final gate is recorded)."""
    rows = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        for audit, res in _audit_gates(session, st.id):  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            for req in _requirements(session, audit, res):
                rows.append(
                    {
                        "audit": audit.name,
                        "stage": res.get("stage"),
                        "requirement": req["name"],
                        "value": req["value"],
                        "comparator": req["comparator"],
                        "threshold": req["threshold"],
                        "passed": req["passed"],
                    }
                )
    return pd.DataFrame(
        rows,
        columns=["audit", "stage", "requirement", "value", "comparator", "threshold", "passed"],
    )


def validity_frame(study: str, settings: Settings | None = None) -> dict[str, Any]:
    """The validity audit's state (``rcea.study.validity_audit.status.validity_status``)."""

    with session_scope(engine(settings)) as session:
        return validity_status(session, study_id=require_study(session, name=study).id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


# --------------------------------------------------------------------------- audit page


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
        return list(
            session.exec(
                select(Audit.name).where(Audit.study_id == st.id).order_by(Audit.id.desc())  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
            ).all()
        )


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
            for t in session.exec(select(AuditTask).where(AuditTask.audit_id == row.id)).all()
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
                _requirements(session, row, gate_res),
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


# --------------------------------------------------------------------------- codebooks


def _trajectory_rows(session: Session, study_id: int, ids: list[str]) -> dict[str, Any]:
    """trajectory_id → row (with provenance: this is the researcher's view)."""

    if not ids:
        return {}
    rows = session.exec(
        select(Trajectory).where(
            Trajectory.study_id == study_id,
            Trajectory.trajectory_id.in_(sorted(set(ids))),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
        )
    ).all()
    return {r.trajectory_id: r for r in rows}


def _example(t: Any, tid: str) -> dict[str, Any]:
    if t is None:
        return {"trajectory_id": tid, "missing": True}
    return {
        "trajectory_id": tid,
        "run": t.run,
        "model": t.model,
        "step": t.step,
        "seed": t.seed,
        "reward": t.reward,
        "text": t.text,
    }


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
        texts = _trajectory_rows(session, st.id, ids)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
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
                                _example(texts.get(t), t)
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


def codebooks_frame(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per question with a codebook: the latest frozen version (or ``draft``),
    its hash, how many versions and modes."""

    rows = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        versions = versions_by_question(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        drafts = {
            d.question_id: d
            for d in session.exec(select(CodebookDraft).where(CodebookDraft.study_id == st.id))
        }
        for q in sorted(set(versions) | set(drafts)):
            vs = versions.get(q, [])
            rows.append(
                {
                    "question_id": q,
                    "status": "frozen" if vs else "draft",
                    "version": vs[-1].version if vs else None,
                    "n_versions": len(vs),
                    "n_modes": len(vs[-1].modes if vs else drafts[q].modes),
                    "content_hash": vs[-1].content_hash[:12] if vs else None,
                    "frozen_at": vs[-1].frozen_at if vs else None,
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "question_id",
            "status",
            "version",
            "n_versions",
            "n_modes",
            "content_hash",
            "frozen_at",
        ],
    )


def codebook_versions(
    study: str, question_id: str, settings: Settings | None = None
) -> list[dict[str, Any]]:
    """The versions of one question's codebook, newest first (the draft alone when none is
    frozen): hash, parent version, reason, who froze it, and each mode's definition with
    its example trajectories (text and provenance)."""

    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        vs = versions_by_question(session, study_id=st.id).get(question_id, [])  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        by_id = {v.id: v for v in vs}
        entries: list[dict[str, Any]] = [
            {
                "label": f"v{v.version}",
                "version": v.version,
                "content_hash": v.content_hash,
                "parent_version": by_id[v.parent_id].version if v.parent_id in by_id else None,
                "reason": v.reason,
                "frozen_by": v.frozen_by,
                "frozen_at": v.frozen_at,
                "prompts": v.prompts,
                "modes": v.modes,
            }
            for v in reversed(vs)
        ]
        if not entries:
            draft = get_draft(session, study_id=st.id, question_id=question_id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            if draft is not None:
                entries.append({"label": "draft", "version": None, "modes": draft.modes})
        ids = [t for e in entries for m in e["modes"] for t in m.get("examples", [])]
        rows = _trajectory_rows(session, st.id, ids)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        for e in entries:
            e["modes"] = [
                {
                    **m,
                    "example_trajectories": [
                        _example(rows.get(t), t) for t in m.get("examples", [])
                    ],
                }
                for m in e["modes"]
            ]
        return entries


# --------------------------------------------------------------------------- report pages


def report(
    study: str,
    settings: Settings | None = None,
    *,
    n_boot: int,
    seed: int = 0,
    k_min: int = 8,
) -> StudyReport:
    """``rcea.study.report.build.build_report`` of the study (the view uses a small ``n_boot``;
    the published report uses the full B), validated into the typed report
    ``rcea.study.report.schema.StudyReport`` that the API returns and the bundle carries: the
    pages read its typed sections, never the raw JSON."""

    with session_scope(engine(settings)) as session:
        params = ReportParameters(seed=seed, n_boot=n_boot, k_min=k_min)
        rep = build_report(session, study=study, params=params)
    return StudyReport.model_validate(rep)


def mode_distribution(
    study: str, pair: dict[str, Any], settings: Settings | None = None
) -> pd.DataFrame:
    """Mode counts per (question, checkpoint) of the trajectories the report's mode numbers
    use: R = 1, judge-accepted, labelled by the partition in ``pair`` (the report's
    ``audits.pair``; the ``mode`` column when it names none); ``uncertain`` counted but
    excluded from ``share``. Columns: question_id, checkpoint, run, model, step, mode,
    count, share.

    Reads through the report's own selection (``rcea.study.report.build``), so the bars are of
    exactly the labels its retention and mode entropy are computed from."""

    with session_scope(engine(settings)) as session:
        modes = mode_labels(session, study_id=require_study(session, name=study).id, pair=pair)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    out = []
    for (run, model, step), by_q in sorted(modes.items(), key=lambda kv: kv[0]):
        for q, labels in sorted(by_q.items()):
            n_incl = sum(m != UNCERTAIN for m in labels)
            for mode in sorted(set(labels)):
                count = labels.count(mode)
                out.append(
                    {
                        "question_id": q,
                        "checkpoint": checkpoint_label(run, model, step),
                        "run": run,
                        "model": model,
                        "step": step,
                        "mode": mode,
                        "count": count,
                        "share": None if mode == UNCERTAIN or not n_incl else count / n_incl,
                    }
                )
    return pd.DataFrame(
        out,
        columns=["question_id", "checkpoint", "run", "model", "step", "mode", "count", "share"],
    )


def calibration_progress(study: str, settings: Settings | None = None) -> pd.DataFrame:
    """One row per validity calibration of the study: held-out items with a human
    reference (``labelled`` of ``of``), A–B disagreements still waiting for adjudication
    (two-annotator plans) and whether it is recorded as completed (the same reading as
    ``rcea demo status``, :func:`rcea.study.progress.read_calibration`)."""

    rows = []
    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        checks = session.exec(
            select(ValidityCheck)
            .where(ValidityCheck.study_id == st.id, ValidityCheck.kind == "calibration")
            .order_by(ValidityCheck.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
        for check in checks:
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


def mode_names(study: str, settings: Settings | None = None) -> dict[str, dict[str, str]]:
    """question id → mode id → the mode's name in the question's latest frozen codebook
    (the partition labels trajectories by id: ``m1``, ``m2`` …)."""

    with session_scope(engine(settings)) as session:
        st = require_study(session, name=study)
        return {
            q: {str(m["id"]): str(m["name"]) for m in vs[-1].modes if "id" in m and "name" in m}
            for q, vs in versions_by_question(session, study_id=st.id).items()  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            if vs
        }
