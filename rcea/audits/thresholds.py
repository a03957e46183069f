"""Gate thresholds (docs/estimators.md item 11). Defaults are the paper's; a frozen rubric
supplies the values actually used."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

_RUBRIC = {"description": "rubric threshold"}  # each field's, in the report's schema


@dataclass(frozen=True)
class GateThresholds:
    """Predeclared requirements of the partition-audit gate."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    human_human_macro_f1_min: float = field(default=0.85, metadata=_RUBRIC)
    automatic_macro_f1_min: float = field(default=0.85, metadata=_RUBRIC)
    gap_max: float = field(default=0.05, metadata=_RUBRIC)
    different_precision_min: float = field(default=0.80, metadata=_RUBRIC)
    different_recall_min: float = field(default=0.80, metadata=_RUBRIC)
    automatic_coverage_min: float = field(default=0.95, metadata=_RUBRIC)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"gate threshold {name} must be a number in [0, 1], got {value!r}")

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


#: The gate's requirements in report order: (report field, threshold field of
#: :class:`GateThresholds`, comparator). The gate, the sequential plan (the first five:
#: the agreement requirements; coverage is checked once, not per look) and every reader
#: of a gate use this one table.
GATE_REQUIREMENTS: tuple[tuple[str, str, str], ...] = (
    ("human_human_macro_f1", "human_human_macro_f1_min", ">="),
    ("automatic_macro_f1", "automatic_macro_f1_min", ">="),
    ("gap", "gap_max", "<="),
    ("different_precision", "different_precision_min", ">="),
    ("different_recall", "different_recall_min", ">="),
    ("automatic_coverage", "automatic_coverage_min", ">="),
)
AGREEMENT_REQUIREMENTS = GATE_REQUIREMENTS[:5]
