"""Process validity of verifier successes (docs/estimators.md item 4).

Only verifier successes (R = 1) are judged. For question x with K₊(x) successes:

    v̂₊(x) = #{i : R_i = 1, judge accepted} / K₊(x),   reported only when K₊(x) ≥ k_min;
    validity entropy h_b(v̂₊(x)) (nats, h_b(0) = h_b(1) = 0);
    macro means over the eligible questions; coverage = n_eligible / n_questions.

A verdict is 1/True (accepted), 0/False (rejected) or ``None`` / ``"unparseable"``
(no parseable verdict). Unparseable verdicts are NOT acceptances: they stay in the
denominator K₊(x) and count against judge coverage = parseable verdicts / judged successes.
Verdicts on failed trajectories (R = 0) are ignored, whatever their value.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcea.audits._checks import as_binary_array, check_positive_int, check_same_length
from rcea.audits._common import QuestionId, dataclass_dict, group_questions
from rcea.audits.entropy import binary_entropy

__all__ = [
    "QuestionValidity",
    "ValiditySummary",
    "ValidityResult",
    "validity_rate",
    "validity_groups",
    "UNPARSEABLE",
]

#: The verdict string for "the judge's output could not be parsed".
UNPARSEABLE = "unparseable"
#: A stored judge verdict as :func:`validity_rate` reads it.
VERDICT_CODES: dict[str, Any] = {"valid": 1, "invalid": 0, UNPARSEABLE: UNPARSEABLE}

_ACCEPT, _REJECT, _NONE = 1, 0, -1


def _verdict_code(value: Any, index: int) -> int:
    if value is None:
        return _NONE
    if isinstance(value, str):
        if value.strip().lower() == UNPARSEABLE:
            return _NONE
        raise ValueError(
            f"validity at index {index} must be 1, 0, None or {UNPARSEABLE!r}, got {value!r}"
        )
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | float):
        if isinstance(value, float) and math.isnan(value):
            raise ValueError(
                f"validity at index {index} is NaN; use None or {UNPARSEABLE!r} for a missing "
                "or unparseable verdict"
            )
        if value == 1:
            return _ACCEPT
        if value == 0:
            return _REJECT
    raise ValueError(
        f"validity at index {index} must be 1, 0, None or {UNPARSEABLE!r}, got {value!r}"
    )


@dataclass(frozen=True)
class QuestionValidity:
    """Judge verdicts on the successes of one question. ``validity_rate`` (v̂₊) and
    ``validity_entropy`` (h_b(v̂₊)) are ``None`` unless ``eligible`` (K₊ ≥ k_min);
    ``judge_coverage`` is ``None`` when K₊ = 0."""

    question_id: QuestionId
    k_success: int
    n_accepted: int
    n_rejected: int
    n_unparseable: int
    eligible: bool
    validity_rate: float | None
    validity_entropy: float | None
    judge_coverage: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclass_dict(self)


@dataclass(frozen=True)
class ValiditySummary:
    """Macro validity over eligible questions (``None`` when none is eligible): the
    report's ``checkpoints[].validity``, its fields (with these descriptions) the section's
    keys (``rcea.study.report.schema``).

    ``coverage`` = n_eligible / n_questions. ``judge_coverage`` pools all judged successes
    (parseable / judged, ``None`` without successes); ``judge_coverage_eligible`` pools the
    successes of eligible questions only."""

    __pydantic_config__ = {"extra": "forbid"}  # the report validates against these fields only

    k_min: int = field(metadata={"description": "K+ gate of a question"})
    n_questions: int = field(metadata={"description": "questions"})
    n_eligible: int = field(metadata={"description": "questions with K+ >= k_min (the n)"})
    # None only in a report read back whose checkpoint had no question (JSON has no NaN)
    coverage: float | None = field(metadata={"description": "n_eligible / n_questions"})
    mean_validity_rate: float | None = field(
        metadata={"description": "macro v+(x) over eligible questions"}
    )
    mean_validity_entropy: float | None = field(metadata={"description": "macro h_b(v+(x))"})
    n_judged: int = field(metadata={"description": "successes with a verdict"})
    n_accepted: int = field(metadata={"description": "successes judged valid"})
    n_unparseable: int = field(metadata={"description": "unparseable verdicts (against coverage)"})
    judge_coverage: float | None = field(metadata={"description": "parseable / judged successes"})
    judge_coverage_eligible: float | None = field(
        metadata={"description": "the same over eligible questions only"}
    )


@dataclass(frozen=True)
class ValidityResult(ValiditySummary):
    """:class:`ValiditySummary` with the per-question rows."""

    questions: tuple[QuestionValidity, ...]

    def to_dict(self, *, include_questions: bool = True) -> dict[str, Any]:
        d = dataclass_dict(self, skip=("questions",))
        if include_questions:
            d["questions"] = [q.to_dict() for q in self.questions]
        return d


def validity_rate(
    question_ids: Sequence[QuestionId] | np.ndarray[Any, Any],
    rewards: Sequence[int] | np.ndarray[Any, Any],
    validity: Sequence[Any],
    *,
    k_min: int = 8,
) -> ValidityResult:
    """Per-question v̂₊(x) (gated by K₊ ≥ k_min), h_b(v̂₊), their macro means and judge
    coverage; see the module docstring for the verdict encoding."""
    k_min = check_positive_int(k_min, "k_min")
    r = as_binary_array(rewards, "rewards")
    verdicts = list(validity.tolist() if isinstance(validity, np.ndarray) else validity)
    check_same_length(question_ids=question_ids, rewards=r, validity=verdicts)
    ids, inv = group_questions(question_ids)
    codes = np.array(
        [_verdict_code(v, i) if r[i] == 1 else _REJECT for i, v in enumerate(verdicts)],
        dtype=np.int8,
    )
    nq = len(ids)
    succ = r == 1
    k_plus = np.bincount(inv[succ], minlength=nq)
    acc = np.bincount(inv[succ & (codes == _ACCEPT)], minlength=nq)
    unp = np.bincount(inv[succ & (codes == _NONE)], minlength=nq)

    rows = []
    for j, q in enumerate(ids):
        kp, a, u = int(k_plus[j]), int(acc[j]), int(unp[j])
        eligible = kp >= k_min
        rate = a / kp if eligible else None
        rows.append(
            QuestionValidity(
                question_id=q,
                k_success=kp,
                n_accepted=a,
                n_rejected=kp - a - u,
                n_unparseable=u,
                eligible=eligible,
                validity_rate=rate,
                validity_entropy=binary_entropy(rate) if rate is not None else None,
                judge_coverage=(kp - u) / kp if kp else None,
            )
        )
    elig = [row for row in rows if row.eligible]
    n_judged = int(k_plus.sum())
    n_unp = int(unp.sum())
    judged_elig = sum(row.k_success for row in elig)
    unp_elig = sum(row.n_unparseable for row in elig)
    return ValidityResult(
        k_min=k_min,
        n_questions=nq,
        n_eligible=len(elig),
        coverage=len(elig) / nq,
        mean_validity_rate=(float(np.mean([row.validity_rate for row in elig])) if elig else None),
        mean_validity_entropy=(
            float(np.mean([row.validity_entropy for row in elig])) if elig else None
        ),
        n_judged=n_judged,
        n_accepted=int(acc.sum()),
        n_unparseable=n_unp,
        judge_coverage=(n_judged - n_unp) / n_judged if n_judged else None,
        judge_coverage_eligible=(judged_elig - unp_elig) / judged_elig if judged_elig else None,
        questions=tuple(rows),
    )


def validity_groups(
    rows: list[dict[str, Any]],
    verdicts: dict[str, str],
    *,
    k_min: int = 8,
    include_questions: bool = False,
) -> list[dict[str, Any]]:
    """Per (run, model, step) of ``rows`` (dicts with run, model, step, question_id, reward,
    trajectory_id): :func:`validity_rate` over every trajectory with the judge's verdict
    (``verdicts``: trajectory id → ``valid``/``invalid``/``unparseable``; no verdict yet →
    ``None``), in key order: the store's validity report and the report's pure core (and
    so its verifier, on a bundle) share it."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["run"], r["model"], r["step"])].append(r)
    out = []
    for (run, model, step), members in sorted(groups.items()):
        res = validity_rate(
            [m["question_id"] for m in members],
            [m["reward"] for m in members],
            [VERDICT_CODES.get(verdicts.get(m["trajectory_id"], "")) for m in members],
            k_min=k_min,
        )
        out.append(
            {
                "run": run,
                "model": model,
                "step": step,
                **res.to_dict(include_questions=include_questions),
            }
        )
    return out
