"""annotation timing for annotator quality

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

Per pair-audit label, Label Studio's ``lead_time`` (seconds the person spent on the
annotation) and ``created_at`` (``annotated_at``): ``rcea audit annotators`` reports
throughput and lead times per person and round. Both nullable: labels
recorded before keep working.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

COLUMNS = (
    ("lead_time", sa.Float()),
    ("annotated_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("audit_label") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_label") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
