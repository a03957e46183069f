"""Every table the docs (docs/store.md) name as frozen (and the append-only ``event`` log) rejects
UPDATE and DELETE in the database itself, on SQLite and PostgreSQL, with the trigger's own
message (issue #23, item 6). The list is read from docs/store.md, so the docs, migrations and
this test cannot drift apart."""

from __future__ import annotations

import datetime as dt
import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlmodel import SQLModel

import app.store.models  # noqa: F401 - registers the tables on SQLModel.metadata

REPO = Path(__file__).resolve().parents[2]
MIGRATIONS = "app.store.migrations.versions"


def readme_frozen_tables() -> list[str]:
    """The backticked names in the store page's sentence on database triggers."""
    text = (REPO / "docs" / "store.md").read_text(encoding="utf-8")
    m = re.search(r"Database triggers reject `UPDATE` and `DELETE` on `event` and on every "
                  r"frozen table\s*\(([^)]*)\)", text)  # fmt: skip
    assert m, "docs/store.md: the sentence listing the frozen tables is gone"
    names = re.findall(r"`([a-z_]+)`", m.group(1).split(";")[0])
    assert len(names) >= 9, names
    return names


FROZEN = readme_frozen_tables()
MESSAGES = {t: f"{t} rows are frozen: create a new version instead" for t in FROZEN}
MESSAGES["event"] = "event table is append-only"


def test_the_readme_list_is_what_the_migrations_freeze() -> None:
    frozen: set[str] = set()
    for path in sorted((REPO / "app/store/migrations/versions").glob("0*.py")):
        module = importlib.import_module(f"{MIGRATIONS}.{path.stem}")
        frozen.update(getattr(module, "FROZEN_TABLES", ()))
    assert sorted(frozen) == sorted(FROZEN)
    assert "partition" in FROZEN


def _value(col: sa.Column, n: int) -> Any:
    typ = col.type.impl_instance if isinstance(col.type, sa.TypeDecorator) else col.type
    try:
        py = typ.python_type
    except NotImplementedError:
        py = dict
    if py is bool:
        return False
    if py is int:
        return n
    if py is float:
        return n / 4
    if py is dt.datetime:
        return dt.datetime(2026, 1, n, tzinfo=dt.UTC)
    if py in (dict, list):
        return {"n": n}
    return f"v{n}"


def _insert_one(conn: sa.Connection, table: sa.Table) -> None:
    """One row with every required column filled, foreign keys not enforced (the triggers
    do not look at the row; the row only has to exist)."""
    values = {
        col.name: _value(col, 1)
        for col in table.columns
        if not (col.primary_key and col.autoincrement in (True, "auto"))
        and not col.nullable
        and col.default is None
        and col.server_default is None
    }
    conn.execute(table.insert().values(**values))


@pytest.mark.parametrize("verb", ["UPDATE", "DELETE"])
@pytest.mark.parametrize("table_name", [*FROZEN, "event"])
def test_frozen_table_rejects_update_and_delete(engine, table_name: str, verb: str) -> None:  # type: ignore[no-untyped-def]
    table = SQLModel.metadata.tables[table_name]
    pg = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        # PostgreSQL's replica role skips foreign-key checks (and user triggers) for the
        # set-up insert; SQLite's pragma does the former.
        conn.exec_driver_sql(
            "SET session_replication_role = replica" if pg else "PRAGMA foreign_keys=OFF"
        )
        _insert_one(conn, table)
        if pg:
            conn.exec_driver_sql("SET session_replication_role = origin")
    with engine.connect() as conn:
        before = conn.execute(sa.select(table)).all()
    assert len(before) == 1
    col = next(c for c in table.columns if not c.primary_key)
    stmt = table.update().values({col.name: _value(col, 2)}) if verb == "UPDATE" else table.delete()
    with (
        pytest.raises(DBAPIError, match=re.escape(MESSAGES[table_name])),
        engine.begin() as conn,
    ):
        conn.execute(stmt)
    with engine.connect() as conn:  # the row is still there, unchanged
        assert conn.execute(sa.select(table)).all() == before
