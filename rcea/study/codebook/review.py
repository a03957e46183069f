"""Researcher-side codebook operations: draft edits, freezing, the reconciliation queue
and extension review (refreezing a new version)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from rcea.pipeline.codebook import (
    UNCERTAIN,
    CodebookError,
    Proposal,
    codebook_hash,
    edit_modes,
    extend_modes,
    group_proposals,
    modes_from_json,
    modes_to_json,
    prompt_set_id,
)
from rcea.study import events
from rcea.study.codebook.common import CodebookStageError, versions_by_question
from rcea.study.store import append_event, require_study
from rcea.study.store.models import (
    CodebookDispute,
    CodebookDraft,
    CodebookExtension,
    CodebookVersion,
    utcnow,
)


class CodebookFrozenError(CodebookError):
    """An edit of a codebook that is already frozen."""


def get_draft(session: Session, *, study_id: int, question_id: str) -> CodebookDraft | None:
    return session.exec(
        select(CodebookDraft).where(
            CodebookDraft.study_id == study_id, CodebookDraft.question_id == question_id
        )
    ).first()


def codebook_list(
    session: Session, *, study_id: int, questions: list[str] | None = None
) -> list[dict[str, Any]]:
    """Each question's codebook (of ``questions`` when given), by question id: the latest
    frozen version (its hash, parent version, reason, when frozen, how many versions) with
    its modes, else the draft's modes (``status: draft``)."""

    versions = versions_by_question(session, study_id=study_id)
    drafts = {
        d.question_id: d
        for d in session.exec(select(CodebookDraft).where(CodebookDraft.study_id == study_id))
    }
    out = []
    for q in sorted(set(versions) | set(drafts)):
        if questions and q not in questions:
            continue
        vs = versions.get(q, [])
        last = vs[-1] if vs else None
        out.append(
            {
                "question_id": q,
                "status": "frozen" if last else "draft",
                "version": last.version if last else None,
                "n_versions": len(vs),
                "content_hash": last.content_hash if last else None,
                "parent_version": next((p.version for p in vs if p.id == last.parent_id), None)
                if last
                else None,
                "reason": last.reason if last else None,
                "frozen_at": last.frozen_at if last else None,
                "modes": last.modes if last else drafts[q].modes,
            }
        )
    return out


def edit_draft(
    session: Session, *, study: str, question_id: str, op: str, actor: str, **args: Any
) -> CodebookDraft:
    """Apply one edit (``rename``, ``merge``, ``split``, ``add``, ``drop``) to the draft of
    a question. ``add`` on a question without a draft starts one. Refused once frozen."""
    st = require_study(session, name=study)
    draft = get_draft(session, study_id=st.id, question_id=question_id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if draft is None:
        if op != "add":
            raise CodebookStageError(
                f"question {question_id!r} has no draft codebook: run `rcea codebook merge` "
                "(or start one with `edit add`)"
            )
        draft = CodebookDraft(study_id=st.id, question_id=question_id, updated_by=actor)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if draft.frozen_version_id is not None:
        v = session.get(CodebookVersion, draft.frozen_version_id)
        raise CodebookFrozenError(
            f"the codebook of question {question_id!r} is frozen (version "
            f"{v.version if v else '?'}, sha256 {v.content_hash[:12] if v else '?'}…): it "
            "cannot be edited; changes go through extension review, which freezes a new "
            "version"
        )
    before = modes_from_json(draft.modes)
    after = edit_modes(before, op, **args)
    draft.modes = modes_to_json(after)
    draft.updated_by = actor
    draft.updated_at = utcnow()
    session.add(draft)
    session.flush()
    append_event(
        session,
        actor=actor,
        kind=events.CODEBOOK_EDIT,
        study_id=st.id,
        payload={"question_id": question_id, "op": op, "args": args, "modes": draft.modes},
    )
    return draft


def freeze_codebooks(
    session: Session, *, study: str, actor: str, questions: list[str] | None = None
) -> list[CodebookVersion]:
    """Freeze every unfrozen draft as version 1 (content-hashed, immutable). Drafts already
    frozen are skipped, so freezing is idempotent. Returns the versions made now."""
    st = require_study(session, name=study)
    drafts = session.exec(
        select(CodebookDraft)
        .where(CodebookDraft.study_id == st.id)
        .order_by(CodebookDraft.question_id)
    ).all()
    if questions is not None:
        known = {d.question_id for d in drafts}
        missing = sorted(set(questions) - known)
        if missing:
            raise CodebookStageError(f"no draft codebook for question(s) {missing}")
        drafts = [d for d in drafts if d.question_id in set(questions)]
    existing = versions_by_question(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    made = []
    for d in drafts:
        if d.frozen_version_id is not None:
            continue
        if existing.get(d.question_id):
            raise CodebookStageError(f"question {d.question_id!r} already has a frozen codebook")
        modes = modes_from_json(d.modes)
        if not modes:
            raise CodebookStageError(f"the draft of question {d.question_id!r} has no mode")
        v = CodebookVersion(
            study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            question_id=d.question_id,
            version=1,
            content_hash=codebook_hash(d.question_id, modes),
            modes=modes_to_json(modes),
            parent_id=None,
            reason="initial freeze",
            prompts=prompt_set_id(),
            frozen_by=actor,
        )
        session.add(v)
        session.flush()
        d.frozen_version_id = v.id
        session.add(d)
        _freeze_event(session, v, actor)
        made.append(v)
    session.flush()
    return made


def _freeze_event(session: Session, v: CodebookVersion, actor: str) -> None:
    append_event(
        session,
        actor=actor,
        kind=events.CODEBOOK_FREEZE,
        study_id=v.study_id,
        payload={
            "question_id": v.question_id,
            "version": v.version,
            "version_id": v.id,
            "content_hash": v.content_hash,
            "parent_id": v.parent_id,
            "reason": v.reason,
            "n_modes": len(v.modes),
            "prompts": v.prompts,
        },
    )


# --------------------------------------------------------------------------- queue


def researcher_queue(session: Session, *, study: str) -> list[CodebookDispute]:
    """Disputes arbitration could not settle, against each question's latest codebook
    (those of a superseded version are reassigned under the new one)."""
    st = require_study(session, name=study)
    latest = {vs[-1].id for vs in versions_by_question(session, study_id=st.id).values()}  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    return [
        d
        for d in session.exec(
            select(CodebookDispute)
            .where(CodebookDispute.study_id == st.id, CodebookDispute.status == "researcher")
            .order_by(CodebookDispute.question_id, CodebookDispute.id)  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        ).all()
        if d.version_id in latest
    ]


def resolve_dispute(
    session: Session,
    *,
    study: str,
    dispute_id: int,
    actor: str,
    mode: str | None = None,
    uncertain: bool = False,
    new_name: str | None = None,
    new_criterion: str = "",
) -> CodebookDispute:
    """A researcher's decision on a disputed trajectory: an existing mode of the codebook
    it was assigned against, ``uncertain``, or a proposed new mode (then it waits for
    extension review like an arbitrated NEW)."""
    st = require_study(session, name=study)
    d = session.get(CodebookDispute, dispute_id)
    if d is None or d.study_id != st.id:
        raise CodebookStageError(f"no dispute #{dispute_id} in study {study!r}")
    if sum([mode is not None, uncertain, new_name is not None]) != 1:
        raise CodebookStageError("give exactly one of a mode id, --uncertain or --new NAME")
    if d.status == "resolved":
        raise CodebookStageError(f"dispute #{dispute_id} is already resolved ({d.final_label})")
    if d.extension_id is not None:
        ext = session.get(CodebookExtension, d.extension_id)
        if ext is not None and ext.status == "pending":
            raise CodebookStageError(
                f"dispute #{dispute_id} is part of pending extension request #{ext.id}: "
                "approve or reject that first"
            )
    v = session.get(CodebookVersion, d.version_id)
    latest = versions_by_question(session, study_id=st.id)[d.question_id][-1]
    if v is None or latest.id != v.id:
        raise CodebookStageError(
            f"dispute #{dispute_id} was raised against version {v.version if v else '?'}; "
            f"the codebook is now at version {latest.version}: its trajectory is reassigned "
            "there"
        )
    if mode is not None:
        ids = [m.id for m in modes_from_json(v.modes)]
        if mode not in ids:
            raise CodebookStageError(f"no mode {mode!r} in version {v.version} (modes: {ids})")
        d.status, d.final_label = "resolved", mode
    elif uncertain:
        d.status, d.final_label = "resolved", UNCERTAIN
    else:
        d.status, d.final_label = "new", None
        d.proposal = {"name": new_name, "criterion": new_criterion}
        d.extension_id = None
    if d.status == "resolved":
        d.resolved_by, d.resolved_at = actor, utcnow()
    session.add(d)
    session.flush()
    append_event(
        session,
        actor=actor,
        kind=events.CODEBOOK_RESOLVE,
        study_id=st.id,
        payload={
            "dispute_id": d.id,
            "question_id": d.question_id,
            "trajectory_id": d.trajectory_id,
            "status": d.status,
            "final_label": d.final_label,
            "proposal": d.proposal,
        },
    )
    return d


# --------------------------------------------------------------------------- extensions


def request_extensions(session: Session, *, study: str, actor: str) -> list[CodebookExtension]:
    """Group the provisional NEW disputes of each question's latest version into one
    question-level extension request (a pending request absorbs later ones). Returns the
    pending requests."""
    st = require_study(session, name=study)
    versions = versions_by_question(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    out = []
    for q, vs in sorted(versions.items()):
        v = vs[-1]
        news = session.exec(
            select(CodebookDispute)
            .where(CodebookDispute.version_id == v.id, CodebookDispute.status == "new")
            .order_by(CodebookDispute.trajectory_id)
        ).all()
        pending = session.exec(
            select(CodebookExtension).where(
                CodebookExtension.base_version_id == v.id, CodebookExtension.status == "pending"
            )
        ).first()
        if not news:
            if pending is not None:
                out.append(pending)
            continue
        proposals = group_proposals([(d.trajectory_id, d.proposal) for d in news])
        payload = [p.to_dict() for p in proposals]
        created = pending is None
        if pending is None:
            pending = CodebookExtension(
                study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                question_id=q,
                base_version_id=v.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
                proposals=payload,
                status="pending",
            )
        elif pending.proposals == payload:
            out.append(pending)
            continue
        pending.proposals = payload
        session.add(pending)
        session.flush()
        for d in news:
            if d.extension_id != pending.id:
                d.extension_id = pending.id
                session.add(d)
        append_event(
            session,
            actor=actor,
            kind=events.EXTENSION_REQUEST if created else "codebook.extension.update",
            study_id=st.id,
            payload={
                "extension_id": pending.id,
                "question_id": q,
                "base_version": v.version,
                "proposals": payload,
            },
        )
        out.append(pending)
    session.flush()
    return out


def list_extensions(
    session: Session, *, study: str, status: str | None = None
) -> list[CodebookExtension]:
    st = require_study(session, name=study)
    stmt = select(CodebookExtension).where(CodebookExtension.study_id == st.id)
    if status is not None:
        stmt = stmt.where(CodebookExtension.status == status)
    return list(session.exec(stmt.order_by(CodebookExtension.id)).all())  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column


def decide_extension(
    session: Session,
    *,
    study: str,
    extension_id: int,
    approve: bool,
    actor: str,
    reason: str = "",
) -> tuple[CodebookExtension, CodebookVersion | None]:
    """Approve (refreeze the question's codebook as a new version whose parent is the
    request's base version, adding the proposed modes) or reject a pending request.

    Approval records which trajectories the new version must reassign: every trajectory of
    the base version still unsettled (provisional NEW, researcher queue, open). Rejection
    sends the request's trajectories to the researcher queue."""
    st = require_study(session, name=study)
    ext = session.get(CodebookExtension, extension_id)
    if ext is None or ext.study_id != st.id:
        raise CodebookStageError(f"no extension request #{extension_id} in study {study!r}")
    if ext.status != "pending":
        raise CodebookStageError(f"extension request #{extension_id} is already {ext.status}")
    base = session.get(CodebookVersion, ext.base_version_id)
    latest = versions_by_question(session, study_id=st.id)[ext.question_id][-1]
    if base is None or latest.id != base.id:
        raise CodebookStageError(
            f"extension request #{extension_id} extends version "
            f"{base.version if base else '?'} but the codebook is at version "
            f"{latest.version}: it is stale"
        )
    disputes = session.exec(
        select(CodebookDispute).where(CodebookDispute.version_id == base.id)
    ).all()
    members = [d for d in disputes if d.extension_id == ext.id]
    ext.decided_by, ext.decided_at, ext.reason = actor, utcnow(), reason
    new_version = None
    if approve:
        proposals = [
            Proposal(p["name"], p.get("criterion", ""), list(p.get("trajectory_ids", [])))
            for p in ext.proposals
        ]
        modes = extend_modes(modes_from_json(base.modes), proposals, note=f"extension #{ext.id}")
        new_version = CodebookVersion(
            study_id=st.id,
            question_id=ext.question_id,
            version=base.version + 1,
            content_hash=codebook_hash(ext.question_id, modes),
            modes=modes_to_json(modes),
            parent_id=base.id,
            reason=f"extension #{ext.id} approved" + (f": {reason}" if reason else ""),
            prompts=prompt_set_id(),
            frozen_by=actor,
        )
        session.add(new_version)
        session.flush()
        ext.status = "approved"
        ext.new_version_id = new_version.id
        ext.affected_trajectory_ids = sorted(
            d.trajectory_id for d in disputes if d.status != "resolved"
        )
        _freeze_event(session, new_version, actor)
    else:
        ext.status = "rejected"
        for d in members:
            d.status = "researcher"
            d.reasons = [*d.reasons, f"extension #{ext.id} rejected"]
            session.add(d)
    session.add(ext)
    session.flush()
    append_event(
        session,
        actor=actor,
        kind=events.extension_decision(approve),
        study_id=st.id,
        payload={
            "extension_id": ext.id,
            "question_id": ext.question_id,
            "base_version_id": base.id,
            "new_version_id": ext.new_version_id,
            "new_version": new_version.version if new_version else None,
            "reason": reason,
            "n_affected": len(ext.affected_trajectory_ids),
        },
    )
    return ext, new_version
