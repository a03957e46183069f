"""The typed study report: pydantic models of what ``rcea.study.report.compute`` produces.

``StudyReport`` is the response model of ``GET /api/studies/{id}/report``; its JSON Schema
is written into every bundle (``report.schema.json``) and into ``docs/report.schema.json``;
the key list of ``docs/report-keys.md`` is generated from the models'
field descriptions (:func:`key_list_markdown`; a test checks the file is current, so there
is no hand-kept list). ``rcea report verify`` validates a bundle's ``report.json``
against the model before recomputing it.

Typed all the way down: the quantities, the checkpoints, the audit states and every
estimator section (entropy, validity, modes, retention, covariance, tail, greedy, pass@k,
failure, association, the gate; models in :mod:`rcea.study.report.sections`, whose keys are
those the report JSON has always had, so earlier bundles still validate). Only the
producer's own training-curve metrics and the judge's calibration report stay open.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from rcea.audits.entropy import OutcomeReport
from rcea.audits.validity import ValiditySummary
from rcea.study.report.law_sections import EntropyLawSection
from rcea.study.report.replicates import ReplicatesSection
from rcea.study.report.sections import (
    AssociationSection,
    CovarianceSection,
    EntropySection,
    FailureRun,
    GateSection,
    GreedyRow,
    ModeCovarianceSection,
    ModeSummary,
    ModeTailEndpoint,
    PassKRow,
    RealizationCheckpoint,
    RetentionSection,
    TailSection,
    TrainingCurve,
)

#: Bumped whenever a key is added, removed or changes meaning.
SCHEMA_VERSION = "5"

JSONObject = dict[str, Any]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Quantity(_Model):
    """One published number with what it rests on."""

    name: str = Field(description="quantity name, e.g. retention, paired_ratio, pass_at_64")
    section: str = Field(description="report section it comes from")
    run: str | None = Field(description="run of the checkpoint (None for pooled fits)")
    model: str | None = Field(description="model (scale) of the checkpoint, or the fit's group")
    step: int | None = Field(description="training step of the checkpoint")
    key: str | None = Field(description="benchmark, budget or fit scope, when the name needs one")
    value: bool | int | float = Field(description="the number")
    ci_low: float | None = Field(description="lower bound of its bootstrap CI, when it has one")
    ci_high: float | None = Field(description="upper bound of its bootstrap CI")
    n: int | None = Field(
        description="units it is computed over: trajectories (accuracy, tail), questions "
        "(entropy; eligible ones for validity, modes, retention; paired ones for the paired "
        "ratio and sign test), benchmark items (greedy; benchmarks for the macro), "
        "transitions (covariance), methods (association)"
    )
    coverage: float | None = Field(
        description="share of the units that could be used, where the estimator defines one "
        "(validity and mode coverage, retention eligible share, broad-ratio min coverage)"
    )
    depends_on: list[Literal["partition", "validity"]] = Field(
        description="audits it rests on: [] entropy-only, partition (modes), validity (judge)"
    )
    publishable: bool = Field(description="false while a gate it depends on has not passed")
    blocked_by: str | None = Field(description="the missing gate, when not publishable")
    label: str = Field(
        description="'audited', 'entropy-only (no audit)' or 'insufficient evidence' (below "
        "the rubric's predeclared minimum of eligible questions; never audited)"
    )
    evidence: str | None = Field(
        default=None,
        description="why the number rests on insufficient evidence (eligible questions, "
        "share, the floor); None when it meets the floor or has none",
    )
    changed_after_failure: str | None = Field(
        default=None,
        description="set on a number labelled 'audited' whose audit (the pair gate, the judge "
        "calibration) passed only after a design changed after a failed attempt: 'changed "
        "after a failed attempt: the <gate> <name> (since <failed attempt>: <key> <before> "
        "→ <after>; …)'; absent otherwise. Every surface that shows the label shows it",
    )


class Parameters(_Model):
    """Estimator settings every number was computed with."""

    seed: int = Field(description="seed of every bootstrap and rarefaction draw")
    n_boot: int = Field(description="bootstrap resamples per CI")
    k_min: int = Field(description="K_min gate of every conditional quantity")
    n_min: int = Field(description="retention eligibility: min(m_0, m_t) >= n_min")
    n_draws: int = Field(description="rarefaction draws per checkpoint")
    confidence: float = Field(description="confidence level of every CI")
    base_step: int = Field(description="step of the base checkpoint (retention)")
    base_run: str = Field(description="run holding each model's shared base checkpoint")
    partition: str | None = Field(description="partition asked for (None: the gate's)")
    association_k: int | None = Field(description="k asked for the retention-pass@k Spearman")
    association_benchmark: str | None = Field(description="benchmark asked for the association")
    association_pooled: bool = Field(description="whether a pooled-over-models fit was asked")
    estimators_from: str = Field(description="'defaults' or 'rubric NAME vV (HASH…)'")
    deviations_from_rubric: list[str] = Field(
        description="settings given that differ from the rubric's [estimators]"
    )
    min_eligible_questions: int = Field(
        default=10, description="predeclared minimum of eligible questions (rubric [estimators])"
    )
    min_eligible_share: float = Field(
        default=0.25, description="predeclared minimum share of eligible questions"
    )
    min_evidence: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="the floor each quantity is held to (paired_ratio, validity, "
        "mode_entropy, retention → questions, share): the rubric's per-quantity "
        "[estimators] <quantity>_min_questions / _min_share, else the one floor above",
    )


class OtherGate(_Model):
    audit: str | None = Field(description="the audit whose final gate passed")
    partition_hash: str | None = Field(description="on this partition")


class FailedGate(_Model):
    audit: str | None = Field(description="the audit whose final gate failed")
    audit_id: int | None = Field(description="its store id")
    rubric_hash: str | None = Field(description="the frozen rubric it was gated by")
    partition_hash: str | None = Field(description="the partition it was bound to")
    recorded_at: str = Field(description="when the failed gate.final was recorded (UTC)")
    recorded_by: str = Field(description="who recorded it")


class AttemptValue(_Model):
    name: str | None = Field(description="gate requirement or acceptance threshold")
    value: float | None = Field(description="the value recorded")
    threshold: float | None = Field(description="its predeclared threshold")
    passed: bool | None = Field(description="whether it held")


class Attempt(_Model):
    """One pair audit, calibration or accepted-set check on the record (rcea.study.report
    .attempts), derived from the hash-chained audit events the bundle carries."""

    kind: str = Field(description="pair audit | calibration | accepted-set check")
    name: str | None = Field(description="its name")
    rubric_hash: str | None = Field(description="the frozen rubric (pair audits)")
    partition_hash: str | None = Field(description="the locked partition (pair audits)")
    judge_hash: str | None = Field(description="the frozen judge (validity checks)")
    seed: int | None = Field(description="sampling seed")
    drawn_by: str = Field(description="who drew it")
    drawn_at: str = Field(description="when (UTC)")
    attempt: int | None = Field(
        description="n-th pair audit of its partition, or n-th check of its kind on its judge"
    )
    reason: str | None = Field(
        description="why it was drawn (required for a re-audit or re-calibration)"
    )
    correction: str | None = Field(
        default=None,
        description="the multiplicity correction its predeclared policy states "
        "([reaudit] / [recalibration] correction; none without a policy)",
    )
    alpha: float | None = Field(
        default=None,
        description="the per-attempt α that correction implies (Bonferroni: 0.05 / "
        "max_attempts; otherwise 0.05)",
    )
    thresholds: JSONObject | None = Field(
        default=None,
        description="validity checks: the acceptance thresholds frozen into its plan when "
        "drawn (a later calibration attempt's tightened by its policy); pair audits: null "
        "(each gate value carries its threshold)",
    )
    n_items: int | None = Field(description="pairs, or held-out / sampled items")
    outcome: str = Field(
        description="passed | failed | abandoned (explicitly, `rcea audit abandon "
        "--reason` / `rcea judge calibrate|accepted abandon --reason`, before any decided "
        "record) | in progress (no decided record yet) | recorded "
        "(a completed validity check recorded before acceptance thresholds existed)"
    )
    decided_at: str | None = Field(description="when the outcome was recorded")
    abandon_reason: str | None = Field(
        default=None, description="why it was abandoned (recorded with `rcea audit abandon`)"
    )
    n_labels: int | None = Field(
        default=None,
        description="human labels counted (pair audits: A, B and adjudicated; calibrations: "
        "held-out reference labels; accepted-set checks: A and B), from the attempt's own "
        "labels the bundle carries (inputs.json attempt_labels); null when not carried",
    )
    values: list[AttemptValue] = Field(description="the gate or acceptance values recorded")
    changed_after_failure: list[JSONObject] | None = Field(
        default=None,
        description="changed after a failed attempt: every design setting (rubric section."
        "setting; calibrations: sizes, labels per item, the predeclared thresholds before "
        "any declared tightening) that differs from the latest earlier FAILED attempt of "
        "the same kind (`since`, `key`, `before`, `after`); [] when none; null when a "
        "design is not recorded",
    )
    basis: str | None = Field(
        default=None,
        description="calibrations: the figures its thresholds applied to (population: "
        "weighted by the judged population's verdict shares; balanced: the raw stratified "
        "sample, every calibration recorded before the basis existed)",
    )


class PairAudit(_Model):
    """The partition the mode numbers rest on and its pair-audit gate."""

    status: str = Field(
        description="none (no audit on the partition) | pending | preliminary | passed | "
        "failed (the latest final gate bound to the partition)"
    )
    audit: str | None = Field(description="name of the audit whose gate this is")
    rubric_hash: str | None = Field(description="SHA-256 of the frozen rubric")
    partition_hash: str | None = Field(description="SHA-256 of the locked partition")
    partition_id: int | None = Field(description="store id of the partition")
    partition_source: str = Field(
        description="gate (latest passing final gate) | latest-frozen | chosen (--partition) "
        "| mode-column"
    )
    gate: GateSection | None = Field(description="the gate report (rcea.audits.gates.GateReport)")
    other_passing: list[OtherGate] = Field(description="passing gates on other partitions")
    failures_on_partition: list[FailedGate] = Field(
        default_factory=list,
        description="every audit of this partition whose final gate FAILED (a later pass "
        "does not erase it; docs/publication.md)",
    )
    blocked_by: str | None = Field(description="why mode numbers are not publishable")
    changed_after_failure: list[JSONObject] = Field(
        default_factory=list,
        description="when the passing gate's audit was changed after a failed attempt: "
        "each difference (as attempts[].changed_after_failure); the scope says so",
    )


class ValidityAudit(BaseModel):
    """The judge behind the validity numbers
    (``rcea.study.validity_audit.status.validity_status``)."""

    model_config = ConfigDict(extra="allow")
    status: str = Field(
        description="no-judge | uncalibrated | calibrated | calibration-incomplete (the "
        "held-out calibration passed but no completed accepted-set check) | "
        "calibration-failed (a predeclared acceptance threshold missed: rcea/audits/acceptance.py)"
    )
    judge_hash: str | None = Field(description="SHA-256 of the frozen production judge")
    judge_name: str | None = Field(description="its name")
    calibration: str | None = Field(description="the completed calibration's name")
    report: JSONObject | None = Field(
        description="its held-out report: the balanced sample's figures at the top level, "
        "`population` the population-weighted ones with stratified-bootstrap intervals "
        "(docs/validity-audit.md)"
    )
    filter: Literal["judge", "none"] = Field(
        description="whether a validity verdict filters the accepted set"
    )
    blocked_by: str | None = Field(description="why validity numbers are not publishable")
    changed_after_failure: list[JSONObject] = Field(
        default_factory=list,
        description="when the passing calibration was changed after a failed attempt: "
        "each difference (as attempts[].changed_after_failure); the scope says so",
    )


class Audits(_Model):
    pair: PairAudit = Field(description="pair-audit state (modes, retention)")
    validity: ValidityAudit = Field(description="validity-audit state (judge verdicts)")


class ImportRecord(_Model):
    """One `rcea import verl|trl|lm-eval` (an ``import.verl``, ``import.trl`` or
    ``import.lm_eval`` event)."""

    source: str | None = Field(description="the dump directory or file(s)")
    run: str | None = Field(description="--run")
    model: str | None = Field(description="--model")
    score_rule: str | None = Field(description="how R was read from the dump, values seen")
    n_special_stripped: int = Field(description="trailing special tokens stripped")


class FlowStage(_Model):
    trajectories: int = Field(description="trajectories at this stage")
    questions: int = Field(description="distinct questions among them")


class Flow(_Model):
    """CONSORT-style flow of one checkpoint (docs/reports.md "Flow")."""

    imported: FlowStage = Field(description="every trajectory of the checkpoint")
    successes: FlowStage = Field(description="verifier successes (R = 1)")
    judged: FlowStage = Field(description="successes with a validity verdict")
    accepted: FlowStage = Field(description="successes accepted (valid, when judged)")
    assigned: FlowStage = Field(description="accepted with a mode other than uncertain")
    eligible: dict[str, int | None] = Field(
        description="questions each number rests on: paired_ratio, validity, modes, retention"
    )


class CheckpointReport(_Model):
    """One (run, model, step)."""

    run: str = Field(description="run")
    model: str = Field(description="model (scale)")
    step: int = Field(description="training step")
    n: int = Field(description="trajectories")
    n_questions: int = Field(description="questions")
    n_success: int = Field(description="trajectories with R = 1")
    accuracy: float = Field(description="share of R = 1")
    reported: bool = Field(description="the checkpoint this (run, model) is reported at (item 14)")
    failed_run: bool = Field(
        description="its (run, model) failed (item 9); the same run at another model is unaffected"
    )
    outcome: OutcomeReport = Field(
        description="item 1 from rewards alone (rcea.audits.entropy.OutcomeReport): every "
        "checkpoint has it, with or without token entropies"
    )
    entropy: EntropySection | None = Field(
        description="items 1-3 (rcea.audits.entropy.EntropyReport without per-question rows)"
    )
    entropy_error: str | None = Field(
        description="why entropy is None (e.g. trajectories without token entropies)"
    )
    validity: ValiditySummary | None = Field(
        description="item 4 (rcea.audits.validity.ValidityResult without per-question rows), "
        "or None without verdicts"
    )
    modes: ModeSummary | None = Field(description="item 5 mode entropy, or None without modes")
    retention: RetentionSection | None = Field(
        description="item 5 rarefied retention vs the same model's base, with CI (the keys "
        "of one `rcea stats retention --json` result); None at the base"
    )
    retention_error: str | None = Field(
        description="why retention is None (e.g. the model has no base checkpoint)"
    )
    flow: Flow | None = Field(
        default=None,
        description="imported → successes → judged → accepted → assigned → eligible "
        "(re-derived by verify)",
    )


class StudyReport(_Model):
    """Every RCEA quantity the store supports for one study."""

    study: str = Field(description="study name")
    study_id: int = Field(description="store id of the study")
    generated_at: str | None = Field(default=None, description="UTC ISO 8601 time of the build")
    schema_version: str = Field(description="version of this schema")
    record_set_hash: str = Field(
        description="SHA-256 of the canonical JSON of the trajectory rows (by trajectory_id; "
        "columns trajectory_id, question_id, reward, run, model, step, seed, "
        "mean_token_entropy, seq_logprob, validity, mode; then the sampling settings and the "
        "training seed of a row that has them)"
    )
    parameters: Parameters = Field(description="estimator settings")
    attempts: list[Attempt] = Field(
        default_factory=list,
        description="every pair audit, calibration and accepted-set check of the study, "
        "passed, failed or in progress (docs/publication.md 'Every attempt')",
    )
    insufficient_evidence: list[str] = Field(
        default_factory=list,
        description="every number below the predeclared minimum evidence, with why "
        "(labelled 'insufficient evidence', never 'audited')",
    )
    audits: Audits = Field(description="the audits the numbers rest on")
    imports: list[ImportRecord] = Field(
        default_factory=list,
        description="trainer dumps imported into the study (`rcea import verl`) with the "
        "score rule that turned their scores into R",
    )
    checkpoints: list[CheckpointReport] = Field(description="one entry per (run, model, step)")
    training_curves: list[TrainingCurve] = Field(description="logged training curves")
    greedy: list[GreedyRow] = Field(description="item 8: greedy accuracy per checkpoint")
    passk: list[PassKRow] = Field(description="macro pass@k per checkpoint and benchmark")
    realization: list[RealizationCheckpoint] = Field(
        default_factory=list,
        description="item 15: within-mode realization entropy per checkpoint, on the mode "
        "numbers' partition (empty without mode data)",
    )
    covariance: CovarianceSection | None = Field(description="item 6: the covariance fit")
    tail: TailSection | None = Field(description="item 7: the reward-stratified tail")
    mode_tail: list[ModeTailEndpoint] = Field(
        default_factory=list,
        description="item 16: mode-stratified covariance per endpoint with a "
        "tail_trajectories measurement, on the mode numbers' partition",
    )
    mode_covariance: ModeCovarianceSection | None = Field(
        default=None,
        description="item 16: item 6's covariance fit by the mode group of each prefix's "
        "trajectory (majority / other / outside C), on the mode numbers' partition (None "
        "without mode data or per-trajectory transition sums; absent in bundles written "
        "before it)",
    )
    failure: list[FailureRun] = Field(description="item 9: failure per (run, model)")
    association: AssociationSection | None = Field(
        description="retention-pass@k Spearman per model (exploratory)"
    )
    entropy_law: EntropyLawSection | None = Field(
        default=None,
        description="item 15: the entropy-performance law per run, its early prediction, "
        "the scaling across sizes, global vs reward-conditioned entropy, and the RQ1 ordering "
        "(None without a training curve paired with an accuracy trace; absent in bundles "
        "written before it)",
    )
    replicates: ReplicatesSection | None = Field(
        default=None,
        description="item 17: the training seeds of the runs (each its own run label in "
        "the other sections) and, per (run, model, step), the across-seed mean, between-seed "
        "SD and hierarchical bootstrap interval; 'single seed' when no checkpoint has two "
        "(absent in bundles written before it)",
    )
    quantities: list[Quantity] = Field(description="every reported number, flat")
    scope: str | None = Field(
        default=None, description="bundle only: 'full (audited)' or 'entropy-only (no audit)'"
    )
    simulated: bool | None = Field(
        default=None, description="bundle only: labels came from simulated annotators"
    )


def report_json(report: StudyReport) -> dict[str, Any]:
    """``report`` as the JSON that ``--json``, ``--out`` and a bundle's ``report.json``
    carry: every key the computation set (so a key added later is absent, not null, in a
    report that never had it), in the schema's order."""
    return report.model_dump(mode="json", exclude_unset=True)


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`StudyReport` (with ``$id`` naming the version)."""
    schema = StudyReport.model_json_schema()
    schema["$id"] = f"rcea-study-report/{SCHEMA_VERSION}"
    return schema


def report_json_schema_text() -> str:
    return json.dumps(report_json_schema(), indent=2, sort_keys=True) + "\n"


def key_list_markdown() -> str:
    """The report's keys, one line each, from the models' field descriptions."""
    lines = [
        f"Report keys (schema version {SCHEMA_VERSION}; generated from "
        "`rcea/study/report/schema.py` — do not edit by hand).",
        "",
    ]

    def walk(model: type, prefix: str, depth: int) -> None:
        for name, f in _fields(model).items():
            lines.append(f"{'  ' * depth}* `{prefix}{name}`: {f.description or ''}")
            sub = _submodel(f.annotation)
            if sub is not None:
                walk(sub, f"{prefix}{name}{_container(f.annotation)}.", depth + 1)

    walk(StudyReport, "", 0)
    return "\n".join(lines) + "\n"


def _fields(model: type) -> dict[str, FieldInfo]:
    """The fields of a model, or of an ``rcea/audits/`` result dataclass that is a section
    (its descriptions in ``field(metadata={"description": ...})``, which pydantic reads
    too; ``rcea/audits/`` imports no pydantic: the live metrics run on numpy alone)."""
    if issubclass(model, BaseModel):
        return model.model_fields
    assert dataclasses.is_dataclass(model)  # _submodel yields models and dataclasses only
    hints = typing.get_type_hints(model)
    return {
        f.name: FieldInfo(annotation=hints[f.name], description=f.metadata.get("description"))
        for f in dataclasses.fields(model)
    }


def _submodel(annotation: Any) -> type | None:
    """The model or result dataclass inside ``annotation`` (``M``, ``M | None``,
    ``list[M]``, ``dict[str, M]``), if any."""

    def section(t: Any) -> bool:
        return isinstance(t, type) and (issubclass(t, BaseModel) or dataclasses.is_dataclass(t))

    for arg in (annotation, *typing.get_args(annotation)):
        if section(arg):
            return arg  # type: ignore[no-any-return]  # section() checked it is a type
        for inner in typing.get_args(arg):
            if section(inner):
                return inner  # type: ignore[no-any-return]  # section() checked it is a type
    return None


def _container(annotation: Any) -> str:
    """``[]`` for a list (or tuple) of models, ``{}`` for a mapping to models (``{key}``),
    else ``""``."""

    for arg in (annotation, *typing.get_args(annotation)):
        origin = typing.get_origin(arg)
        if origin in (list, tuple):
            return "[]"
        if origin is dict:
            return "{}"
    return ""


DOCS = ("docs/report-keys.md", "docs/report.schema.json")


def write_docs(root: str = ".") -> list[str]:
    """Regenerate ``docs/report-keys.md`` and ``docs/report.schema.json`` under ``root``
    (``python -m rcea.study.report.schema``)."""

    keys, schema = (Path(root) / d for d in DOCS)
    keys.write_text("# Report JSON keys\n\n" + key_list_markdown(), encoding="utf-8")
    schema.write_text(report_json_schema_text(), encoding="utf-8")
    return [str(keys), str(schema)]


if __name__ == "__main__":
    for path in write_docs():
        print(f"wrote {path}")
