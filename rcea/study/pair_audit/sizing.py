"""``rcea audit rubric init --study S``: a rubric whose pair plan and calibration fit the
study, every other setting the shipped default's, spelled out (docs/rubrics.md).

The pair audit draws within-question pairs of successful (R = 1) trajectories: a question
with K₊ successes has at most K₊(K₊−1)/2 pairs. The plan asks for at most the shipped
numbers (156 pairs on 29 questions) and never more than the study has: ``n_questions``
= the questions with K₊ ≥ 2 (capped), ``pairs_per_question`` = the median pair count over
them (capped), the calibration ``size`` = the successes (capped), its held-out share
kept."""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session

from rcea.audits.rubric import DEFAULT_RUBRIC_PATH, default_rubric, parse_rubric
from rcea.study.store import Trajectory, require_study


@dataclass(frozen=True)
class RubricSize:
    study: str
    n_questions_in_study: int
    n_eligible_questions: int
    n_successes: int
    max_pairs: int
    n_questions: int
    pairs_per_question: int
    calibration_size: int
    calibration_held_out: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def planned_pairs(self) -> int:
        return self.n_questions * self.pairs_per_question


def size_rubric(session: Session, *, study: str) -> RubricSize:
    """The pair plan and calibration size the study supports (module docstring)."""
    st = require_study(session, name=study)
    rows = session.execute(
        select(Trajectory.question_id, func.sum(Trajectory.reward))  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
        .where(Trajectory.study_id == st.id)
        .group_by(Trajectory.question_id)
    ).all()
    succ = {q: int(k or 0) for q, k in rows}
    pairs = sorted(k * (k - 1) // 2 for k in succ.values() if k >= 2)
    base = default_rubric()
    if not pairs:
        raise ValueError(
            f"study {study} has no question with two successful trajectories: "
            "the pair audit has nothing to draw"
        )
    cal = base.calibration
    assert cal is not None  # the shipped rubric has one
    n_success = sum(succ.values())
    size = min(cal.size, n_success)
    held = max(1, min(size, round(size * cal.held_out / cal.size)))
    return RubricSize(
        study=study,
        n_questions_in_study=len(succ),
        n_eligible_questions=len(pairs),
        n_successes=n_success,
        max_pairs=sum(pairs),
        n_questions=min(base.pairs.n_questions, len(pairs)),
        pairs_per_question=max(
            1, min(base.pairs.pairs_per_question, int(statistics.median(pairs)))
        ),
        calibration_size=size,
        calibration_held_out=held,
    )


def sized_rubric_text(size: RubricSize, *, name: str) -> str:
    """The shipped default rubric's TOML with ``name`` and the sized plan; parsed back
    before it is returned (``ValueError`` if the result is not a valid rubric)."""
    text = DEFAULT_RUBRIC_PATH.read_text(encoding="utf-8")
    subs = {
        ("rubric", "name"): f'"{name}"',
        ("rubric", "description"): f'"The RCEA defaults, pair plan sized to study {size.study}."',
        ("pairs", "pairs_per_question"): str(size.pairs_per_question),
        ("pairs", "n_questions"): str(size.n_questions),
        ("calibration", "size"): str(size.calibration_size),
        ("calibration", "held_out"): str(size.calibration_held_out),
    }
    out, section = [], None
    for line in text.splitlines():
        m = re.match(r"\s*\[(\w+)\]", line)
        if m:
            section = m.group(1)
        kv = re.match(r"(\s*)(\w+)(\s*=\s*)([^#]*?)(\s*#.*)?$", line)
        if kv and (section, kv.group(2)) in subs:
            line = f"{kv.group(1)}{kv.group(2)}{kv.group(3)}{subs[(section, kv.group(2))]}"  # type: ignore[index]  # the regex groups matched, so they are str
            if kv.group(2) == "pairs_per_question":
                line += (
                    f"   # sized to {size.study}: {size.n_eligible_questions} questions with "
                    f"K+ >= 2, {size.max_pairs} pairs in all"
                )
        elif line.startswith("# Pair-sampling plan"):
            line = (
                "# Pair-sampling plan of the partition audit (sized by `rcea audit rubric init`)."
            )
        out.append(line)
    result = "\n".join(out) + "\n"
    parse_rubric(result, source=f"sized rubric for {size.study}")
    return result
