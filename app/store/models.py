"""SQLModel tables of the store.

Token-level arrays never become SQL rows: they live in Parquet artifacts under the data
dir, and a trajectory row points at them with ``token_artifact`` (path relative to the
data dir) + ``token_row``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class Study(SQLModel, table=True):
    __tablename__ = "study"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True, max_length=200)
    description: str = Field(default="", sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow)


class Question(SQLModel, table=True):
    __tablename__ = "question"
    __table_args__ = (UniqueConstraint("study_id", "question_id", name="uq_question_study_qid"),)

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    question_id: str = Field(max_length=300)
    created_at: datetime = Field(default_factory=utcnow)


class Ingest(SQLModel, table=True):
    """One ingested file: its content hash makes re-ingesting the same file a no-op."""

    __tablename__ = "ingest"
    __table_args__ = (UniqueConstraint("study_id", "sha256", name="uq_ingest_study_sha"),)

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id", index=True)
    source: str = Field(sa_type=Text, description="file name as given to `rcea ingest`")
    sha256: str = Field(max_length=64)
    n_records: int
    token_artifact: str | None = Field(default=None, sa_type=Text)
    created_at: datetime = Field(default_factory=utcnow)


class TrajectoryBase(SQLModel):
    """The DESIGN.md interchange record (one sampled trajectory)."""

    trajectory_id: str = Field(max_length=300)
    question_id: str = Field(max_length=300)
    text: str = Field(sa_type=Text)
    reward: int
    run: str = Field(max_length=200)
    model: str = Field(max_length=200)
    step: int
    seed: int = Field(sa_type=BigInteger)
    mean_token_entropy: float | None = None
    n_tokens: int | None = None
    seq_logprob: float | None = None
    answer: str | None = Field(default=None, sa_type=Text)
    validity: int | None = None
    mode: str | None = Field(default=None, max_length=300)
    split: str | None = Field(default=None, max_length=20)


class Trajectory(TrajectoryBase, table=True):
    __tablename__ = "trajectory"
    __table_args__ = (
        UniqueConstraint("study_id", "trajectory_id", name="uq_trajectory_study_tid"),
        Index("ix_trajectory_study_question", "study_id", "question_id"),
        Index("ix_trajectory_study_run_step", "study_id", "run", "step"),
    )

    id: int | None = Field(default=None, primary_key=True)
    study_id: int = Field(foreign_key="study.id")
    ingest_id: int = Field(foreign_key="ingest.id", index=True)
    token_artifact: str | None = Field(
        default=None, sa_type=Text, description="Parquet path under data dir"
    )
    token_row: int | None = Field(default=None, description="row in the token artifact")


class Event(SQLModel, table=True):
    """Append-only audit log: freezes, extensions, adjudications, publications.

    The migration installs database triggers that reject UPDATE and DELETE.
    """

    __tablename__ = "event"

    id: int | None = Field(default=None, primary_key=True)
    time: datetime = Field(default_factory=utcnow, index=True)
    actor: str = Field(max_length=200)
    kind: str = Field(max_length=100, index=True)
    study_id: int | None = Field(default=None, foreign_key="study.id", index=True)
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
