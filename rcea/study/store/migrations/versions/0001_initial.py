"""initial schema: study, question, ingest, trajectory, append-only event

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_APPEND_ONLY_MSG = "event table is append-only"


def upgrade() -> None:
    op.create_table(
        "study",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_study_name", "study", ["name"], unique=True)
    op.create_table(
        "question",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=False),
        sa.Column("question_id", sa.String(300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("study_id", "question_id", name="uq_question_study_qid"),
    )
    op.create_index("ix_question_study_id", "question", ["study_id"])
    op.create_table(
        "ingest",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("n_records", sa.Integer(), nullable=False),
        sa.Column("token_artifact", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("study_id", "sha256", name="uq_ingest_study_sha"),
    )
    op.create_index("ix_ingest_study_id", "ingest", ["study_id"])
    op.create_table(
        "trajectory",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=False),
        sa.Column("ingest_id", sa.Integer(), sa.ForeignKey("ingest.id"), nullable=False),
        sa.Column("trajectory_id", sa.String(300), nullable=False),
        sa.Column("question_id", sa.String(300), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("reward", sa.Integer(), nullable=False),
        sa.Column("run", sa.String(200), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("mean_token_entropy", sa.Float(), nullable=True),
        sa.Column("n_tokens", sa.Integer(), nullable=True),
        sa.Column("seq_logprob", sa.Float(), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("validity", sa.Integer(), nullable=True),
        sa.Column("mode", sa.String(300), nullable=True),
        sa.Column("split", sa.String(20), nullable=True),
        sa.Column("token_artifact", sa.Text(), nullable=True),
        sa.Column("token_row", sa.Integer(), nullable=True),
        sa.UniqueConstraint("study_id", "trajectory_id", name="uq_trajectory_study_tid"),
        sa.CheckConstraint("reward IN (0, 1)", name="ck_trajectory_reward_binary"),
        sa.CheckConstraint(
            "validity IS NULL OR validity IN (0, 1)", name="ck_trajectory_validity_binary"
        ),
    )
    op.create_index("ix_trajectory_ingest_id", "trajectory", ["ingest_id"])
    op.create_index("ix_trajectory_study_question", "trajectory", ["study_id", "question_id"])
    op.create_index("ix_trajectory_study_run_step", "trajectory", ["study_id", "run", "step"])
    op.create_table(
        "event",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(100), nullable=False),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id"), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
    )
    op.create_index("ix_event_time", "event", ["time"])
    op.create_index("ix_event_kind", "event", ["kind"])
    op.create_index("ix_event_study_id", "event", ["study_id"])
    _install_append_only_triggers()


def _install_append_only_triggers() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER event_no_{verb.lower()} BEFORE {verb} ON event "
                f"BEGIN SELECT RAISE(ABORT, '{_APPEND_ONLY_MSG}'); END"
            )
    elif dialect == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION rcea_event_append_only() RETURNS trigger AS $$ "
            f"BEGIN RAISE EXCEPTION '{_APPEND_ONLY_MSG}'; END; $$ LANGUAGE plpgsql"
        )
        op.execute(
            "CREATE TRIGGER event_append_only BEFORE UPDATE OR DELETE ON event "
            "FOR EACH ROW EXECUTE FUNCTION rcea_event_append_only()"
        )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS event_no_update")
        op.execute("DROP TRIGGER IF EXISTS event_no_delete")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS event_append_only ON event")
        op.execute("DROP FUNCTION IF EXISTS rcea_event_append_only()")
    for table in ("event", "trajectory", "ingest", "question", "study"):
        op.drop_table(table)
