"""Study resources."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from app.api.deps import SessionDep
from app.store import StoreError, list_studies, study_summary

router = APIRouter(prefix="/api/studies", tags=["studies"])


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
def get_study_summary(study_id: int, session: SessionDep) -> StudySummary:
    try:
        return StudySummary.model_validate(study_summary(session, study_id=study_id))
    except StoreError as exc:
        raise HTTPException(404, str(exc)) from exc
