"""Problem statements shown to the judge and to annotators (never ids or provenance).

Loaded per study from a JSONL file (``{"question_id": ..., "problem": ...}`` per line;
``question`` is accepted as the text field too) or from a domain function
``problem_fn(question_id) -> str`` given as ``MODULE:FUNCTION`` (the toy domain:
``rcea.pipeline.toy:problem_by_id``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlmodel import Session, select

from rcea.pipeline.jsonl import iter_json_objects
from rcea.pipeline.records import forbidden_character
from rcea.study.codebook.backend import load_strategy_fn
from rcea.study.store import problem_texts, require_study
from rcea.study.store.models import JudgeProblem, Trajectory


def _from_file(path: Path, wanted: set[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, rec in iter_json_objects(path):
        qid = rec.get("question_id")
        text = rec.get("problem", rec.get("question"))
        if not isinstance(qid, str) or not qid:
            raise ValueError(f"{path}:line {n}: question_id: missing or not a string")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{path}:line {n}: problem: missing or empty")
        for name, value in (("question_id", qid), ("problem", text)):
            if why := forbidden_character(value):
                raise ValueError(f"{path}:line {n}: {name}: {why}")
        out[qid] = text
    missing = sorted(wanted - set(out))
    if missing:
        raise ValueError(f"{path}: no problem for question(s) {', '.join(missing[:10])}")
    return out


def load_problems(session: Session, *, study: str, source: str) -> dict[str, int]:
    """Store the problem text of every question of ``study`` (insert or replace)."""
    st = require_study(session, name=study)
    wanted = set(
        session.exec(
            select(Trajectory.question_id).where(Trajectory.study_id == st.id).distinct()
        ).all()
    )
    path = Path(source)
    if path.suffix.lower() in (".jsonl", ".json") or path.exists():
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file")
        texts = _from_file(path, wanted)
    else:
        try:
            fn: Callable[[str], str] = load_strategy_fn(source)  # type: ignore[assignment]  # not checked by hand yet: mypy sees a two-argument strategy function here
        except ValueError as exc:
            raise ValueError(
                f"problem source {source!r} is neither a JSONL file nor a usable "
                f"MODULE:FUNCTION ({str(exc).split(': ', 1)[-1]})"
            ) from exc
        texts = {}
        for q in sorted(wanted):
            try:
                texts[q] = str(fn(q))
            except Exception as exc:  # noqa: BLE001 - name the question
                raise ValueError(f"{source}: no problem for question {q!r}: {exc}") from exc
            if why := forbidden_character(texts[q]):
                raise ValueError(f"{source}: problem of question {q!r}: {why}")
    have = {
        p.question_id: p
        for p in session.exec(select(JudgeProblem).where(JudgeProblem.study_id == st.id)).all()
    }
    new = changed = 0
    for q in sorted(wanted):
        row = have.get(q)
        if row is None:
            session.add(JudgeProblem(study_id=st.id, question_id=q, text=texts[q]))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            new += 1
        elif row.text != texts[q]:
            row.text = texts[q]
            session.add(row)
            changed += 1
    session.flush()
    return {"n_questions": len(wanted), "new": new, "changed": changed}


def problems_for(session: Session, *, study_id: int) -> dict[str, str]:
    """The problem text of each question: the ingested ``question`` field, overridden by
    a text loaded with ``rcea judge problems``."""

    return problem_texts(session, study_id=study_id)
