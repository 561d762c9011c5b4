"""`leadership.term`: a token drawn by each new leader, checked by every fenced write with the
epoch. After a failover that lost commits, the promoted database can hand out an epoch a
deposed leader already holds in memory; the token, unique per acquisition, still tells them
apart.

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
    op.add_column(
        "leadership", sa.Column("term", sa.Text(), server_default=sa.text("''"), nullable=False)
    )


def downgrade() -> None:
    op.drop_column("leadership", "term")
