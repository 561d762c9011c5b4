"""Finished runs for runtime predictions; each job's family and checkpoint facts (rules 5, 6).

A new table `runs`, one row per attempt that ran to its own end (succeeded, or failed by
itself; never an eviction, a teardown at startup or a deletion), rather than reading history
from the rows that exist:
- `jobs` keeps one row per job, and a requeue resets its `started_at`: the runtime of every
  attempt but the last is gone, and an attempt's end cannot be told from an eviction there;
- `events` would need a started/ended pairing per attempt and a join to `jobs` for the shape,
  over a table that grows with every queue move: no index can bound "the last N runs of this
  shape" there;
- `reservations` are per device and end the same way for an eviction as for a success.
A narrow append-only table with the shape as columns and an index on the shape then the end
serves the controller's bounded read (the last N runs per shape, on becoming leader) and the
API's (the last N runs of one job's shape) from the index alone.

`jobs` gains `family` (label `gangq.dev/family`, NULL meaning the name without its numeric
suffix), `checkpoint_interval_s` (`spec.checkpointIntervalSeconds`) and `last_checkpoint_at`
(the annotation `gangq.dev/last-checkpoint`), kept so a restarted controller and every API
replica see them without the TrainingJob.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SHAPE = ("tenant", "tier", "replicas", "devices_per_replica", "family")


def upgrade() -> None:
    # Nullable without defaults: adding them rewrites no rows, so it is instant on a big queue.
    op.add_column("jobs", sa.Column("family", sa.Text(), nullable=True))
    op.add_column("jobs", sa.Column("checkpoint_interval_s", sa.Integer(), nullable=True))
    op.add_column(
        "jobs", sa.Column("last_checkpoint_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_check_constraint(
        op.f("ck_jobs_checkpoint_interval_positive"),
        "jobs",
        "checkpoint_interval_s IS NULL OR checkpoint_interval_s > 0",
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("job_key", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("tier", sa.Text(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("devices_per_replica", sa.Integer(), nullable=False),
        sa.Column("family", sa.Text(), nullable=False),
        sa.Column("device_class", sa.Text(), nullable=False),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("runtime_s", sa.Double(), nullable=False),
        sa.CheckConstraint("ended_at >= started_at", name=op.f("ck_runs_interval_ordered")),
        sa.CheckConstraint("runtime_s >= 0", name=op.f("ck_runs_runtime_not_negative")),
        sa.CheckConstraint("replicas > 0", name=op.f("ck_runs_replicas_positive")),
        sa.CheckConstraint(
            "devices_per_replica > 0", name=op.f("ck_runs_devices_per_replica_positive")
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_runs_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index("uq_runs_attempt", "runs", ["job_id", "started_at"], unique=True)
    op.create_index("ix_runs_shape_recent", "runs", [*SHAPE, "ended_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_shape_recent", table_name="runs")
    op.drop_index("uq_runs_attempt", table_name="runs")
    op.drop_table("runs")
    op.drop_constraint(op.f("ck_jobs_checkpoint_interval_positive"), "jobs", type_="check")
    op.drop_column("jobs", "last_checkpoint_at")
    op.drop_column("jobs", "checkpoint_interval_s")
    op.drop_column("jobs", "family")
