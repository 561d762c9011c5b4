"""Elastic jobs (rule 13): `jobs.min_replicas`, the least an elastic job runs at (NULL: not
elastic, it runs at `replicas` only), and `jobs.size`, the replicas its admission placed
(NULL until it is admitted, and again once it is queued anew).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns without a default rewrite no rows: instant on a big queue.
    op.add_column("jobs", sa.Column("min_replicas", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("size", sa.Integer(), nullable=True))
    op.create_check_constraint(
        op.f("ck_jobs_min_replicas_in_range"),
        "jobs",
        "min_replicas IS NULL OR (min_replicas >= 1 AND min_replicas <= replicas)",
    )
    op.create_check_constraint(op.f("ck_jobs_size_positive"), "jobs", "size IS NULL OR size > 0")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_jobs_size_positive"), "jobs", type_="check")
    op.drop_constraint(op.f("ck_jobs_min_replicas_in_range"), "jobs", type_="check")
    op.drop_column("jobs", "size")
    op.drop_column("jobs", "min_replicas")
