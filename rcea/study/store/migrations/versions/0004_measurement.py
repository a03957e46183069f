"""measurement table

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Named results computed by producers outside the trajectory table (training curves,
greedy accuracy, pass@k, accuracy traces, covariance transitions, tail tables), one row
per (study, kind, run, model, step, key).
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "measurement",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=50), nullable=False),
        sa.Column("run", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("model", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["study.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "study_id", "kind", "run", "model", "step", "key", name="uq_measurement_key"
        ),
    )
    with op.batch_alter_table("measurement", schema=None) as batch_op:
        batch_op.create_index("ix_measurement_kind", ["study_id", "kind"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("measurement", schema=None) as batch_op:
        batch_op.drop_index("ix_measurement_kind")
    op.drop_table("measurement")
