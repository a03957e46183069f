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
