"""A checkpoint asked of a victim before its eviction: `jobs.checkpoint_requested_at`,
`jobs.evict_by` and `jobs.evicted_for`, stored with the decision so that a new leader continues
the wait instead of asking again or evicting early (rule 6, rule 9).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable columns without a default rewrite no rows: instant on a big queue.
    op.add_column(
        "jobs", sa.Column("checkpoint_requested_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("jobs", sa.Column("evict_by", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("evicted_for", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "evicted_for")
    op.drop_column("jobs", "evict_by")
    op.drop_column("jobs", "checkpoint_requested_at")
