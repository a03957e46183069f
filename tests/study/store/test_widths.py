"""Every width-limited column of the store is held to its width, and every integer column to
its range, on every engine (docs/store.md "Widths and ranges").

The columns are enumerated from the migrated database itself (``sa.inspect``: what the
migrations created, not the models the guard reads), each checked against the guard's
limit and then written too long (too large) through a store engine: refused before the
statement reaches the database, one line naming the table, the column and the limit.
On PostgreSQL the same value through a bare engine is PostgreSQL's own refusal; on
SQLite it is kept — the difference the guard removes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlmodel import SQLModel

from rcea.pipeline.records import ID_WIDTHS, INT32_MAX
from rcea.study.store import make_engine
from rcea.study.store.models import Study
from rcea.study.store.repository import STUDY_NAME_WIDTH
from rcea.study.store.widths import INT32, INT64, WidthError, check_stored, limits


def _schema(engine: sa.Engine) -> Iterator[tuple[str, str, int | None, tuple[int, int] | None]]:
    """(table, column, width, integer range) of every limited column the database has."""
    inspector = sa.inspect(engine)
    for table in inspector.get_table_names():
        if table == "alembic_version":
            continue
        for col in inspector.get_columns(table):
            kind = col["type"]
            if isinstance(kind, sa.String) and getattr(kind, "length", None):
                yield table, col["name"], kind.length, None
            elif isinstance(kind, sa.BigInteger):
                yield table, col["name"], None, INT64
            elif isinstance(kind, sa.Integer) and not isinstance(kind, sa.Boolean):
                yield table, col["name"], None, INT32


def _too_much(width: int | None, span: tuple[int, int] | None) -> tuple[object, str]:
    if width is not None:
        return "x" * (width + 1), f"is {width + 1} characters long; the store keeps at most {width}"
    assert span is not None
    return span[1] + 1, f"the store keeps integers from {span[0]:,} to {span[1]:,}"


def test_every_limited_column_is_guarded_on_insert_and_update(store_url: str) -> None:
    engine = make_engine(store_url)
    try:
        found = list(_schema(engine))
        # SQLite reports what the migrations declared, PostgreSQL what it enforces
        assert len([c for c in found if c[2]]) >= 90, found  # 92 text columns today
        tables = SQLModel.metadata.tables
        for table, column, width, span in found:
            lim = limits()[table][column]
            assert (lim.width, (lim.low, lim.high) if span else None) == (
                width,
                span,
            ), f"{table}.{column}: the guard holds {lim}, the database {width or span}"
            value, expected = _too_much(width, span)
            for statement in (
                sa.insert(tables[table]).values({column: value}),
                sa.update(tables[table]).values({column: value}),
            ):
                with pytest.raises(WidthError) as caught, engine.begin() as conn:
                    conn.execute(statement)
                assert str(caught.value).startswith(f"{table}.{column} "), caught.value
                assert expected in str(caught.value), caught.value
        # and no column the guard knows is missing from the database
        known = {(t, c) for t, cols in limits().items() for c in cols}
        assert known == {(t, c) for t, c, _, _ in found}
    finally:
        engine.dispose()


def test_postgres_refuses_what_sqlite_keeps_and_the_guard_refuses_both(store_url: str) -> None:
    """A 201-character study name: SQLite keeps it, PostgreSQL refuses it — so the guard
    refuses it on both, with one message."""
    name = "s" * (STUDY_NAME_WIDTH or 0) + "s"
    bare = sa.create_engine(store_url)
    try:
        insert = sa.insert(SQLModel.metadata.tables["study"]).values(name=name, description="")
        if store_url.startswith("sqlite"):
            with bare.begin() as conn:
                conn.execute(insert)  # kept: SQLite ignores VARCHAR(200)
        else:
            with pytest.raises(sa.exc.DataError, match="too long"), bare.begin() as conn:
                conn.execute(insert)
    finally:
        bare.dispose()
    guarded = make_engine(store_url)
    try:
        with pytest.raises(WidthError) as caught, guarded.begin() as conn:
            conn.execute(sa.insert(SQLModel.metadata.tables["study"]).values(name=name + "2"))
        assert str(caught.value) == (
            "study.name is 202 characters long; the store keeps at most 200"
        )
    finally:
        guarded.dispose()


def test_a_command_names_its_option() -> None:
    with pytest.raises(WidthError, match=r"^--name is 201 characters long; the store keeps"):
        check_stored("n" * 201, Study.name, option="--name")
    with pytest.raises(WidthError, match=r"^--seed is an integer of 201 bits; the store keeps"):
        check_stored(2**200, SQLModel.metadata.tables["audit"].c.seed, option="--seed")


def test_the_record_schema_uses_the_stores_widths() -> None:
    """The records' own checks (rcea/pipeline/records.py, a layer below the store) hold
    the same numbers: a file refused by ``validate`` is the file the store would refuse."""
    trajectory = limits()["trajectory"]
    assert {f: trajectory[f].width for f in ID_WIDTHS} == ID_WIDTHS
    assert INT32_MAX == trajectory["step"].high == trajectory["n_tokens"].high
    assert trajectory["seed"].high == INT64[1]
