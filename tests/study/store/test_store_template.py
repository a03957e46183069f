"""The migrated template stores of ``tests/conftest.py`` are what a user's store is: every
migration run from an empty database, on SQLite and on PostgreSQL, gives the same
catalog (tables, columns, indexes, constraints, triggers, trigger functions, revision)
as the ``store_url`` copy every other store test starts from."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from rcea.study.store import make_engine, upgrade
from rcea.study.store.db import current_revision


def _catalog(engine: sa.Engine) -> dict[str, Any]:
    insp = sa.inspect(engine)
    out: dict[str, Any] = {"revision": current_revision(engine)}
    for table in sorted(insp.get_table_names()):
        out[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                for c in insp.get_columns(table)
            ],
            "pk": insp.get_pk_constraint(table)["constrained_columns"],
            "fks": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"], str(f.get("options")))
                for f in insp.get_foreign_keys(table)
            ),
            "indexes": sorted(
                (i["name"] or "", tuple(map(str, i["column_names"])), bool(i["unique"]))
                for i in insp.get_indexes(table)
            ),
            "uniques": sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(table)),
            "checks": sorted(str(c["sqltext"]) for c in insp.get_check_constraints(table)),
        }
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.exec_driver_sql(
                "SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'view')"
            )
            out["triggers"] = sorted(tuple(r) for r in rows)
        else:
            rows = conn.exec_driver_sql(
                "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                "AND NOT t.tgisinternal"
            )
            out["triggers"] = sorted(tuple(r) for r in rows)
            rows = conn.exec_driver_sql(
                "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n "
                "ON n.oid = p.pronamespace WHERE n.nspname = current_schema()"
            )
            out["functions"] = sorted(tuple(r) for r in rows)
    return out


def test_template_copy_equals_every_migration_from_empty(store_url: str, tmp_path: Path) -> None:
    """Runs every migration on an empty database of the same engine (a new SQLite file; a
    new PostgreSQL database) and compares its catalog with the template copy's."""
    copy = make_engine(store_url)
    if copy.dialect.name == "sqlite":
        empty_url = f"sqlite:///{tmp_path / 'from-empty.db'}"
        admin = None
        name = ""
    else:
        name = f"rcea_e_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(copy.url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        empty_url = copy.url.set(database=name).render_as_string(hide_password=False)
    fresh = make_engine(empty_url)
    try:
        assert sa.inspect(fresh).get_table_names() == []
        upgrade(fresh)
        expected = _catalog(fresh)
        assert expected["revision"] is not None and "trajectory" in expected
        assert _catalog(copy) == expected
    finally:
        fresh.dispose()
        copy.dispose()
        if admin is not None:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()
