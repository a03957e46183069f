"""incremental sync: a per-binding cursor in the server's own clock

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-01

``labelling_project.synced_until`` is the time (the person's Label Studio server's clock,
from its ``Date`` header) at which the last sync of that project started. An incremental
sync reads only the tasks whose ``updated_at`` is later than it (minus an overlap);
Label Studio bumps a task's ``updated_at`` whenever one of its annotations is saved or
deleted. Null: never synced, so the next sync reads the whole project.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("labelling_project") as batch:
        batch.add_column(
            sa.Column("synced_until", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("labelling_project") as batch:
        batch.drop_column("synced_until")
