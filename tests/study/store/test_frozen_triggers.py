"""Every table the docs (docs/store.md) name as frozen (and the append-only ``event`` log) rejects
UPDATE and DELETE in the database itself, on SQLite and PostgreSQL, with the trigger's own
message. The list is read from docs/store.md, so the docs, migrations and
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

import rcea.study.store.models  # noqa: F401 - registers the tables on SQLModel.metadata

REPO = Path(__file__).resolve().parents[3]
MIGRATIONS = "rcea.study.store.migrations.versions"


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
    for path in sorted((REPO / "rcea/study/store/migrations/versions").glob("0*.py")):
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


def _insert_one(conn: sa.Connection, table: sa.Table, **extra: Any) -> None:
    """One row with every required column filled (and ``extra``), foreign keys not
    enforced (the triggers do not look at the row; the row only has to exist)."""
    values = extra | {
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


# --------------------------------------------------------------- the catalog, exactly
# Written from the mutants of rcea/study/store/migrations/triggers.py that `make mutation` left
# alive (docs/mutation.md): every trigger and trigger function by name after an upgrade,
# and none left behind by a downgrade (a leftover PostgreSQL function survives its table).


def _catalog(engine: sa.Engine) -> tuple[set[str], set[str]]:
    """(trigger names, trigger function names) of the store's schema."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            return {r[0] for r in rows}, set()
        triggers = conn.exec_driver_sql(
            "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND NOT t.tgisinternal"
        )
        functions = conn.exec_driver_sql(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = current_schema()"
        )
        return {r[0] for r in triggers}, {r[0] for r in functions}


#: Tables with bound columns at the head revision: the audit's rubric and partition
#: (0008) and the tasks' render hashes (0016).
BOUND = ("audit", "audit_task", "validity_task")


def _expected(dialect: str, *, bound: bool) -> tuple[set[str], set[str]]:
    if dialect == "sqlite":
        trig = {f"{t}_no_{v}" for t in [*FROZEN, "event"] for v in ("update", "delete")}
        return trig | ({f"{t}_bound_no_update" for t in BOUND} if bound else set()), set()
    trig = {f"{t}_frozen" for t in FROZEN} | {"event_append_only"}
    func = {f"rcea_{t}_frozen" for t in FROZEN} | {"rcea_event_append_only"}
    if bound:  # 0008: TRUNCATE guards and the audit's bound columns; 0016: render hashes
        trig |= {f"{t}_no_truncate" for t in [*FROZEN, "event"]} | {f"{t}_bound" for t in BOUND}
        func |= {f"rcea_{t}_bound" for t in BOUND}
    return trig, func


def test_catalog_after_upgrade_and_each_downgrade(store_url: str) -> None:
    from rcea.study.store import make_engine, upgrade
    from rcea.study.store.db import current_revision, downgrade

    eng = make_engine(store_url)
    dialect = eng.dialect.name
    try:
        upgrade(eng)
        assert _catalog(eng) == _expected(dialect, bound=True)
        downgrade(eng, "0007")  # 0008's guards go, the frozen-table triggers stay
        assert current_revision(eng) == "0007"
        assert _catalog(eng) == _expected(dialect, bound=False)
        upgrade(eng)
        assert _catalog(eng) == _expected(dialect, bound=True)
        downgrade(eng, "base")  # nothing left behind, functions included
        assert _catalog(eng) == (set(), set())
    finally:
        eng.dispose()


def test_downgrade_0008_lifts_only_the_bound_columns_rule(engine) -> None:  # type: ignore[no-untyped-def]
    """After 0008's downgrade the audit's bound columns are writable again and TRUNCATE
    is no longer refused by a guard of 0008 (rows of frozen tables still are)."""
    from rcea.study.store.db import downgrade

    table = SQLModel.metadata.tables["audit"]
    pg = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "SET session_replication_role = replica" if pg else "PRAGMA foreign_keys=OFF"
        )
        _insert_one(conn, table)
        if pg:
            conn.exec_driver_sql("SET session_replication_role = origin")
    bound = "audit rows bind their rubric and partition: draw a new audit instead of changing them"
    with pytest.raises(DBAPIError, match=re.escape(bound)), engine.begin() as conn:
        conn.execute(table.update().values(rubric_hash="changed"))
    downgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(table.update().values(rubric_hash="changed"))
    with engine.connect() as conn:
        assert conn.execute(sa.select(table.c.rubric_hash)).scalar_one() == "changed"


@pytest.mark.parametrize("table_name", ["audit_task", "validity_task"])
def test_a_task_render_hash_cannot_be_changed(engine, table_name: str) -> None:  # type: ignore[no-untyped-def]
    """The hash of what an annotator saw (0016) stays as pushed, on SQLite and PostgreSQL,
    with the migration's own message; the task's other columns stay writable."""
    msg = importlib.import_module(f"{MIGRATIONS}.0016_render_hash").render_bound_msg(table_name)
    table = SQLModel.metadata.tables[table_name]
    pg = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "SET session_replication_role = replica" if pg else "PRAGMA foreign_keys=OFF"
        )
        _insert_one(conn, table, render_sha256="a" * 64)
        if pg:
            conn.exec_driver_sql("SET session_replication_role = origin")
    with pytest.raises(DBAPIError, match=re.escape(msg)), engine.begin() as conn:
        conn.execute(table.update().values(render_sha256="b" * 64))
    with engine.begin() as conn:
        conn.execute(table.update().values(project_id=7))
    with engine.connect() as conn:
        row = conn.execute(sa.select(table.c.render_sha256, table.c.project_id)).one()
    assert tuple(row) == ("a" * 64, 7)
