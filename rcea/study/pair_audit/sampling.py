"""Drawing a pair audit: disjoint from codebook-development questions, seeded, and bound
to one frozen rubric hash and one locked partition hash."""

from __future__ import annotations

from collections import defaultdict
from math import comb
from typing import Any

from sqlalchemy import insert
from sqlmodel import Session, select

from rcea.audits.rubric import PairPlan
from rcea.audits.sampling import attempt_seed, automatic_pair_label, sample_pairs
from rcea.study import events
from rcea.study.pair_audit.freeze import (
    FreezeError,
    get_rubric,
    latest_partition,
    partition_modes,
    rubric_spec,
)
from rcea.study.store import Trajectory, append_event, list_events, require_study
from rcea.study.store.models import Audit, AuditPair, AuditTask, Rubric
from rcea.study.store.widths import check_stored

DEV_QUESTIONS_EVENT = events.CODEBOOK_DEV_QUESTIONS

#: (run, model, step)
Checkpoint = tuple[str, str, int]


def in_scope(plan: PairPlan, run: str, model: str, step: int) -> bool:
    """Whether a trajectory of (run, model, step) is in the pair plan's checkpoints."""
    return (
        (plan.runs is None or run in plan.runs)
        and (plan.models is None or model in plan.models)
        and (plan.steps is None or step in plan.steps)
    )


def checkpoint_of(session: Session, *, study_id: int) -> dict[str, Checkpoint]:
    """trajectory_id → (run, model, step) of every trajectory of the study."""
    rows = session.exec(
        select(Trajectory.trajectory_id, Trajectory.run, Trajectory.model, Trajectory.step).where(
            Trajectory.study_id == study_id
        )
    ).all()
    return {t: (r, m, s) for t, r, m, s in rows}


def record_dev_questions(session: Session, *, study: str, questions: list[str], actor: str) -> int:
    """Record questions used to develop codebook prompts; audits never draw them."""
    st = require_study(session, name=study)
    clean = sorted({q.strip() for q in questions if q.strip()})
    if not clean:
        raise FreezeError("the development-question list is empty")
    append_event(
        session, actor=actor, kind=DEV_QUESTIONS_EVENT, study_id=st.id, payload={"questions": clean}
    )
    return len(clean)


def dev_questions(session: Session, *, study_id: int) -> list[str]:
    out: set[str] = set()
    for ev in list_events(session, kind=DEV_QUESTIONS_EVENT, study_id=study_id):
        out.update(ev.payload.get("questions", []))
    return sorted(out)


def draw_audit(
    session: Session,
    *,
    study: str,
    rubric: str,
    rubric_version: str | None = None,
    name: str | None = None,
    actor: str,
    seed: int | None = None,
    reason: str | None = None,
) -> Audit:
    """Sample the pairs of a new audit and lock the current partition into it.

    A partition whose recorded final gate FAILED is bound by that failure
    (:func:`reaudit_check`): another audit of it is refused unless the failed audit's
    frozen rubric predeclares a ``[reaudit]`` policy, the new audit uses that same rubric,
    attempts remain, and ``reason`` says why (docs/publication.md "Every attempt")."""
    st = require_study(session, name=study)
    assert st.id is not None  # stored rows have ids; SQLModel types keys Optional
    rub = get_rubric(session, name=rubric, version=rubric_version)
    spec = rubric_spec(rub)
    part = latest_partition(session, study_id=st.id)
    assert part.id is not None  # stored rows have ids; SQLModel types keys Optional
    reason = (reason or "").strip() or None
    attempt = reaudit_check(
        session,
        study_id=st.id,
        partition_hash=part.content_hash,
        rubric=rub,
        reason=reason,
    )
    modes = partition_modes(session, partition_id=part.id)
    plan = spec.pairs
    where = checkpoint_of(session, study_id=st.id) if plan.scope() else {}
    by_q: dict[str, list[str]] = defaultdict(list)
    for tid, (qid, _mode) in modes.items():
        if not plan.scope() or (tid in where and in_scope(plan, *where[tid])):
            by_q[qid].append(tid)
    excluded = dev_questions(session, study_id=st.id)
    base_seed = plan.seed if seed is None else seed
    # a later attempt on the partition: fresh pairs (none an earlier audit of it drew),
    # with a seed derived from the attempt (docs/publication.md "Every attempt")
    seed = attempt_seed(base_seed, attempt["attempt"])
    earlier = [
        (p.trajectory_a, p.trajectory_b)
        for a in session.exec(
            select(Audit).where(Audit.study_id == st.id, Audit.partition_hash == part.content_hash)
        ).all()
        for p in audit_pairs(session, audit_id=a.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    ]
    try:
        pairs = sample_pairs(
            by_q,
            pairs_per_question=plan.pairs_per_question,
            n_questions=plan.n_questions,
            seed=seed,
            excluded_questions=excluded,
            max_pairs=plan.max_pairs,
            min_pairs_per_question=plan.min_pairs_per_question,
            excluded_pairs=earlier,
        )
    except ValueError as exc:
        if not earlier:
            raise
        raise FreezeError(
            f"{exc} — after excluding the {len(earlier)} pairs earlier audits of this "
            "partition drew (a re-audit draws fresh pairs)"
        ) from exc
    below_floor = sorted(
        q for q, ts in by_q.items() if q not in excluded and comb(len(set(ts)), 2) < plan.floor
    )
    name = name or f"{study}-audit-{len(session.exec(select(Audit)).all()) + 1}"
    check_stored(name, Audit.name, option="--name")
    if session.exec(select(Audit).where(Audit.name == name)).first() is not None:
        raise FreezeError(f"an audit named {name!r} already exists")
    audit = Audit(
        study_id=st.id,
        name=name,
        rubric_id=rub.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        rubric_hash=rub.content_hash,
        partition_id=part.id,
        partition_hash=part.content_hash,
        seed=seed,
        excluded_questions=excluded,
        labelstudio={},
        created_by=actor,
    )
    session.add(audit)
    session.flush()
    session.execute(
        insert(AuditPair),
        [
            {
                "audit_id": audit.id,
                "pair_key": p.pair_key,
                "question_id": p.question_id,
                "trajectory_a": p.trajectory_a,
                "trajectory_b": p.trajectory_b,
                "automatic": automatic_pair_label(
                    modes[p.trajectory_a][1], modes[p.trajectory_b][1]
                ),
            }
            for p in pairs
        ],
    )
    append_event(
        session,
        actor=actor,
        kind=events.AUDIT_SAMPLE,
        study_id=st.id,
        payload={
            "audit_id": audit.id,
            "name": name,
            "rubric_hash": rub.content_hash,
            "partition_hash": part.content_hash,
            "seed": seed,
            "rubric_seed": base_seed,
            "n_excluded_earlier_pairs": len(earlier),
            "n_pairs": len(pairs),
            "n_questions": len({p.question_id for p in pairs}),
            "excluded_questions": excluded,
            "below_floor": below_floor,
            **({"scope": plan.scope()} if plan.scope() else {}),
            # the rubric's content (its head aside): what a later attempt is compared
            # with when this one fails ("changed after a failed attempt")
            "design": {k: v for k, v in spec.to_dict().items() if k != "rubric"},
            "attempt": attempt["attempt"],
            "reason": reason,
            "failed_before": attempt["failed_before"],
            # the policy it runs under: the failed audit's, or (a first attempt) its own
            # rubric's when that declares one — so every attempt shows the same α
            **(
                {"reaudit": policy}
                if (policy := attempt["policy"] or _own_policy(spec, rub))
                else {}
            ),
        },
    )
    return audit


def failed_final_gates(
    session: Session, *, study_id: int, partition_hash: str
) -> list[dict[str, Any]]:
    """Every audit on ``partition_hash`` with a recorded ``gate.final`` that FAILED (one
    entry per audit, its first failed record: a failure stays on the record even if a
    later record of the same audit differs)."""
    seen: dict[Any, dict[str, Any]] = {}
    for ev in list_events(session, kind=events.GATE_FINAL, study_id=study_id):
        p = ev.payload
        if p.get("partition_hash") != partition_hash or p.get("status") != "failed":
            continue
        seen.setdefault(
            p.get("audit_id"),
            {
                "audit": p.get("audit"),
                "audit_id": p.get("audit_id"),
                "rubric_hash": p.get("rubric_hash"),
                "partition_hash": partition_hash,
                "recorded_at": ev.time.isoformat(),
                "recorded_by": ev.actor,
            },
        )
    return list(seen.values())


def reaudit_check(
    session: Session, *, study_id: int, partition_hash: str, rubric: Rubric, reason: str | None
) -> dict[str, Any]:
    """Whether another pair audit may be drawn on ``partition_hash``: always when no final
    gate on it failed; after a failure only under the failed audit's predeclared
    ``[reaudit]`` policy, with the same rubric, within ``max_attempts`` and with a reason.
    Returns the attempt number, the failures before it and the policy; raises
    :class:`FreezeError` naming what to do instead."""
    prior = session.exec(
        select(Audit).where(Audit.study_id == study_id, Audit.partition_hash == partition_hash)
    ).all()
    failed = failed_final_gates(session, study_id=study_id, partition_hash=partition_hash)
    out: dict[str, Any] = {
        "attempt": len(prior) + 1,
        "failed_before": [f["audit"] for f in failed],
        "policy": None,
    }
    if not failed:
        return out
    first = failed[0]
    instead = (
        "a failed final gate binds its partition. Instead refreeze the codebook: a new "
        "partition (`rcea codebook ...` then `rcea audit partition freeze`), with its own "
        "audits; the failed audit stays on the record"
    )
    where = f"partition {partition_hash[:12]}…: the final gate of audit {first['audit']} FAILED"
    frozen = session.exec(select(Rubric).where(Rubric.content_hash == first["rubric_hash"])).first()
    policy = rubric_spec(frozen).reaudit if frozen is not None else None
    if policy is None or not policy.allows_reaudit:
        raise FreezeError(
            f"refusing another audit of {where} and its frozen rubric predeclares no "
            f"re-audit policy ([reaudit] max_attempts > 1); {instead}"
        )
    if rubric.content_hash != first["rubric_hash"]:
        raise FreezeError(
            f"refusing another audit of {where}: a re-audit must use the rubric that "
            f"predeclared it ({first['rubric_hash'][:12]}…), not {rubric.name} "
            f"v{rubric.version} ({rubric.content_hash[:12]}…); {instead}"
        )
    if len(prior) >= policy.max_attempts:
        raise FreezeError(
            f"refusing another audit of {where}: the rubric's [reaudit] max_attempts = "
            f"{policy.max_attempts} are spent ({len(prior)} audits); {instead}"
        )
    if not reason:
        raise FreezeError(
            f"another audit of {where}: the rubric allows {policy.max_attempts} attempts "
            f"(correction {policy.correction}), but a re-audit needs a recorded reason "
            "(`rcea audit sample --reason ...`)"
        )
    out["policy"] = {**policy.to_dict(), "rubric_hash": first["rubric_hash"]}
    return out


def _own_policy(spec: Any, rub: Rubric) -> dict[str, Any] | None:
    """The rubric's own ``[reaudit]`` policy (``None`` when it declares none)."""
    if not spec.reaudit.allows_reaudit:
        return None
    return {**spec.reaudit.to_dict(), "rubric_hash": rub.content_hash}


def get_audit(session: Session, *, name: str | None = None, study: str | None = None) -> Audit:
    """An audit by name, or the latest audit of a study, or the latest overall."""
    stmt = select(Audit)
    if name:
        stmt = stmt.where(Audit.name == name)
    elif study:
        stmt = stmt.where(Audit.study_id == require_study(session, name=study).id)
    audit = session.exec(stmt.order_by(Audit.id.desc())).first()  # type: ignore[union-attr]  # SQLModel types a column attribute as its Python value, not as the SQL column
    if audit is None:
        raise FreezeError(
            "no such audit: draw one with `rcea audit sample --study S --rubric NAME`"
        )
    return audit


def find_audit(session: Session, *, name: str, study_id: int | None = None) -> Audit | None:
    """The audit called ``name`` (in ``study_id`` when given), or ``None``."""
    stmt = select(Audit).where(Audit.name == name)
    if study_id is not None:
        stmt = stmt.where(Audit.study_id == study_id)
    return session.exec(stmt).first()


def study_audits(session: Session, *, study_id: int) -> list[Audit]:
    """The study's pair audits, oldest first."""
    return list(
        session.exec(
            select(Audit).where(Audit.study_id == study_id).order_by(Audit.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
    )


def audit_tasks(session: Session, *, audit_id: int, role: str | None = None) -> list[AuditTask]:
    """The audit's Label Studio tasks (of ``role`` when given), in task order."""
    stmt = select(AuditTask).where(AuditTask.audit_id == audit_id)
    if role is not None:
        stmt = stmt.where(AuditTask.role == role)
    return list(session.exec(stmt.order_by(AuditTask.task_id)).all())  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column


def audit_pairs(session: Session, *, audit_id: int) -> list[AuditPair]:
    return list(
        session.exec(
            select(AuditPair).where(AuditPair.audit_id == audit_id).order_by(AuditPair.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
    )


def audit_overview(session: Session, audit: Audit) -> dict[str, Any]:
    pairs = audit_pairs(session, audit_id=audit.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return {
        "audit": audit.name,
        "audit_id": audit.id,
        "rubric_hash": audit.rubric_hash,
        "partition_hash": audit.partition_hash,
        "seed": audit.seed,
        "n_pairs": len(pairs),
        "n_questions": len({p.question_id for p in pairs}),
        "n_uncertain_pairs": sum(1 for p in pairs if p.automatic is None),
        "excluded_questions": audit.excluded_questions,
        "below_floor": next(
            (
                ev.payload.get("below_floor", [])
                for ev in list_events(session, kind=events.AUDIT_SAMPLE, study_id=audit.study_id)
                if ev.payload.get("audit_id") == audit.id
            ),
            [],
        ),
    }
