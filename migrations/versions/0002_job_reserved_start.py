"""Backfill reservations per job: `jobs.reserved_start_at`, the start the API shows as an ETA.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable without a default: adding it rewrites no rows, so it is instant on a big queue.
    op.add_column("jobs", sa.Column("reserved_start_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "reserved_start_at")
