"""the training seed: part of a run's identity

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

``trajectory.train_seed`` is the training seed (replicate) of the run a trajectory was
sampled from — not its decoding ``seed`` — so a checkpoint is (run, model, training seed,
step) (docs/estimators.md item 17). Empty for trajectories imported without one (a run of one
unnamed seed). ``measurement.train_seed`` keys a producer's measurement the same way, with
-1 for "no training seed" (as ``step = -1`` is "not step-specific"), and joins the
measurement's unique key so that two seeds' measurements never replace each other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

OLD_KEY = ("study_id", "kind", "run", "model", "step", "key")
NEW_KEY = ("study_id", "kind", "run", "model", "train_seed", "step", "key")


def upgrade() -> None:
    with op.batch_alter_table("trajectory") as batch:
        batch.add_column(sa.Column("train_seed", sa.Integer(), nullable=True))
    with op.batch_alter_table("measurement") as batch:
        batch.add_column(sa.Column("train_seed", sa.Integer(), nullable=False, server_default="-1"))
        batch.drop_constraint("uq_measurement_key", type_="unique")
        batch.create_unique_constraint("uq_measurement_key", list(NEW_KEY))


def downgrade() -> None:
    with op.batch_alter_table("measurement") as batch:
        batch.drop_constraint("uq_measurement_key", type_="unique")
        batch.create_unique_constraint("uq_measurement_key", list(OLD_KEY))
        batch.drop_column("train_seed")
    with op.batch_alter_table("trajectory") as batch:
        batch.drop_column("train_seed")
