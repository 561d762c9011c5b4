"""Reservations of GPU partitions and capacity shares, never over-committed (rule 12).

The API server lets any client allocate a whole GPU and one of its partitions, or shares above a
device's capacity (reference cases 10-12, 10-34), so the allocator's database must refuse them
as it refuses a device reserved twice (rule 1). Each reservation row now says what it holds:
- `counters`: the shared counters the device consumes, `{"driver/pool/set": {"counter":
  [amount, total]}}` in thousandths, NULL for a device that consumes none;
- `share_id` and `consumed`: a share of a multi-allocatable device, its `shareID` (written into
  the claim) and the capacity it takes, `{"capacity": [amount, capacity]}`;
- `equivalent`: the GPU-equivalents the row counts for, in thousandths (1000: a whole device).
The unique index of rule 1 now spans exclusive rows only (shares of one device coexist).

Sums are no row constraint, so statement-level triggers check them after every insert or
update: they take a transaction-level advisory lock per counter set and per shared device the
statement touches (in a fixed order), then sum what the active rows hold. A second writer of the
same counter set, a second leader included, waits for the first to commit and then sees its
rows: one of the two is refused (SQLSTATE 23P01, exclusion violation, constraint named
`reservations_fit`). Plain devices take no lock: the unique index guards them as before.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK_FUNCTION = """
CREATE FUNCTION reservations_fit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lock_key text;
    touched_sets text[];
    bad text;
BEGIN
    SELECT array_agg(DISTINCT s.key) INTO touched_sets
    FROM new_rows n, jsonb_object_keys(n.counters) AS s(key)
    WHERE n.released_at IS NULL AND n.counters IS NOT NULL;
    FOR lock_key IN
        SELECT k FROM (
            SELECT unnest(touched_sets) AS k
            UNION
            SELECT n.driver || '/' || n.pool || '/' || n.device
            FROM new_rows n WHERE n.released_at IS NULL AND n.share_id IS NOT NULL
        ) keys ORDER BY k
    LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('gangq-fit:' || lock_key, 0));
    END LOOP;
    IF touched_sets IS NOT NULL THEN
        SELECT held.set_key || ' counter ' || c.key INTO bad
        FROM (
            SELECT DISTINCT ON (r.driver, r.pool, r.device) r.counters
            FROM reservations r
            WHERE r.released_at IS NULL AND r.counters ?| touched_sets
            ORDER BY r.driver, r.pool, r.device
        ) d, jsonb_each(d.counters) AS held(set_key, amounts), jsonb_each(held.amounts) AS c(key, v)
        WHERE held.set_key = ANY(touched_sets)
        GROUP BY held.set_key, c.key
        HAVING sum((c.v->>0)::numeric) > min((c.v->>1)::numeric)
        LIMIT 1;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'counter set % is over-committed (rule 12)', bad
                USING ERRCODE = '23P01', CONSTRAINT = 'reservations_fit';
        END IF;
    END IF;
    SELECT n.driver || '/' || n.pool || '/' || n.device INTO bad
    FROM new_rows n
    WHERE n.released_at IS NULL AND n.share_id IS NULL AND EXISTS (
        SELECT 1 FROM reservations r
        WHERE r.released_at IS NULL AND r.share_id IS NOT NULL
          AND r.driver = n.driver AND r.pool = n.pool AND r.device = n.device
    )
    LIMIT 1;
    IF bad IS NULL THEN
        SELECT n.driver || '/' || n.pool || '/' || n.device INTO bad
        FROM new_rows n
        WHERE n.released_at IS NULL AND n.share_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM reservations r
            WHERE r.released_at IS NULL AND r.share_id IS NULL
              AND r.driver = n.driver AND r.pool = n.pool AND r.device = n.device
        )
        LIMIT 1;
    END IF;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'device % is reserved whole and shared at once (rule 12)', bad
            USING ERRCODE = '23P01', CONSTRAINT = 'reservations_fit';
    END IF;
    SELECT r.driver || '/' || r.pool || '/' || r.device || ' capacity ' || c.key INTO bad
    FROM reservations r
    JOIN (
        SELECT DISTINCT driver, pool, device FROM new_rows
        WHERE released_at IS NULL AND share_id IS NOT NULL
    ) n USING (driver, pool, device),
    jsonb_each(r.consumed) AS c(key, v)
    WHERE r.released_at IS NULL
    GROUP BY r.driver, r.pool, r.device, c.key
    HAVING sum((c.v->>0)::numeric) > min((c.v->>1)::numeric)
    LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'device % is over-committed by its shares (rule 12)', bad
            USING ERRCODE = '23P01', CONSTRAINT = 'reservations_fit';
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.add_column("reservations", sa.Column("share_id", postgresql.UUID(), nullable=True))
    op.add_column("reservations", sa.Column("consumed", postgresql.JSONB(), nullable=True))
    op.add_column("reservations", sa.Column("counters", postgresql.JSONB(), nullable=True))
    op.add_column(
        "reservations",
        sa.Column("equivalent", sa.Integer(), server_default=sa.text("1000"), nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_reservations_equivalent_bounded"),
        "reservations",
        "equivalent > 0 AND equivalent <= 1000",
    )
    op.create_check_constraint(
        op.f("ck_reservations_share_has_consumed"),
        "reservations",
        "(share_id IS NULL) = (consumed IS NULL)",
    )
    op.drop_index("uq_reservations_active_device", table_name="reservations")
    op.create_index(
        "uq_reservations_active_device",
        "reservations",
        ["driver", "pool", "device"],
        unique=True,
        postgresql_where=sa.text("released_at IS NULL AND share_id IS NULL"),
    )
    op.create_index(
        "ix_reservations_active_shares",
        "reservations",
        ["driver", "pool", "device"],
        postgresql_where=sa.text("released_at IS NULL AND share_id IS NOT NULL"),
    )
    op.create_index(
        "ix_reservations_active_counters",
        "reservations",
        ["counters"],
        postgresql_using="gin",
        postgresql_where=sa.text("released_at IS NULL AND counters IS NOT NULL"),
    )
    op.execute(CHECK_FUNCTION)
    for event in ("INSERT", "UPDATE"):
        op.execute(
            f"CREATE TRIGGER reservations_fit_{event.lower()} AFTER {event} ON reservations "
            "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
            "EXECUTE FUNCTION reservations_fit()"
        )


def downgrade() -> None:
    for event in ("insert", "update"):
        op.execute(f"DROP TRIGGER reservations_fit_{event} ON reservations")
    op.execute("DROP FUNCTION reservations_fit()")
    op.drop_index("ix_reservations_active_counters", table_name="reservations")
    op.drop_index("ix_reservations_active_shares", table_name="reservations")
    op.drop_index("uq_reservations_active_device", table_name="reservations")
    op.create_index(
        "uq_reservations_active_device",
        "reservations",
        ["driver", "pool", "device"],
        unique=True,
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.drop_constraint(op.f("ck_reservations_share_has_consumed"), "reservations", type_="check")
    op.drop_constraint(op.f("ck_reservations_equivalent_bounded"), "reservations", type_="check")
    op.drop_column("reservations", "equivalent")
    op.drop_column("reservations", "counters")
    op.drop_column("reservations", "consumed")
    op.drop_column("reservations", "share_id")
