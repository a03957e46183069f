"""Predeclared partition-audit gate (docs/estimators.md items 10 and 11).

Inputs are the audit pairs: ids, the labels of annotators A and B, adjudicated labels,
and the automatic label of each pair (``"same"``/``"different"``, or ``None`` /
``"uncertain"`` when a member of the pair is ``uncertain`` in the locked partition).

Uncertain pairs have no automatic label. They are excluded from the *automatic* F1s
(automatic vs reference, vs A, vs B), counted (``n_excluded_uncertain``) and listed. The
human–human macro-F1 is over **every** pair both annotators labelled: it never depends on
the automatic partition (docs/estimators.md item 10); ``human_human_macro_f1_evaluated`` reports
it on the automatically labelled subset, for information only. The cost of uncertainty
is carried by ``automatic_coverage`` (non-uncertain / judge-accepted trajectories over
the whole locked partition), which the caller computes and passes in.

``adjudication_scope`` (a rubric setting, recorded in the report): ``disagreements`` —
only A ≠ B pairs are adjudicated, and an adjudicated label on a pair where A = B is
ignored (``n_adjudications_out_of_scope``); ``disagreements_and_automatic`` — A = B ≠
automatic pairs may be adjudicated too, which can only move the reference toward the
automatic label.

Final stage (gated), with the reference of ``rcea.audits.agreement.final_reference``:

==============================  ================================================  ====
requirement                     value                                             test
==============================  ================================================  ====
human_human_macro_f1            macro-F1 of A vs B (before adjudication)          ≥ min
automatic_macro_f1              macro-F1 of automatic vs final reference          ≥ min
gap                             human_human_macro_f1 − automatic_macro_f1          ≤ max
different_precision             precision of automatic "different" vs reference   ≥ min
different_recall                recall of automatic "different" vs reference      ≥ min
automatic_coverage              given by the caller                               ≥ min
==============================  ================================================  ====

The gate passes iff every requirement passes. A value within ``GATE_TOLERANCE`` (1e-12)
of its threshold meets it: the values are ratios of counts, and floating-point rounding
must not fail a gate met exactly (e.g. 0.90 − 0.85 = 0.05000000000000004 in float64);
1e-12 is far below the spacing of such ratios for any realistic number of pairs.
Precision/recall follow sklearn's ``zero_division=0``: if the automatic partition never
says "different", its different-precision is 0 (and fails). With no evaluable pair
(all uncertain) the F1 values are ``None`` and their requirements fail.

A final-stage call with A/B disagreements that have no adjudicated label raises
``ValueError`` naming the pairs (the gate cannot be evaluated before adjudication is
complete). The preliminary stage is reported, not gated (``passed`` is ``None``, no
requirements): human–human (A vs B), automatic vs A and automatic vs B (both stages
report the latter two).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rcea.audits._checks import check_probability, check_same_length
from rcea.audits.agreement import (
    AgreementResult,
    check_labels,
    final_reference,
    pair_agreement,
    resolve_adjudication,
)
from rcea.audits.thresholds import GATE_REQUIREMENTS, GateThresholds

__all__ = [
    "GATE_TOLERANCE",
    "UNCERTAIN",
    "GateReport",
    "RequirementResult",
    "evaluate_gate",
]

GATE_TOLERANCE = 1e-12
UNCERTAIN = "uncertain"

Stage = Literal["final", "preliminary"]


@dataclass(frozen=True)
class RequirementResult:
    """One gate requirement: ``value <comparator> threshold`` (``>=`` or ``<=``)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    name: str = field(metadata={"description": "requirement"})
    value: float | None = field(metadata={"description": "its value"})
    threshold: float = field(metadata={"description": "the rubric's threshold"})
    comparator: str = field(metadata={"description": ">= or <="})
    passed: bool | None = field(
        metadata={
            "description": "value <comparator> threshold (None: interim under a sequential plan)"
        }
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "threshold": self.threshold,
            "comparator": self.comparator,
            "passed": self.passed,
        }


def requirement_result(
    name: str, value: float | None, threshold: float, comparator: str
) -> RequirementResult:
    if value is None:
        ok = False
    elif comparator == ">=":
        ok = value >= threshold - GATE_TOLERANCE
    else:
        ok = value <= threshold + GATE_TOLERANCE
    return RequirementResult(name, value, float(threshold), comparator, bool(ok))


@dataclass(frozen=True, kw_only=True)
class GateReport:
    """Everything the gate computed; ``passed`` is ``None`` for the preliminary stage. The
    report's ``audits.pair.gate`` is this result (with a sequential plan's keys,
    ``rcea.study.report.sections.GateSection``); the defaults are the values of gates
    stored before those keys existed."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    stage: str = field(metadata={"description": "final | preliminary"})
    passed: bool | None = field(metadata={"description": "None in the preliminary stage"})
    human_human_macro_f1: float | None = field(metadata={"description": "F1_HH"})
    automatic_macro_f1: float | None = field(metadata={"description": "automatic vs reference"})
    gap: float | None = field(metadata={"description": "F1_HH - automatic"})
    different_precision: float | None = field(
        metadata={"description": "of the automatic 'different'"}
    )
    different_recall: float | None = field(metadata={"description": "likewise"})
    automatic_coverage: float = field(
        metadata={"description": "share of pairs the partition labels"}
    )
    audited_coverage: float | None = field(metadata={"description": "share evaluated"})
    automatic_vs_a_macro_f1: float | None = field(
        default=None, metadata={"description": "automatic vs A"}
    )
    automatic_vs_b_macro_f1: float | None = field(
        default=None, metadata={"description": "automatic vs B"}
    )
    human_human_macro_f1_evaluated: float | None = field(
        default=None, metadata={"description": "F1_HH on evaluated pairs"}
    )
    adjudication_scope: str = field(
        default="disagreements_and_automatic",
        metadata={"description": "which pairs are adjudicated"},
    )
    n_adjudications_out_of_scope: int = field(
        default=0, metadata={"description": "adjudications not used"}
    )
    requirements: tuple[RequirementResult, ...] = field(
        metadata={"description": "each requirement"}
    )
    thresholds: GateThresholds = field(metadata={"description": "the frozen rubric's thresholds"})
    rubric_hash: str | None = field(metadata={"description": "SHA-256 of the rubric"})
    partition_hash: str | None = field(metadata={"description": "SHA-256 of the partition"})
    n_pairs: int = field(metadata={"description": "pairs drawn"})
    n_evaluated: int = field(metadata={"description": "pairs evaluated"})
    n_excluded_uncertain: int = field(metadata={"description": "pairs excluded as uncertain"})
    n_adjudicated: int = field(metadata={"description": "pairs adjudicated"})
    n_unresolved: int = field(metadata={"description": "disagreements not adjudicated"})
    excluded_pair_ids: tuple[str, ...] = field(metadata={"description": "the excluded pairs"})
    human_human: AgreementResult | None = field(metadata={"description": "A vs B"})
    automatic_vs_reference: AgreementResult | None = field(
        metadata={"description": "automatic vs reference"}
    )
    automatic_vs_a: AgreementResult | None = field(
        default=None, metadata={"description": "automatic vs A"}
    )
    automatic_vs_b: AgreementResult | None = field(
        default=None, metadata={"description": "automatic vs B"}
    )

    @property
    def failed_requirements(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.requirements if not r.passed)

    def to_dict(self) -> dict[str, Any]:
        def agreement(a: AgreementResult | None) -> dict[str, Any] | None:
            return None if a is None else a.to_dict()

        return {
            "stage": self.stage,
            "passed": self.passed,
            "human_human_macro_f1": self.human_human_macro_f1,
            "automatic_macro_f1": self.automatic_macro_f1,
            "gap": self.gap,
            "different_precision": self.different_precision,
            "different_recall": self.different_recall,
            "automatic_coverage": self.automatic_coverage,
            "audited_coverage": self.audited_coverage,
            "automatic_vs_a_macro_f1": self.automatic_vs_a_macro_f1,
            "automatic_vs_b_macro_f1": self.automatic_vs_b_macro_f1,
            "human_human_macro_f1_evaluated": self.human_human_macro_f1_evaluated,
            "adjudication_scope": self.adjudication_scope,
            "n_adjudications_out_of_scope": self.n_adjudications_out_of_scope,
            "requirements": [r.to_dict() for r in self.requirements],
            "thresholds": self.thresholds.to_dict(),
            "rubric_hash": self.rubric_hash,
            "partition_hash": self.partition_hash,
            "n_pairs": self.n_pairs,
            "n_evaluated": self.n_evaluated,
            "n_excluded_uncertain": self.n_excluded_uncertain,
            "n_adjudicated": self.n_adjudicated,
            "n_unresolved": self.n_unresolved,
            "excluded_pair_ids": list(self.excluded_pair_ids),
            "human_human": agreement(self.human_human),
            "automatic_vs_reference": agreement(self.automatic_vs_reference),
            "automatic_vs_a": agreement(self.automatic_vs_a),
            "automatic_vs_b": agreement(self.automatic_vs_b),
        }


def _automatic_labels(automatic: Sequence[Any]) -> list[str | None]:
    if isinstance(automatic, str):
        raise ValueError("automatic must be a sequence of labels, not a single string")
    out: list[str | None] = []
    for i, lab in enumerate(automatic):
        if lab is None or lab == UNCERTAIN:
            out.append(None)
        elif lab in ("same", "different"):
            out.append(str(lab))
        else:
            raise ValueError(
                f"automatic[{i}] must be 'same', 'different', None or 'uncertain', got {lab!r}"
            )
    return out


def _subset(values: Sequence[Any], keep: list[bool]) -> list[Any]:
    return [v for v, k in zip(values, keep, strict=True) if k]


SCOPES = ("disagreements", "disagreements_and_automatic")


def needs_adjudication(a: Any, b: Any, automatic: Any, scope: str) -> bool:
    """Whether a pair both annotators labelled goes to adjudication under the rubric's
    ``[adjudication] scope``: A ≠ B always; with ``disagreements_and_automatic`` also an
    agreed label that differs from the pair's automatic label (when it has one)."""
    if scope not in SCOPES:
        raise ValueError(f"adjudication scope must be one of {SCOPES}, got {scope!r}")
    if a != b:
        return True
    return scope == "disagreements_and_automatic" and automatic is not None and a != automatic


def counted_adjudications(
    pair_ids: Sequence[Any],
    annotator_a: Sequence[Any],
    annotator_b: Sequence[Any],
    automatic: Sequence[Any],
    adjudicated: Mapping[Any, Any],
    scope: str,
) -> dict[Any, Any]:
    """The adjudicated labels a gate counts: those given, on pairs that need adjudication
    under ``scope`` (:func:`needs_adjudication`). The final gate, the interim decisions of
    a sequential plan and the bundle verifier all take adjudications through this rule."""
    return {
        p: adjudicated[p]
        for p, x, y, z in zip(pair_ids, annotator_a, annotator_b, automatic, strict=True)
        if adjudicated.get(p) is not None and needs_adjudication(x, y, z, scope)
    }


def evaluate_gate(
    pair_ids: Sequence[Any],
    annotator_a: Sequence[Any],
    annotator_b: Sequence[Any],
    adjudicated: Mapping[Any, Any] | Sequence[Any] | None,
    automatic: Sequence[Any],
    automatic_coverage: float,
    thresholds: GateThresholds,
    audited_coverage: float | None = None,
    rubric_hash: str | None = None,
    partition_hash: str | None = None,
    stage: Stage = "final",
    adjudication_scope: str = "disagreements_and_automatic",
) -> GateReport:
    """Evaluate the partition-audit gate (see the module docstring for every rule).

    ``adjudicated``: ``None``, a mapping pair id → label, or a sequence aligned with
    ``pair_ids`` (``None`` where not adjudicated). ``automatic_coverage`` and
    ``audited_coverage`` are shares in [0, 1]. Raises ``ValueError`` on bad input and,
    at the final stage, on unresolved A/B disagreements (naming the pairs).
    """
    if stage not in ("final", "preliminary"):
        raise ValueError(f"stage must be 'final' or 'preliminary', got {stage!r}")
    if adjudication_scope not in ("disagreements", "disagreements_and_automatic"):
        raise ValueError(
            "adjudication_scope must be 'disagreements' or 'disagreements_and_automatic', "
            f"got {adjudication_scope!r}"
        )
    if not isinstance(thresholds, GateThresholds):
        raise ValueError("thresholds must be a GateThresholds instance")
    a = check_labels(annotator_a, "annotator_a")
    b = check_labels(annotator_b, "annotator_b")
    auto = _automatic_labels(automatic)
    ids = [str(p) for p in pair_ids]
    n_pairs = check_same_length(pair_ids=ids, annotator_a=a, annotator_b=b, automatic=auto)
    adj = resolve_adjudication(ids, adjudicated)
    coverage = check_probability(float(automatic_coverage), "automatic_coverage")
    audited = (
        None
        if audited_coverage is None
        else check_probability(float(audited_coverage), "audited_coverage")
    )
    out_of_scope = 0
    if adjudication_scope == "disagreements":
        out_of_scope = sum(
            la == lb and lj is not None for la, lb, lj in zip(a, b, adj, strict=True)
        )
        adj = [lj if la != lb else None for la, lb, lj in zip(a, b, adj, strict=True)]
    unresolved = [
        p for p, la, lb, lj in zip(ids, a, b, adj, strict=True) if la != lb and lj is None
    ]
    n_adjudicated = sum(lj is not None for lj in adj)

    keep = [lab is not None for lab in auto]
    excluded = tuple(p for p, k in zip(ids, keep, strict=True) if not k)
    n_eval = sum(keep)
    a_eval, b_eval, auto_eval = _subset(a, keep), _subset(b, keep), _subset(auto, keep)
    # F1_HH over every pair both annotators labelled: never filtered by the partition
    hh = pair_agreement(a, b) if n_pairs else None
    hh_f1 = None if hh is None else hh.macro_f1
    hh_eval = pair_agreement(a_eval, b_eval) if n_eval else None
    vs_a = pair_agreement(auto_eval, a_eval) if n_eval else None
    vs_b = pair_agreement(auto_eval, b_eval) if n_eval else None

    common: dict[str, Any] = {
        "human_human_macro_f1": hh_f1,
        "automatic_coverage": coverage,
        "audited_coverage": audited,
        "human_human_macro_f1_evaluated": None if hh_eval is None else hh_eval.macro_f1,
        "adjudication_scope": adjudication_scope,
        "n_adjudications_out_of_scope": out_of_scope,
        "thresholds": thresholds,
        "rubric_hash": rubric_hash,
        "partition_hash": partition_hash,
        "n_pairs": n_pairs,
        "n_evaluated": n_eval,
        "n_excluded_uncertain": n_pairs - n_eval,
        "n_adjudicated": n_adjudicated,
        "n_unresolved": len(unresolved),
        "excluded_pair_ids": excluded,
        "human_human": hh,
        "automatic_vs_a_macro_f1": None if vs_a is None else vs_a.macro_f1,
        "automatic_vs_b_macro_f1": None if vs_b is None else vs_b.macro_f1,
        "automatic_vs_a": vs_a,
        "automatic_vs_b": vs_b,
    }

    if stage == "preliminary":
        return GateReport(
            stage=stage,
            passed=None,
            automatic_macro_f1=None,
            gap=None,
            different_precision=None,
            different_recall=None,
            requirements=(),
            automatic_vs_reference=None,
            **common,
        )

    if unresolved:
        raise ValueError(
            f"final gate cannot be evaluated: {len(unresolved)} pair(s) where annotators A "
            f"and B disagree have no adjudicated label: {unresolved}"
        )
    reference = final_reference(ids, a, b, adj)
    ref_eval = _subset(list(reference.labels), keep)
    vs_ref = pair_agreement(auto_eval, ref_eval) if n_eval else None
    auto_f1 = None if vs_ref is None else vs_ref.macro_f1
    gap = None if hh_f1 is None or auto_f1 is None else hh_f1 - auto_f1
    d_prec = None if vs_ref is None else vs_ref.different_precision
    d_rec = None if vs_ref is None else vs_ref.different_recall
    values = {
        "human_human_macro_f1": hh_f1,
        "automatic_macro_f1": auto_f1,
        "gap": gap,
        "different_precision": d_prec,
        "different_recall": d_rec,
        "automatic_coverage": coverage,
    }
    requirements = tuple(
        requirement_result(name, values[name], getattr(thresholds, key), comparator)
        for name, key, comparator in GATE_REQUIREMENTS
    )
    return GateReport(
        stage=stage,
        passed=all(r.passed for r in requirements),
        automatic_macro_f1=auto_f1,
        gap=gap,
        different_precision=d_prec,
        different_recall=d_rec,
        requirements=requirements,
        automatic_vs_reference=vs_ref,
        **common,
    )
