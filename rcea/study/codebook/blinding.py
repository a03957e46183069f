"""The provenance scan every codebook prompt passes before it is sent.

Run, model, step and seed values, trajectory ids and automatic labels must never reach an
induction, assignment or arbitration prompt (docs/trust-model.md). Prompts are built from opaque
handles and texts only; this guard re-checks every rendered prompt with the same scan the
Label Studio tasks use and stops the stage if anything leaks (e.g. a trajectory text or a
researcher-written mode name that mentions a run name).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlmodel import Session, select

from rcea.annotation.tasks import BlindingViolation, LeakScanner
from rcea.pipeline.llm import Messages
from rcea.study.labelling.blinding import study_provenance
from rcea.study.store.models import Trajectory


class PromptBlindingGuard:
    """``guard(question_id, messages)`` raises :class:`BlindingViolation` on a leak.

    One compiled :class:`LeakScanner` per question (the study's run and model names plus
    that question's trajectory ids), built on first use and reused for every prompt."""

    def __init__(self, common: Iterable[str], per_question: dict[str, set[str]]) -> None:
        self.common = {str(v) for v in common if str(v)}
        self.per_question = per_question
        self._scanners: dict[str, LeakScanner] = {}
        self._sources: dict[str, tuple[dict[str, str], str | None]] = {}

    def add_sources(self, question_id: str, texts: dict[str, str], question: str | None) -> None:
        """The trajectory texts (id → text) and question text a prompt of
        ``question_id`` is built from: a refusal names the one holding the leak."""
        self._sources[question_id] = (texts, question)

    def _scanner(self, question_id: str) -> LeakScanner:
        scanner = self._scanners.get(question_id)
        if scanner is None:
            forbidden = self.common | self.per_question.get(question_id, set())
            scanner = self._scanners[question_id] = LeakScanner(forbidden)
        return scanner

    def retain(self, questions: Iterable[str]) -> None:
        """Forget every question but ``questions`` (ids, scanners and sources): a
        streaming run keeps only the questions it is working on."""
        keep = set(questions)
        for store in (self.per_question, self._scanners, self._sources):
            for q in [q for q in store if q not in keep]:
                del store[q]

    def check_question(self, question_id: str, text: str) -> None:
        """Refuse, before any prompt is sent, a question text holding a forbidden value."""
        leaks = self._scanner(question_id).scan([text])
        if leaks:
            raise BlindingViolation(
                f"the question text of {question_id!r} contains provenance or ids: "
                + "; ".join(leaks[:5])
                + " — refusing to send it in a prompt; correct it with `rcea judge problems "
                "--study S FILE.jsonl` (that text replaces the ingested one)"
            )

    def explain(self, question_id: str, messages: Messages) -> list[str]:
        """Which source of the prompt holds which forbidden value: ``trajectory 'T'
        (value ...)`` for a trajectory text shown in it, ``the question text (value
        ...)``; empty when the leak comes from elsewhere (e.g. a mode name)."""
        scanner = self._scanner(question_id)
        texts, question = self._sources.get(question_id, ({}, None))
        sent = "\n".join(m["content"] for m in messages)
        out = []
        if question and question.replace("</problem>", "</ problem>") in sent:
            out += [f"the question text of {question_id!r} ({x})" for x in scanner.scan([question])]
        for tid in sorted(texts):
            text = texts[tid]
            if text.replace("</solution>", "</ solution>") in sent:
                out += [f"trajectory {tid!r} ({x})" for x in scanner.scan([text])]
        return out

    def __call__(self, question_id: str, messages: Messages) -> None:
        leaks = self._scanner(question_id).scan([m["content"] for m in messages])
        if leaks:
            where = self.explain(question_id, messages)
            hint = (
                " — in " + "; ".join(where[:5]) + ". Exclude the trajectory from the cycle "
                "(`rcea codebook exclude --study S --trajectory T --reason R`) or fix the text"
                if where
                else ""
            )
            raise BlindingViolation(
                f"a prompt for question {question_id!r} contains provenance or ids: "
                + "; ".join(leaks[:5])
                + hint
                + " — refusing to send it"
            )


def study_guard(
    session: Session, *, study_id: int, questions: Iterable[str] | None = None
) -> PromptBlindingGuard:
    """Forbidden: every run and model name of the study and, per question, the ids of its
    trajectories. (Step and seed numbers occur naturally in arithmetic and the automatic
    ``mode`` column holds ordinary words; prompts never render either field.) With
    ``questions``, only those questions' ids are loaded (a streaming caller adds the others
    with :func:`extend_guard` as it reaches them); every run and model name always is."""
    if questions is None:
        common: set[str] = set()
        per_question: dict[str, set[str]] = {}
        for r in study_provenance(session, study_id):
            common.update((r.run, r.model))
            per_question.setdefault(r.question_id, set()).add(r.trajectory_id)
        return PromptBlindingGuard(common, per_question)

    names = session.exec(
        select(Trajectory.run, Trajectory.model).where(Trajectory.study_id == study_id).distinct()
    ).all()
    guard = PromptBlindingGuard({v for pair in names for v in pair}, {})
    extend_guard(session, guard, study_id=study_id, questions=questions)
    return guard


def extend_guard(
    session: Session, guard: PromptBlindingGuard, *, study_id: int, questions: Iterable[str]
) -> None:
    """Load the trajectory ids of ``questions`` into ``guard`` (a scanner compiled
    before for one of them is rebuilt on next use)."""

    wanted = sorted(set(questions))
    for i in range(0, len(wanted), 500):
        chunk = wanted[i : i + 500]
        rows = session.exec(
            select(Trajectory.question_id, Trajectory.trajectory_id).where(
                Trajectory.study_id == study_id,
                Trajectory.question_id.in_(chunk),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
            )
        )
        for q, t in rows:
            guard.per_question.setdefault(q, set()).add(t)
        for q in chunk:
            guard._scanners.pop(q, None)
