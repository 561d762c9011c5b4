"""An index on `reservations.released_at`: each cycle reads the releases since the last one
(when each device came free, which a preemption by tier counts idle time from, rule 6)
without scanning the usage record.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_reservations_released",
        "reservations",
        ["released_at"],
        postgresql_where=sa.text("released_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_reservations_released", table_name="reservations")
