"""K_min and n_min the samples per question allow (docs/rubrics.md "Sizing a rubric").

A conditional number of one checkpoint (validity, mode entropy) counts a question when it
has K₊ ≥ K_min verifier successes; retention counts a question when both checkpoints have
n(x) = min(m₀, m_t) ≥ n_min accepted successes. Either number is "audited" only when the
eligible questions meet the minimum-evidence floor (docs/estimators.md "Minimum
evidence": at least ``min_questions`` and ``min_share`` of the checkpoint's questions).
With 8 samples per question the default K_min = 8 needs every sample to succeed, so
almost no number can be audited. :func:`largest_threshold` picks the largest threshold,
at most the default, at which at least half of the checkpoints (or checkpoint pairs)
meet the floor, and returns the coverage at every threshold it tried, for the trade-off
shown to the user."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: the smallest threshold ever proposed: one success per question says nothing about a
#: share, two at least can disagree
LOWEST = 2


@dataclass(frozen=True)
class ThresholdCoverage:
    """At one threshold: how many checkpoints meet the evidence floor, of how many, and
    the median share of eligible questions over the checkpoints."""

    threshold: int
    n_meeting_floor: int
    n_checkpoints: int
    median_share: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def meets_floor(n_eligible: int, n_questions: int, *, min_questions: int, min_share: float) -> bool:
    """The minimum-evidence floor of docs/estimators.md."""
    return n_questions > 0 and n_eligible >= min_questions and n_eligible / n_questions >= min_share


def coverage_at(
    counts: Mapping[Hashable, Sequence[int]], k: int, *, min_questions: int, min_share: float
) -> ThresholdCoverage:
    """``counts``: checkpoint → one count per question (K₊, or n(x) for retention)."""
    shares = []
    meeting = 0
    for per_q in counts.values():
        n_elig = sum(1 for c in per_q if c >= k)
        shares.append(n_elig / len(per_q) if per_q else 0.0)
        meeting += meets_floor(n_elig, len(per_q), min_questions=min_questions, min_share=min_share)
    shares.sort()
    median = 0.0
    if shares:
        mid = len(shares) // 2
        median = shares[mid] if len(shares) % 2 else (shares[mid - 1] + shares[mid]) / 2
    return ThresholdCoverage(k, meeting, len(counts), median)


def largest_threshold(
    counts: Mapping[Hashable, Sequence[int]],
    *,
    default: int,
    min_questions: int,
    min_share: float,
) -> tuple[int, list[ThresholdCoverage], bool]:
    """The largest threshold in [``LOWEST``, ``default``] at which at least half of the
    checkpoints meet the floor; the coverage at each threshold tried (``default`` down);
    and whether that threshold meets it (``False``: not even ``LOWEST`` does, and
    ``LOWEST`` is returned). No checkpoints: ``default``, unchanged."""
    if not counts:
        return default, [], True
    table = []
    for k in range(default, min(LOWEST, default) - 1, -1):
        cov = coverage_at(counts, k, min_questions=min_questions, min_share=min_share)
        table.append(cov)
        if 2 * cov.n_meeting_floor >= cov.n_checkpoints and cov.n_meeting_floor > 0:
            return k, table, True
    return min(LOWEST, default), table, False
