"""``build_report``: every RCEA quantity the store can support for one study, JSON-ready.

The keys are those of the typed report ``rcea.study.report.schema.StudyReport`` (its field
descriptions generate docs/report-keys.md and the JSON Schema docs/report.schema.json).
:func:`build_report` (``rcea report build``) reads the store one checkpoint at a time
(:class:`rcea.study.report.rows.StoreRows`) and computes with :func:`compute_report_from`;
:func:`gather_inputs` reads everything at once (a bundle's ``inputs.json``) and
:func:`compute_report` computes the same report from those inputs alone, through the same
:func:`compute_report_from` (``rcea report verify`` reruns it on a bundle).

Mode numbers use the partition of the latest passing final gate (``gate.final`` event)
when there is one, else the latest frozen partition (unpublishable), else the trajectory
``mode`` column (unpublishable). The included trajectories are R = 1 and judge-accepted
(validity 1; when no success of the study carries a verdict, every success).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session, select
from tqdm import tqdm

from rcea.audits.association import retention_passk_spearman
from rcea.audits.covariance import FIT_SUMMARY, covariance_fit_by_group
from rcea.audits.entropy import outcome_report
from rcea.audits.failure import detect_training_failure, last_milestone_before_failure
from rcea.audits.modes import RarefiedRetention
from rcea.audits.passk import macro_pass_at_k
from rcea.audits.rubric import EstimatorSettings
from rcea.audits.tail import BudgetTail, StratumTail, TailResult, direction_counts
from rcea.audits.validity import validity_rate
from rcea.study import events
from rcea.study.events import IMPORT_LM_EVAL, IMPORT_TRL, IMPORT_VERL
from rcea.study.pair_audit.freeze import partition_modes, rubric_spec
from rcea.study.pair_audit.gate import audit_gate
from rcea.study.pair_audit.sampling import failed_final_gates
from rcea.study.records.imports import describe_rule
from rcea.study.report.attempt_labels import attempt_labels
from rcea.study.report.attempts import (
    AUDIT_EVENT_KINDS,
    CALIBRATION_KIND,
    PAIR_KIND,
    attempts,
    chain,
)
from rcea.study.report.entropy_law import entropy_law_section, law_quantities
from rcea.study.report.estimates import (
    UNCERTAIN,
    checkpoint_entropy,
    mode_label,
    retention_table,
    sequence_quantity,
)
from rcea.study.report.mode_tail import (
    SUM_FIELDS,
    ModeTailCollector,
    mode_covariance_quantities,
    mode_tail_quantities,
)
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.publication import evidence_lines, mark_changed_quantities
from rcea.study.report.realization import RealizationCollector, realization_quantities
from rcea.study.report.replicates import measurement_run, replicates_section, seeded_run
from rcea.study.report.rows import (
    CheckpointRows,
    MemoryRows,
    StoreRows,
    study_trajectories,
)
from rcea.study.report.schema import SCHEMA_VERSION
from rcea.study.report.sections import ModeSummary, RetentionSection
from rcea.study.store import list_events, require_study
from rcea.study.store.measurements import list_measurements
from rcea.study.store.models import Audit, JudgeVersion, Partition, Rubric
from rcea.study.validity_audit.checks import production_judge
from rcea.study.validity_audit.status import validity_status
from rcea.study.validity_audit.validity import production_verdicts, validity_groups
from rcea.study.validity_audit.versions import JudgeError

ENTROPY_ONLY_LABEL = "entropy-only (no audit)"
#: What fills the token- and sequence-entropy splits of a checkpoint whose trajectories
#: carry rewards only (an imported trainer dump): docs/how-to-verl.md step 2.
FILL_TOKEN_ENTROPIES = (
    "the outcome numbers (H(R|x), accuracy, coverage) need rewards only and are in "
    "`outcome`; fill the token and sequence splits with `rcea probe score --study S "
    "--run RUN --model MODEL --step STEP --checkpoint DIR` (docs/how-to-verl.md, step 2)"
)
AUDITED_LABEL = "audited"
INSUFFICIENT_LABEL = "insufficient evidence"

Key = tuple[str, str, int]


def build_report(
    session: Session,
    *,
    study: str,
    params: ReportParameters | None = None,
    include_draws: bool = False,
    progress: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """Assemble the report of ``study`` (keys in the module docstring) under ``params``
    (:class:`~rcea.study.report.parameters.ReportParameters`, with keyword ``overrides`` of its
    fields applied; given estimator settings that
    differ from the bound rubric are listed in ``parameters.deviations_from_rubric``).
    ``progress`` shows a tqdm bar over checkpoints; ``include_draws`` keeps the
    rarefaction draws in each retention result (the bundle does).
    """
    params = ReportParameters.of(params, **overrides)
    meta, source = _gather_meta(session, study=study, params=params)
    return with_time(
        compute_report_from(meta, source, include_draws=include_draws, progress=progress)
    )


def with_time(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with ``generated_at`` (UTC now) after ``study_id``."""
    return {
        **{k: report[k] for k in ("study", "study_id")},
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        **{k: v for k, v in report.items() if k not in ("study", "study_id")},
    }


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
    meta, source = _gather_meta(session, study=study, params=params)
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


def _gather_meta(
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


def compute_report(
    inputs: dict[str, Any], *, include_draws: bool = False, progress: bool = False
) -> dict[str, Any]:
    """The report (keys in the module docstring, without ``generated_at``) from
    :func:`gather_inputs`' dict alone — no store: ``rcea report verify`` calls this on a
    bundle's ``inputs.json``."""
    source = MemoryRows(
        inputs["rows"],
        inputs.get("judge_verdicts"),
        judged=inputs["validity_status"]["status"] != "no-judge",
    )
    return compute_report_from(inputs, source, include_draws=include_draws, progress=progress)


def compute_report_from(
    inputs: dict[str, Any],
    source: CheckpointRows,
    *,
    include_draws: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """The report from ``inputs`` (:func:`gather_inputs`' dict; ``rows`` and
    ``judge_verdicts`` unused) and the trajectory rows of ``source``, read one checkpoint
    at a time: per-checkpoint numbers are computed as each checkpoint is read, then
    retention (which compares checkpoints) from the mode labels kept meanwhile."""
    par = inputs["parameters"]
    pair = inputs["pair"]
    seed, n_boot, k_min = par["seed"], par["n_boot"], par["k_min"]
    n_min, n_draws, conf = par["n_min"], par["n_draws"], par["confidence"]
    base_step, base_run = par["base_step"], par["base_run"]
    vstat = inputs["validity_status"]
    has_verdicts = source.has_verdicts()
    validity = {
        "judge_name": None,
        **vstat,
        "filter": "judge" if has_verdicts else "none",
        "blocked_by": _validity_blocker(vstat),
    }
    keys = source.checkpoint_keys()
    measurements = _measurements(inputs["measurements"])
    failure = _failure(measurements["accuracy_trace"], keys, measurements["training_curve"])
    # A failure is a property of one (run, model): the same run name at another scale
    # is unaffected (docs/estimators.md item 14).
    failed: set[tuple[str, str]] = {(f["run"], f["model"]) for f in failure if f["failed"]}
    reported = {(f["run"], f["model"]): f["reported_step"] for f in failure}
    models_of_run: dict[str, set[str]] = defaultdict(set)
    for run, model, _ in keys:
        models_of_run[run].add(model)
    for m in (x for rows_ in measurements.values() for x in rows_):
        if m["run"] and m["model"]:
            models_of_run[m["run"]].add(m["model"])

    def label(run: str, model: str) -> str:
        return run if len(models_of_run[run]) <= 1 else f"{run}:{model}"

    last_step: dict[tuple[str, str], int] = {}
    for run, model, step in keys:
        last_step[(run, model)] = max(step, last_step.get((run, model), step))

    outside: dict[Key, int] = {}
    labels = ModeLabels(pair, has_verdicts, outside)
    realization = RealizationCollector(pair, has_verdicts, k_min=k_min)
    mode_tail = ModeTailCollector(
        pair,
        has_verdicts,
        {(m["run"], m["model"], m["step"]) for m in measurements["tail_trajectories"]},
        measurements["covariance_transition"],
    )
    checkpoints = []
    paired_ratios: dict[Key, dict[Any, float]] = {}  # item 17's per-seed ρ_H inputs
    for key in _progress(keys, progress, "checkpoints"):
        run, model, step = key
        ck, verdicts = source.checkpoint(key)
        entropy, entropy_error = None, None
        try:
            entropy_report = checkpoint_entropy(
                [r["question_id"] for r in ck],
                [r["reward"] for r in ck],
                [r["mean_token_entropy"] for r in ck],
                [r["seq_logprob"] for r in ck],
                seed=seed,
                k_min=k_min,
                n_boot=n_boot,
                confidence=conf,
                truncated=[r["truncated"] for r in ck],
                quantities=[
                    sequence_quantity(
                        r["sampling_temperature"], r["sampling_top_p"], r["logprob_temperature"]
                    )
                    for r in ck
                ],
            )
            paired_ratios[key] = entropy_report.paired.question_ratios
            entropy = entropy_report.to_dict(include_questions=False)
        except ValueError as exc:
            entropy_error = f"{exc}; {FILL_TOKEN_ENTROPIES}"
        outcome = outcome_report(
            [r["question_id"] for r in ck], [r["reward"] for r in ck], k_min=k_min
        ).to_dict()
        # With a production judge, verdicts come from its verdict table so that
        # `unparseable` and not-yet-judged successes count against coverage
        # (docs/estimators.md item 4), not as invalid.
        judged = None
        if source.judged and verdicts is not None:
            (group,) = validity_groups(ck, verdicts, k_min=k_min)
            judged = {k: v for k, v in group.items() if k not in ("run", "model", "step")}
        labels.add(key, ck)
        realization.add(key, ck)
        mode_tail.add(key, ck)
        n_success = sum(r["reward"] for r in ck)
        checkpoints.append(
            {
                "run": run,
                "model": model,
                "step": step,
                "n": len(ck),
                "n_questions": len({r["question_id"] for r in ck}),
                "n_success": n_success,
                "accuracy": n_success / len(ck),
                "reported": step == reported.get((run, model), last_step[(run, model)]),
                "failed_run": (run, model) in failed,
                "outcome": outcome,
                "entropy": entropy,
                "entropy_error": entropy_error,
                "validity": judged or (_validity(ck, k_min) if has_verdicts else None),
                "flow": _flow(ck, has_verdicts, pair),
            }
        )
        del ck, verdicts
    modes = labels.result()

    retention: dict[Key, dict[str, Any]] = {}
    retention_results: dict[Key, RarefiedRetention] = {}
    retention_errors: dict[Key, str] = {}
    retention_error = None
    if modes:
        try:
            for row in retention_table(
                modes,
                base_step=base_step,
                base_run=base_run,
                seed=seed,
                n_min=n_min,
                n_draws=n_draws,
                n_boot=n_boot,
                confidence=conf,
            ):
                if row.result is None:
                    retention_errors[row.key] = str(row.error)
                    continue
                retention_results[row.key] = row.result
                retention[row.key] = RetentionSection.of(
                    row.result, row.base, include_draws=include_draws
                ).to_json()
        except ValueError as exc:
            retention_error = str(exc)
    for c in checkpoints:
        key = (c["run"], c["model"], c["step"])
        c["modes"] = (
            _json(ModeSummary.of(modes.get(key), n_min, outside.get(key, 0))) if modes else None
        )
        c["retention"] = retention.get(key)
        c["retention_error"] = (
            retention_errors.get(key, retention_error) if c["step"] != base_step else None
        )
        e, v, m, r = c["entropy"] or {}, c["validity"] or {}, c["modes"] or {}, c["retention"]
        c["flow"]["eligible"] = {  # questions each number rests on (its n)
            "paired_ratio": e.get("n_paired_questions"),
            "validity": v.get("n_eligible"),
            "modes": m.get("n_eligible"),
            "retention": r["n_eligible"] if r else None,
        }

    passk = _passk(measurements["passk"])
    greedy = _greedy(measurements["greedy_accuracy"])
    report: dict[str, Any] = {
        "study": inputs["study"],
        "study_id": inputs["study_id"],
        "schema_version": SCHEMA_VERSION,
        "record_set_hash": source.record_set_hash(),
        "parameters": {
            k: par[k]
            for k in (
                "seed",
                "n_boot",
                "k_min",
                "n_min",
                "n_draws",
                "confidence",
                "base_step",
                "base_run",
                "partition",
                "association_k",
                "association_benchmark",
                "association_pooled",
                "estimators_from",
                "deviations_from_rubric",
            )
        }
        | {  # predeclared minimum evidence (bundles written before it: the defaults)
            k: par.get(k, getattr(EstimatorSettings, k))
            for k in ("min_eligible_questions", "min_eligible_share")
        }
        | {"min_evidence": _min_evidence(par)},
        "audits": {"pair": pair, "validity": validity},
        "imports": inputs.get("imports", []),
        "checkpoints": checkpoints,
        "training_curves": [
            {
                "run": m["run"],
                "model": m["model"],
                "points": m["payload"].get("points", []),
                "preset": m["payload"].get("objective_preset"),
                "params": m["payload"].get("objective_params", {}),
            }
            for m in measurements["training_curve"]
        ],
        "greedy": greedy,
        "passk": passk,
        "realization": (
            realization.section(base_step=base_step, base_run=base_run) if modes else []
        ),
        "covariance": _covariance(measurements["covariance_transition"], failed, label),
        "tail": _tail(measurements["tail"], failed),
        "mode_tail": mode_tail.section(measurements["tail_trajectories"], failed) if modes else [],
        "mode_covariance": (
            mode_tail.covariance_section(measurements["covariance_transition"], failed, label)
            if modes
            else None
        ),
        "failure": failure,
        "association": _association(
            checkpoints,
            passk,
            failed,
            label,
            k=par["association_k"],
            benchmark=par["association_benchmark"],
            pooled=par["association_pooled"],
        ),
        # item 18 from the stored curves and accuracy traces (its own section)
        "entropy_law": entropy_law_section(
            measurements["training_curve"],
            measurements["accuracy_trace"],
            checkpoints,
            greedy,
            passk,
            failed,
            seed=seed,
            benchmark=par["association_benchmark"],
            k=par["association_k"],
        ),
    }
    # item 17: each training seed is its own run above; here the across-seed aggregates
    report["replicates"] = replicates_section(
        source.run_identities(),
        keys,
        paired=paired_ratios,
        retention=retention_results,
        realization=realization.reports,
        passk=measurements["passk"],
        n_boot=n_boot,
        seed=seed,
        confidence=conf,
        mode_deps=["partition", "validity"] if validity["filter"] == "judge" else ["partition"],
    )
    report["quantities"] = quantities(report)
    report["insufficient_evidence"] = evidence_lines(report["quantities"])
    # every pair audit, calibration and accepted-set check on the record (bundles written
    # before the chain: none listed)
    report["attempts"] = attempts(inputs.get("audit_events") or [], inputs.get("attempt_labels"))
    # a pass that rests on a design changed after a failed attempt carries the mark
    changed = {
        (a["kind"], a["name"]): a["changed_after_failure"]
        for a in report["attempts"]
        if a["outcome"] == "passed" and a.get("changed_after_failure")
    }
    pair["changed_after_failure"] = changed.get((PAIR_KIND, pair.get("audit"))) or []
    validity["changed_after_failure"] = (
        changed.get((CALIBRATION_KIND, validity.get("calibration"))) or []
    )
    mark_changed_quantities(report, AUDITED_LABEL)  # each audited number carries it too
    return report


# --------------------------------------------------------------------------- store reads


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


#: Payload fields each measurement kind needs here, and the fields of its list items.
_REQUIRED: dict[str, tuple[tuple[str, ...], str | None, tuple[str, ...]]] = {
    "training_curve": (("points",), None, ()),
    "greedy_accuracy": (("accuracy",), None, ()),
    "accuracy_trace": (("points",), "points", ("step", "accuracy")),
    "passk": (("k",), "questions", ("n", "c")),
    "covariance_transition": (("predicted", "observed"), None, ()),
    "tail_trajectories": (("quantile", *SUM_FIELDS), None, ()),
    "tail": (
        (
            "quantile",
            "n_tokens",
            "n_trajectories",
            "n_groups",
            "n_zero_variance_groups",
            "mean_logprob",
            "mean_advantage",
            "success",
            "failure",
            "gap_failure_minus_success_pp",
            "budgets",
        ),
        None,
        (),
    ),
}


def _measurements(stored: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The study's measurements (``{kind, run, model, step, key, payload}``) by kind; a
    payload without a field the report needs is a ``ValueError`` naming the measurement
    and the field."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in stored:
        where = (
            f"measurement {m['kind']} (run={m['run']!r} model={m['model']!r} "
            f"step={m['step']} key={m['key']!r})"
        )
        fields, items, item_fields = _REQUIRED.get(m["kind"], ((), None, ()))
        missing = [f for f in fields if f not in m["payload"]]
        for i, item in enumerate(m["payload"].get(items) or [] if items else []):
            missing += [f"{items}[{i}].{f}" for f in item_fields if f not in item]
        if missing:
            raise ValueError(f"{where}: payload lacks {', '.join(missing[:5])}")
        out[m["kind"]].append(
            {
                "run": m["run"],
                "model": m["model"],
                "step": m["step"],
                "key": m["key"],
                "payload": m["payload"],
                "where": where,
            }
        )
    return out


# --------------------------------------------------------------------------- audits


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


def _validity_blocker(vstat: dict[str, Any]) -> str | None:
    if vstat["status"] == "calibrated":
        return None
    if vstat["status"] == "no-judge":
        return (
            "validity rests on no frozen judge: the validity column did not come from "
            "`rcea judge run`, so it has no completed calibration"
        )
    if vstat["status"] == "calibration-failed":
        return (
            f"validity rests on judge {str(vstat['judge_hash'])[:12]}… whose calibration "
            "FAILED its predeclared acceptance thresholds: "
            + "; ".join(vstat.get("failed_requirements") or [])
        )
    if vstat["status"] == "calibration-incomplete":
        return (
            f"validity rests on judge {str(vstat['judge_hash'])[:12]}… whose calibration is "
            "INCOMPLETE: held-out calibration passed, but "
            + "; ".join(vstat.get("missing") or ["no accepted-set check"])
        )
    return f"validity rests on judge {str(vstat['judge_hash'])[:12]}… with no completed calibration"


# --------------------------------------------------------------------------- per checkpoint


def _validity(ck: list[dict[str, Any]], k_min: int) -> dict[str, Any]:
    res = validity_rate(
        [r["question_id"] for r in ck],
        [r["reward"] for r in ck],
        [r["validity"] for r in ck],
        k_min=k_min,
    )
    return res.to_dict(include_questions=False)


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


def mode_labels_from_rows(
    rows: list[dict[str, Any]],
    pair: dict[str, Any],
    has_verdicts: bool,
    not_in_partition: dict[Key, int] | None = None,
) -> dict[Key, dict[str, list[str]]]:
    """:class:`ModeLabels` of ``rows`` (all of them in memory)."""
    by_ckpt: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:  # a seeded run under its label, as the report keys it (item 17)
        by_ckpt[(seeded_run(r["run"], r.get("train_seed")), r["model"], r["step"])].append(r)
    labels = ModeLabels(pair, has_verdicts, not_in_partition)
    for key, ck in by_ckpt.items():
        labels.add(key, ck)
    return labels.result()


class ModeLabels:
    """Checkpoint → question → mode labels of the included trajectories, collected one
    checkpoint at a time: R = 1 and accepted (when ``has_verdicts``), labelled by the
    partition of ``pair["partition_id"]`` (rows carry ``in_partition`` and
    ``partition_mode``) or else the ``mode`` column; ``uncertain`` kept so that it counts
    against coverage. Accepted successes absent from the partition (e.g. ingested after
    its freeze) have no mode in it: they are left out and, when ``not_in_partition`` is
    given, counted there per checkpoint. :meth:`result` is empty when there is no
    partition and no trajectory has a mode (no mode data). Equal labels share one string,
    so the labels kept for retention cost a pointer per trajectory."""

    def __init__(
        self,
        pair: dict[str, Any],
        has_verdicts: bool,
        not_in_partition: dict[Key, int] | None = None,
    ) -> None:
        self.use_partition = pair["partition_id"] is not None
        self.has_verdicts = has_verdicts
        self.not_in_partition = not_in_partition
        self.any_mode = self.use_partition
        self.modes: dict[Key, dict[str, list[str]]] = {}
        self._interned: dict[str, str] = {}

    def add(self, key: Key, ck: list[dict[str, Any]]) -> None:
        """Take one checkpoint's rows (every row, failures included)."""
        self.any_mode = self.any_mode or any(mode_label(r["mode"]) != UNCERTAIN for r in ck)
        out: dict[str, list[str]] = defaultdict(list)
        for r in ck:
            if r["reward"] != 1 or (self.has_verdicts and r["validity"] != 1):
                continue
            if not self.use_partition:
                mode = r["mode"]
            elif r["in_partition"]:
                mode = r["partition_mode"]
            else:
                if self.not_in_partition is not None:
                    self.not_in_partition[key] = self.not_in_partition.get(key, 0) + 1
                continue
            lab = mode_label(mode)
            out[r["question_id"]].append(self._interned.setdefault(lab, lab))
        if out:
            self.modes[key] = dict(out)

    def result(self) -> dict[Key, dict[str, list[str]]]:
        return self.modes if self.any_mode else {}


def _flow(ck: list[dict[str, Any]], has_verdicts: bool, pair: dict[str, Any]) -> dict[str, Any]:
    """The CONSORT-style flow of one checkpoint (docs/reports.md "Flow"): questions and
    trajectories imported → verifier successes (R = 1) → judged (a validity verdict) →
    accepted (R = 1 and, with verdicts, valid) → assigned (a mode other than uncertain,
    from the partition the numbers rest on, else the mode column); ``eligible`` (the
    questions each number rests on) is added once the numbers are computed."""
    use_partition = pair.get("partition_id") is not None

    def mode(r: dict[str, Any]) -> Any:
        if not use_partition:
            return r["mode"]
        return r["partition_mode"] if r.get("in_partition") else None

    stages = {
        "imported": ck,
        "successes": [r for r in ck if r["reward"] == 1],
    }
    stages["judged"] = [r for r in stages["successes"] if r["validity"] is not None]
    stages["accepted"] = [r for r in stages["successes"] if not has_verdicts or r["validity"] == 1]
    stages["assigned"] = [
        r for r in stages["accepted"] if mode(r) is not None and mode_label(mode(r)) != UNCERTAIN
    ]
    return {
        name: {"trajectories": len(rows), "questions": len({r["question_id"] for r in rows})}
        for name, rows in stages.items()
    }


def _json(section: ModeSummary | None) -> dict[str, Any] | None:
    return None if section is None else section.model_dump(mode="json")


# --------------------------------------------------------------------------- measurements


def _greedy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Item 8: greedy accuracy per benchmark and the unweighted macro over benchmarks."""
    groups: dict[Key, dict[str, Any]] = {}
    for m in rows:
        g = groups.setdefault(
            (m["run"], m["model"], m["step"]),
            {"run": m["run"], "model": m["model"], "step": m["step"], "accuracy": {}, "n": {}},
        )
        g["accuracy"][m["key"]] = m["payload"].get("accuracy")
        g["n"][m["key"]] = m["payload"].get("n")
    for g in groups.values():
        vals = [v for v in g["accuracy"].values() if v is not None]
        g["macro_accuracy"] = sum(vals) / len(vals) if vals else None
    return list(groups.values())


def _passk(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Item 8: macro pass@k per checkpoint and benchmark, recomputed from the stored
    per-question (n, c) when present (``recomputed``), else the producer's values."""

    out = []
    for m in rows:
        p = m["payload"]
        qs = p.get("questions") or []
        ks = [int(k) for k in p.get("k") or []]
        if qs and ks:
            res = macro_pass_at_k([q["n"] for q in qs], [q["c"] for q in qs], ks).to_dict()
            values, n_q, recomputed = res["pass_at_k"], res["n_questions"], True
        else:
            values = {
                (k if str(k).startswith("pass_at_") else f"pass_at_{k}"): v
                for k, v in (p.get("pass_at_k") or {}).items()
            }
            n_q, recomputed = None, False
        out.append(
            {
                "run": m["run"],
                "model": m["model"],
                "step": m["step"],
                "benchmark": m["key"],
                "n": p.get("n"),
                "n_questions": n_q,
                "pass_at_k": values,
                "recomputed": recomputed,
            }
        )
    return out


def _covariance(
    rows: list[dict[str, Any]], failed: set[tuple[str, str]], label: Any
) -> dict[str, Any] | None:
    """Item 6 across the stored transitions, pooled and per model; failed (run, model)
    pairs excluded (``excluded_runs`` names them with ``label``: the run, or
    ``run:model`` when the run name exists at several scales)."""

    if not rows:
        return None
    labels = [str(m["payload"].get("transition") or "") for m in rows]
    if len(set(labels)) != len(labels) or "" in labels:
        labels = [
            f"{m['model']}/{m['run']}:{m['payload'].get('from_step')}->"
            f"{m['payload'].get('to_step', m['step'])}"
            for m in rows
        ]
    ids = [label(m["run"], m["model"]) for m in rows]
    excluded = sorted(
        {i for i, m in zip(ids, rows, strict=True) if (m["run"], m["model"]) in failed}
    )
    fit = covariance_fit_by_group(
        [m["model"] for m in rows],
        labels,
        [m["payload"]["predicted"] for m in rows],
        [m["payload"]["observed"] for m in rows],
        runs=ids,
        excluded_runs=excluded,
    ).to_dict()
    fit["transitions"] = [
        {
            "transition": lab,
            "run": m["run"],
            "model": m["model"],
            "from_step": m["payload"].get("from_step"),
            "to_step": m["payload"].get("to_step", m["step"]),
            "predicted": m["payload"]["predicted"],
            "observed": m["payload"]["observed"],
            "n_positions": m["payload"].get("n_positions"),
            "failed_run": (m["run"], m["model"]) in failed,
        }
        for lab, m in zip(labels, rows, strict=True)
    ]
    fit["excluded_runs"] = fit["pooled"]["excluded_runs"]
    return fit


def _tail(rows: list[dict[str, Any]], failed: set[tuple[str, str]]) -> dict[str, Any] | None:
    """Item 7 per endpoint (failed (run, model) kept and marked) and the direction counts."""

    if not rows:
        return None
    endpoints = [
        {
            "run": m["run"],
            "model": m["model"],
            "step": m["step"],
            "failed_run": (m["run"], m["model"]) in failed,
            "report": m["payload"],
        }
        for m in rows
    ]
    return {
        "endpoints": endpoints,
        "direction_counts": direction_counts([_tail_result(m) for m in rows]).to_dict(),
    }


def _tail_result(m: dict[str, Any]) -> TailResult:

    p = m["payload"]
    try:
        success, failure = StratumTail(**p["success"]), StratumTail(**p["failure"])
        budgets = tuple(BudgetTail(**b) for b in p["budgets"])
    except TypeError as exc:
        raise ValueError(f"{m['where']}: malformed tail report ({exc})") from None
    return TailResult(
        endpoint=p.get("endpoint") or f"{m['run']}:{m['model']}:{m['step']}",
        quantile=p["quantile"],
        n_tokens=p["n_tokens"],
        n_trajectories=p["n_trajectories"],
        n_groups=p["n_groups"],
        n_zero_variance_groups=p["n_zero_variance_groups"],
        mean_logprob=p["mean_logprob"],
        mean_advantage=p["mean_advantage"],
        success=success,
        failure=failure,
        gap_failure_minus_success_pp=p["gap_failure_minus_success_pp"],
        budgets=budgets,
    )


#: Half-width (in training progress) of the failure window around the collapse (item 13).
FAILURE_WINDOW_HALF_WIDTH = 0.05


def _failure(
    traces: list[dict[str, Any]],
    keys: list[Key],
    curves: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Item 9 per (run, model) from its accuracy traces (one per benchmark; the pair
    failed when any trace did) and item 14: a failed (run, model) is reported at its
    latest stored checkpoint ≤ the last step attaining the peak, any other at its last
    checkpoint. A failure never spreads to the same run name at another scale.

    Item 13, next to the verdict of a failed pair: ``failure_window`` from its
    ``training_curve`` points with progress within ±``FAILURE_WINDOW_HALF_WIDTH`` of the
    collapse — ``nonzero_variance_share`` (mean of 1 − ``frac_reward_zero_std``: the
    share of completions in groups with non-zero reward variance) and
    ``empty_mask_share`` (mean of ``objective/cov_mask_empty``: the share of updates
    whose covariance mask selected nothing), each ``None`` when not logged."""

    steps: dict[tuple[str, str], set[int]] = defaultdict(set)
    for run, model, step in keys:
        steps[(run, model)].add(step)
    checks: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    objs: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for m in traces:
        pts = sorted(m["payload"].get("points", []), key=lambda p: p["step"])
        pts = [p for p in pts if p.get("accuracy") is not None]
        if not pts:
            continue
        try:
            chk = detect_training_failure([p["step"] for p in pts], [p["accuracy"] for p in pts])
        except ValueError as exc:
            raise ValueError(f"{m['where']}: {exc}") from None
        checks[(m["run"], m["model"])].append({"benchmark": m["key"], **chk.to_dict()})
        objs[(m["run"], m["model"])].append(chk)
    curve_of = {(c["run"], c["model"]): c["payload"].get("points") or [] for c in curves or []}
    out = []
    for run, model in sorted(set(steps) | set(checks)):
        failed = [c for c in objs[(run, model)] if c.failed]
        milestones = sorted(steps.get((run, model), set()))
        window = None
        if failed:
            # A failed run with no stored checkpoints (e.g. only its trace was recorded)
            # has no milestone to report.
            cands = (
                [last_milestone_before_failure(milestones, c) for c in failed] if milestones else []
            )
            known = [c for c in cands if c is not None]
            reported = min(known) if known else None
            reason = "last pre-failure milestone"
            collapse = min(c.collapse_step for c in failed if c.collapse_step is not None)
            window = failure_window(curve_of.get((run, model), []), collapse)
        else:
            reported = milestones[-1] if milestones else None
            reason = "final checkpoint"
        out.append(
            {
                "run": run,
                "model": model,
                "failed": bool(failed),
                "checks": checks[(run, model)],
                "reported_step": reported,
                "reported_reason": reason,
                "failure_window": window,
            }
        )
    return out


def failure_window(
    points: list[dict[str, Any]], collapse_step: int, half_width: float = FAILURE_WINDOW_HALF_WIDTH
) -> dict[str, Any] | None:
    """docs/estimators.md item 13 in the window of training progress around ``collapse_step``
    (see :func:`_failure`); ``None`` without a training curve."""
    pts = sorted((p for p in points if "step" in p and "progress" in p), key=lambda p: p["step"])
    if not pts:
        return None
    # progress of the collapse: from the curve's own step → progress scale
    scale = next((p["progress"] / p["step"] for p in reversed(pts) if p["step"]), None)
    if not scale:
        return None
    centre = collapse_step * scale
    lo, hi = centre - half_width, centre + half_width
    win = [p for p in pts if lo - 1e-12 <= p["progress"] <= hi + 1e-12]

    def share(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    nz = [
        1.0 - float(p["frac_reward_zero_std"])
        for p in win
        if p.get("frac_reward_zero_std") is not None
    ]
    empty = [
        float(p["objective/cov_mask_empty"])
        for p in win
        if p.get("objective/cov_mask_empty") is not None
    ]
    return {
        "collapse_step": collapse_step,
        "progress_low": max(lo, 0.0),
        "progress_high": hi,
        "n_points": len(win),
        "nonzero_variance_share": share(nz),
        "n_nonzero_variance_points": len(nz),
        "empty_mask_share": share(empty),
        "n_empty_mask_points": len(empty),
    }


#: The association's default benchmark and k (the paper's: MATH500 pass@64).
ASSOCIATION_BENCHMARK = "MATH500"
ASSOCIATION_K = 64


def _association(
    checkpoints: list[dict[str, Any]],
    passk: list[dict[str, Any]],
    failed: set[tuple[str, str]],
    label: Any,
    *,
    k: int | None,
    benchmark: str | None,
    pooled: bool = False,
) -> dict[str, Any] | None:
    """Exploratory retention–pass@k Spearman (docs/estimators.md item 14), per model scale, on one
    named benchmark and k: each method's (run's) retention and pass@k at its reported
    checkpoint; failed (run, model) pairs excluded. Benchmark: ``benchmark``, else
    MATH500 when stored, else the only benchmark, else the first in sorted order (named
    in the output). k: ``k``, else 64 when stored for that benchmark, else its largest.
    ``pooled`` adds a fit over every scale together, labelled ``pooled``."""

    if not passk:
        return None
    benches = sorted({p["benchmark"] for p in passk})
    if benchmark is None:
        benchmark = ASSOCIATION_BENCHMARK if ASSOCIATION_BENCHMARK in benches else benches[0]
        bench_source = (
            "default"
            if benchmark == ASSOCIATION_BENCHMARK
            else ("only benchmark" if len(benches) == 1 else "first benchmark (MATH500 absent)")
        )
    else:
        bench_source = "chosen"
        if benchmark not in benches:
            raise ValueError(
                f"association benchmark {benchmark!r} has no pass@k measurement "
                f"(have: {', '.join(benches)})"
            )
    on_bench = [p for p in passk if p["benchmark"] == benchmark]
    available = [{int(n.removeprefix("pass_at_")) for n in p["pass_at_k"]} for p in on_bench]
    common = set.intersection(*available) if available else set()
    if k is None:
        if not common:
            return None
        k = ASSOCIATION_K if ASSOCIATION_K in common else max(common)
    name = f"pass_at_{k}"
    value = {(p["run"], p["model"], p["step"]): p["pass_at_k"].get(name) for p in on_bench}
    rows = []
    for c in checkpoints:
        if not c["reported"] or c["retention"] is None:
            continue
        rows.append(
            {
                "method": c["run"],
                "label": label(c["run"], c["model"]),
                "run": c["run"],
                "model": c["model"],
                "step": c["step"],
                "retention": c["retention"]["retention"],
                "pass_at_k": value.get((c["run"], c["model"], c["step"])),
            }
        )
    if not rows:
        return None

    def fit(sel: list[dict[str, Any]], key: str) -> dict[str, Any]:
        res = retention_passk_spearman(
            [r[key] for r in sel],
            [r["retention"] for r in sel],
            [r["pass_at_k"] for r in sel],
            excluded=[r[key] for r in sel if (r["run"], r["model"]) in failed],
        ).to_dict()
        return res

    by_model = {
        m: fit([r for r in rows if r["model"] == m], "method")
        for m in sorted({r["model"] for r in rows})
    }
    out: dict[str, Any] = {
        "benchmark": benchmark,
        "benchmark_source": bench_source,
        "k": k,
        "metric": f"{benchmark} pass@{k}",
        "by_model": by_model,
        "pooled": None,
        "rows": rows,
    }
    if pooled:
        out["pooled"] = {**fit(rows, "label"), "label": "pooled over models " + ", ".join(by_model)}
    # one scale: its numbers at the top level, as before
    only = next(iter(by_model.values())) if len(by_model) == 1 else None
    for key in ("rho", "p_value", "n", "methods", "excluded", "missing"):
        out[key] = only[key] if only else None
    return out


# --------------------------------------------------------------------------- quantities


def _min_evidence(par: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-quantity floors of ``par`` (inputs written before per-quantity floors: the
    one floor applies to all four)."""
    if par.get("min_evidence"):
        return par["min_evidence"]  # type: ignore[no-any-return]  # a value of the rubric's parameter dict (typed Any)
    return EstimatorSettings(
        min_eligible_questions=par.get("min_eligible_questions", 10),
        min_eligible_share=par.get("min_eligible_share", 0.25),
    ).min_evidence()


def _evidence(eligible: tuple[int | None, int], floor: tuple[int, float]) -> str | None:
    """Why a number rests on too little (``None``: it meets the rubric's predeclared
    minimum evidence of the quantity, ``[estimators] <quantity>_min_questions`` and
    ``<quantity>_min_share``, else ``min_eligible_questions`` and ``min_eligible_share``)."""
    n, total = eligible[0] or 0, eligible[1] or 0
    share = n / total if total else 0.0
    if n >= floor[0] and share >= floor[1]:
        return None
    return (
        f"insufficient evidence: {n} of {total} questions eligible (share {share:.3f}); "
        f"the rubric's floor is {floor[0]} questions and share {floor[1]}"
    )


def quantities(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The flat list of every number in ``report`` with what it depends on.

    ``depends_on``: ``[]`` (entropy-only: verifier rewards, log-probabilities, token
    entropies, producer measurements), ``["validity"]`` (judge verdicts),
    ``["partition"]`` / ``["partition", "validity"]`` (modes; validity joins when a judge
    verdict filters the accepted set). ``publishable`` is false and ``blocked_by`` names the
    missing gate while the pair gate of the partition has not passed or the judge has no
    completed calibration. Paired ratios, validity, mode and retention numbers resting on
    fewer eligible questions than the predeclared floor carry ``evidence`` (why) and the
    label "insufficient evidence", never "audited" (docs/publication.md).
    """
    pair = report["audits"]["pair"]
    val = report["audits"]["validity"]
    mode_deps = ["partition", "validity"] if val["filter"] == "judge" else ["partition"]
    blockers = {"partition": pair["blocked_by"], "validity": val["blocked_by"]}
    floors = {
        q: (f["questions"], f["share"]) for q, f in _min_evidence(report["parameters"]).items()
    }
    out: list[dict[str, Any]] = []

    def add(
        name: str,
        section: str,
        value: Any,
        deps: list[str],
        *,
        run: str | None = None,
        model: str | None = None,
        step: int | None = None,
        key: str | None = None,
        ci: tuple[Any, Any] = (None, None),
        n: int | None = None,
        coverage: float | None = None,
        eligible: tuple[int | None, int] | None = None,
        floor: str | None = None,
    ) -> None:
        if value is None:
            return
        blocked = [blockers[d] for d in deps if blockers[d]]
        evidence = _evidence(eligible, floors[floor]) if eligible and floor else None
        label = AUDITED_LABEL if deps else ENTROPY_ONLY_LABEL
        out.append(
            {
                "name": name,
                "section": section,
                "run": run,
                "model": model,
                "step": step,
                "key": key,
                "value": value,
                "ci_low": ci[0],
                "ci_high": ci[1],
                "n": n,
                "coverage": coverage,
                "depends_on": deps,
                "publishable": not blocked,
                "blocked_by": "; ".join(blocked) if blocked else None,
                "label": INSUFFICIENT_LABEL if evidence else label,
                "evidence": evidence,
            }
        )

    for c in report["checkpoints"]:
        where = {"run": c["run"], "model": c["model"], "step": c["step"]}
        add("accuracy", "checkpoints", c["accuracy"], [], n=c["n"], **where)
        o = c.get("outcome")
        if o and not c["entropy"]:  # with token entropies, the entropy section carries them
            for name in (
                "mean_outcome_entropy",
                "sequence_outcome_term",
                "mean_accuracy",
                "coverage_success",
                "coverage_failure",
                "share_solved",
                "share_mixed",
            ):
                add(name, "outcome", o[name], [], n=o["n_questions"], **where)
        e = c["entropy"]
        if e:
            nq, npq = e.get("n_questions"), e.get("n_paired_questions")
            for name in (
                "mean_outcome_entropy",
                "mean_token_entropy",
                "mean_sequence_entropy",
                "mean_conditional_entropy_success",
                "mean_conditional_entropy_failure",
                "max_abs_residual",
                "max_abs_token_mixture_residual",
                "coverage_success",
                "coverage_failure",
            ):
                add(name, "entropy", e.get(name), [], n=nq, **where)
            add(
                "broad_ratio",
                "entropy",
                e.get("broad_ratio"),
                [],
                n=nq,
                coverage=_min_or_none(e.get("coverage_success"), e.get("coverage_failure")),
                **where,
            )
            for name in ("direction_share", "sign_test_p"):
                add(name, "entropy", e.get(name), [], n=npq, **where)
            add(
                "paired_ratio",
                "entropy",
                e.get("paired_ratio"),
                [],
                ci=(e.get("paired_ci_low"), e.get("paired_ci_high")),
                n=npq,
                eligible=(npq, c["n_questions"]),
                floor="paired_ratio",
                **where,
            )
        v = c["validity"]
        if v:
            for name, field in (
                ("mean_validity_rate", "mean_validity_rate"),
                ("mean_validity_entropy", "mean_validity_entropy"),
                ("validity_coverage", "coverage"),
                ("judge_coverage", "judge_coverage"),
            ):
                add(
                    name,
                    "validity",
                    v.get(field),
                    ["validity"],
                    n=v.get("n_eligible"),
                    coverage=v.get("coverage"),
                    eligible=(v.get("n_eligible"), c["n_questions"]),
                    floor="validity",
                    **where,
                )
        m = c["modes"]
        if m:
            for name, field in (
                ("mean_n_eff", "mean_n_eff"),
                ("mean_mode_entropy", "mean_mode_entropy"),
                ("mode_coverage", "coverage"),
            ):
                add(
                    name,
                    "modes",
                    m[field],
                    mode_deps,
                    n=m["n_eligible"],
                    coverage=m["coverage"],
                    eligible=(m["n_eligible"], c["n_questions"]),
                    floor="mode_entropy",
                    **where,
                )
        r = c["retention"]
        if r:
            add(
                "retention",
                "retention",
                r["retention"],
                mode_deps,
                ci=(r["ci_low"], r["ci_high"]),
                n=r["n_eligible"],
                coverage=r["eligible_share"],
                eligible=(r["n_eligible"], r["n_denominator"]),
                floor="retention",
                **where,
            )
            add(
                "retention_eligible_share",
                "retention",
                r["eligible_share"],
                mode_deps,
                n=r["n_denominator"],
                eligible=(r["n_eligible"], r["n_denominator"]),
                floor="retention",
                **where,
            )
    realization_quantities(
        report.get("realization") or [],
        {(c["run"], c["model"], c["step"]): c["n_questions"] for c in report["checkpoints"]},
        mode_deps,
        add,
    )
    mode_tail_quantities(report.get("mode_tail") or [], mode_deps, add)
    mode_covariance_quantities(report.get("mode_covariance"), mode_deps, add)
    for g in report["greedy"]:
        where = {"run": g["run"], "model": g["model"], "step": g["step"]}
        for bench, acc in g["accuracy"].items():
            add("greedy_accuracy", "greedy", acc, [], key=bench, n=g["n"].get(bench), **where)
        n_bench = sum(v is not None for v in g["accuracy"].values())
        add("greedy_macro_accuracy", "greedy", g["macro_accuracy"], [], n=n_bench, **where)
    for p in report["passk"]:
        for name, value in p["pass_at_k"].items():
            add(
                name,
                "passk",
                value,
                [],
                run=p["run"],
                model=p["model"],
                step=p["step"],
                key=p["benchmark"],
                n=p["n_questions"],
            )
    cov = report["covariance"]
    if cov:
        for scope, fit in [("pooled", cov["pooled"]), *cov["groups"].items()]:
            for name in FIT_SUMMARY:
                add(
                    f"covfit_{name}",
                    "covariance",
                    fit.get(name),
                    [],
                    model=None if scope == "pooled" else scope,
                    key=scope,
                    n=fit.get("n"),
                )
    tail = report["tail"]
    if tail:
        for ep in tail["endpoints"]:
            where = {"run": ep["run"], "model": ep["model"], "step": ep["step"]}
            rep = ep["report"]
            nt = rep.get("n_trajectories")
            add(
                "q99_success_share",
                "tail",
                (rep.get("success") or {}).get("share"),
                [],
                n=nt,
                **where,
            )
            add(
                "q99_failure_share",
                "tail",
                (rep.get("failure") or {}).get("share"),
                [],
                n=nt,
                **where,
            )
            add("q99_gap_pp", "tail", rep.get("gap_failure_minus_success_pp"), [], n=nt, **where)
            for b in rep.get("budgets") or []:
                add(
                    "budget_gap_pp",
                    "tail",
                    b.get("gap_failure_minus_success_pp"),
                    [],
                    key=f"top_{b.get('budget'):g}",
                    n=nt,
                    **where,
                )
    for q in law_quantities(report.get("entropy_law")):
        add(
            q["name"],
            "entropy_law",
            q["value"],
            [],
            run=q["run"],
            model=q["model"],
            key=q["key"],
            n=q["n"],
        )
    for f in report["failure"]:
        add(
            "failed",
            "failure",
            f["failed"],
            [],
            run=f["run"],
            model=f["model"],
            step=f["reported_step"],
        )
    assoc = report["association"]
    if assoc:
        for model, fit in assoc["by_model"].items():
            add(
                "retention_passk_spearman_rho",
                "association",
                fit["rho"],
                mode_deps,
                model=model,
                key=assoc["metric"],
                n=fit.get("n"),
            )
        if assoc["pooled"]:
            add(
                "retention_passk_spearman_rho",
                "association",
                assoc["pooled"]["rho"],
                mode_deps,
                model="pooled",
                key=assoc["metric"],
                n=assoc["pooled"].get("n"),
            )
    return out


def _min_or_none(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _progress(items: list[Any], show: bool, desc: str) -> Any:
    if not show:
        return items

    return tqdm(items, desc=desc, unit="checkpoint")
