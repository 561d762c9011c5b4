"""Each job and reservation row names the transaction that last wrote it (`changed_by`), so
that a leader reads again only the rows written since its last read (`store.liverows`).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("jobs", "reservations")
STAMP_FUNCTION = """
CREATE FUNCTION gangq_stamp_writer() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.changed_by := pg_current_xact_id()::text::bigint;
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.execute(STAMP_FUNCTION)
    for table in TABLES:
        op.add_column(table, sa.Column("changed_by", sa.BigInteger(), nullable=True))
        op.execute(
            f"CREATE TRIGGER {table}_stamp_writer BEFORE INSERT OR UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION gangq_stamp_writer()"
        )
        op.execute(f"UPDATE {table} SET changed_by = 0")  # the trigger stamps each row
        op.alter_column(table, "changed_by", nullable=False)
        op.create_index(f"ix_{table}_changed_by", table, ["changed_by"])


def downgrade() -> None:
    for table in TABLES:
        op.drop_index(f"ix_{table}_changed_by", table_name=table)
        op.execute(f"DROP TRIGGER {table}_stamp_writer ON {table}")
        op.drop_column(table, "changed_by")
    op.execute("DROP FUNCTION gangq_stamp_writer()")
