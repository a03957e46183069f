"""Approving extension requests, the one rule the CLI, the view and the demo share:
approval refreezes each request's question as a new codebook version (one transaction),
then the affected questions' trajectories are assigned and reconciled again against the
new version — unless the caller asks for the refreeze alone (``backend=None``, the CLI's
``--no-reassign``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from rcea.pipeline.codebook.logic import DEFAULT_CONFIDENCE_THRESHOLD
from rcea.study.codebook.backend import BackendOptions, make_backend
from rcea.study.codebook.review import decide_extension
from rcea.study.codebook.stages import assign, reconcile
from rcea.study.settings import Settings
from rcea.study.store import session_scope


def decision_summary(ext: Any, version: Any) -> dict[str, Any]:
    """What a decided request reports (CLI, view, demo): id, question, status, the new
    version and its hash (approved), and the affected trajectories."""
    return {
        "extension_id": ext.id,
        "question_id": ext.question_id,
        "status": ext.status,
        "version": version.version if version else None,
        "content_hash": version.content_hash if version else None,
        "n_affected": len(ext.affected_trajectory_ids),
    }


def approve_extensions(
    engine: Engine,
    *,
    study: str,
    extension_ids: list[int],
    actor: str,
    reason: str = "",
    backend: Any = None,
    seed: int = 0,
    threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
    concurrency: int = 8,
) -> dict[str, Any]:
    """Approve every request in ``extension_ids`` (all or none: one transaction), then,
    with a ``backend``, reassign and reconcile only the questions they touch. Returns
    ``approved`` (one entry per request: id, question, new version, its hash, affected
    trajectories) and, when reassigned, the ``assign`` and ``reconcile`` stage reports.
    Raises ``CodebookStageError`` for a request that is unknown, stale or decided."""
    approved: list[dict[str, Any]] = []
    with session_scope(engine) as s:
        for ext_id in extension_ids:
            ext, v = decide_extension(
                s, study=study, extension_id=ext_id, approve=True, actor=actor, reason=reason
            )
            approved.append(decision_summary(ext, v))
    out: dict[str, Any] = {"approved": approved}
    if backend is None or not approved:
        return out
    questions = list(dict.fromkeys(a["question_id"] for a in approved))
    kw = {"study": study, "backend": backend, "actor": actor, "concurrency": concurrency}
    out["assign"] = assign(engine, seed=seed, questions=questions, **kw).to_dict()
    out["reconcile"] = reconcile(
        engine, seed=seed, threshold=threshold, questions=questions, **kw
    ).to_dict()
    return out


def backend_from_settings(settings: Settings) -> tuple[Any, int, float]:
    """The codebook backend, seed and threshold a caller without options of its own (the
    view) uses: the settings ``codebook_backend`` (openai | oracle), ``codebook_oracle``,
    ``codebook_seed``, ``codebook_threshold`` and ``llm_concurrency`` — the same
    ``RCEA_*`` variables that are the defaults of the CLI's options — and the endpoint."""
    options = BackendOptions(
        kind=settings.codebook_backend,
        oracle=settings.codebook_oracle,
        concurrency=settings.llm_concurrency,
        seed=settings.codebook_seed,
    )
    return make_backend(settings, options), settings.codebook_seed, settings.codebook_threshold
