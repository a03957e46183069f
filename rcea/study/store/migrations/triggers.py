"""Database triggers that make frozen tables immutable, shared by the migrations.

SQLite: ``BEFORE UPDATE`` / ``BEFORE DELETE`` triggers that ``RAISE(ABORT)``; PostgreSQL:
one plpgsql function per table raising an exception, fired before every UPDATE or DELETE.
Changing a frozen object therefore fails in the database itself, whatever the caller.
"""

from __future__ import annotations

from alembic import op


def install_immutable_trigger(table: str) -> None:
    """Reject every UPDATE and DELETE on ``table``."""
    msg = f"{table} rows are frozen: create a new version instead"
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER {table}_no_{verb.lower()} BEFORE {verb} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{msg}'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            f"CREATE OR REPLACE FUNCTION rcea_{table}_frozen() RETURNS trigger AS $$ "
            f"BEGIN RAISE EXCEPTION '{msg}'; END; $$ LANGUAGE plpgsql"
        )
        op.execute(
            f"CREATE TRIGGER {table}_frozen BEFORE UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION rcea_{table}_frozen()"
        )


def drop_immutable_trigger(table: str) -> None:
    """Undo :func:`install_immutable_trigger` (downgrades)."""
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
        op.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
    elif dialect == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {table}_frozen ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS rcea_{table}_frozen()")


def install_truncate_guard(table: str, function: str | None = None) -> None:
    """PostgreSQL: reject ``TRUNCATE`` of ``table`` (row triggers do not fire on it, and
    ``TRUNCATE … CASCADE`` of a referenced table reaches it too). ``function`` is the
    table's existing row-trigger function (default ``rcea_<table>_frozen``), so the error
    names the same rule. SQLite has no ``TRUNCATE``."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {function or f'rcea_{table}_frozen'}()"
    )


def drop_truncate_guard(table: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")


def install_bound_columns_trigger(table: str, columns: tuple[str, ...], msg: str) -> None:
    """Reject an UPDATE that names any of ``columns`` on ``table`` (other columns stay
    writable), on SQLite and PostgreSQL."""
    cols = ", ".join(columns)
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(
            f"CREATE TRIGGER {table}_bound_no_update BEFORE UPDATE OF {cols} ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{msg}'); END"
        )
    elif dialect == "postgresql":
        changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)
        op.execute(
            f"CREATE OR REPLACE FUNCTION rcea_{table}_bound() RETURNS trigger AS $$ "
            f"BEGIN IF {changed} THEN RAISE EXCEPTION '{msg}'; END IF; RETURN NEW; END; "
            "$$ LANGUAGE plpgsql"
        )
        op.execute(
            f"CREATE TRIGGER {table}_bound BEFORE UPDATE OF {cols} ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION rcea_{table}_bound()"
        )


def drop_bound_columns_trigger(table: str) -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute(f"DROP TRIGGER IF EXISTS {table}_bound_no_update")
    elif dialect == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {table}_bound ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS rcea_{table}_bound()")
