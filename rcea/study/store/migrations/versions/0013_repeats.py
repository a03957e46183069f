"""hidden repeats for annotator self-consistency

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

The rubric's ``[annotators] repeat_share`` shows a share of the pairs a second time to
annotators A and B. ``audit_task.repeat`` marks the second task of a pair in a
person's project (so a pair may have two tasks per role: the unique key gains
``repeat``), and ``audit_label.repeat`` the labels given on it: they measure the person's
self-consistency and are never counted in the gate, the reference or the sequential
looks. Both default to false, so earlier tasks and labels keep their meaning.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_task") as batch:
        batch.add_column(
            sa.Column("repeat", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.drop_constraint("uq_task_audit_role_pair", type_="unique")
        batch.create_unique_constraint(
            "uq_task_audit_role_pair_repeat", ["audit_id", "role", "pair_id", "repeat"]
        )
    with op.batch_alter_table("audit_label") as batch:
        batch.add_column(
            sa.Column("repeat", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    # without the column a repeat's label would count as a second original: drop them
    op.execute('DELETE FROM audit_label WHERE "repeat"')
    op.execute('DELETE FROM audit_task WHERE "repeat"')
    with op.batch_alter_table("audit_label") as batch:
        batch.drop_column("repeat")
    with op.batch_alter_table("audit_task") as batch:
        batch.drop_constraint("uq_task_audit_role_pair_repeat", type_="unique")
        batch.create_unique_constraint("uq_task_audit_role_pair", ["audit_id", "role", "pair_id"])
        batch.drop_column("repeat")
