"""Predeclared acceptance of the validity judge (docs/validity-audit.md "Acceptance"):
thresholds a frozen rubric states before the calibration is labelled, and the pure
evaluation of a calibration report and of an accepted-set report against them.

Defaults (``[acceptance]`` absent) and why: the paper's judge reached 95.7% held-out
accuracy, 94.9% accepted-valid precision and 96.6% valid recall on 117 held-out items;
with n = 117 the lower end of a 95% interval around those is near 0.90, so 0.90 for
accuracy, accepted-valid precision and valid recall accepts a judge like the paper's and
refuses one that is clearly worse (0.80 accuracy, 0.71 recall). Macro-F1 0.85 is the pair
gate's agreement threshold; coverage 0.95 (at most 1 in 20 unparseable verdicts) matches the
gate's automatic coverage. The accepted-set check's lower 95% Clopper–Pearson bound 0.80
against each annotator: the paper's 91.3% / 89.1% clear it on a few hundred items, and a
lower bound under 0.80 means one accepted trajectory in five may be invalid. The default
calibration design holds out 300 items (rcea/audits/rubric.py) and applies these to the
population-weighted figures: a judge of ≥ 95 % population accuracy then passes with
probability ≥ 0.948 in simulation (benchmarks/bench_calibration_design.py).

``basis`` says which figures the calibration thresholds apply to: ``population`` (the
default: the population-weighted figures of rcea/audits/calibration.py, what the judge does
on the whole judged population) or ``balanced`` (the raw figures of the verdict-stratified
sample). Thresholds recorded before the basis existed applied to the balanced sample:
:meth:`JudgeAcceptance.from_dict` reads a stored table without ``basis`` (or none at all)
as ``balanced``."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

#: the calibration report fields a threshold applies to, in report order
CALIBRATION_FIELDS = (
    "accuracy",
    "macro_f1",
    "accepted_valid_precision",
    "valid_recall",
    "coverage",
)
#: the figures calibration thresholds may apply to (the first is the default)
BASES = ("population", "balanced")
#: the confidence of the accepted-set interval the lower-bound threshold applies to
ACCEPTED_CONFIDENCE = 0.95


@dataclass(frozen=True)
class JudgeAcceptance:
    """The rubric's ``[acceptance]`` table: minimum held-out calibration values, and the
    minimum lower bound of the 95% interval of accepted-set precision per annotator."""

    accuracy_min: float = 0.90
    macro_f1_min: float = 0.85
    accepted_valid_precision_min: float = 0.90
    valid_recall_min: float = 0.90
    coverage_min: float = 0.95
    accepted_precision_lower_min: float = 0.80
    basis: str = BASES[0]

    def __post_init__(self) -> None:
        if self.basis not in BASES:
            raise ValueError(
                f"[acceptance] basis must be one of {', '.join(BASES)}, got {self.basis!r}"
            )
        for f in fields(self):
            if f.name == "basis":
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"[acceptance] {f.name} must be a number, got {v!r}")
            if not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"[acceptance] {f.name} must be in [0, 1], got {v!r}")
            object.__setattr__(self, f.name, float(v))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def tightened(self, by: float) -> JudgeAcceptance:
        """These thresholds with ``by`` added to each calibration minimum (capped at 1):
        a later calibration attempt under a re-calibration policy."""
        raised = {f"{k}_min": min(1.0, getattr(self, f"{k}_min") + by) for k in CALIBRATION_FIELDS}
        return JudgeAcceptance(**{**asdict(self), **raised})

    def hashed(self) -> dict[str, Any]:
        """The rubric content: ``basis`` only when not the default (rubrics frozen before
        it existed keep their hashes)."""
        out = asdict(self)
        if self.basis == BASES[0]:
            out.pop("basis")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> JudgeAcceptance:
        """Thresholds stored with a check; without ``basis`` (or without any) they were
        recorded before the basis existed and applied to the balanced sample."""
        return cls(**{"basis": "balanced", **(data or {})})


def _requirement(name: str, value: float | None, threshold: float) -> dict[str, Any]:
    passed = value is not None and math.isfinite(value) and value >= threshold
    return {
        "name": name,
        "value": value,
        "comparator": ">=",
        "threshold": threshold,
        "passed": bool(passed),
    }


def calibration_acceptance(report: dict[str, Any], t: JudgeAcceptance) -> dict[str, Any]:
    """Each held-out calibration value on the thresholds' ``basis`` (the report's
    ``population`` figures, or its balanced top-level ones) against its minimum; ``passed``
    only when all hold (a missing value fails: a report without population figures fails
    a population basis)."""
    values = report if t.basis == "balanced" else (report.get("population") or {})
    reqs = [
        {**_requirement(k, values.get(k), getattr(t, f"{k}_min")), "basis": t.basis}
        for k in CALIBRATION_FIELDS
    ]
    return {
        "passed": all(r["passed"] for r in reqs),
        "basis": t.basis,
        "requirements": reqs,
        "thresholds": t.to_dict(),
    }


def accepted_acceptance(report: dict[str, Any], t: JudgeAcceptance) -> dict[str, Any]:
    """The lower bound of the accepted-set precision interval against each annotator
    (``report`` from :func:`rcea.audits.calibration.accepted_set_precision` at 95%)."""
    if not math.isclose(float(report.get("confidence", ACCEPTED_CONFIDENCE)), ACCEPTED_CONFIDENCE):
        raise ValueError("the acceptance threshold applies to the 95% interval")
    reqs = [
        _requirement(
            f"accepted_precision_lower_{role[-1]}",
            report[role]["ci_low"],
            t.accepted_precision_lower_min,
        )
        for role in ("annotator_a", "annotator_b")
    ]
    return {
        "passed": all(r["passed"] for r in reqs),
        "requirements": reqs,
        "thresholds": t.to_dict(),
    }
