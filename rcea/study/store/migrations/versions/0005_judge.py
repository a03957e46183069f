"""validity audit tables

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

Frozen judge versions, the judges' verdicts and the sampled items of calibrations and
accepted-set checks are immutable in the database itself (triggers reject UPDATE and
DELETE, as in 0002/0003). Problem texts, checks, Label Studio tasks and labels are the
mutable state of the audit.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from rcea.study.store.migrations.triggers import drop_immutable_trigger, install_immutable_trigger

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

FROZEN_TABLES = ("judge_version", "judge_verdict", "validity_item")


def upgrade() -> None:
    op.create_table(
        "judge_version",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("content_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("frozen_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("frozen_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["judge_version.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version", name="uq_judge_version"),
    )
    with op.batch_alter_table("judge_version", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_judge_version_content_hash"), ["content_hash"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_judge_version_name"), ["name"], unique=False)

    op.create_table(
        "judge_problem",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("question_id", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["study.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "question_id", name="uq_judge_problem"),
    )
    with op.batch_alter_table("judge_problem", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_judge_problem_study_id"), ["study_id"], unique=False)

    op.create_table(
        "judge_verdict",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("judge_id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("question_id", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("verdict", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("error_location", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("request_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
        sa.Column("usage", sa.JSON(), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["judge_id"],
            ["judge_version.id"],
        ),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["study.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("judge_id", "study_id", "trajectory_id", name="uq_judge_verdict"),
    )
    with op.batch_alter_table("judge_verdict", schema=None) as batch_op:
        batch_op.create_index(
            "ix_judge_verdict_study_judge", ["study_id", "judge_id"], unique=False
        )

    op.create_table(
        "validity_check",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("judge_id", sa.Integer(), nullable=False),
        sa.Column("judge_hash", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("labelstudio", sa.JSON(), nullable=False),
        sa.Column("created_by", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["judge_id"],
            ["judge_version.id"],
        ),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["study.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    with op.batch_alter_table("validity_check", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_validity_check_study_id"), ["study_id"], unique=False)

    op.create_table(
        "validity_item",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("check_id", sa.Integer(), nullable=False),
        sa.Column("item_key", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("trajectory_id", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("question_id", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
        sa.Column("split", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("judge_verdict", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.ForeignKeyConstraint(
            ["check_id"],
            ["validity_check.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("check_id", "item_key", name="uq_validity_item_key"),
        sa.UniqueConstraint("check_id", "trajectory_id", name="uq_validity_item_tid"),
    )
    with op.batch_alter_table("validity_item", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_validity_item_check_id"), ["check_id"], unique=False)

    op.create_table(
        "validity_label",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("check_id", sa.Integer(), nullable=False),
        sa.Column("annotation_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=True),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=True),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("label", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=30), nullable=False),
        sa.Column("updated_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["check_id"],
            ["validity_check.id"],
        ),
        sa.ForeignKeyConstraint(
            ["item_id"],
            ["validity_item.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("check_id", "annotation_id", name="uq_validity_label_annotation"),
    )
    with op.batch_alter_table("validity_label", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_validity_label_check_id"), ["check_id"], unique=False)

    op.create_table(
        "validity_task",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("check_id", sa.Integer(), nullable=False),
        sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["check_id"],
            ["validity_check.id"],
        ),
        sa.ForeignKeyConstraint(
            ["item_id"],
            ["validity_item.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("check_id", "role", "item_id", name="uq_validity_task_role_item"),
    )
    with op.batch_alter_table("validity_task", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_validity_task_check_id"), ["check_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_validity_task_task_id"), ["task_id"], unique=False)

    for table in FROZEN_TABLES:
        install_immutable_trigger(table)


def downgrade() -> None:
    for table in FROZEN_TABLES:
        drop_immutable_trigger(table)
    with op.batch_alter_table("validity_task", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_validity_task_task_id"))
        batch_op.drop_index(batch_op.f("ix_validity_task_check_id"))

    op.drop_table("validity_task")
    with op.batch_alter_table("validity_label", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_validity_label_check_id"))

    op.drop_table("validity_label")
    with op.batch_alter_table("validity_item", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_validity_item_check_id"))

    op.drop_table("validity_item")
    with op.batch_alter_table("validity_check", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_validity_check_study_id"))

    op.drop_table("validity_check")
    with op.batch_alter_table("judge_verdict", schema=None) as batch_op:
        batch_op.drop_index("ix_judge_verdict_study_judge")

    op.drop_table("judge_verdict")
    with op.batch_alter_table("judge_problem", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_judge_problem_study_id"))

    op.drop_table("judge_problem")
    with op.batch_alter_table("judge_version", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_judge_version_name"))
        batch_op.drop_index(batch_op.f("ix_judge_version_content_hash"))

    op.drop_table("judge_version")
