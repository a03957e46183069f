"""a question's reference answer; a trajectory's reward extras

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04

``question.ground_truth`` keeps the reference answer a trainer dump carries per question
(verl's ``gts``; the records' ``ground_truth``), so that importing a dump drops nothing
the dump has and ``rcea export`` writes it back. Empty for earlier questions.
``trajectory.reward_extras`` keeps the other per-sample keys of a dump (verl's reward
extras, ``num_turns``) as one JSON object text.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("question") as batch:
        batch.add_column(sa.Column("ground_truth", sa.Text(), nullable=True))
    with op.batch_alter_table("trajectory") as batch:
        batch.add_column(sa.Column("reward_extras", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trajectory") as batch:
        batch.drop_column("reward_extras")
    with op.batch_alter_table("question") as batch:
        batch.drop_column("ground_truth")
