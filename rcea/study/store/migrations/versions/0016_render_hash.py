"""the hash of what an annotator saw, recorded with each task

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04

``audit_task.render_sha256`` and ``validity_task.render_sha256`` keep the SHA-256 of
everything a task showed when it was pushed — the rendered HTML of its texts, their
source and the rest of its data (the task data's ``shown_sha256``,
``rcea.annotation.render.shown_hash``; docs/labelstudio.md "What a task shows"). Rendering is
deterministic, so a re-push computes the same hash; one that differs is reported by the
push and the stored hash stays. The column cannot be updated, on SQLite and PostgreSQL
(the bound-columns trigger of ``rcea/study/store/migrations/triggers.py``). Empty for tasks
pushed before this revision: what they showed was not recorded.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from rcea.study.store.migrations.triggers import (
    drop_bound_columns_trigger,
    install_bound_columns_trigger,
)

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TASK_TABLES = ("audit_task", "validity_task")
RENDER_BOUND_COLUMNS = ("render_sha256",)


def render_bound_msg(table: str) -> str:
    """The error of an update of ``table``'s render hash (no quotes: it sits in SQL)."""
    return (
        f"{table} rows keep the hash of what the annotator saw: push a new round "
        "instead of changing it"
    )


def upgrade() -> None:
    for table in TASK_TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column(
                    "render_sha256", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True
                )
            )
        install_bound_columns_trigger(table, RENDER_BOUND_COLUMNS, render_bound_msg(table))


def downgrade() -> None:
    for table in reversed(TASK_TABLES):
        drop_bound_columns_trigger(table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("render_sha256")
