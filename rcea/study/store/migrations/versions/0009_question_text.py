"""question text

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

The problem statement of each question (the records' optional ``question`` field), per
(study, question_id): shown to annotators, the validity judge and the codebook prompts.
Nullable: studies ingested without question texts keep working (tasks and prompts omit
it). Ingest refuses a second, different text for a question id.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("question") as batch:
        batch.add_column(sa.Column("text", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("question") as batch:
        batch.drop_column("text")
