"""The provenance scan every codebook prompt passes before it is sent.

Run, model, step and seed values, trajectory ids and automatic labels must never reach an
induction, assignment or arbitration prompt (DESIGN.md). Prompts are built from opaque
handles and texts only; this guard re-checks every rendered prompt with the same scan the
Label Studio tasks use and stops the stage if anything leaks (e.g. a trajectory text or a
researcher-written mode name that mentions a run name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlmodel import Session, select

from annotation.tasks import BlindingViolation, scan_for_leaks
from app.store.models import Trajectory
from pipeline.llm import Messages


class PromptBlindingGuard:
    """``guard(question_id, messages)`` raises :class:`BlindingViolation` on a leak.

    A compiled per-question pattern of every forbidden value (any length, as a substring)
    screens each prompt first; only a prompt it flags goes through ``scan_for_leaks``,
    which decides and names the leak. The screen is a superset of the scan's rule, so it
    never lets a leak through; it just keeps the scan off the hot path."""

    def __init__(self, common: Iterable[str], per_question: dict[str, set[str]]) -> None:
        self.common = {str(v) for v in common if str(v)}
        self.per_question = per_question
        self._screens: dict[str, re.Pattern[str] | None] = {}

    def _screen(self, question_id: str, forbidden: set[str]) -> re.Pattern[str] | None:
        if question_id not in self._screens:
            words = sorted(forbidden, key=lambda v: (-len(v), v))
            self._screens[question_id] = (
                re.compile("|".join(re.escape(w) for w in words)) if words else None
            )
        return self._screens[question_id]

    def __call__(self, question_id: str, messages: Messages) -> None:
        forbidden = self.common | self.per_question.get(question_id, set())
        texts = [m["content"] for m in messages]
        screen = self._screen(question_id, forbidden)
        if screen is None or not any(screen.search(t) for t in texts):
            return
        leaks = scan_for_leaks(texts, forbidden)
        if leaks:
            raise BlindingViolation(
                f"a prompt for question {question_id!r} contains provenance or ids: "
                + "; ".join(leaks[:5])
                + " — refusing to send it"
            )


def study_guard(session: Session, *, study_id: int) -> PromptBlindingGuard:
    """Forbidden: every run and model name of the study and, per question, the ids of its
    trajectories. (Step and seed numbers occur naturally in arithmetic and the automatic
    ``mode`` column holds ordinary words; prompts never render either field.)"""
    rows = session.exec(
        select(
            Trajectory.question_id,
            Trajectory.trajectory_id,
            Trajectory.run,
            Trajectory.model,
        ).where(Trajectory.study_id == study_id)
    ).all()
    common: set[str] = set()
    per_question: dict[str, set[str]] = {}
    for q, tid, run, model in rows:
        common.update((run, model))
        per_question.setdefault(q, set()).add(tid)
    return PromptBlindingGuard(common, per_question)
