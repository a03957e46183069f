"""Every store read of the report, returning plain data: :func:`gather_inputs` (what
:func:`rcea.study.report.compute.compute_report` needs, all at once: a bundle's
``inputs.json``) and :func:`gather_meta` (the same without the rows, with the
:class:`StoreRows` that streams them one checkpoint at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import and_
from sqlmodel import Session, select

from rcea.audits.rubric import EstimatorSettings
from rcea.study import events
from rcea.study.events import IMPORT_LM_EVAL, IMPORT_TRL, IMPORT_VERL
from rcea.study.pair_audit.freeze import partition_modes, rubric_spec
from rcea.study.pair_audit.gate import audit_gate
from rcea.study.pair_audit.sampling import failed_final_gates
from rcea.study.records.imports import describe_rule
from rcea.study.report.attempt_labels import attempt_labels
from rcea.study.report.attempts import AUDIT_EVENT_KINDS, chain
from rcea.study.report.compute import Key, ModeLabels
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.replicates import check_labels, measurement_run, seeded_run
from rcea.study.report.rows import COLUMNS, SAMPLING_COLUMNS, SEED_COLUMN, record_set_hash
from rcea.study.store import list_events, require_study
from rcea.study.store.measurements import list_measurements
from rcea.study.store.models import (
    Audit,
    JudgeVerdict,
    JudgeVersion,
    Partition,
    PartitionAssignment,
    Rubric,
    Trajectory,
)
from rcea.study.validity_audit.checks import production_judge
from rcea.study.validity_audit.status import validity_status
from rcea.study.validity_audit.validity import production_verdicts
from rcea.study.validity_audit.versions import JudgeError

#: Measurement kinds the report reads (and the bundle carries).
REPORT_MEASUREMENTS = (
    "training_curve",
    "greedy_accuracy",
    "accuracy_trace",
    "passk",
    "covariance_transition",
    "tail",
    "tail_trajectories",
)


def gather_inputs(
    session: Session,
    *,
    study: str,
    params: ReportParameters | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Everything :func:`compute_report` needs, read from the store, JSON-ready (the
    bundle's ``inputs.json`` carries exactly this): ``study``, ``study_id``,
    ``parameters`` (resolved estimator settings, their source and deviations), ``rows``
    (every trajectory's sufficient statistics in ingest order, with ``in_partition`` and
    ``partition_mode`` when the mode numbers rest on a frozen partition), ``pair`` and
    ``validity_status`` (the audit states), ``judge_verdicts`` (trajectory id → verdict
    of the production judge, ``None`` when validity comes from the column) and
    ``measurements`` (the producer measurements the report reads). Unlike
    ``build_report`` this holds every row (a bundle carries them all)."""
    params = ReportParameters.of(params, **overrides)
    meta, source = gather_meta(session, study=study, params=params)
    rows = study_trajectories(session, meta["study_id"])
    if source.partition_id is not None:
        assigned = partition_modes(session, partition_id=source.partition_id)
        for r in rows:
            hit = assigned.get(r["trajectory_id"])
            r["in_partition"] = hit is not None
            r["partition_mode"] = hit[1] if hit is not None else None
    verdicts: dict[str, str] | None = None
    if source.judge_id is not None:
        judge = session.get(JudgeVersion, source.judge_id)
        verdicts = production_verdicts(session, study_id=meta["study_id"], judge=judge)
    return {
        "study": meta["study"],
        "study_id": meta["study_id"],
        "parameters": meta["parameters"],
        "rows": rows,
        "pair": meta["pair"],
        "validity_status": meta["validity_status"],
        "judge_verdicts": verdicts,
        "measurements": meta["measurements"],
        "imports": meta["imports"],
        "audit_events": meta["audit_events"],
        "attempt_labels": meta["attempt_labels"],
    }


def gather_meta(
    session: Session,
    *,
    study: str,
    params: ReportParameters,
) -> tuple[dict[str, Any], StoreRows]:
    """:func:`gather_inputs` without ``rows`` and ``judge_verdicts``, and the store
    source that reads those one checkpoint at a time."""
    st = require_study(session, name=study)
    pair = pair_audit_state(session, study_id=st.id, partition=params.partition)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    given = params.estimator_settings()
    est, est_source = _estimator_settings(session, pair["rubric_hash"])
    resolved = {k: getattr(est, k) if v is None else v for k, v in given.items()}
    deviations = (
        sorted(k for k, v in given.items() if v is not None and v != getattr(est, k))
        if est_source != "defaults"
        else []
    )
    vstat = validity_status(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    judge_id: int | None = None
    if vstat["status"] != "no-judge":
        try:
            judge_id = production_judge(session, study_id=st.id).id  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        except JudgeError:  # a judge.run event naming no stored judge version: the column
            judge_id = None
    measurements = [
        {
            "kind": m.kind,
            # a seeded run's measurements under its seeded label (docs/estimators.md item 17)
            "run": measurement_run(m.run, m.train_seed),
            "model": m.model,
            "step": m.step,
            "key": m.key,
            "payload": m.payload,
        }
        for m in list_measurements(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        if m.kind in REPORT_MEASUREMENTS
    ]
    meta = {
        "study": st.name,
        "study_id": st.id,
        "parameters": {
            **resolved,
            "base_step": params.base_step,
            "base_run": params.base_run,
            "partition": params.partition,
            "association_k": params.association_k,
            "association_benchmark": params.association_benchmark,
            "association_pooled": params.association_pooled,
            "estimators_from": est_source,
            "deviations_from_rubric": deviations,
            "min_eligible_questions": est.min_eligible_questions,
            "min_eligible_share": est.min_eligible_share,
            "min_evidence": est.min_evidence(),
        },
        "pair": pair,
        "validity_status": vstat,
        "measurements": measurements,
        "imports": import_rules(session, study_id=st.id),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        "attempt_labels": attempt_labels(session, study_id=st.id),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        "audit_events": chain(
            [
                {
                    "id": e.id,
                    "time": e.time.isoformat(),
                    "actor": e.actor,
                    "kind": e.kind,
                    "payload": e.payload,
                }
                for e in list_events(session, study_id=st.id)
                if e.kind in AUDIT_EVENT_KINDS
            ]
        ),
    }
    source = StoreRows(
        session,
        study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        partition_id=pair["partition_id"],
        judge_id=judge_id,
    )
    return meta, source


def import_rules(session: Session, *, study_id: int) -> list[dict[str, Any]]:
    """Every trainer-dump or evaluation-log import of the study with its score rule
    (``import.verl``, ``import.trl`` and ``import.lm_eval`` events, in the order they
    happened): what turned each file's scores into R, shown with the numbers."""

    out = []
    events = [
        ev
        for kind in (IMPORT_VERL, IMPORT_TRL, IMPORT_LM_EVAL)
        for ev in list_events(session, kind=kind, study_id=study_id)
    ]
    for ev in sorted(events, key=lambda e: e.id or 0):  # stored events have ids
        p = ev.payload or {}
        opts = p.get("options", {})
        rules = sorted(
            {describe_rule(r) for r in (p.get("score_rules") or {}).values() if r is not None}
        )
        out.append(
            {
                "source": p.get("source"),
                "run": opts.get("run"),
                "model": opts.get("model"),
                "score_rule": "; ".join(rules) or None,
                "n_special_stripped": p.get("n_special_stripped", 0),
            }
        )
    return out


def _estimator_settings(session: Session, rubric_hash: str | None) -> tuple[Any, str]:
    """The ``[estimators]`` of the frozen rubric with ``rubric_hash`` and a description of
    where they come from (``rubric NAME vV (HASH…)``), else the defaults."""

    row = (
        session.exec(select(Rubric).where(Rubric.content_hash == rubric_hash)).first()
        if rubric_hash
        else None
    )
    if row is None:
        return EstimatorSettings(), "defaults"
    return rubric_spec(row).estimators, f"rubric {row.name} v{row.version} ({rubric_hash[:12]}…)"  # type: ignore[index]  # a stored rubric has its hash


def pair_audit_state(
    session: Session, *, study_id: int, partition: str | None = None
) -> dict[str, Any]:
    """Which partition the mode numbers rest on and the state of its pair-audit gate.

    Default: the partition of the latest passing ``gate.final`` event; without one the
    latest frozen partition; without any the ``mode`` column. ``partition`` (a content
    hash prefix or ``latest``) chooses explicitly. The status is that of the latest final
    gate bound to the chosen partition, else of its latest audit's preliminary gate
    (pending|preliminary), else ``none``. ``failures_on_partition`` lists every audit of
    the chosen partition whose final gate FAILED: a later pass does not erase it, and
    the report states it (docs/publication.md "Every attempt").
    """
    finals = list_events(session, kind=events.GATE_FINAL, study_id=study_id)
    parts = list(
        session.exec(
            select(Partition).where(Partition.study_id == study_id).order_by(Partition.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
    )
    by_hash = {p.content_hash: p for p in parts}
    passing = [e for e in finals if e.payload.get("status") == "passed"]
    chosen: Partition | None = None
    source = "mode-column"
    if partition is not None:
        chosen = _resolve_partition(parts, partition)
        source = "chosen"
    elif passing and passing[-1].payload.get("partition_hash") in by_hash:
        chosen, source = by_hash[passing[-1].payload["partition_hash"]], "gate"
    elif parts:
        chosen, source = parts[-1], "latest-frozen"
    state: dict[str, Any] = {
        "status": "none",
        "audit": None,
        "rubric_hash": None,
        "partition_hash": chosen.content_hash if chosen else None,
        "partition_id": chosen.id if chosen else None,
        "partition_source": source,
        "gate": None,
        "other_passing": [
            {"audit": e.payload.get("audit"), "partition_hash": e.payload.get("partition_hash")}
            for e in passing
            if chosen is None or e.payload.get("partition_hash") != chosen.content_hash
        ],
        "blocked_by": None,
    }
    state["failures_on_partition"] = (
        failed_final_gates(session, study_id=study_id, partition_hash=chosen.content_hash)
        if chosen is not None
        else []
    )
    if chosen is None:
        state["blocked_by"] = (
            "modes rest on the trajectory mode column, not a frozen partition "
            "(run `rcea audit partition freeze` and pass a pair audit)"
        )
        return state
    bound = [e for e in finals if e.payload.get("partition_hash") == chosen.content_hash]
    if bound:
        ev = bound[-1].payload
        state.update(
            status=ev.get("status"),
            audit=ev.get("audit"),
            rubric_hash=ev.get("rubric_hash"),
            gate=ev.get("report"),
        )
    else:
        audit = session.exec(
            select(Audit)
            .where(Audit.study_id == study_id, Audit.partition_hash == chosen.content_hash)
            .order_by(Audit.id.desc())  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).first()
        if audit is not None:
            state.update(
                status=_preliminary_status(session, audit),
                audit=audit.name,
                rubric_hash=audit.rubric_hash,
            )
    if state["status"] != "passed":
        state["blocked_by"] = _partition_blocker(state)
    return state


def _resolve_partition(parts: list[Partition], spec: str) -> Partition:
    if not parts:
        raise ValueError("the study has no frozen partition")
    if spec == "latest":
        return parts[-1]
    hits = {p.content_hash: p for p in parts if p.content_hash.startswith(spec)}
    if len(hits) != 1:
        known = ", ".join(p.content_hash[:12] for p in parts)
        raise ValueError(
            f"partition {spec!r} matches {len(hits)} frozen partitions of the study "
            f"(known: {known})"
        )
    return next(iter(hits.values()))


def _preliminary_status(session: Session, audit: Audit) -> str:
    """The audit's state through the shared reader (no final gate is bound to the
    partition here, so it is the live preliminary gate); a broken binding reads pending."""

    status = str(audit_gate(session, audit, with_preliminary=False)["status"])
    return "pending" if status.startswith("error") else status


def _partition_blocker(state: dict[str, Any]) -> str:
    h = f"{state['partition_hash'][:12]}…"
    if state["audit"] is None:
        msg = f"retention rests on partition {h} which has no pair audit (`rcea audit sample`)"
    else:
        msg = (
            f"retention rests on partition {h} which has no passing final gate "
            f"(audit {state['audit']}: status {state['status']})"
        )
    others = [
        f"audit {o['audit']} passed on partition {str(o['partition_hash'])[:12]}…"
        for o in state["other_passing"]
    ]
    if others:
        msg += "; a gate bound to another partition does not count (" + "; ".join(others) + ")"
    return msg


def mode_labels(
    session: Session, *, study_id: int, pair: dict[str, Any]
) -> dict[Key, dict[str, list[str]]]:
    """Checkpoint → question → mode labels of the study's included trajectories (as in
    the report), read from the store one checkpoint at a time."""
    source = StoreRows(session, study_id=study_id, partition_id=pair["partition_id"], judge_id=None)
    labels = ModeLabels(pair, source.has_verdicts())
    for key in source.checkpoint_keys():
        labels.add(key, source.checkpoint(key)[0])
    return labels.result()


#: Rows per page when the record-set hash streams from the store.
HASH_PAGE = 20_000


class StoreRows:
    """A study's rows read from the store one checkpoint at a time.

    ``partition_id``: the partition the mode numbers rest on (its assignment joined as
    ``in_partition``/``partition_mode``); ``judge_id``: the production judge (its verdict
    joined), ``None`` when validity comes from the column."""

    def __init__(
        self,
        session: Session,
        *,
        study_id: int,
        partition_id: int | None,
        judge_id: int | None,
    ) -> None:
        self.session = session
        self.study_id = study_id
        self.partition_id = partition_id
        self.judge_id = judge_id
        self.judged = judge_id is not None
        stmt = (
            select(Trajectory.run, Trajectory.train_seed, Trajectory.model, Trajectory.step)
            .where(Trajectory.study_id == self.study_id)
            .distinct()
        )
        self._stored = list(session.exec(stmt).all())
        self._identities = check_labels((r, t) for r, t, _, _ in self._stored)

    def checkpoint_keys(self) -> list[Key]:
        return sorted({(seeded_run(r, t), m, s) for r, t, m, s in self._stored})

    def run_identities(self) -> dict[str, tuple[str, int]]:
        return dict(self._identities)

    def checkpoint(self, key: Key) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
        label, model, step = key
        run, train_seed = self._identities.get(label, (label, None))
        names = (*COLUMNS, *SAMPLING_COLUMNS, SEED_COLUMN)
        stmt = select(*(getattr(Trajectory, c) for c in names))
        if self.partition_id is not None:
            stmt = stmt.add_columns(
                PartitionAssignment.id.label("pa_id"),  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
                PartitionAssignment.mode.label("pa_mode"),  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
            ).outerjoin(
                PartitionAssignment,
                and_(
                    PartitionAssignment.partition_id == self.partition_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    PartitionAssignment.trajectory_id == Trajectory.trajectory_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                ),
            )
        if self.judge_id is not None:
            stmt = stmt.add_columns(JudgeVerdict.verdict.label("jv")).outerjoin(  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
                JudgeVerdict,
                and_(
                    JudgeVerdict.judge_id == self.judge_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    JudgeVerdict.study_id == self.study_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                    JudgeVerdict.trajectory_id == Trajectory.trajectory_id,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
                ),
            )
        seed_col: Any = Trajectory.train_seed
        stmt = stmt.where(
            Trajectory.study_id == self.study_id,
            Trajectory.run == run,
            seed_col.is_(None) if train_seed is None else seed_col == train_seed,
            Trajectory.model == model,
            Trajectory.step == step,
        ).order_by(Trajectory.id)
        rows: list[dict[str, Any]] = []
        verdicts: dict[str, str] | None = {} if self.judged else None
        n = len(names)
        for rec in self.session.exec(stmt):
            row = dict(zip(names, rec[:n], strict=True))
            row["run"] = label
            extra = rec[n:]  # (pa_id, pa_mode) with a partition, then jv with a judge
            if self.partition_id is not None:
                row["in_partition"] = extra[0] is not None
                row["partition_mode"] = extra[1]
                extra = extra[2:]
            if verdicts is not None and extra[0] is not None:
                verdicts[row["trajectory_id"]] = extra[0]
            rows.append(row)
        return rows, verdicts

    def has_verdicts(self) -> bool:
        stmt = (
            select(Trajectory.id)
            .where(
                Trajectory.study_id == self.study_id,
                Trajectory.reward == 1,
                Trajectory.validity.is_not(None),  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
            .limit(1)
        )
        return self.session.exec(stmt).first() is not None

    def iter_hash_rows(self) -> Iterator[dict[str, Any]]:
        """Every row in trajectory-id order (code-point order on both back ends: the
        ``C`` collation on PostgreSQL), read in pages of :data:`HASH_PAGE`."""
        names = (*COLUMNS, *SAMPLING_COLUMNS, SEED_COLUMN)
        cols: list[Any] = [getattr(Trajectory, c) for c in names]
        tid: Any = Trajectory.trajectory_id
        if self.session.get_bind().dialect.name == "postgresql":
            tid = tid.collate("C")
        stmt = (
            select(*cols)
            .where(Trajectory.study_id == self.study_id)
            .order_by(tid)
            .execution_options(yield_per=HASH_PAGE)
        )
        for rec in self.session.exec(stmt):
            yield dict(zip(names, rec, strict=True))

    def record_set_hash(self) -> str:
        return record_set_hash(self.iter_hash_rows(), ordered=True)


def study_trajectories(session: Session, study_id: int) -> list[dict[str, Any]]:
    """Every trajectory row of the study in ingest order (the bundle's ``rows``)."""
    names = (*COLUMNS, *SAMPLING_COLUMNS, SEED_COLUMN)
    cols = [getattr(Trajectory, c) for c in names]
    # Ingest order (row id): the within-question order fixes the bootstrap and
    # rarefaction draws, so the numbers equal `rcea stats` on the ingested file(s).
    stmt = select(*cols).where(Trajectory.study_id == study_id).order_by(Trajectory.id)
    return [dict(zip(names, row, strict=True)) for row in session.exec(stmt).all()]
