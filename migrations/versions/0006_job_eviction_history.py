"""What a job's evictions cost so far and when it last entered the queue: `jobs.lost_device_s`
and `jobs.queued_at`, which the decision core weighs before evicting it again (rule 6).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A constant default and a nullable column rewrite no rows: instant on a big queue.
    op.add_column(
        "jobs",
        sa.Column("lost_device_s", sa.Double(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("jobs", sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(op.f("ck_jobs_lost_not_negative"), "jobs", "lost_device_s >= 0")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_jobs_lost_not_negative"), "jobs", type_="check")
    op.drop_column("jobs", "queued_at")
    op.drop_column("jobs", "lost_device_s")
