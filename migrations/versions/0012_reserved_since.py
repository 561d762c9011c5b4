"""`jobs.reserved_since`: since when a queued job has held its tier's backfill reservation.
A reservation passes to a job ordered ahead of its holder only when that job entered the queue
after the holder got it (rule 5), so the next cycle must know when that was.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("reserved_since", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "reserved_since")
