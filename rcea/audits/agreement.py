"""Partition-audit pair agreement (docs/estimators.md item 10).

Labels are ``"same"`` / ``"different"`` (same or different solution strategy). For
labels x compared against reference labels y, per class ℓ (TP, FP, FN counted with x as
the prediction and y as the truth):

* precision_ℓ = TP/(TP+FP), recall_ℓ = TP/(TP+FN), F1_ℓ = 2TP/(2TP+FP+FN);
  each is 0 when its denominator is 0 (sklearn's ``zero_division=0``), so a class that
  never appears in either sequence gets F1 = 0 and still counts in the mean;
* macro-F1 = (F1_same + F1_different)/2 — identical to sklearn
  ``f1_score(y, x, labels=["same", "different"], average="macro", zero_division=0)``;
* Cohen's κ = 1 − Σ_{i≠j} O_ij / Σ_{i≠j} E_ij with O the confusion counts and
  E_ij = row_i·col_j/n (sklearn ``cohen_kappa_score``); ``None`` where undefined (the
  expected disagreement is 0, i.e. both sequences use one and the same label only);
* ``confusion[reference][predicted]`` counts (rows = y, columns = x).

Macro-F1 pools all audit pairs (per-question F1 is undefined for single-mode questions).

``final_reference`` builds the final reference: the agreed A/B label, or the adjudicated
label where A and B disagree or where an adjudication was recorded for an agreed pair
(arbitration of human vs automatic changed it). A disagreement without adjudication is
an error naming the pairs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rcea.audits._checks import check_same_length
from rcea.audits._common import dataclass_dict

__all__ = [
    "DIFFERENT",
    "LABELS",
    "SAME",
    "AgreementResult",
    "ClassMetrics",
    "ReferenceLabels",
    "check_labels",
    "final_reference",
    "pair_agreement",
    "resolve_adjudication",
    "unresolved_pairs",
]

SAME = "same"
DIFFERENT = "different"
LABELS: tuple[str, str] = (SAME, DIFFERENT)


def check_labels(labels: Sequence[Any], name: str, *, allow_empty: bool = False) -> list[str]:
    """Return ``labels`` as a list of str, each ``"same"`` or ``"different"``."""
    if isinstance(labels, str):
        raise ValueError(f"{name} must be a sequence of labels, not a single string")
    out = list(labels)
    if not allow_empty and not out:
        raise ValueError(f"{name} is empty")
    for i, lab in enumerate(out):
        if lab not in LABELS:
            raise ValueError(f"{name}[{i}] must be 'same' or 'different', got {lab!r}")
    return [str(lab) for lab in out]


@dataclass(frozen=True)
class ClassMetrics:
    """Precision, recall and F1 of one class (``support`` = count in the reference)."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    precision: float = field(metadata={"description": "precision"})
    recall: float = field(metadata={"description": "recall"})
    f1: float = field(metadata={"description": "F1"})
    support: int = field(metadata={"description": "count in the reference"})

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class AgreementResult:
    """Agreement of labels x with reference labels y over n pairs."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    n_pairs: int = field(metadata={"description": "pairs compared"})
    macro_f1: float = field(metadata={"description": "macro F1 over same/different"})
    accuracy: float = field(metadata={"description": "accuracy"})
    cohen_kappa: float | None = field(metadata={"description": "Cohen's kappa"})
    per_class: dict[str, ClassMetrics] = field(
        metadata={"description": "same / different -> scores"}
    )
    confusion: dict[str, dict[str, int]] = field(
        metadata={"description": "reference -> label -> count"}
    )

    @property
    def different_precision(self) -> float:
        return self.per_class[DIFFERENT].precision

    @property
    def different_recall(self) -> float:
        return self.per_class[DIFFERENT].recall

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def pair_agreement(labels_x: Sequence[Any], labels_y: Sequence[Any]) -> AgreementResult:
    """Macro-F1, per-class precision/recall/F1, Cohen's κ and confusion of x vs reference y.

    Formulas in the module docstring. Raises ``ValueError`` for empty or mismatched
    inputs or labels other than ``"same"``/``"different"``.
    """
    x = check_labels(labels_x, "labels_x")
    y = check_labels(labels_y, "labels_y")
    n = check_same_length(labels_x=x, labels_y=y)
    confusion = {ref: {pred: 0 for pred in LABELS} for ref in LABELS}
    for pred, ref in zip(x, y, strict=True):
        confusion[ref][pred] += 1
    per_class: dict[str, ClassMetrics] = {}
    for lab in LABELS:
        tp = confusion[lab][lab]
        fp = sum(confusion[ref][lab] for ref in LABELS if ref != lab)
        fn = sum(confusion[lab][pred] for pred in LABELS if pred != lab)
        per_class[lab] = ClassMetrics(
            precision=_ratio(tp, tp + fp),
            recall=_ratio(tp, tp + fn),
            f1=_ratio(2 * tp, 2 * tp + fp + fn),
            support=tp + fn,
        )
    macro_f1 = (per_class[SAME].f1 + per_class[DIFFERENT].f1) / 2.0
    agree = sum(confusion[lab][lab] for lab in LABELS)
    row = {ref: sum(confusion[ref].values()) for ref in LABELS}
    col = {pred: sum(confusion[ref][pred] for ref in LABELS) for pred in LABELS}
    observed_dis = sum(confusion[r][p] for r in LABELS for p in LABELS if r != p)
    expected_dis = sum(row[r] * col[p] / n for r in LABELS for p in LABELS if r != p)
    kappa = None if expected_dis == 0 else float(1.0 - observed_dis / expected_dis)
    return AgreementResult(
        n_pairs=n,
        macro_f1=float(macro_f1),
        accuracy=agree / n,
        cohen_kappa=kappa,
        per_class=per_class,
        confusion=confusion,
    )


def resolve_adjudication(
    pair_ids: Sequence[Any], adjudicated: Mapping[Any, Any] | Sequence[Any] | None
) -> list[str | None]:
    """Align ``adjudicated`` with ``pair_ids``: a list with the label or ``None`` per pair.

    ``adjudicated`` is ``None``, a mapping pair id → label (ids not in ``pair_ids`` are
    an error), or a sequence aligned with ``pair_ids`` with ``None`` where there is none.
    """
    ids = [str(p) for p in pair_ids]
    if len(set(ids)) != len(ids):
        dup = sorted({p for p in ids if ids.count(p) > 1})
        raise ValueError(f"pair_ids must be unique; duplicated: {dup}")
    if adjudicated is None:
        return [None] * len(ids)
    if isinstance(adjudicated, Mapping):
        given = {str(k): v for k, v in adjudicated.items()}
        unknown = sorted(set(given) - set(ids))
        if unknown:
            raise ValueError(f"adjudicated names pair ids that are not audit pairs: {unknown}")
        aligned = [given.get(p) for p in ids]
    else:
        if isinstance(adjudicated, str):
            raise ValueError("adjudicated must be a mapping or a sequence, not a string")
        aligned = list(adjudicated)
        check_same_length(pair_ids=ids, adjudicated=aligned)
    for pid, lab in zip(ids, aligned, strict=True):
        if lab is not None and lab not in LABELS:
            raise ValueError(f"adjudicated label for pair {pid!r} must be 'same' or 'different'")
    return [None if lab is None else str(lab) for lab in aligned]


def unresolved_pairs(
    pair_ids: Sequence[Any],
    labels_a: Sequence[Any],
    labels_b: Sequence[Any],
    adjudicated: Mapping[Any, Any] | Sequence[Any] | None = None,
) -> list[str]:
    """Pair ids where annotators A and B disagree and no adjudicated label exists."""
    a = check_labels(labels_a, "labels_a", allow_empty=True)
    b = check_labels(labels_b, "labels_b", allow_empty=True)
    check_same_length(pair_ids=pair_ids, labels_a=a, labels_b=b)
    adj = resolve_adjudication(pair_ids, adjudicated)
    return [
        str(pid)
        for pid, la, lb, lj in zip(pair_ids, a, b, adj, strict=True)
        if la != lb and lj is None
    ]


@dataclass(frozen=True)
class ReferenceLabels:
    """Final reference labels with the source of each (``agreed`` or ``adjudicated``)."""

    pair_ids: tuple[str, ...]
    labels: tuple[str, ...]
    sources: tuple[str, ...]
    n_agreed: int
    n_adjudicated: int
    n_disagreements: int
    n_overridden: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "pair_ids": list(self.pair_ids),
            "labels": list(self.labels),
            "sources": list(self.sources),
            "n_agreed": self.n_agreed,
            "n_adjudicated": self.n_adjudicated,
            "n_disagreements": self.n_disagreements,
            "n_overridden": self.n_overridden,
        }


def final_reference(
    pair_ids: Sequence[Any],
    labels_a: Sequence[Any],
    labels_b: Sequence[Any],
    adjudicated: Mapping[Any, Any] | Sequence[Any] | None = None,
) -> ReferenceLabels:
    """Reference per pair: adjudicated label if one exists, else the agreed A/B label.

    ``n_adjudicated`` counts pairs whose reference came from adjudication,
    ``n_disagreements`` pairs where A ≠ B, ``n_overridden`` adjudications that changed an
    agreed label. Raises ``ValueError`` naming every pair where A ≠ B without an
    adjudicated label.
    """
    a = check_labels(labels_a, "labels_a")
    b = check_labels(labels_b, "labels_b")
    check_same_length(pair_ids=pair_ids, labels_a=a, labels_b=b)
    adj = resolve_adjudication(pair_ids, adjudicated)
    ids = [str(p) for p in pair_ids]
    missing = [
        pid for pid, la, lb, lj in zip(ids, a, b, adj, strict=True) if la != lb and lj is None
    ]
    if missing:
        raise ValueError(
            f"{len(missing)} pair(s) where annotators A and B disagree have no adjudicated "
            f"label: {missing}"
        )
    labels: list[str] = []
    sources: list[str] = []
    overridden = 0
    for la, lb, lj in zip(a, b, adj, strict=True):
        if lj is None:
            labels.append(la)
            sources.append("agreed")
        else:
            labels.append(lj)
            sources.append("adjudicated")
            if la == lb and lj != la:
                overridden += 1
    return ReferenceLabels(
        pair_ids=tuple(ids),
        labels=tuple(labels),
        sources=tuple(sources),
        n_agreed=sources.count("agreed"),
        n_adjudicated=sources.count("adjudicated"),
        n_disagreements=sum(la != lb for la, lb in zip(a, b, strict=True)),
        n_overridden=overridden,
    )
