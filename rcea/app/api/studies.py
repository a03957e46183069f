"""Study resources."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel

from rcea.app.api.deps import SessionDep
from rcea.study.pair_audit.freeze import FreezeError
from rcea.study.pair_audit.gate import audit_gate
from rcea.study.pair_audit.sampling import find_audit
from rcea.study.report.build import build_report
from rcea.study.report.parameters import ReportParameters
from rcea.study.report.schema import StudyReport
from rcea.study.store import StoreError, list_studies, study_summary
from rcea.study.store.repository import study_by_id

router = APIRouter(prefix="/api/studies", tags=["studies"])

#: A store id: an integer the store's INTEGER keys can hold (1 … 2**31 - 1); integer
#: parameters are bounded the same way; anything
#: else is answered 422 before the store is asked (never an overflow and a 500).
INT_MAX = 2**31 - 1
StudyId = Annotated[int, Path(ge=1, le=INT_MAX)]


class StudyPublic(BaseModel):
    id: int
    name: str
    description: str
    created_at: datetime


class SummaryGroup(BaseModel):
    run: str
    model: str
    step: int
    n: int
    n_success: int
    n_failure: int


class StudySummary(BaseModel):
    study: str
    study_id: int
    n_trajectories: int
    n_questions: int
    n_ingests: int
    groups: list[SummaryGroup]


@router.get("", response_model=list[StudyPublic])
def get_studies(session: SessionDep) -> list[StudyPublic]:
    return [StudyPublic.model_validate(s, from_attributes=True) for s in list_studies(session)]


@router.get("/{study_id}/summary", response_model=StudySummary)
def get_study_summary(study_id: StudyId, session: SessionDep) -> StudySummary:
    try:
        return StudySummary.model_validate(study_summary(session, study_id=study_id))
    except StoreError as exc:
        raise HTTPException(404, str(exc)) from exc


@router.get("/{study_id}/report", response_model=StudyReport, response_model_exclude_unset=True)
def get_study_report(
    study_id: StudyId,
    session: SessionDep,
    seed: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    n_boot: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    k_min: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    n_min: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    n_draws: Annotated[int | None, Query(ge=1, le=1_000)] = None,
    base_step: Annotated[int, Query(ge=0, le=INT_MAX)] = 0,
    base_run: Annotated[str, Query(min_length=1, max_length=200)] = "base",
    association_benchmark: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    association_k: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    association_pooled: bool = False,
) -> StudyReport:
    """The study report (``rcea.study.report.build.build_report``, the typed
    ``rcea.study.report.schema.StudyReport``; keys: docs/report-keys.md).
    Estimator settings left out come from the gate rubric, else the defaults."""

    study = study_by_id(session, study_id)
    if study is None:
        raise HTTPException(404, f"no study with id {study_id}")
    try:
        params = ReportParameters(
            seed=seed,
            n_boot=n_boot,
            k_min=k_min,
            n_min=n_min,
            n_draws=n_draws,
            base_step=base_step,
            base_run=base_run,
            association_benchmark=association_benchmark,
            association_k=association_k,
            association_pooled=association_pooled,
        )
        return build_report(session, study=study.name, params=params)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc


@router.get("/{study_id}/audits/{audit}/gate")
def get_audit_gate(
    study_id: StudyId, audit: Annotated[str, Path(max_length=200)], session: SessionDep
) -> dict[str, Any]:
    """The gate of a pair audit (``rcea.study.pair_audit.gate.audit_gate``): the recorded final
    gate when there is one (``stage: final``), with the live preliminary gate beside it under
    ``preliminary``; else the live preliminary gate: progress, the report and, with a
    ``[sequential]`` plan in the frozen rubric, the interim decisions at the current look
    (``sequential``, ``decision``; docs/sequential-gate.md)."""

    row = find_audit(session, name=audit, study_id=study_id)
    if row is None:
        raise HTTPException(404, f"no audit {audit!r} in study {study_id}")
    try:
        return audit_gate(session, row)
    except (FreezeError, ValueError) as exc:
        raise HTTPException(422, str(exc)) from exc
