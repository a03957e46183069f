"""Audit rubric: a TOML file that predeclares the gate thresholds, estimator settings and
sampling plans before any audit data are seen (docs/estimators.md items 11 and "Freeze semantics").

Format (every section but ``[rubric]`` may be omitted; missing keys get the defaults)::

    [rubric]
    name = "rcea-partition-audit"        # required, non-empty string
    version = "1"                        # required, string or integer (stored as string)
    description = "..."                  # optional

    [gate]                               # GateThresholds fields, each in [0, 1]
    human_human_macro_f1_min = 0.85
    automatic_macro_f1_min = 0.85
    gap_max = 0.05
    different_precision_min = 0.80
    different_recall_min = 0.80
    automatic_coverage_min = 0.95

    [estimators]
    k_min = 8          # >= 1
    n_min = 8          # >= 1
    n_draws = 20       # >= 1
    n_boot = 10000     # >= 100
    confidence = 0.95  # in (0, 1)
    seed = 0           # >= 0
    min_eligible_questions = 10   # >= 1; minimum evidence (docs/estimators.md "Minimum
    min_eligible_share = 0.25     # evidence"): out of the hash while default
    # per quantity (each optional; absent: the one floor above applies), for
    # paired_ratio, validity, mode_entropy and retention:
    # validity_min_questions = 10
    # validity_min_share = 0.25

    [pairs]            # pair-sampling plan of the partition audit
    seed = 0
    pairs_per_question = 156
    n_questions = 29
    # max_pairs = 5000 # optional cap (absent = no cap)
    # strategy_definition = "..."  # shown to annotators and adjudicators
    # min_pairs_per_question = 3   # optional floor: pairs per question from what each
                                   # question can give, up to pairs_per_question; at most
                                   # n_questions questions (PairPlan)
    # runs = ["grpo"]              # optional: draw only from these checkpoints
    # models = ["qwen2.5-1.5b"]
    # steps = [40]

    [adjudication]     # optional; which labelled pairs go to the adjudicator
    scope = "disagreements_and_automatic"  # or "disagreements" (A ≠ B only)

    [calibration]      # optional judge-calibration plan
    size = 600
    held_out = 300     # 1 <= held_out <= size
    seed = 0
    annotators_per_item = 2   # optional, default 1; 2: A and B label every item and
                              # their disagreements are adjudicated

    [sequential]       # optional predeclared group-sequential plan (docs/sequential-gate.md)
    looks = [0.25, 0.5, 0.75, 1.0]   # shares of the planned pairs labelled by A and B
    alpha = 0.05                      # per requirement, per direction
    spending = "obrien_fleming"       # or "pocock" or "bonferroni"
    n_boot = 2000                     # question-level bootstrap replicates per look
    seed = 0

    [annotators]       # optional; annotator quality (docs/sequential-gate.md)
    repeat_share = 0.05   # in [0, 0.5]; share of pairs shown a second time to A and B
                          # (hidden repeats: self-consistency, never counted in the gate)

    [reaudit]          # optional; may a partition whose final gate FAILED be audited again?
    max_attempts = 2              # >= 1 pair audits on one partition (default 1: none)
    correction = "bonferroni"     # the stated multiplicity correction ("bonferroni" or
                                  # "none"), recorded with every attempt and shown beside
                                  # the gate (docs/publication.md "Every attempt")

    [acceptance]       # optional; predeclared acceptance of the validity judge (defaults
    accuracy_min = 0.90                  # shown; their reasons: rcea/audits/acceptance.py)
    macro_f1_min = 0.85
    accepted_valid_precision_min = 0.90
    valid_recall_min = 0.90
    coverage_min = 0.95
    accepted_precision_lower_min = 0.80  # lower 95% bound of accepted-set precision, each annotator
    basis = "population"                 # the calibration figures the thresholds apply to:
                                         # population-weighted (default) or "balanced"

    [recalibration]    # optional; may a judge whose calibration FAILED be calibrated again?
    max_attempts = 2              # >= 1 calibrations of one judge (default 1: none)
    tighten = 0.02                # added to each calibration minimum per later attempt
    correction = "bonferroni"     # stated multiplicity correction, shown with each attempt

``[acceptance]`` likewise enters the content (and hash) only when it differs from the
defaults; the defaults apply to every rubric without it. So does ``[recalibration]``.

``[reaudit]`` enters the content (and hash) only when it is not the default
(``max_attempts = 1``): rubrics frozen before it existed keep their hashes. Without it a
failed final gate binds its partition: the remedy is a new partition (refreeze the
codebook), never another draw.

``[sequential]`` is part of the frozen content (and hash) when present; without it the
gate is the fixed-sample gate, and rubrics frozen before it existed keep their hashes.
``[annotators]`` likewise enters the content (and hash) only when ``repeat_share`` is not
its default 0 (no hidden repeats).

``[adjudication] scope`` (docs/estimators.md item 10): ``disagreements`` sends only pairs
where A ≠ B to adjudication; ``disagreements_and_automatic`` (the default) also pairs where
A = B but the automatic label differs — arbitrating those can only move the reference
toward the automatic label, so the gate records which scope was used. The section is left
out of ``to_dict()`` (and so of the hash) while it holds the default, so rubrics frozen
before it existed keep their hashes.

Unknown sections or keys and out-of-range values raise ``ValueError`` naming the section
and key. ``content_hash()`` is the SHA-256 of the canonical JSON (sorted keys, compact
separators) of the rubric AFTER defaults are filled, so two files with the same content
in a different key order, or one spelling out a default that the other omits, hash the same.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomli_w

from rcea.audits.acceptance import JudgeAcceptance
from rcea.audits.inputs import loads_toml, read_text
from rcea.audits.sequential import SequentialPlan
from rcea.audits.thresholds import GateThresholds

__all__ = [
    "ADJUDICATION_SCOPES",
    "DEFAULT_ADJUDICATION_SCOPE",
    "DEFAULT_RUBRIC_PATH",
    "AdjudicationPolicy",
    "AnnotatorPlan",
    "CalibrationPlan",
    "EstimatorSettings",
    "JudgeAcceptance",
    "PairPlan",
    "ReauditPolicy",
    "RecalibrationPolicy",
    "Rubric",
    "SequentialPlan",
    "default_rubric",
    "load_rubric",
    "rubric_path",
    "parse_rubric",
    "rubric_from_dict",
]

DEFAULT_RUBRIC_PATH = Path(__file__).with_name("default_rubric.toml")

_MAX_SEED = 2**63 - 1

#: What annotators and adjudicators are told a "strategy" is (docs/codebook.md).
DEFAULT_STRATEGY_DEFINITION = (
    "Two solutions use the same strategy when they share the decisive method and the core "
    "sequence of operations. Wording, notation, arithmetic detail or the order of "
    "exposition never make a different strategy."
)


def _int(section: str, key: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"[{section}] {key} must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"[{section}] {key} must be {rng}, got {value!r}")
    return value


def _unit(section: str, key: str, value: Any, *, open_interval: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"[{section}] {key} must be a number, got {value!r}")
    v = float(value)
    ok = math.isfinite(v) and (0.0 < v < 1.0 if open_interval else 0.0 <= v <= 1.0)
    if not ok:
        rng = "strictly between 0 and 1" if open_interval else "in [0, 1]"
        raise ValueError(f"[{section}] {key} must be {rng}, got {value!r}")
    return v


#: the numbers a minimum-evidence floor applies to, each with its own optional floor
EVIDENCE_QUANTITIES = ("paired_ratio", "validity", "mode_entropy", "retention")


@dataclass(frozen=True)
class EstimatorSettings:
    """Estimator settings shared by the entropy, validity and mode estimators."""

    k_min: int = 8
    n_min: int = 8
    n_draws: int = 20
    n_boot: int = 10_000
    confidence: float = 0.95
    seed: int = 0
    #: predeclared minimum evidence of paired ratios, validity, mode entropy and
    #: retention: eligible questions (count and share of the checkpoint's questions);
    #: below it a number is shown labelled "insufficient evidence", never "audited"
    min_eligible_questions: int = 10
    min_eligible_share: float = 0.25
    #: the floor of one quantity (``None``: the one floor above applies to it; rubrics
    #: frozen before per-quantity floors keep it for all four)
    paired_ratio_min_questions: int | None = None
    paired_ratio_min_share: float | None = None
    validity_min_questions: int | None = None
    validity_min_share: float | None = None
    mode_entropy_min_questions: int | None = None
    mode_entropy_min_share: float | None = None
    retention_min_questions: int | None = None
    retention_min_share: float | None = None

    def __post_init__(self) -> None:
        s = "estimators"
        _int(s, "min_eligible_questions", self.min_eligible_questions, 1)
        object.__setattr__(
            self, "min_eligible_share", _unit(s, "min_eligible_share", self.min_eligible_share)
        )
        for q in EVIDENCE_QUANTITIES:
            if getattr(self, f"{q}_min_questions") is not None:
                _int(s, f"{q}_min_questions", getattr(self, f"{q}_min_questions"), 1)
            if getattr(self, f"{q}_min_share") is not None:
                key = f"{q}_min_share"
                object.__setattr__(self, key, _unit(s, key, getattr(self, key)))
        _int(s, "k_min", self.k_min, 1)
        _int(s, "n_min", self.n_min, 1)
        _int(s, "n_draws", self.n_draws, 1)
        _int(s, "n_boot", self.n_boot, 100)
        object.__setattr__(
            self, "confidence", _unit(s, "confidence", self.confidence, open_interval=True)
        )
        _int(s, "seed", self.seed, 0, _MAX_SEED)

    def min_evidence(self) -> dict[str, dict[str, Any]]:
        """The floor of each quantity (``questions``, ``share``): its own when the rubric
        states it, else the one floor (docs/estimators.md "Minimum evidence")."""
        out = {}
        for q in EVIDENCE_QUANTITIES:
            n, share = getattr(self, f"{q}_min_questions"), getattr(self, f"{q}_min_share")
            out[q] = {
                "questions": self.min_eligible_questions if n is None else n,
                "share": self.min_eligible_share if share is None else share,
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("min_eligible_questions", "min_eligible_share"):  # defaults stay out
            if out[key] == getattr(EstimatorSettings, key):  # of the hash (old rubrics)
                out.pop(key)
        for key in [k for k, v in out.items() if v is None]:  # per-quantity floors: only
            out.pop(key)  # when stated (old rubrics keep their hashes)
        return out


def _names(section: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"[{section}] {key} must be a non-empty list of names, got {value!r}")
    for v in value:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"[{section}] {key} must hold non-empty strings, got {v!r}")
    return tuple(sorted(set(value)))


@dataclass(frozen=True)
class PairPlan:
    """Pair-sampling plan of the partition audit (``max_pairs=None``: no overall cap).

    Two allocations. **Fixed** (``min_pairs_per_question`` absent, the paper's): exactly
    ``n_questions`` questions, each with at least ``pairs_per_question`` pairs, give
    ``pairs_per_question`` pairs each; fewer qualifying questions refuse the draw.
    **From what each question can give** (``min_pairs_per_question`` = the floor, what
    ``rcea audit rubric init`` writes): a question qualifies with at least the floor's
    pairs and gives all of them up to ``pairs_per_question`` (the cap); at most
    ``n_questions`` qualifying questions are drawn, questions below the floor are left
    out and listed. ``runs``/``models``/``steps`` (absent: every checkpoint) restrict the
    draw to the trajectories of those checkpoints. Each of the four keys enters the hash
    only when set, so rubrics frozen before them keep their hashes."""

    seed: int = 0
    pairs_per_question: int = 156
    n_questions: int = 29
    max_pairs: int | None = None
    strategy_definition: str = DEFAULT_STRATEGY_DEFINITION
    min_pairs_per_question: int | None = None
    runs: tuple[str, ...] | None = None
    models: tuple[str, ...] | None = None
    steps: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        s = "pairs"
        if not isinstance(self.strategy_definition, str) or not self.strategy_definition.strip():
            raise ValueError("[pairs] strategy_definition must be a non-empty string")
        _int(s, "seed", self.seed, 0, _MAX_SEED)
        _int(s, "pairs_per_question", self.pairs_per_question, 1)
        _int(s, "n_questions", self.n_questions, 1)
        if self.max_pairs is not None:
            _int(s, "max_pairs", self.max_pairs, 1)
        if self.min_pairs_per_question is not None:
            _int(s, "min_pairs_per_question", self.min_pairs_per_question, 1)
            if self.min_pairs_per_question > self.pairs_per_question:
                raise ValueError(
                    f"[pairs] min_pairs_per_question ({self.min_pairs_per_question}) must not "
                    f"exceed pairs_per_question ({self.pairs_per_question})"
                )
        for key in ("runs", "models"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, _names(s, key, getattr(self, key)))
        if self.steps is not None:
            if not isinstance(self.steps, list | tuple) or not self.steps:
                raise ValueError(f"[pairs] steps must be a non-empty list, got {self.steps!r}")
            steps = tuple(sorted({_int(s, "steps", v, 0) for v in self.steps}))
            object.__setattr__(self, "steps", steps)

    @property
    def from_each_question(self) -> bool:
        """Whether pairs per question come from what each question can give (a floor)."""
        return self.min_pairs_per_question is not None

    @property
    def floor(self) -> int:
        """The fewest pairs a question must have to be drawn."""
        return self.min_pairs_per_question or self.pairs_per_question

    def scope(self) -> dict[str, list[Any]]:
        """The checkpoints the draw is restricted to (only the stated keys)."""
        return {
            k: list(getattr(self, k))
            for k in ("runs", "models", "steps")
            if getattr(self, k) is not None
        }

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("min_pairs_per_question", "runs", "models", "steps"):
            if out[key] is None:  # only when set: earlier rubrics keep their hashes
                out.pop(key)
            elif key != "min_pairs_per_question":
                out[key] = list(out[key])
        return out


#: Adjudication scopes: A ≠ B only, or also A = B ≠ automatic.
ADJUDICATION_SCOPES = ("disagreements", "disagreements_and_automatic")
DEFAULT_ADJUDICATION_SCOPE = "disagreements_and_automatic"


@dataclass(frozen=True)
class AdjudicationPolicy:
    """Which labelled pairs go to the adjudicator (see the module docstring)."""

    scope: str = DEFAULT_ADJUDICATION_SCOPE

    def __post_init__(self) -> None:
        if self.scope not in ADJUDICATION_SCOPES:
            raise ValueError(
                f"[adjudication] scope must be one of {', '.join(ADJUDICATION_SCOPES)}, "
                f"got {self.scope!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AnnotatorPlan:
    """The rubric's ``[annotators]`` table: ``repeat_share`` of the pairs (rounded half
    up, chosen from the audit's seed) is shown a second time to annotators A and B as
    separate, indistinguishable blinded tasks; their second labels measure each person's
    self-consistency and never count in the gate (docs/sequential-gate.md)."""

    repeat_share: float = 0.0

    def __post_init__(self) -> None:
        v = self.repeat_share
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"[annotators] repeat_share must be a number, got {v!r}")
        if not 0.0 <= float(v) <= 0.5:
            raise ValueError(f"[annotators] repeat_share must be in [0, 0.5], got {v!r}")
        object.__setattr__(self, "repeat_share", float(v))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CalibrationPlan:
    """Judge-calibration plan: ``size`` labelled items of which ``held_out`` are held out."""

    size: int = 600
    held_out: int = 300
    seed: int = 0
    annotators_per_item: int = 1  # 2: A and B label every item; disagreements adjudicated

    def __post_init__(self) -> None:
        s = "calibration"
        _int(s, "size", self.size, 1)
        _int(s, "held_out", self.held_out, 1, self.size)
        _int(s, "seed", self.seed, 0, _MAX_SEED)
        _int(s, "annotators_per_item", self.annotators_per_item, 1, 2)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.annotators_per_item == 1:  # the default stays out of the hash (old rubrics)
            out.pop("annotators_per_item")
        return out


#: Multiplicity corrections a re-audit policy may state.
REAUDIT_CORRECTIONS = ("bonferroni", "none")


@dataclass(frozen=True)
class ReauditPolicy:
    """The rubric's ``[reaudit]`` table: how many pair audits one partition may have when
    a final gate on it failed (``max_attempts``; 1, the default: a failure binds the
    partition), and the multiplicity correction stated for them (docs/publication.md)."""

    max_attempts: int = 1
    correction: str = "none"

    def __post_init__(self) -> None:
        _int("reaudit", "max_attempts", self.max_attempts, 1, 20)
        if self.correction not in REAUDIT_CORRECTIONS:
            raise ValueError(
                f"[reaudit] correction must be one of {', '.join(REAUDIT_CORRECTIONS)}, "
                f"got {self.correction!r}"
            )

    @property
    def allows_reaudit(self) -> bool:
        return self.max_attempts > 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RecalibrationPolicy:
    """The rubric's ``[recalibration]`` table: how many calibrations (and, separately,
    accepted-set checks) one frozen judge may have once one of them FAILED
    (``max_attempts``; 1, the default: a failure binds the judge, the remedy is a new judge
    version), how the calibration thresholds tighten for each later attempt (``tighten``
    is added to every ``[acceptance]`` calibration minimum per attempt after the first,
    capped at 1), and the stated multiplicity correction of the attempts' intervals."""

    max_attempts: int = 1
    tighten: float = 0.0
    correction: str = "none"

    def __post_init__(self) -> None:
        _int("recalibration", "max_attempts", self.max_attempts, 1, 20)
        object.__setattr__(self, "tighten", _unit("recalibration", "tighten", self.tighten))
        if self.correction not in REAUDIT_CORRECTIONS:
            raise ValueError(
                f"[recalibration] correction must be one of {', '.join(REAUDIT_CORRECTIONS)}, "
                f"got {self.correction!r}"
            )

    @property
    def allows_recalibration(self) -> bool:
        return self.max_attempts > 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Rubric:
    """A parsed, validated, default-filled rubric. ``source`` (where it was read from) is
    not part of its content or hash."""

    name: str
    version: str
    description: str = ""
    gate: GateThresholds = field(default_factory=GateThresholds)
    estimators: EstimatorSettings = field(default_factory=EstimatorSettings)
    pairs: PairPlan = field(default_factory=PairPlan)
    calibration: CalibrationPlan | None = None
    adjudication: AdjudicationPolicy = field(default_factory=AdjudicationPolicy)
    sequential: SequentialPlan | None = None
    annotators: AnnotatorPlan = field(default_factory=AnnotatorPlan)
    reaudit: ReauditPolicy = field(default_factory=ReauditPolicy)
    acceptance: JudgeAcceptance = field(default_factory=JudgeAcceptance)
    recalibration: RecalibrationPolicy = field(default_factory=RecalibrationPolicy)
    source: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Content as nested JSON-safe dicts, one per TOML section (defaults filled)."""
        return {
            "rubric": {
                "name": self.name,
                "version": self.version,
                "description": self.description,
            },
            "gate": self.gate.to_dict(),
            "estimators": self.estimators.to_dict(),
            "pairs": self.pairs.to_dict(),
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            # only when not the default: earlier frozen rubrics keep their hashes
            **(
                {"adjudication": self.adjudication.to_dict()}
                if self.adjudication != AdjudicationPolicy()
                else {}
            ),
            # only when declared: rubrics without a sequential plan keep their hashes
            **({"sequential": self.sequential.to_dict()} if self.sequential else {}),
            # only when not the default (no repeats): earlier rubrics keep their hashes
            **(
                {"annotators": self.annotators.to_dict()}
                if self.annotators != AnnotatorPlan()
                else {}
            ),
            # only when declared: rubrics without a re-audit policy keep their hashes
            **({"reaudit": self.reaudit.to_dict()} if self.reaudit != ReauditPolicy() else {}),
            **(
                {"acceptance": self.acceptance.hashed()}
                if self.acceptance != JudgeAcceptance()
                else {}
            ),
            # only when declared: rubrics without a re-calibration policy keep their hashes
            **(
                {"recalibration": self.recalibration.to_dict()}
                if self.recalibration != RecalibrationPolicy()
                else {}
            ),
        }

    def canonical_json(self) -> str:
        """``json.dumps(to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)``."""
        return json.dumps(
            self.to_dict(),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )

    def content_hash(self) -> str:
        """SHA-256 hex digest of the UTF-8 canonical JSON."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    def to_toml(self) -> str:
        """The rubric as TOML text (defaults written out, ``None`` values omitted);
        ``parse_rubric(r.to_toml()) == r``."""
        doc = {
            sec: {k: v for k, v in body.items() if v is not None}
            for sec, body in self.to_dict().items()
            if body is not None
        }
        return tomli_w.dumps(doc)


_SECTIONS: dict[str, type] = {
    "gate": GateThresholds,
    "estimators": EstimatorSettings,
    "pairs": PairPlan,
    "calibration": CalibrationPlan,
    "adjudication": AdjudicationPolicy,
    "sequential": SequentialPlan,
    "annotators": AnnotatorPlan,
    "reaudit": ReauditPolicy,
    "acceptance": JudgeAcceptance,
    "recalibration": RecalibrationPolicy,
}
_RUBRIC_KEYS = ("name", "version", "description")


def _check_keys(section: str, body: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError(f"[{section}] must be a table, got {type(body).__name__}")
    for key in body:
        if key not in allowed:
            raise ValueError(
                f"unknown key {key!r} in section [{section}] (allowed: {', '.join(allowed)})"
            )
    return body


def rubric_from_dict(data: dict[str, Any], *, source: str | None = None) -> Rubric:
    """Validate a decoded TOML document (or ``Rubric.to_dict()``) and fill defaults;
    every problem is a ``ValueError`` that starts with ``source`` when one is given."""
    try:
        return _rubric_from_dict(data, source=source)
    except (ValueError, TypeError) as exc:
        if source is None or source.startswith("<") or str(exc).startswith(f"{source}:"):
            raise
        raise ValueError(f"{source}: {exc}") from None


def _rubric_from_dict(data: dict[str, Any], *, source: str | None) -> Rubric:
    if not isinstance(data, dict):
        raise ValueError("a rubric must be a table of sections")
    known = ("rubric", *_SECTIONS)
    for sec in data:
        if sec not in known:
            raise ValueError(f"unknown section [{sec}] (allowed: {', '.join(known)})")
    if "rubric" not in data:
        raise ValueError("missing section [rubric] (needs name and version)")
    head = _check_keys("rubric", data["rubric"], _RUBRIC_KEYS)
    name = head.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"[rubric] name must be a non-empty string, got {name!r}")
    version = head.get("version")
    if isinstance(version, bool) or not isinstance(version, str | int) or str(version) == "":
        raise ValueError(f"[rubric] version must be a non-empty string or integer, got {version!r}")
    description = head.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"[rubric] description must be a string, got {description!r}")

    parts: dict[str, Any] = {}
    for sec, cls in _SECTIONS.items():
        body = data.get(sec)
        if body is None:
            parts[sec] = None if sec in ("calibration", "sequential") else cls()
            continue
        allowed = tuple(f.name for f in fields(cls))
        body = _check_keys(sec, body, allowed)
        if cls is GateThresholds:
            body = {k: _unit("gate", k, v) for k, v in body.items()}
        if cls is SequentialPlan and isinstance(body.get("looks"), list):
            body = {**body, "looks": tuple(body["looks"])}
        parts[sec] = cls(**body)
    return Rubric(
        name=name,
        version=str(version),
        description=description,
        gate=parts["gate"],
        estimators=parts["estimators"],
        pairs=parts["pairs"],
        calibration=parts["calibration"],
        adjudication=parts["adjudication"],
        sequential=parts["sequential"],
        annotators=parts["annotators"],
        reaudit=parts["reaudit"],
        acceptance=parts["acceptance"],
        recalibration=parts["recalibration"],
        source=source,
    )


def parse_rubric(text: str, *, source: str = "<string>") -> Rubric:
    """Parse rubric TOML text; syntax errors become ``ValueError`` naming ``source``."""
    data = loads_toml(text, source)  # InputError (a ValueError): syntax, depth, integers
    return rubric_from_dict(data, source=source)


def load_rubric(path: str | Path) -> Rubric:
    """Read and parse a rubric file."""
    p = Path(path)
    try:
        text = read_text(p)  # a regular UTF-8 file (InputError names it otherwise)
    except OSError as exc:
        raise ValueError(f"cannot read rubric {p}: {exc}") from exc
    return parse_rubric(text, source=str(p))


#: Rubrics shipped inside the package, by the name ``rcea audit rubric freeze`` accepts.
SHIPPED_RUBRICS: dict[str, Path] = {
    "default": DEFAULT_RUBRIC_PATH,
    "demo": Path(__file__).with_name("demo_rubric.toml"),
}


def rubric_path(name_or_path: str | Path) -> Path:
    """A rubric file: an existing path as given, else a shipped rubric by name
    (``default``, ``demo``); ``ValueError`` naming both choices otherwise."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    if str(name_or_path) in SHIPPED_RUBRICS:
        return SHIPPED_RUBRICS[str(name_or_path)]
    raise ValueError(
        f"no rubric file {str(name_or_path)!r}; give a TOML path or a shipped rubric: "
        + ", ".join(SHIPPED_RUBRICS)
    )


def default_rubric() -> Rubric:
    """The shipped example rubric with the paper's defaults (``default_rubric.toml``)."""
    return load_rubric(DEFAULT_RUBRIC_PATH)
