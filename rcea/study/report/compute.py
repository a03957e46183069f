"""``compute_report``: the study report from its inputs alone — no store, no session
(``tests/test_layering.py`` holds it to that). :mod:`rcea.study.report.inputs` reads the
inputs; ``rcea report build`` streams the rows one checkpoint at a time
(:class:`~rcea.study.report.inputs.StoreRows`), ``rcea report verify`` reruns this on a
bundle's ``inputs.json`` (:class:`~rcea.study.report.rows.MemoryRows`); both reach
:func:`compute_report_from`.

Mode numbers use the partition of the latest passing final gate (``gate.final`` event)
when there is one, else the latest frozen partition (unpublishable), else the trajectory
``mode`` column (unpublishable). The included trajectories are R = 1 and judge-accepted
(validity 1; when no success of the study carries a verdict, every success).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tqdm import tqdm

from rcea.audits.entropy import outcome_report
from rcea.audits.modes import RarefiedRetention
from rcea.audits.rubric import EstimatorSettings
from rcea.audits.validity import validity_groups, validity_rate
from rcea.study.report.attempts import CALIBRATION_KIND, PAIR_KIND, attempts
from rcea.study.report.entropy_law import entropy_law_section
from rcea.study.report.estimates import (
    UNCERTAIN,
    mode_label,
    retention_table,
    rows_entropy,
)
from rcea.study.report.measured import (
    association,
    covariance,
    failure,
    greedy,
    measurements_by_kind,
    passk,
    tail,
)
from rcea.study.report.mode_tail import ModeTailCollector
from rcea.study.report.publication import (
    AUDITED_LABEL,
    evidence_lines,
    mark_changed_quantities,
    min_evidence,
    quantities,
)
from rcea.study.report.realization import RealizationCollector
from rcea.study.report.replicates import replicates_section, run_name, seeded_run
from rcea.study.report.rows import CheckpointRows, MemoryRows
from rcea.study.report.schema import SCHEMA_VERSION, Parameters, StudyReport
from rcea.study.report.sections import ModeSummary, RetentionSection

#: What fills the token- and sequence-entropy splits of a checkpoint whose trajectories
#: carry rewards only (an imported trainer dump): docs/how-to-verl.md step 2.
FILL_TOKEN_ENTROPIES = (
    "the outcome numbers (H(R|x), accuracy, coverage) need rewards only and are in "
    "`outcome`; fill the token and sequence splits with `rcea probe score --study S "
    "--run RUN --model MODEL --step STEP --checkpoint DIR` (docs/how-to-verl.md, step 2)"
)
#: Predeclared minimum evidence of inputs written before it: the defaults.
_FLOORS = {
    k: getattr(EstimatorSettings, k) for k in ("min_eligible_questions", "min_eligible_share")
}

Key = tuple[str, str, int]


def compute_report(
    inputs: dict[str, Any], *, include_draws: bool = False, progress: bool = False
) -> StudyReport:
    """The report (without ``generated_at``) from
    :func:`~rcea.study.report.inputs.gather_inputs`' dict alone: ``rcea report verify``
    calls this on a bundle's ``inputs.json``."""
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
) -> StudyReport:
    """The typed report from ``inputs`` (``gather_inputs``' dict; ``rows`` and
    ``judge_verdicts`` unused) and the trajectory rows of ``source``, read one checkpoint
    at a time: per-checkpoint numbers are computed as each checkpoint is read, then
    retention (which compares checkpoints) from the mode labels kept meanwhile."""
    par, pair, vstat = inputs["parameters"], inputs["pair"], inputs["validity_status"]
    has_verdicts = source.has_verdicts()
    validity = {
        "judge_name": None,
        **vstat,
        "filter": "judge" if has_verdicts else "none",
        "blocked_by": _validity_blocker(vstat),
    }
    keys = source.checkpoint_keys()
    measurements = measurements_by_kind(inputs["measurements"])
    failures = failure(measurements["accuracy_trace"], keys, measurements["training_curve"])
    # A failure is a property of one (run, model): the same run name at another scale
    # is unaffected (docs/estimators.md item 14).
    failed: set[tuple[str, str]] = {(f["run"], f["model"]) for f in failures if f["failed"]}
    last_step: dict[tuple[str, str], int] = {}
    for run, model, step in keys:
        last_step[(run, model)] = max(step, last_step.get((run, model), step))
    reported = {(f["run"], f["model"]): f["reported_step"] for f in failures}
    reported = {rm: reported.get(rm, s) for rm, s in last_step.items()}
    identities = source.run_identities()
    label = _run_label(keys, measurements, identities)

    outside: dict[Key, int] = {}
    labels = ModeLabels(pair, has_verdicts, outside)
    realization = RealizationCollector(pair, has_verdicts, k_min=par["k_min"])
    tail_keys = {(m["run"], m["model"], m["step"]) for m in measurements["tail_trajectories"]}
    mode_tail = ModeTailCollector(
        pair, has_verdicts, tail_keys, measurements["covariance_transition"]
    )
    checkpoints = []
    paired_ratios: dict[Key, dict[Any, float]] = {}  # item 17's per-seed ρ_H inputs
    for key in _progress(keys, progress, "checkpoints"):
        ck, verdicts = source.checkpoint(key)
        judged = verdicts if source.judged else None
        checkpoints.append(_checkpoint(key, ck, judged, has_verdicts, pair, par, paired_ratios))
        checkpoints[-1]["reported"] = key[2] == reported[key[:2]]
        checkpoints[-1]["failed_run"] = key[:2] in failed
        for collector in (labels, realization, mode_tail):
            collector.add(key, ck)
        del ck, verdicts
    modes = labels.result()
    retention_results = _add_modes(checkpoints, modes, outside, par, include_draws=include_draws)

    passks = passk(measurements["passk"])
    greedies = greedy(measurements["greedy_accuracy"])
    base_step, base_run = par["base_step"], par["base_run"]
    report: dict[str, Any] = {
        "study": inputs["study"],
        "study_id": inputs["study_id"],
        "schema_version": SCHEMA_VERSION,
        "record_set_hash": source.record_set_hash(),
        "parameters": {k: par.get(k, _FLOORS.get(k)) for k in Parameters.model_fields}
        | {"min_evidence": min_evidence(par)},
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
        "greedy": greedies,
        "passk": passks,
        "realization": (
            realization.section(base_step=base_step, base_run=base_run) if modes else []
        ),
        "covariance": covariance(measurements["covariance_transition"], failed, label),
        "tail": tail(measurements["tail"], failed),
        "mode_tail": mode_tail.section(measurements["tail_trajectories"], failed) if modes else [],
        "mode_covariance": (
            mode_tail.covariance_section(measurements["covariance_transition"], failed, label)
            if modes
            else None
        ),
        "failure": failures,
        "association": association(
            checkpoints,
            passks,
            failed,
            label,
            k=par["association_k"],
            benchmark=par["association_benchmark"],
            pooled=par["association_pooled"],
            identities=identities,
        ),
        # item 18 from the stored curves and accuracy traces (its own section)
        "entropy_law": entropy_law_section(
            measurements["training_curve"],
            measurements["accuracy_trace"],
            checkpoints,
            greedies,
            passks,
            failed,
            seed=par["seed"],
            benchmark=par["association_benchmark"],
            k=par["association_k"],
            identities=identities,
        ),
    }
    # item 17: each training seed is its own run above; here the across-seed aggregates
    report["replicates"] = replicates_section(
        identities,
        keys,
        paired=paired_ratios,
        retention=retention_results,
        realization=realization.reports,
        passk=measurements["passk"],
        mode_tail=mode_tail.results,
        tail_trajectories=measurements["tail_trajectories"],
        n_boot=par["n_boot"],
        seed=par["seed"],
        confidence=par["confidence"],
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
    return StudyReport.model_validate(report)


def _run_label(
    keys: list[Key],
    measurements: dict[str, list[dict[str, Any]]],
    identities: dict[str, tuple[str, int]],
) -> Any:
    """``run``, or ``run:model`` when the run name exists at several model scales (a
    seeded label's models count for its run too: the run labels its seeds' point)."""
    models_of_run: dict[str, set[str]] = defaultdict(set)
    for run, model, _ in keys:
        models_of_run[run].add(model)
        models_of_run[run_name(identities, run)].add(model)
    for m in (x for rows_ in measurements.values() for x in rows_):
        if m["run"] and m["model"]:
            models_of_run[m["run"]].add(m["model"])
            models_of_run[run_name(identities, m["run"])].add(m["model"])

    def label(run: str, model: str) -> str:
        return run if len(models_of_run[run]) <= 1 else f"{run}:{model}"

    return label


def _checkpoint(
    key: Key,
    ck: list[dict[str, Any]],
    verdicts: dict[str, Any] | None,
    has_verdicts: bool,
    pair: dict[str, Any],
    par: dict[str, Any],
    paired_ratios: dict[Key, dict[Any, float]],
) -> dict[str, Any]:
    """One checkpoint's numbers but its modes and retention (:func:`_add_modes`), which
    compare checkpoints. ``verdicts``: the production judge's (``None``: the column);
    the per-question paired ratios go into ``paired_ratios`` (item 17)."""
    run, model, step = key
    k_min = par["k_min"]
    entropy, entropy_error = None, None
    try:
        entropy_report = rows_entropy(
            ck, seed=par["seed"], k_min=k_min, n_boot=par["n_boot"], confidence=par["confidence"]
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
    if verdicts is not None:
        (group,) = validity_groups(ck, verdicts, k_min=k_min)
        judged = {k: v for k, v in group.items() if k not in ("run", "model", "step")}
    n_success = sum(r["reward"] for r in ck)
    return {
        "run": run,
        "model": model,
        "step": step,
        "n": len(ck),
        "n_questions": len({r["question_id"] for r in ck}),
        "n_success": n_success,
        "accuracy": n_success / len(ck),
        "reported": None,
        "failed_run": None,
        "outcome": outcome,
        "entropy": entropy,
        "entropy_error": entropy_error,
        "validity": judged or (_validity(ck, k_min) if has_verdicts else None),
        "flow": _flow(ck, has_verdicts, pair),
    }


def _add_modes(
    checkpoints: list[dict[str, Any]],
    modes: dict[Key, dict[str, list[str]]],
    outside: dict[Key, int],
    par: dict[str, Any],
    *,
    include_draws: bool,
) -> dict[Key, RarefiedRetention]:
    """Each checkpoint's ``modes``, its ``retention`` against the base (or why not) and
    the questions each of its numbers rests on (``flow.eligible``); returns the retention
    results (item 17 aggregates them across seeds)."""
    retention: dict[Key, dict[str, Any]] = {}
    results: dict[Key, RarefiedRetention] = {}
    errors: dict[Key, str] = {}
    error = None
    if modes:
        try:
            for row in retention_table(
                modes,
                base_step=par["base_step"],
                base_run=par["base_run"],
                seed=par["seed"],
                n_min=par["n_min"],
                n_draws=par["n_draws"],
                n_boot=par["n_boot"],
                confidence=par["confidence"],
            ):
                if row.result is None:
                    errors[row.key] = str(row.error)
                    continue
                results[row.key] = row.result
                retention[row.key] = RetentionSection.of(
                    row.result, row.base, include_draws=include_draws
                ).to_json()
        except ValueError as exc:
            error = str(exc)
    for c in checkpoints:
        key = (c["run"], c["model"], c["step"])
        summary = (
            ModeSummary.of(modes.get(key), par["n_min"], outside.get(key, 0)) if modes else None
        )
        c["modes"] = summary.model_dump(mode="json") if summary else None
        c["retention"] = retention.get(key)
        c["retention_error"] = errors.get(key, error) if c["step"] != par["base_step"] else None
        e, v, m, r = c["entropy"] or {}, c["validity"] or {}, c["modes"] or {}, c["retention"]
        c["flow"]["eligible"] = {  # questions each number rests on (its n)
            "paired_ratio": e.get("n_paired_questions"),
            "validity": v.get("n_eligible"),
            "modes": m.get("n_eligible"),
            "retention": r["n_eligible"] if r else None,
        }
    return results


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


def _validity(ck: list[dict[str, Any]], k_min: int) -> dict[str, Any]:
    res = validity_rate(
        [r["question_id"] for r in ck],
        [r["reward"] for r in ck],
        [r["validity"] for r in ck],
        k_min=k_min,
    )
    return res.to_dict(include_questions=False)


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


def _progress(items: list[Any], show: bool, desc: str) -> Any:
    if not show:
        return items

    return tqdm(items, desc=desc, unit="checkpoint")
