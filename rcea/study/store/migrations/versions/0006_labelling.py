"""labelling core: person → project bindings; labels keyed by role

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

One Label Studio server per person means annotation and task ids repeat across servers:
labels are now unique per (round, role, annotation id). ``labelling_project`` is the typed
person → project binding of every human round (pair audit, adjudication, validity checks),
written before the project is created so an interrupted push adopts it.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

LABEL_KEYS = (
    ("audit_label", "audit_id", "uq_label_audit_annotation", "uq_label_audit_role_annotation"),
    (
        "validity_label",
        "check_id",
        "uq_validity_label_annotation",
        "uq_validity_label_role_annotation",
    ),
)


def upgrade() -> None:
    op.create_table(
        "labelling_project",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("family", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("person", sqlmodel.sql.sqltypes.AutoString(length=320), nullable=False),
        sa.Column("person_slug", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("server_url", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=True),
        sa.Column("marker", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("family", "owner_id", "role", name="uq_labelling_project_role"),
    )
    with op.batch_alter_table("labelling_project", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_labelling_project_owner_id"), ["owner_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_labelling_project_person"), ["person"], unique=False)
    for table, owner, old, new in LABEL_KEYS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(old, type_="unique")
            batch_op.create_unique_constraint(new, [owner, "role", "annotation_id"])


def downgrade() -> None:
    for table, owner, old, new in LABEL_KEYS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(new, type_="unique")
            batch_op.create_unique_constraint(old, [owner, "annotation_id"])
    with op.batch_alter_table("labelling_project", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_labelling_project_person"))
        batch_op.drop_index(batch_op.f("ix_labelling_project_owner_id"))
    op.drop_table("labelling_project")
