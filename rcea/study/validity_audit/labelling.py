"""The validity rounds on the labelling core (:mod:`rcea.study.labelling`): push and sync.

* Calibration: the items are split (seeded) among one or more annotators, one project
  each; every item is labelled by exactly one person.
* Accepted-set check: two annotators (roles ``A`` and ``B``) label every item, each in
  their own project and their own random order.

Tasks carry only an opaque item key, the problem and the solution text; every batch is
scanned for provenance, ids, verdicts and rationales before anything is created in Label
Studio. Each annotator works on their own server; labels are verified and recorded by the
core's one status rule, exactly as in the pair audit.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from sqlmodel import Session, select

from rcea.annotation.people import People
from rcea.annotation.validity_tasks import CHOICES, build_validity_task, validity_label_config
from rcea.pipeline.judge import INVALID, UNPARSEABLE, VALID
from rcea.study import events
from rcea.study.labelling import (
    VALIDITY,
    BuiltTask,
    Forbidden,
    WebhookTarget,
    bindings,
    check_blinding,
    check_distinct_people,
    check_question_texts,
    ensure_member,
    person_role,
    push_roles,
    push_tasks,
    round_title,
    sync_round,
)
from rcea.study.labelling import current_labels as core_current_labels
from rcea.study.labelling import forbidden_values as shared_forbidden
from rcea.study.labelling import status_counts as core_status_counts
from rcea.study.records.shown import shown_solutions
from rcea.study.store import append_event
from rcea.study.store.models import (
    JudgeVerdict,
    JudgeVersion,
    ValidityCheck,
    ValidityItem,
)
from rcea.study.validity_audit.checks import ACCEPTED, CALIBRATION, check_items
from rcea.study.validity_audit.problems import problems_for
from rcea.study.validity_audit.versions import JudgeError, judge_spec

CHOICE_OF = {label: choice for choice, label in CHOICES.items()}  # valid → "valid", ...


ADJUDICATOR = "adjudicator"


def double_labelled(check: ValidityCheck) -> bool:
    """A and B label every item: the accepted-set check always; a calibration when its
    rubric plan says ``annotators_per_item = 2`` (then disagreements are adjudicated)."""
    return check.kind == ACCEPTED or int(check.plan.get("annotators_per_item", 1)) == 2


def roles_for(check: ValidityCheck, n_annotators: int) -> list[str]:
    if double_labelled(check):
        if n_annotators != 2:
            what = "accepted-set check" if check.kind == ACCEPTED else "calibration plan"
            raise JudgeError(f"this {what} has two annotators per item: give exactly two (A and B)")
        return ["A", "B"]
    if n_annotators < 1:
        raise JudgeError("a calibration needs at least one annotator")
    return [f"annotator-{i + 1}" for i in range(n_annotators)]


def forbidden_values(
    session: Session, check: ValidityCheck, items: Sequence[ValidityItem]
) -> Forbidden:
    """The shared provenance set (:func:`rcea.study.labelling.forbidden_values`) plus what is the
    validity round's own: verdict words and the judge's rationales and error locations."""
    ids = sorted({i.trajectory_id for i in items})
    extra: set[str] = {VALID, INVALID, UNPARSEABLE}
    for rationale, location in session.exec(
        select(JudgeVerdict.rationale, JudgeVerdict.error_location).where(
            JudgeVerdict.judge_id == check.judge_id,
            JudgeVerdict.study_id == check.study_id,
            JudgeVerdict.trajectory_id.in_(ids),  # type: ignore[attr-defined]  # SQLModel types a column attribute as its Python value, not as the SQL column
        )
    ).all():
        extra.update(x for x in (rationale, location) if x)
    return shared_forbidden(session, check.study_id, ids, extra_exact=extra)


def _assignment(
    check: ValidityCheck, items: list[ValidityItem], roles: list[str]
) -> dict[str, Any]:
    rng = random.Random(f"{check.seed}:{check.id}:push")
    if double_labelled(check):
        out = {}
        for role in roles:
            order = list(items)
            random.Random(f"{check.seed}:{check.id}:{role}").shuffle(order)
            out[role] = order
        return out
    order = list(items)
    rng.shuffle(order)
    return {role: order[i :: len(roles)] for i, role in enumerate(roles)}


def push_check(
    session: Session,
    check: ValidityCheck,
    people: People,
    *,
    annotators: Sequence[str],
    actor: str,
    webhook: WebhookTarget | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """One project per annotator, on that person's own server, with the blinded tasks.

    ``annotators``: e-mails in role order; accounts are created when missing (their new
    passwords are returned once under ``new_accounts``). Idempotent and crash-safe."""
    roles = roles_for(check, len(annotators))
    check_distinct_people(dict(zip(roles, annotators, strict=True)))
    items = check_items(session, check_id=check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    rows = shown_solutions(
        session, study_id=check.study_id, trajectory_ids={i.trajectory_id for i in items}
    )
    problems = problems_for(session, study_id=check.study_id)
    missing = sorted({i.question_id for i in items if i.question_id not in problems})
    if missing:
        raise JudgeError(
            f"no problem text for {len(missing)} question(s) ({', '.join(missing[:5])}): "
            "ingest records with a `question` field, or load them with `rcea judge problems`"
        )
    forbidden = forbidden_values(session, check, items)
    plan = _assignment(check, items, roles)
    built = {
        role: [
            BuiltTask(
                i.item_key,
                i.id,
                build_validity_task(i.item_key, problems[i.question_id], rows[i.trajectory_id]),
            )
            for i in plan[role]
        ]
        for role in roles
    }
    shown = {  # the check is named by its number, never by its (researcher-chosen) name
        role: {
            "title": round_title("validity", check.id, role),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            "description": f"Blinded validity audit ({check.kind} {check.id}, "
            f"{person_role(role)}): is each solution process-valid?",
        }
        for role in roles
    }
    check_question_texts({q: problems[q] for q in {i.question_id for i in items}}, forbidden)
    for role, tasks in built.items():  # checked before anything is created in Label Studio
        check_blinding([shown[role], *(t.data for t in tasks)], forbidden, what="validity tasks")
    out: dict[str, Any] = {
        "check": check.name,
        "kind": check.kind,
        **push_roles(
            session,
            people,
            VALIDITY,
            check,
            {
                role: (email, built[role], shown[role])
                for email, role in zip(annotators, roles, strict=True)
            },
            label_config=validity_label_config(),
            webhook=webhook,
            progress=progress,
        ),
    }
    append_event(
        session,
        actor=actor,
        kind=events.judge_round(check.kind, "push"),
        study_id=check.study_id,
        payload={k: v for k, v in out.items() if k != "new_accounts"},
    )
    return out


def ensure_judge_frozen(session: Session, check: ValidityCheck) -> JudgeVersion:
    """The bound judge version, re-verified against the hash bound at sampling: labels
    (held-out ones above all) are only ever recorded against a frozen, unchanged judge."""
    row = session.get(JudgeVersion, check.judge_id)
    if row is None or row.content_hash != check.judge_hash:
        raise JudgeError(
            f"check {check.name}: its judge (hash {check.judge_hash[:12]}…) is missing or "
            "changed; a changed judge needs a new calibration"
        )
    judge_spec(row)
    return row


def needs_adjudication(session: Session, check: ValidityCheck) -> list[ValidityItem]:
    """Items both A and B labelled with different labels (double-labelled checks)."""
    if not double_labelled(check):
        return []
    labels = current_labels(session, check)
    a, b = labels.get("A", {}), labels.get("B", {})
    items = check_items(session, check_id=check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return [i for i in items if i.id in a and i.id in b and a[i.id] != b[i.id]]


def adjudicate_check(
    session: Session,
    check: ValidityCheck,
    people: People,
    *,
    adjudicator: str,
    actor: str,
    webhook: WebhookTarget | None = None,
    password: str | None = None,
) -> dict[str, Any]:
    """Create or extend the validity adjudication project on the adjudicator's own
    server: every item where A and B disagree, with both answers in random order (never
    who gave them, never the judge's verdict). The adjudicator is neither A nor B."""
    bound = {b.role: b.person for b in bindings(session, VALIDITY, check.id)}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    check_distinct_people({**bound, ADJUDICATOR: adjudicator})
    if not double_labelled(check):
        raise JudgeError(f"{check.name} has one annotator per item: nothing to adjudicate")
    todo = needs_adjudication(session, check)
    labels = current_labels(session, check)
    problems = problems_for(session, study_id=check.study_id)
    texts = shown_solutions(
        session, study_id=check.study_id, trajectory_ids={i.trajectory_id for i in todo}
    )
    rng = random.Random(f"{check.seed}:{check.id}:{ADJUDICATOR}")
    built = []
    for i in todo:
        answers = [labels["A"][i.id], labels["B"][i.id]]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
        rng.shuffle(answers)
        data = build_validity_task(i.item_key, problems[i.question_id], texts[i.trajectory_id])
        data["answer_1"], data["answer_2"] = (CHOICE_OF[x] for x in answers)
        built.append(BuiltTask(i.item_key, i.id, data))  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    shown = {
        "title": round_title("validity", check.id, ADJUDICATOR),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        "description": f"Adjudication (validity {check.kind} {check.id}): the two annotators' "
        "answers in random order, "
        "without who gave them.",
    }
    # The human answers are choice words by construction (the verdict words are
    # forbidden everywhere else); everything around them is scanned as usual.
    if not all(t.data[k] in CHOICE_OF.values() for t in built for k in ("answer_1", "answer_2")):
        raise JudgeError("an adjudication answer is not one of the annotators' choices")
    check_blinding(
        [
            shown,
            *({k: v for k, v in t.data.items() if not k.startswith("answer_")} for t in built),
        ],  # fmt: skip
        forbidden_values(session, check, todo),
        what="validity adjudication tasks",
    )
    member = ensure_member(people, adjudicator, password)
    res = push_tasks(
        session,
        people,
        VALIDITY,
        check,
        ADJUDICATOR,
        member,
        built,
        title=shown["title"],
        description=shown["description"],
        label_config=validity_label_config(adjudication=True),
        webhook=webhook,
    )
    out = {
        "check": check.name,
        "project_id": res["project_id"],
        "email": member.email,
        "url": member.person.url,
        "n_items": len(todo),
        "n_new": res["n_new"],
        "render_changed": res["render_changed"],
        "new_password": member.new_password,
    }
    append_event(
        session,
        actor=actor,
        kind=events.judge_round(check.kind, "adjudicate"),
        study_id=check.study_id,
        payload={k: v for k, v in out.items() if k != "new_password"},
    )
    return out


def human_reference(session: Session, check: ValidityCheck) -> dict[int, str]:
    """item id → the human label that counts: the single annotator's; with two per item,
    the agreed label, or the adjudicated one where A and B disagreed (items still waiting
    for a second label or for adjudication have none yet)."""
    labels = current_labels(session, check)
    if not double_labelled(check):
        out: dict[int, str] = {}
        for by_item in labels.values():
            out.update(by_item)
        return out
    a, b, adj = labels.get("A", {}), labels.get("B", {}), labels.get(ADJUDICATOR, {})
    ref = {i: a[i] for i in a if i in b and a[i] == b[i]}
    ref.update({i: adj[i] for i in adj if i in a and i in b and a[i] != b[i]})
    return ref


def sync_check(
    session: Session, check: ValidityCheck, people: People, *, full: bool = False
) -> dict[str, Any]:
    """Reconcile every project of the check with Label Studio, both ways (incrementally
    once synced, unless ``full``)."""
    ensure_judge_frozen(session, check)
    res = sync_round(session, people, VALIDITY, check, full=full).to_dict()
    return {"check": check.name, "kind": check.kind, **res}


def current_labels(session: Session, check: ValidityCheck) -> dict[str, dict[int, str]]:
    """role → item id → the label of that role's latest counted annotation."""
    return core_current_labels(session, VALIDITY, check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


def status_counts(session: Session, check: ValidityCheck) -> dict[str, int]:
    return core_status_counts(session, VALIDITY, check.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional


__all__ = [
    "CALIBRATION",
    "current_labels",
    "ensure_judge_frozen",
    "forbidden_values",
    "push_check",
    "status_counts",
    "sync_check",
]
