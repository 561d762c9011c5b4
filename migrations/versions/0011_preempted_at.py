"""`jobs.preempted_at`: when a queued job last evicted or shrank gangs for itself. Its wait
pays for one eviction only (rule 6, ski rental): the idle or kept time it weighs counts from
there.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("preempted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "preempted_at")
