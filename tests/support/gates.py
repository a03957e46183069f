"""Shared test support (moved from tests/audits/test_gates.py)."""

from __future__ import annotations

from dataclasses import dataclass

from rcea.audits.gates import evaluate_gate
from rcea.audits.thresholds import GateThresholds

FLIP = {"same": "different", "different": "same"}


DEFAULT = GateThresholds()


@dataclass
class Audit:
    ids: list[str]
    a: list[str]
    b: list[str]
    adjudicated: dict[str, str]
    automatic: list[str | None]
    reference: list[str]


def build(
    n_same: int = 50,
    n_diff: int = 50,
    hh_disagree: int = 0,
    auto_fp: int = 0,
    auto_fn: int = 0,
    n_uncertain: int = 0,
) -> Audit:
    """Reference = A; B flips ``hh_disagree`` pairs (half from each class), adjudicated back
    to A. Automatic: ``auto_fp`` reference-same pairs called different, ``auto_fn``
    reference-different pairs called same; the last ``n_uncertain`` pairs are uncertain."""
    reference = ["same"] * n_same + ["different"] * n_diff
    ids = [f"p{i:03d}" for i in range(len(reference))]
    a = list(reference)
    b = list(reference)
    flips = list(range(hh_disagree // 2)) + list(
        range(n_same, n_same + hh_disagree - hh_disagree // 2)
    )
    for i in flips:
        b[i] = FLIP[b[i]]
    automatic: list[str | None] = list(reference)
    # automatic errors taken from the end of each class block (disjoint from B's flips)
    for i in range(n_same - auto_fp, n_same):
        automatic[i] = "different"
    for i in range(n_same + n_diff - auto_fn, n_same + n_diff):
        automatic[i] = "same"
    for i in range(len(reference) - n_uncertain, len(reference)):
        automatic[i] = None
    adjudicated = {ids[i]: reference[i] for i in flips}
    return Audit(ids, a, b, adjudicated, automatic, reference)


def gate(audit: Audit, coverage: float = 0.97, thresholds: GateThresholds = DEFAULT, **kw):
    return evaluate_gate(
        audit.ids,
        audit.a,
        audit.b,
        audit.adjudicated,
        audit.automatic,
        coverage,
        thresholds,
        **kw,
    )
