"""The one forbidden-values provider for everything that leaves the store for a person
or a prompt, and the one check run before anything is created in Label Studio.

Forbidden, for the trajectories concerned: their ids, and every run and model name of the
study (identifiers: matched also as substrings); their question ids, steps, seeds and
automatic modes (short or natural-language values: matched as whole values only); plus
whatever a round adds (verdict words, the judge's rationales).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, select

from rcea.annotation.tasks import BlindingViolation, LeakScanner
from rcea.study.store.models import Trajectory

#: Keys that never appear in task data, whatever the round.
FORBIDDEN_KEYS = (
    "run",
    "model",
    "step",
    "seed",
    "trajectory_id",
    "question_id",
    "automatic",
    "mode",
    "predictions",
    "reward",
    "verdict",
    "judge",
    "validity",
    "rationale",
    "split",
)


@dataclass(frozen=True)
class Forbidden:
    substrings: set[str] = field(default_factory=set)
    exact: set[str] = field(default_factory=set)

    def scanner(self) -> LeakScanner:
        return LeakScanner(
            self.substrings, forbidden_exact=self.exact, forbidden_keys=FORBIDDEN_KEYS
        )


def study_provenance(
    session: Session, study_id: int, trajectory_ids: Iterable[str] | None = None
) -> list[Any]:
    """Rows (trajectory_id, question_id, run, model, step, seed, mode) of the study,
    only the given trajectories when ``trajectory_ids`` is set."""
    stmt = select(  # type: ignore[call-overload]  # SQLModel types a column attribute as its Python value, not as the SQL column
        Trajectory.trajectory_id,
        Trajectory.question_id,
        Trajectory.run,
        Trajectory.model,
        Trajectory.step,
        Trajectory.seed,
        Trajectory.mode,
    ).where(Trajectory.study_id == study_id)
    if trajectory_ids is not None:
        stmt = stmt.where(Trajectory.trajectory_id.in_(sorted(set(trajectory_ids))))  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
    return list(session.exec(stmt).all())


def forbidden_values(
    session: Session,
    study_id: int,
    trajectory_ids: Iterable[str],
    *,
    extra_exact: Iterable[str] = (),
) -> Forbidden:
    out = Forbidden(exact={str(v) for v in extra_exact if v})
    names = session.exec(
        select(Trajectory.run, Trajectory.model).where(Trajectory.study_id == study_id).distinct()
    ).all()
    for run, model in names:
        out.substrings.update((run, model))
    for r in study_provenance(session, study_id, trajectory_ids):
        out.substrings.add(r.trajectory_id)
        out.exact.update({r.question_id, str(r.step), str(r.seed)})
        if r.mode:
            out.exact.add(r.mode)
    return out


def check_blinding(tasks: Iterable[dict[str, Any]], forbidden: Forbidden, *, what: str) -> None:
    """Raise :class:`BlindingViolation` naming what leaked; call before any project exists."""
    leaks = forbidden.scanner().scan(list(tasks))
    if leaks:
        raise BlindingViolation(f"refusing to send {what} that leak: {leaks[:5]}")


def check_question_texts(texts: dict[str, str], forbidden: Forbidden) -> None:
    """Raise :class:`BlindingViolation` naming the question whose stored problem
    statement holds a forbidden value (run or model name, trajectory id, ...): it would
    reach every annotator of that question."""
    scanner = forbidden.scanner()
    for qid in sorted(texts):
        leaks = scanner.scan([texts[qid]])
        if leaks:
            raise BlindingViolation(
                f"the question text of question {qid!r} contains provenance: "
                f"{'; '.join(leaks[:5])} — refusing to show it to annotators or prompts"
            )
