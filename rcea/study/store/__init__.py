"""The SQLModel store: tables, migrations, sessions, artifacts and store operations."""

from sqlalchemy.engine import Engine

from rcea.study.settings import Settings, get_settings
from rcea.study.store.db import make_engine, session_scope, upgrade
from rcea.study.store.models import Event, Ingest, Question, Study, Trajectory
from rcea.study.store.repository import (
    StoreError,
    append_event,
    get_or_create_study,
    latest_payload,
    list_events,
    list_studies,
    payloads,
    problem_texts,
    question_texts,
    require_study,
    study_summary,
)

__all__ = [
    "Event",
    "Ingest",
    "Question",
    "StoreError",
    "Study",
    "Trajectory",
    "append_event",
    "get_or_create_study",
    "latest_payload",
    "list_events",
    "list_studies",
    "make_engine",
    "open_store",
    "payloads",
    "problem_texts",
    "question_texts",
    "require_study",
    "session_scope",
    "study_summary",
    "upgrade",
]


def open_store(settings: Settings | None = None) -> Engine:
    """Engine for the configured database, migrated to the latest schema."""

    settings = settings or get_settings()
    settings.ensure_data_dir()
    engine = make_engine(
        settings.resolved_database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
    )
    upgrade(engine)
    return engine
