"""The nodes a backfill reservation holds: `jobs.reserved_nodes`, shown with the reserved start.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable without a default: adding it rewrites no rows, so it is instant on a big queue.
    op.add_column("jobs", sa.Column("reserved_nodes", postgresql.ARRAY(sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "reserved_nodes")
