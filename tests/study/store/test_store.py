"""The store on SQLite and PostgreSQL: migrations, append-only events, summaries."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from rcea.study.store import (
    Event,
    Trajectory,
    append_event,
    get_or_create_study,
    list_events,
    make_engine,
    session_scope,
    study_summary,
    upgrade,
)
from rcea.study.store.db import current_revision, downgrade
from tests.support.product_helpers import table_names


def test_migration_creates_tables_and_is_idempotent(engine) -> None:  # type: ignore[no-untyped-def]
    assert {"study", "question", "ingest", "trajectory", "event"} <= set(table_names(engine))
    head = _script_head()
    assert current_revision(engine) == head
    upgrade(engine)  # again: nothing to do, no error
    assert current_revision(engine) == head


def _script_head() -> str:
    from alembic.script import ScriptDirectory

    from rcea.study.store.db import alembic_config

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def test_models_match_migrations(engine) -> None:  # type: ignore[no-untyped-def]
    """The SQLModel tables and the Alembic schema must not drift apart."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlmodel import SQLModel

    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, SQLModel.metadata)
    assert diff == []


def test_downgrade_to_base_and_back(store_url: str) -> None:
    eng = make_engine(store_url)
    upgrade(eng)
    downgrade(eng, "base")
    assert "trajectory" not in table_names(eng)
    upgrade(eng)
    assert "trajectory" in table_names(eng)
    eng.dispose()


def test_events_are_append_only(engine) -> None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        st = get_or_create_study(s, name="s1")
        ev = append_event(
            s, actor="alice", kind="rubric.freeze", payload={"hash": "ab"}, study_id=st.id
        )
        ev_id = ev.id
    with session_scope(engine) as s:
        events = list_events(s, kind="rubric.freeze")
        assert [e.payload for e in events] == [{"hash": "ab"}]
        assert events[0].actor == "alice" and events[0].time is not None
    for stmt in (
        sa.update(Event).where(Event.id == ev_id).values(actor="mallory"),
        sa.delete(Event).where(Event.id == ev_id),
    ):
        with pytest.raises(DBAPIError, match="event table is append-only"), engine.begin() as conn:
            conn.execute(stmt)
    with session_scope(engine) as s:
        assert list_events(s)[0].actor == "alice"


def test_event_needs_actor(engine) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.store import StoreError

    with pytest.raises(StoreError), session_scope(engine) as s:
        append_event(s, actor="", kind="x")


def test_reward_check_constraint(engine) -> None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        st = get_or_create_study(s, name="s1")
        sid = st.id
    row = dict(
        study_id=sid,
        ingest_id=None,
        trajectory_id="t",
        question_id="q",
        text="x",
        reward=2,
        run="r",
        model="m",
        step=0,
        seed=0,
    )
    with pytest.raises((IntegrityError, DBAPIError)), engine.begin() as conn:
        conn.execute(sa.insert(Trajectory), [row])


def test_summary_counts(engine) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.store import Ingest

    with session_scope(engine) as s:
        st = get_or_create_study(s, name="s1")
        ing = Ingest(study_id=st.id, source="f", sha256="0" * 64, n_records=3)
        s.add(ing)
        s.flush()
        for i, (step, r) in enumerate([(0, 1), (0, 0), (10, 1)]):
            s.add(
                Trajectory(
                    study_id=st.id,
                    ingest_id=ing.id,
                    trajectory_id=f"t{i}",
                    question_id="q1",
                    text="x",
                    reward=r,
                    run="grpo",
                    model="m",
                    step=step,
                    seed=i,
                )
            )
        sid = st.id
    with session_scope(engine) as s:
        summ = study_summary(s, study_id=sid)
    assert summ["n_trajectories"] == 3
    assert summ["groups"] == [
        {"run": "grpo", "model": "m", "step": 0, "n": 2, "n_success": 1, "n_failure": 1},
        {"run": "grpo", "model": "m", "step": 10, "n": 1, "n_success": 1, "n_failure": 0},
    ]


def test_measurement_upsert_and_kind_check(engine) -> None:  # type: ignore[no-untyped-def]
    from rcea.study.store.measurements import list_measurements, record_measurement

    with session_scope(engine) as s:
        st = get_or_create_study(s, name="m")
        record_measurement(
            s, study_id=st.id, kind="passk", run="grpo", step=10, key="eval", payload={"n": 4}
        )
        record_measurement(
            s, study_id=st.id, kind="passk", run="grpo", step=10, key="eval", payload={"n": 8}
        )
        record_measurement(
            s, study_id=st.id, kind="passk", run="grpo", step=20, key="eval", payload={"n": 8}
        )
        with pytest.raises(ValueError, match="unknown measurement kind"):
            record_measurement(s, study_id=st.id, kind="nope", payload={})
        rows = list_measurements(s, study_id=st.id, kind="passk")
        assert [(r.step, r.payload["n"]) for r in rows] == [(10, 8), (20, 8)]
