"""The final partition: per accepted trajectory a mode of its question's latest frozen
codebook, or ``uncertain``; written to the store (a frozen ``partition``, what the pair
audit locks) and as Parquet."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import func
from sqlmodel import Session, select

from rcea.audits.inputs import check_output_file
from rcea.pipeline.codebook import (
    DEFAULT_CONFIDENCE_THRESHOLD,
    UNCERTAIN,
    ItemLabel,
    dispute_reasons,
)
from rcea.pipeline.llm import canonical_json
from rcea.pipeline.safety import path_under
from rcea.study import events
from rcea.study.codebook.common import (
    CodebookStageError,
    accepted_by_question,
    assigned_passes,
    excluded_trajectories,
    versions_by_question,
)
from rcea.study.pair_audit.freeze import store_partition
from rcea.study.store import append_event, require_study
from rcea.study.store.models import (
    CodebookBatch,
    CodebookDispute,
    CodebookDraft,
    CodebookExport,
    CodebookExtension,
)


@dataclass(frozen=True)
class FinalLabel:
    question_id: str
    trajectory_id: str
    mode: str | None
    """None = uncertain"""
    version: int | None
    why: str
    """settled | arbitrated | researcher | uncertain:<cause> (``by researcher`` is a
    decision; every other cause is work a stage can still do)"""


def final_labels(
    session: Session, *, study_id: int, threshold: float = DEFAULT_CONFIDENCE_THRESHOLD
) -> list[FinalLabel]:
    """Each accepted trajectory's outcome under the latest version that assigned it."""
    groups = accepted_by_question(session, study_id=study_id)
    versions = versions_by_question(session, study_id=study_id)
    all_ids = [v.id for vs in versions.values() for v in vs]
    passes = assigned_passes(session, version_ids=all_ids)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    disputes = {
        (d.version_id, d.trajectory_id): d
        for d in session.exec(
            select(CodebookDispute).where(CodebookDispute.study_id == study_id)
        ).all()
    }
    out = []
    for q, rows in sorted(groups.items()):
        vs = versions.get(q, [])
        for tid, _ in rows:
            chosen = None
            for v in reversed(vs):
                if tid in passes[v.id]:  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
                    chosen = v
                    break
            if chosen is None:
                why = "uncertain:no codebook" if not vs else "uncertain:not assigned"
                out.append(FinalLabel(q, tid, None, None, why))
                continue
            p = passes[chosen.id][tid]  # type: ignore[index]  # a stored row's id is set: SQLModel types every primary key Optional
            d = disputes.get((chosen.id, tid))  # type: ignore[arg-type]  # a stored version's id is set: SQLModel types every primary key Optional
            if d is not None:
                if d.status == "resolved" and d.final_label not in (None, UNCERTAIN):
                    why = (
                        "arbitrated"
                        if (d.resolved_by or "").startswith("arbitration")
                        else "researcher"
                    )
                    out.append(FinalLabel(q, tid, d.final_label, chosen.version, why))
                else:
                    why = {
                        "resolved": "uncertain:by researcher",
                        "researcher": "uncertain:researcher queue",
                        "new": "uncertain:provisional NEW",
                        "open": "uncertain:not arbitrated",
                    }.get(d.status, f"uncertain:{d.status}")
                    out.append(FinalLabel(q, tid, None, chosen.version, why))
                continue
            if 1 not in p or 2 not in p:
                out.append(FinalLabel(q, tid, None, chosen.version, "uncertain:missing pass"))
                continue
            a = ItemLabel(tid, p[1].label, p[1].confidence)
            b = ItemLabel(tid, p[2].label, p[2].confidence)
            if dispute_reasons(a, b, threshold=threshold):
                out.append(FinalLabel(q, tid, None, chosen.version, "uncertain:not reconciled"))
            else:
                out.append(FinalLabel(q, tid, a.label, chosen.version, "settled"))
    return out


def export_blockers(session: Session, *, study_id: int, labels: list[FinalLabel]) -> dict[str, int]:
    """What still makes trajectories uncertain that a later stage could settle."""
    causes = Counter(x.why for x in labels if x.mode is None)
    blockers = {
        why.split(":", 1)[1]: n for why, n in causes.items() if why != "uncertain:by researcher"
    }
    pending = session.exec(
        select(func.count())
        .select_from(CodebookExtension)
        .where(CodebookExtension.study_id == study_id, CodebookExtension.status == "pending")
    ).one()
    if pending:
        blockers["pending extension requests"] = int(pending)
    return blockers


def export_partition(
    session: Session,
    *,
    study: str,
    actor: str,
    artifacts_dir: Path,
    out: Path | None = None,
    allow_incomplete: bool = False,
    threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
) -> dict[str, Any]:
    """Freeze the final partition (source ``codebook:<digest of the versions used>``) and
    write it as Parquet. Refused while a stage could still settle trajectories (no
    codebook, unassigned, unreconciled, researcher queue, pending extension) unless
    ``allow_incomplete``; identical content to the latest partition is a no-op."""
    if out is not None:  # before the partition is frozen, not after
        check_output_file(out)
    st = require_study(session, name=study)
    labels = final_labels(session, study_id=st.id, threshold=threshold)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if not labels:
        raise CodebookStageError(f"study {study!r} has no accepted trajectories")
    blockers = export_blockers(session, study_id=st.id, labels=labels)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    if blockers and not allow_incomplete:
        detail = ", ".join(f"{n} {k}" for k, n in sorted(blockers.items()))
        raise CodebookStageError(
            f"the codebook cycle is not finished ({detail}); finish it, or export with "
            "--allow-incomplete to count these trajectories as uncertain"
        )
    versions = versions_by_question(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    used = {
        q: {"version": vs[-1].version, "content_hash": vs[-1].content_hash}
        for q, vs in versions.items()
    }
    digest = hashlib.sha256(canonical_json(used).encode()).hexdigest()
    source = f"codebook:{digest[:16]}"
    triples = [(x.question_id, x.trajectory_id, x.mode) for x in labels]
    n_uncertain = sum(1 for x in labels if x.mode is None)
    n_modes = sum(len(vs[-1].modes) for vs in versions.values())
    n_used = len({(x.question_id, x.mode) for x in labels if x.mode is not None})
    part, created = store_partition(
        session,
        study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        triples=triples,
        source=source,
        actor=actor,
    )
    path = out or path_under(
        artifacts_dir / "codebook", study, suffix=f"-partition-{part.id}.parquet"
    )
    _write_parquet(path, labels, versions)
    excluded = {
        tid: {"question_id": e["question_id"], "reason": e["reason"]}
        for tid, e in sorted(excluded_trajectories(session, study_id=st.id).items())  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    }
    export = session.exec(
        select(CodebookExport).where(CodebookExport.partition_id == part.id)
    ).first()
    if export is None:
        export = CodebookExport(
            study_id=st.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            partition_id=part.id,  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
            versions=used,
            n_modes=n_modes,
            n_included=len(triples) - n_uncertain,
            n_uncertain=n_uncertain,
            parquet_path=str(path),
            created_by=actor,
        )
        session.add(export)
        session.flush()
        append_event(
            session,
            actor=actor,
            kind=events.CODEBOOK_EXPORT,
            study_id=st.id,
            payload={
                "export_id": export.id,
                "partition_id": part.id,
                "source": source,
                "excluded": excluded,
            },
        )
    return {
        "partition_id": part.id,
        "partition_hash": part.content_hash,
        "source": part.source,
        "created": created,
        "n_accepted": len(triples),
        "n_included": len(triples) - n_uncertain,
        "n_uncertain": n_uncertain,
        "n_modes": n_modes,
        "n_modes_used": n_used,
        "n_codebooks": len(versions),
        "uncertain_causes": dict(Counter(x.why for x in labels if x.mode is None)),
        "incomplete": blockers,
        "n_excluded": len(excluded),
        "excluded": excluded,
        "parquet": str(path),
    }


def _write_parquet(path: Path, labels: list[FinalLabel], versions: dict[str, list[Any]]) -> None:
    hashes = {q: {v.version: v.content_hash for v in vs} for q, vs in versions.items()}
    table = pa.table(
        {
            "trajectory_id": [x.trajectory_id for x in labels],
            "question_id": [x.question_id for x in labels],
            "mode": [x.mode if x.mode is not None else UNCERTAIN for x in labels],
            "codebook_version": pa.array([x.version for x in labels], type=pa.int32()),
            "codebook_hash": [
                hashes.get(x.question_id, {}).get(x.version) if x.version else None for x in labels
            ],
            "outcome": [x.why for x in labels],
        }
    )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    os.chmod(tmp, 0o600)
    tmp.replace(path)


def cycle_status(session: Session, *, study: str) -> dict[str, Any]:
    """Progress of every stage, for `rcea codebook status`."""
    st = require_study(session, name=study)
    groups = accepted_by_question(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    versions = versions_by_question(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    batches = session.exec(
        select(CodebookBatch.stage, CodebookBatch.status, func.count())
        .where(CodebookBatch.study_id == st.id)
        .group_by(CodebookBatch.stage, CodebookBatch.status)
    ).all()
    disputes = session.exec(
        select(CodebookDispute.status, func.count())
        .where(CodebookDispute.study_id == st.id)
        .group_by(CodebookDispute.status)
    ).all()
    extensions = session.exec(
        select(CodebookExtension.status, func.count())
        .where(CodebookExtension.study_id == st.id)
        .group_by(CodebookExtension.status)
    ).all()
    tokens: Counter[str] = Counter()
    for usage in session.exec(
        select(CodebookBatch.usage).where(CodebookBatch.study_id == st.id)
    ).all():
        for k in ("prompt_tokens", "completion_tokens"):
            tokens[k] += int((usage or {}).get(k) or 0)
        tokens["cached"] += int(bool((usage or {}).get("cached")))
    labels = final_labels(session, study_id=st.id)  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
    drafts = session.exec(
        select(func.count()).select_from(CodebookDraft).where(CodebookDraft.study_id == st.id)
    ).one()
    return {
        "study": study,
        "n_questions": len(groups),
        "n_accepted": sum(len(v) for v in groups.values()),
        "n_excluded": len(excluded_trajectories(session, study_id=st.id)),  # type: ignore[arg-type]  # a stored row's id is set: SQLModel types every primary key Optional
        "n_drafts": int(drafts),
        "n_frozen_codebooks": len(versions),
        "versions": {q: vs[-1].version for q, vs in sorted(versions.items())},
        "batches": {f"{stage}:{status}": int(n) for stage, status, n in batches},
        "disputes": {s: int(n) for s, n in disputes},
        "extensions": {s: int(n) for s, n in extensions},
        "outcomes": dict(Counter(x.why for x in labels)),
        "tokens": dict(tokens),
    }
