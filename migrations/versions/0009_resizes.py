"""Resizing elastic gangs (rule 13): `jobs.shrink_to`, the replicas a gang chosen to shrink
keeps (NULL: it is not shrinking; an evicting row with it set is a shrink, not an eviction),
and `jobs.grown_from`, the size a grow under way started from (NULL: none; the replicas from
it on are being added and are released together once all of them exist).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns without a default rewrite no rows: instant on a big queue.
    op.add_column("jobs", sa.Column("shrink_to", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("grown_from", sa.Integer(), nullable=True))
    op.create_check_constraint(
        op.f("ck_jobs_shrink_to_positive"), "jobs", "shrink_to IS NULL OR shrink_to > 0"
    )
    op.create_check_constraint(
        op.f("ck_jobs_grown_from_positive"), "jobs", "grown_from IS NULL OR grown_from > 0"
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_jobs_grown_from_positive"), "jobs", type_="check")
    op.drop_constraint(op.f("ck_jobs_shrink_to_positive"), "jobs", type_="check")
    op.drop_column("jobs", "grown_from")
    op.drop_column("jobs", "shrink_to")
