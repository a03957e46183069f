"""append-only that holds on PostgreSQL: TRUNCATE guards and the audit's bound hashes

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

Row triggers (0001/0002/0003/0005) do not fire on ``TRUNCATE``: on PostgreSQL every frozen
table and the event log get a ``BEFORE TRUNCATE`` statement trigger raising the same error
as their row trigger (``TRUNCATE … CASCADE`` of a referencing table is refused too). An
``audit`` row's bound rubric and partition (ids and hashes) cannot be updated, on SQLite
and PostgreSQL: a gate recomputed against another partition is a different audit.
"""

from __future__ import annotations

from rcea.study.store.migrations.triggers import (
    drop_bound_columns_trigger,
    drop_truncate_guard,
    install_bound_columns_trigger,
    install_truncate_guard,
)

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# Every frozen table of 0002, 0003 and 0005 (docs/store.md).
FROZEN_TABLES = (
    "rubric",
    "partition",
    "partition_assignment",
    "audit_pair",
    "codebook_version",
    "codebook_export",
    "judge_version",
    "judge_verdict",
    "validity_item",
)
AUDIT_BOUND_COLUMNS = ("rubric_id", "rubric_hash", "partition_id", "partition_hash")
AUDIT_BOUND_MSG = (
    "audit rows bind their rubric and partition: draw a new audit instead of changing them"
)


def upgrade() -> None:
    install_truncate_guard("event", "rcea_event_append_only")
    for table in FROZEN_TABLES:
        install_truncate_guard(table)
    install_bound_columns_trigger("audit", AUDIT_BOUND_COLUMNS, AUDIT_BOUND_MSG)


def downgrade() -> None:
    drop_bound_columns_trigger("audit")
    for table in (*FROZEN_TABLES, "event"):
        drop_truncate_guard(table)
