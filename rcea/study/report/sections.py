"""Typed estimator sections of the study report (``rcea.study.report.schema.StudyReport``).

Where an ``rcea/audits/`` result is a section as it stands, the result's dataclass is the
section's type (its descriptions in field metadata; where the report adds a key, a
dataclass subclass here); otherwise one pydantic model per section that
``rcea.study.report.compute`` fills from a result. The keys are exactly those of the JSON
the report has always carried (so published
bundles keep verifying), now with types and a description each. Every quantity carries
its value, its CI where it has one (``*_ci_low``/``*_ci_high``), its units ``n_*`` and
coverage; the checkpoint (run, model, step) it belongs to is the enclosing
``checkpoints[]`` entry or, for the measurement sections, the row's own ``run``,
``model`` and ``step`` (:class:`AtCheckpoint`). What each published number rests on
(``depends_on``: partition, validity) is on its row of ``quantities[]``; the section
models state the part that is fixed as ``DEPENDS_ON``.

Floats that are undefined (no eligible question, constant inputs) are ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from rcea.audits.association import RetentionPasskAssociation
from rcea.audits.covariance import CovarianceFitByGroup
from rcea.audits.entropy import BroadTokenEntropyRatio, EntropySummary, PairedRatioSummary
from rcea.audits.failure import FailureCheck
from rcea.audits.gates import GateReport, RequirementResult
from rcea.audits.mode_covariance import ModeCovarianceSummary
from rcea.audits.mode_tail import ModeTailSummary
from rcea.audits.modes import RarefiedRetentionSummary, mode_entropy
from rcea.audits.realization import RealizationRetentionSummary, RealizationSummary
from rcea.audits.tail import TailDirectionSummary, TailResult

Dependency = Literal["partition", "validity"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: the audits every number of the section rests on at least; ``quantities[].depends_on``
    #: is exact (it adds ``validity`` to partition numbers when a verdict filters successes)
    DEPENDS_ON: ClassVar[tuple[Dependency, ...]] = ()


class CheckpointRef(Section):
    """A checkpoint: (run, model, step)."""

    run: str = Field(description="run")
    model: str = Field(description="model (scale)")
    step: int = Field(description="training step")


class AtCheckpoint(Section):
    """A row that belongs to one checkpoint."""

    run: str = Field(description="run of the checkpoint")
    model: str = Field(description="model (scale) of the checkpoint")
    step: int = Field(description="training step of the checkpoint")


# --------------------------------------------------------------------------- items 1-3


class QuestionRatio(Section):
    question_id: str = Field(description="question")
    ratio: float | None = Field(description="its failed/successful token-entropy ratio")


@dataclass(frozen=True, kw_only=True)
class PairedRatio(PairedRatioSummary):
    """Item 3 paired ratio: geometric mean over questions with both strata eligible (the
    result's ``question_ratios`` as a list)."""

    question_ratios: list[QuestionRatio] = field(metadata={"description": "per-question ratio"})


@dataclass(frozen=True, kw_only=True)
class EntropySection(EntropySummary):
    """Items 1-3 at one checkpoint (``rcea.audits.entropy.EntropyReport`` without per-question
    rows): macro entropies, Prop. 1 residual checks, the broad and paired ratios, and the
    ratios' headline numbers flattened."""

    n_boot_degenerate: int = field(
        metadata={"description": "paired-ratio resamples that were degenerate"}
    )
    boot_degenerate_share: float | None = field(metadata={"description": "their share of n_boot"})
    warnings: list[str] = field(metadata={"description": "estimator warnings"})
    paired_ratio: float | None = field(metadata={"description": "paired.ratio (item 3 value)"})
    paired_ci_low: float | None = field(metadata={"description": "paired.ci_low"})
    paired_ci_high: float | None = field(metadata={"description": "paired.ci_high"})
    n_paired_questions: int = field(metadata={"description": "paired.n_paired_questions (its n)"})
    coverage_paired: float | None = field(
        metadata={"description": "paired.coverage_paired (its coverage)"}
    )
    direction_share: float | None = field(metadata={"description": "paired.direction_share"})
    sign_test_p: float | None = field(metadata={"description": "paired.sign_test_p"})
    broad_ratio: float | None = field(metadata={"description": "broad.ratio"})
    coverage_success: float | None = field(metadata={"description": "broad.coverage_success"})
    coverage_failure: float | None = field(metadata={"description": "broad.coverage_failure"})
    broad: BroadTokenEntropyRatio = field(metadata={"description": "the broad ratio"})
    paired: PairedRatio = field(metadata={"description": "the paired ratio"})


# --------------------------------------------------------------------------- items 4-5


class ModeSummary(Section):
    """Item 5 at one checkpoint."""

    DEPENDS_ON: ClassVar[tuple[Dependency, ...]] = ("partition",)
    n_questions: int = Field(description="questions with included labels")
    n_eligible: int = Field(description="questions with at least n_min included labels")
    mean_n_eff: float | None = Field(description="macro mean N_eff = exp(H(Z|C_x))")
    mean_mode_entropy: float | None = Field(description="macro mean mode entropy")
    n_included: int = Field(description="included (non-uncertain) labels")
    n_uncertain: int = Field(description="uncertain labels (against coverage)")
    coverage: float | None = Field(description="included / (included + uncertain)")
    n_not_in_partition: int = Field(description="accepted successes the partition lacks")

    @classmethod
    def of(
        cls, by_q: dict[str, list[str]] | None, n_min: int, n_not_in_partition: int = 0
    ) -> ModeSummary | None:
        """Per question H(Z|C_x) and N_eff = exp(H); macro means over the questions with
        at least ``n_min`` included (non-uncertain) labels. ``n_not_in_partition``:
        accepted successes the partition does not hold (left out of every mode number
        and of ``coverage``, which is over the partition). ``None`` without labels."""

        if not by_q:
            return None
        ents = [mode_entropy(labels) for labels in by_q.values()]
        elig = [e for e in ents if e.n >= n_min and e.entropy is not None]
        n_incl = sum(e.n for e in ents)
        n_unc = sum(e.n_excluded for e in ents)
        return cls(
            n_questions=len(ents),
            n_eligible=len(elig),
            mean_n_eff=sum(e.n_eff for e in elig) / len(elig) if elig else None,  # type: ignore[misc]  # sum() of a generator of numbers; mypy reads the conditional's None into it
            mean_mode_entropy=sum(e.entropy for e in elig) / len(elig) if elig else None,  # type: ignore[misc]  # sum() of a generator of numbers; mypy reads the conditional's None into it
            n_included=n_incl,
            n_uncertain=n_unc,
            coverage=n_incl / (n_incl + n_unc) if n_incl + n_unc else None,
            n_not_in_partition=n_not_in_partition,
        )


class RarefactionDraws(Section):
    base_draws: list[list[int]] = Field(description="positions drawn from the base labels")
    checkpoint_draws: list[list[int]] = Field(description="positions drawn at the checkpoint")


@dataclass(frozen=True, kw_only=True)
class RetentionSection(RarefiedRetentionSummary):
    """Item 5 rarefied retention of one checkpoint against the same model's base
    (``rcea.audits.modes.RarefiedRetention`` without per-question rows)."""

    DEPENDS_ON: ClassVar[tuple[Dependency, ...]] = ("partition",)
    n_boot_degenerate: int = field(metadata={"description": "degenerate resamples"})
    boot_degenerate_share: float | None = field(metadata={"description": "their share of n_boot"})
    warnings: list[str] = field(metadata={"description": "estimator warnings"})
    # absent, not null, without include_draws (a dataclass keeps no set of the keys given)
    draws: Annotated[
        dict[str, RarefactionDraws] | None,
        Field(
            description="only with include_draws (the bundle keeps them in rarefaction.json): "
            "question -> its draws",
            exclude_if=lambda v: v is None,
        ),
    ] = None
    base: CheckpointRef = field(metadata={"description": "the base checkpoint it is compared with"})

    @classmethod
    def of(
        cls, res: Any, base: tuple[str, str, int] | None, *, include_draws: bool = False
    ) -> RetentionSection:
        """From an ``rcea.audits.modes.RarefiedRetention``; with ``include_draws`` the
        per-question rarefaction draws (``draws``: question id → ``base_draws`` /
        ``checkpoint_draws``, positions in the question's label list as given), from which
        the result is recomputable (``rarefied_retention(stored_draws=...)``)."""
        d = res.to_dict(include_draws=False)
        d.pop("questions", None)
        if include_draws:
            d["draws"] = {str(q): v for q, v in res.draws().items()}
        if base is not None:
            d["base"] = dict(zip(("run", "model", "step"), base, strict=True))
        return _RETENTION.validate_python(d)

    def to_json(self) -> dict[str, Any]:
        """The JSON object (``draws`` only when it was set)."""
        out: dict[str, Any] = _RETENTION.dump_python(self, mode="json")
        return out


_RETENTION = TypeAdapter(RetentionSection)


# --------------------------------------------------------------------------- item 15


class RealizationCheckpoint(AtCheckpoint):
    """Item 15 of one checkpoint, on the partition the mode numbers rest on."""

    DEPENDS_ON: ClassVar[tuple[Dependency, ...]] = ("partition",)
    report: RealizationSummary | None = Field(description="the macro numbers, or None (error)")
    error: str | None = Field(description="why report is None (no ℓ or token entropies)")
    base: CheckpointRef | None = Field(description="the base checkpoint retention compares with")
    retention: RealizationRetentionSummary | None = Field(
        description="realization retention vs the base; None at the base"
    )
    retention_error: str | None = Field(description="why retention is None off the base")


# --------------------------------------------------------------------------- item 16


@dataclass(frozen=True, kw_only=True)
class ModeTailEndpoint(ModeTailSummary):
    """Item 16 at one endpoint (``rcea.audits.mode_tail`` from the probe's
    per-trajectory sums, on the mode numbers' partition)."""

    DEPENDS_ON: ClassVar[tuple[Dependency, ...]] = ("partition",)
    run: str = field(metadata={"description": "run of the checkpoint"})
    model: str = field(metadata={"description": "model (scale) of the checkpoint"})
    step: int = field(metadata={"description": "training step of the checkpoint"})
    failed_run: bool = field(
        metadata={"description": "its (run, model) failed (item 9): kept, marked"}
    )
    quantile: float = field(
        metadata={"description": "the success-stratum tail quantile (item 7's q99)"}
    )
    n_trajectories: int = field(metadata={"description": "trajectories the probe summed"})
    n_unmatched: int = field(
        metadata={"description": "of them, not among the study's rows (not in C)"}
    )
    n_question_ratios: int = field(
        metadata={"description": "questions with more than one mode and a ratio"}
    )


# --------------------------------------------------------------------------- item 6


class CovarianceTransition(Section):
    transition: str = Field(description="label run:model:from->to")
    run: str = Field(description="run")
    model: str = Field(description="model (scale)")
    from_step: int | None = Field(description="step before")
    to_step: int = Field(description="step after")
    predicted: float | None = Field(description="mean predicted delta-H")
    observed: float | None = Field(description="mean observed delta-H")
    n_positions: int | None = Field(description="token positions averaged")
    failed_run: bool = Field(description="its (run, model) failed: shown, not fitted")


@dataclass(frozen=True, kw_only=True)
class CovarianceSection(CovarianceFitByGroup):
    """Item 6: the covariance fit pooled and per model group."""

    transitions: list[CovarianceTransition] = field(
        metadata={"description": "one row per transition"}
    )
    excluded_runs: list[str] = field(metadata={"description": "failed runs left out of every fit"})


class ModeCovarianceTransition(Section):
    """One transition's mean Δh over the prefixes of one mode group."""

    group: str = Field(description="majority | other | outside_c (item 16's groups)")
    transition: str = Field(description="label, as in the covariance section")
    run: str = Field(description="run")
    model: str = Field(description="model (scale)")
    from_step: int | None = Field(description="step before (where the prefixes were sampled)")
    to_step: int = Field(description="step after")
    predicted: float = Field(description="mean predicted delta-H over the group's positions")
    observed: float = Field(description="mean observed delta-H over them")
    n_positions: int = Field(description="the group's positions in this transition")
    failed_run: bool = Field(description="its (run, model) failed: shown, not fitted")


@dataclass(frozen=True, kw_only=True)
class ModeCovarianceSection(ModeCovarianceSummary):
    """Item 16: item 6's fit by the mode group of the trajectory each prefix belongs to
    (``rcea.audits.mode_covariance``), on the mode numbers' partition."""

    DEPENDS_ON: ClassVar[tuple[Dependency, ...]] = ("partition",)
    n_unmatched: int = field(
        metadata={
            "description": "trajectories the probe used that the study's rows at θ lack (outside C)"
        }
    )
    n_transitions: int = field(metadata={"description": "transitions with per-trajectory sums"})
    n_transitions_without_trajectories: int = field(
        metadata={"description": "transitions recorded without them (an older probe): not grouped"}
    )
    transitions: list[ModeCovarianceTransition] = field(
        metadata={"description": "one row per (group, transition)"}
    )
    excluded_runs: list[str] = field(metadata={"description": "failed runs left out of every fit"})
    sentence: str = field(metadata={"description": "the groups' fits in words"})


# --------------------------------------------------------------------------- item 7


class TailEndpoint(AtCheckpoint):
    failed_run: bool = Field(description="its (run, model) failed")
    report: TailResult = Field(description="the tail at this endpoint")


class TailSection(Section):
    """Item 7: the reward-stratified tail per endpoint and the direction counts."""

    endpoints: list[TailEndpoint] = Field(description="one per endpoint")
    direction_counts: TailDirectionSummary = Field(description="over non-failed endpoints")


# --------------------------------------------------------------------------- items 8, 9, 14


class TrainingPoint(BaseModel):
    """One logged training point; the producer's own metrics are kept as extra keys."""

    model_config = ConfigDict(extra="allow")
    step: int | None = Field(default=None, description="training step")
    progress: float | None = Field(default=None, description="training progress in [0, 1]")


class ObjectiveSetting(BaseModel):
    """One resolved objective hyper-parameter of a training run."""

    value: Any = Field(description="the value the run used")
    source: str = Field(description="where it comes from: the preset's source, or the table")


class TrainingCurve(Section):
    run: str = Field(description="run")
    model: str = Field(description="model (scale)")
    points: list[TrainingPoint] = Field(description="logged points (entropy, reward, ...)")
    preset: str | None = Field(
        default=None, description="the objective preset of the run (docs/objectives.md)"
    )
    params: dict[str, ObjectiveSetting] = Field(
        default_factory=dict, description="parameter -> every resolved objective value"
    )


class GreedyRow(AtCheckpoint):
    """Item 8 at one checkpoint."""

    accuracy: dict[str, float | None] = Field(description="benchmark -> greedy accuracy")
    n: dict[str, int | None] = Field(description="benchmark -> items")
    macro_accuracy: float | None = Field(description="unweighted mean over benchmarks")


class PassKRow(AtCheckpoint):
    benchmark: str = Field(description="benchmark")
    n: int | None = Field(description="samples per question")
    n_questions: int | None = Field(description="questions (its n); None when not recomputed")
    pass_at_k: dict[str, float | None] = Field(
        description="pass_at_<k> -> macro pass@k (recomputed with the stable product form "
        "from the stored per-question n, c: equal to `rcea stats passk` on that CSV)"
    )
    recomputed: bool = Field(
        description="false: the producer's values (no per-question counts stored)"
    )


@dataclass(frozen=True)
class BenchmarkFailureCheck(FailureCheck):
    """``rcea.audits.failure`` on one benchmark's accuracy trace."""

    benchmark: str = field(metadata={"description": "benchmark"})


class FailureWindow(Section):
    """Item 13 around the collapse."""

    collapse_step: int = Field(description="the collapse step")
    progress_low: float = Field(description="window start (training progress)")
    progress_high: float = Field(description="window end")
    n_points: int = Field(description="training points in the window")
    nonzero_variance_share: float | None = Field(description="mean 1 - frac_reward_zero_std")
    n_nonzero_variance_points: int = Field(description="its points")
    empty_mask_share: float | None = Field(description="mean objective/cov_mask_empty")
    n_empty_mask_points: int = Field(description="its points")


class FailureRun(Section):
    """Item 9 for one (run, model)."""

    run: str = Field(description="run")
    model: str = Field(description="model (scale)")
    failed: bool = Field(description="any benchmark check failed")
    checks: list[BenchmarkFailureCheck] = Field(description="one per benchmark")
    reported_step: int | None = Field(
        description="the checkpoint reported (item 14); for a failed pair the latest stored "
        "checkpoint at or before the last step attaining the peak"
    )
    reported_reason: str | None = Field(
        description="'final checkpoint' or 'last pre-failure milestone'"
    )
    failure_window: FailureWindow | None = Field(description="item 13, when failed")


@dataclass(frozen=True, kw_only=True)
class AssociationFit(RetentionPasskAssociation):
    """One scale's fit, with the training seeds averaged into each method's point."""

    n_seeds: dict[str, int] = field(
        metadata={
            "description": "method -> the training seeds averaged into its point (the seeds "
            "of one run are one point; a failed seed left out)"
        }
    )


@dataclass(frozen=True, kw_only=True)
class PooledAssociationFit(AssociationFit):
    """The fit over every scale together (``association.pooled``), labelled."""

    label: str = field(metadata={"description": "'pooled over models ...'"})


class AssociationRow(AtCheckpoint):
    method: str = Field(description="the method (run; a training seed's seeded label)")
    label: str = Field(description="run, or run:model when the run has several scales")
    point: str = Field(description="the run whose point it enters (its seeds are one point)")
    retention: float | None = Field(description="its retention at the reported checkpoint")
    pass_at_k: float | None = Field(description="its pass@k there")


class AssociationSection(Section):
    """Retention-pass@k Spearman per model (exploratory, docs/estimators.md item 14)."""

    DEPENDS_ON: ClassVar[tuple[Dependency, ...]] = ("partition",)
    benchmark: str = Field(description="benchmark")
    benchmark_source: str = Field(description="default | chosen | only benchmark | first ...")
    k: int = Field(description="k of pass@k")
    metric: str = Field(description="'<benchmark> pass@<k>'")
    by_model: dict[str, AssociationFit] = Field(description="model -> its fit")
    pooled: PooledAssociationFit | None = Field(description="only when asked for")
    rows: list[AssociationRow] = Field(description="the methods' points")
    rho: float | None = Field(description="by_model's only fit, with one scale")
    p_value: float | None = Field(description="likewise")
    n: int | None = Field(description="likewise")
    methods: list[str] | None = Field(description="likewise")
    excluded: list[str] | None = Field(description="likewise")
    missing: list[str] | None = Field(description="likewise")
    n_seeds: dict[str, int] | None = Field(description="likewise")


# --------------------------------------------------------------------------- the gate


class AsStored:
    """A dataclass section read from a stored dict writes the keys that dict had, as
    ``report_json``'s ``exclude_unset`` does for a model: a key added later (a sequential
    plan's) is absent, not null, where the gate never had it."""

    @model_validator(mode="wrap")
    @classmethod
    def _remember_keys(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        obj = handler(data)
        if isinstance(data, dict):
            object.__setattr__(obj, "_stored_keys", frozenset(data))  # frozen: not a field
        return obj

    @model_serializer(mode="wrap")
    def _stored_only(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]  # a return type would be the API schema
        out: dict[str, Any] = handler(self)
        keys = getattr(self, "_stored_keys", None)
        return out if keys is None else {k: v for k, v in out.items() if k in keys}


@dataclass(frozen=True, kw_only=True)
class Requirement(AsStored, RequirementResult):
    """A requirement of the gate, with its decision under a sequential plan."""

    decision: str | None = field(
        default=None,
        metadata={
            "description": "sequential plan only: settled_pass | settled_fail | undecided at "
            "the look"
        },
    )
    lower: float | None = field(
        default=None, metadata={"description": "sequential: interval lower bound"}
    )
    upper: float | None = field(
        default=None, metadata={"description": "sequential: interval upper bound"}
    )
    se: float | None = field(default=None, metadata={"description": "sequential: standard error"})
    pairs_needed: int | None = field(
        default=None,
        metadata={"description": "sequential: pairs estimated to settle an undecided one"},
    )
    settles_by_look: int | None = field(
        default=None,
        metadata={"description": "sequential: the look by which it is expected to settle"},
    )


@dataclass(frozen=True, kw_only=True)
class GateSection(AsStored, GateReport):
    """The pair-audit gate (``rcea.audits.gates.GateReport``), with the interim report and
    the decision under the rubric's sequential plan (``rcea.audits.sequential.attach_interim``)."""

    requirements: tuple[Requirement, ...] = field(metadata={"description": "each requirement"})
    sequential: dict[str, Any] | None = field(
        default=None,
        metadata={
            "description": "the interim report under the rubric's [sequential] plan "
            "(docs/sequential-gate.md)"
        },
    )
    decision: str | None = field(
        default=None,
        metadata={"description": "sequential: the gate's settled_pass | settled_fail | undecided"},
    )
    gate_rule: str | None = field(
        default=None, metadata={"description": "sequential when a plan decides"}
    )
    fixed_sample_passed: bool | None = field(
        default=None,
        metadata={"description": "sequential: what the fixed-sample rule would have said"},
    )
