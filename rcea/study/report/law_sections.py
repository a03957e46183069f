"""Typed ``entropy_law`` section of the study report (docs/estimators.md item 18), filled by
:func:`rcea.study.report.entropy_law.entropy_law_section`. Entropy-only: every number
rests on the producer's training curves and accuracy measurements, no audit."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from rcea.audits.entropy_law import (
    EntropyComparison,
    LawScaling,
    OrderingTest,
    RunLaw,
)
from rcea.study.report.sections import Section


class LawRun(Section):
    """One (run, model, training seed): the global-entropy law at the top level."""

    label: str = Field(description="run:model[:seed<s>]")
    run: str = Field(description="run")
    model: str = Field(description="model (scale)")
    seed: int | None = Field(description="training seed, when recorded")
    n_params: float | None = Field(description="non-embedding parameters, when recorded")
    a: float | None = Field(description="global entropy: a")
    b: float | None = Field(description="global entropy: b")
    r2: float | None = Field(description="global entropy: R²")
    rmse: float | None = Field(description="global entropy: RMSE")
    n: int | None = Field(description="global entropy: paired points")
    ceiling: float | None = Field(description="global entropy: b − a")
    early_fit_rmse: float | None = Field(description="global entropy: early-fit RMSE")
    entropy_keys: dict[str, str] = Field(
        description="entropy kind -> the logged key or column it was read from"
    )
    accuracy_benchmarks: list[str] = Field(
        description="benchmarks whose accuracy traces were averaged into R"
    )
    entropies: dict[str, RunLaw | None] = Field(
        description="global / success / failure -> its law (None when not logged)"
    )


@dataclass(frozen=True, kw_only=True)
class RunLawScaling(LawScaling):
    """a and b against log N_params for one run (and seed) across model sizes."""

    run: str = field(metadata={"description": "run"})
    seed: int | None = field(metadata={"description": "training seed"})


@dataclass(frozen=True, kw_only=True)
class SeededOrderingTest(OrderingTest):
    """One scale's test, with the training seeds averaged into each run's endpoint."""

    n_seeds: dict[str, int] = field(
        metadata={
            "description": "run -> the training seeds averaged into its endpoint (the seeds "
            "of one run are one endpoint; a failed seed left out)"
        }
    )


class OrderingModel(Section):
    metrics: list[str] = Field(description="the metrics present")
    by_model: dict[str, SeededOrderingTest] = Field(description="model -> its test")
    kendall_tau: dict[str, float | None] | None = Field(description="one scale: metric -> τ-b")
    p_value: dict[str, float | None] | None = Field(description="one scale: metric -> p")


class EntropyLawSection(Section):
    """Item 15: the entropy–performance law per trace, its early prediction, the scaling
    across sizes, the global vs reward-conditioned comparison and the RQ1 ordering."""

    fit_fraction: float = Field(description="f of the early fit")
    runs: list[LawRun] = Field(description="one per (run, model, training seed)")
    scaling: list[RunLawScaling] = Field(description="per run across model sizes")
    comparison: EntropyComparison = Field(description="which entropy predicted R best")
    without_trace: list[str] = Field(
        description="(run, model)s without a curve with entropy or without an accuracy trace"
    )
    pass_at_k_metric: str | None = Field(description="'<benchmark> pass@<k>' of the ordering")
    ordering: OrderingModel | None = Field(description="RQ1 per model scale")
    ordering_sentence: str | None = Field(description="the ordering finding in words")
    error: str | None = Field(default=None, description="why the section could not be computed")
