"""The pair audit's rounds on the labelling core: A and B (same blinded pairs, each in
their own order, on their own server), the adjudication round, and sync.

What is the pair audit's own: the task builder (two texts left/right, randomised per pair
and person; the adjudication variant adds the two human answers in random order) and
the label config. Blinding, push, verification and sync are :mod:`rcea.study.labelling`'s.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from sqlmodel import Session

from rcea.annotation.people import People
from rcea.annotation.tasks import NO_QUESTION, Shown, build_pair_task, pair_label_config
from rcea.study import events
from rcea.study.labelling import (
    PAIR,
    BuiltTask,
    Member,
    WebhookTarget,
    bindings,
    check_blinding,
    check_distinct_people,
    check_question_texts,
    ensure_member,
    forbidden_values,
    push_roles,
    push_tasks,
    round_title,
    sync_round,
)
from rcea.study.pair_audit.labels import (
    ADJUDICATOR,
    audit_rubric,
    current_labels,
    needs_adjudication,
)
from rcea.study.pair_audit.repeats import n_repeats, repeat_key, repeat_positions, with_repeats
from rcea.study.pair_audit.sampling import audit_pairs
from rcea.study.records.shown import shown_solutions
from rcea.study.store import append_event, problem_texts
from rcea.study.store.models import Audit, AuditPair

ROLE_TITLES = {"A": "annotator A", "B": "annotator B", ADJUDICATOR: "adjudication"}


def _texts(session: Session, audit: Audit, pairs: list[AuditPair]) -> dict[str, Shown]:
    ids = sorted({p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs})
    return shown_solutions(session, study_id=audit.study_id, trajectory_ids=ids)


def build_pair_tasks(
    session: Session,
    audit: Audit,
    pairs: list[AuditPair],
    role: str,
    *,
    answers: dict[int, tuple[str, str]] | None = None,
    repeat_share: float = 0.0,
) -> list[BuiltTask]:
    """The blinded tasks of ``role``; left/right drawn from a per-(audit, role) seed.
    When the study stores problem statements, every task carries its pair's (see
    :func:`shows_questions`). With ``repeat_share`` (rubric ``[annotators]``), the hidden
    repeats are placed among them (:mod:`rcea.study.pair_audit.repeats`)."""
    texts = _texts(session, audit, pairs)
    problems = problem_texts(session, study_id=audit.study_id)
    show = shows_questions(session, audit)
    rng = random.Random(f"{audit.seed}:{audit.id}:{role}")
    out = []
    for p in pairs:
        task = build_pair_task(
            p.pair_key,
            texts[p.trajectory_a],
            texts[p.trajectory_b],
            rng=rng,
            answers=None if answers is None else answers[p.id],  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
            question=problems.get(p.question_id, NO_QUESTION) if show else None,
        )
        out.append(BuiltTask(p.pair_key, p.id, task.data, {"left_is_a": task.left_is_a}))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    positions = repeat_positions(len(pairs), repeat_share, repeat_seed(audit))
    if not positions:
        return out
    # the repeats draw their own left/right: the originals' draws stay as without them
    rng = random.Random(f"{repeat_seed(audit)}:{role}:left")
    taken = {p.pair_key for p in pairs}
    repeats: dict[int, BuiltTask] = {}
    for i in positions:
        p = pairs[i]
        key = repeat_key(repeat_seed(audit), p.pair_key, taken)
        taken.add(key)
        task = build_pair_task(
            key,
            texts[p.trajectory_a],
            texts[p.trajectory_b],
            rng=rng,
            question=problems.get(p.question_id, NO_QUESTION) if show else None,
        )
        repeats[i] = BuiltTask(key, p.id, task.data, {"left_is_a": task.left_is_a, "repeat": True})  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return with_repeats(out, repeats)


def repeat_seed(audit: Audit) -> str:
    """The seed of the audit's hidden repeats (which pairs, their keys and sides)."""
    return f"{audit.seed}:{audit.id}"


def shows_questions(session: Session, audit: Audit) -> bool:
    """Whether the audit's tasks and label configs show problem statements: when any
    question of the study has a stored text."""
    return bool(problem_texts(session, study_id=audit.study_id))


def _texts_of_round(audit: Audit, role: str, definition: str) -> dict[str, str]:
    """Project title and description: what else the person sees (scanned like the tasks;
    the audit is named by its number, never by its name, which a researcher chose)."""
    what = ROLE_TITLES[role]
    lead = (
        "the two annotators' answers are shown in random order, without who gave them."
        if role == ADJUDICATOR
        else "do the two solutions use the same strategy?"
    )
    return {
        "title": round_title("pairs", audit.id, role),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        "description": f"Blinded pair audit ({what}): {lead}\n\n{definition}",
    }


def _checked(
    session: Session, audit: Audit, pairs: list[AuditPair], tasks: list[BuiltTask], texts: Any
) -> list[BuiltTask]:
    ids = {p.trajectory_a for p in pairs} | {p.trajectory_b for p in pairs}
    forbidden = forbidden_values(session, audit.study_id, ids)
    problems = problem_texts(session, study_id=audit.study_id)
    check_question_texts(
        {q: problems[q] for q in {p.question_id for p in pairs} if q in problems}, forbidden
    )
    check_blinding([texts, *(t.data for t in tasks)], forbidden, what="tasks")
    return tasks


def push_audit(
    session: Session,
    audit: Audit,
    people: People,
    *,
    annotators: dict[str, str],
    webhook: WebhookTarget | None,
    actor: str,
    passwords: dict[str, str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Serve the audit to annotators A and B (``annotators``: role → e-mail): each gets
    an account on their own server (created when missing; new passwords are returned
    once under ``new_accounts``) and a project with every pair, plus the rubric's hidden
    repeats (``n_repeats``; :mod:`rcea.study.pair_audit.repeats`). Idempotent and crash-safe (see
    :mod:`rcea.study.labelling.push`)."""
    check_distinct_people({r: annotators[r] for r in ("A", "B")})
    spec = audit_rubric(session, audit)
    pairs = audit_pairs(session, audit_id=audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    shown = {r: _texts_of_round(audit, r, spec.pairs.strategy_definition) for r in ("A", "B")}
    share = spec.annotators.repeat_share
    built = {  # checked before anything exists in Label Studio (hidden repeats too)
        r: _checked(
            session,
            audit,
            pairs,
            build_pair_tasks(session, audit, pairs, r, repeat_share=share),
            shown[r],
        )
        for r in ("A", "B")
    }
    out: dict[str, Any] = {
        "audit": audit.name,
        "n_repeats": n_repeats(len(pairs), share),
        **push_roles(
            session,
            people,
            PAIR,
            audit,
            {r: (annotators[r], built[r], shown[r]) for r in ("A", "B")},
            label_config=pair_label_config(
                spec.pairs.strategy_definition, question=shows_questions(session, audit)
            ),
            webhook=webhook,
            passwords=passwords,
            progress=progress,
        ),
    }
    append_event(
        session,
        actor=actor,
        kind=events.AUDIT_PUSH,
        study_id=audit.study_id,
        payload={
            "audit_id": audit.id,
            "audit": audit.name,
            "n_repeats": out["n_repeats"],
            "projects": out["projects"],
        },
    )
    return out


def sync_audit(
    session: Session, audit: Audit, people: People, *, full: bool = False
) -> dict[str, Any]:
    """Reconcile every project of the audit with Label Studio, both ways (incrementally
    once synced, unless ``full``)."""
    res = sync_round(session, people, PAIR, audit, full=full).to_dict()
    return {"audit": audit.name, **res}


def adjudicate(
    session: Session,
    audit: Audit,
    people: People,
    *,
    adjudicator: str,
    actor: str,
    webhook: WebhookTarget | None = None,
    password: str | None = None,
) -> dict[str, Any]:
    """Create or extend the adjudication project on the adjudicator's own server with
    every pair that needs adjudication. The adjudicator sees both texts, the strategy
    definition and the two human answers in random order; never who gave them and never
    the automatic label. The adjudicator is neither A nor B."""
    bound = {b.role: b.person for b in bindings(session, PAIR, audit.id)}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    check_distinct_people({**bound, ADJUDICATOR: adjudicator})
    spec = audit_rubric(session, audit)
    pairs = audit_pairs(session, audit_id=audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    labels = current_labels(session, audit)
    todo = needs_adjudication(pairs, labels, spec.adjudication.scope)
    answers = {p.id: (labels["A"][p.id], labels["B"][p.id]) for p in todo}  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
    shown = _texts_of_round(audit, ADJUDICATOR, spec.pairs.strategy_definition)
    built = _checked(
        session,
        audit,
        todo,
        build_pair_tasks(session, audit, todo, ADJUDICATOR, answers=answers),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        shown,
    )
    member: Member = ensure_member(people, adjudicator, password)
    res = push_tasks(
        session,
        people,
        PAIR,
        audit,
        ADJUDICATOR,
        member,
        built,
        title=shown["title"],
        description=shown["description"],
        label_config=pair_label_config(
            spec.pairs.strategy_definition,
            adjudication=True,
            question=shows_questions(session, audit),
        ),
        webhook=webhook,
    )
    out = {
        "audit": audit.name,
        "project_id": res["project_id"],
        "email": member.email,
        "url": member.person.url,
        "n_pairs": len(todo),
        "n_new": res["n_new"],
        "render_changed": res["render_changed"],
        "new_password": member.new_password,
    }
    append_event(
        session,
        actor=actor,
        kind=events.AUDIT_ADJUDICATE,
        study_id=audit.study_id,
        payload={k: v for k, v in out.items() if k != "new_password"} | {"audit_id": audit.id},
    )
    return out
