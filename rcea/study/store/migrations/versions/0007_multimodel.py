"""trajectory sampling settings and truncation

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Per trajectory, the sampling settings the probe recorded (``sampling_temperature``,
``sampling_top_p``), the temperature its ``seq_logprob`` was computed at
(``logprob_temperature``) and whether it hit the token limit before EOS (``truncated``):
ℓ-based numbers are labelled ``cross_entropy`` when sampling differed from ℓ's
distribution, and truncated samples are counted (docs/estimators.md item 2). All nullable: files
without them ingest as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COLUMNS = (
    ("truncated", sa.Boolean()),
    ("sampling_temperature", sa.Float()),
    ("sampling_top_p", sa.Float()),
    ("logprob_temperature", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table("trajectory") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trajectory") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
