"""a multi-turn trajectory's turns

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04

``trajectory.turns`` keeps the turns of a multi-turn (agent-loop, tool-calling)
transcript as a JSON array of ``{"role", "content"}`` objects (the records' ``turns``,
``rcea import verl --multi-turn transcript``), so that the judge and the annotators are
shown one block per turn (docs/how-to-verl.md). Empty for single-turn trajectories.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trajectory") as batch:
        batch.add_column(sa.Column("turns", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trajectory") as batch:
        batch.drop_column("turns")
