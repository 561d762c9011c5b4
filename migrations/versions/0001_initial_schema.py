"""Initial schema: tenants and quotas, jobs, reservations, events, leadership, NOTIFY triggers.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL = "gangq_wakeup"
"""LISTEN/NOTIFY channel; the payload says what happened: job, release or quota."""

NOTIFY_FUNCTION = f"""
CREATE FUNCTION gangq_notify_wakeup() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', TG_ARGV[0]);
    RETURN NULL;
END
$$
"""

TRIGGERS = (
    "CREATE TRIGGER jobs_notify_enqueued AFTER INSERT ON jobs "
    "FOR EACH STATEMENT EXECUTE FUNCTION gangq_notify_wakeup('job')",
    "CREATE TRIGGER jobs_notify_requeued AFTER UPDATE OF phase ON jobs FOR EACH ROW "
    "WHEN (NEW.phase = 'Queued' AND OLD.phase <> 'Queued') "
    "EXECUTE FUNCTION gangq_notify_wakeup('job')",
    "CREATE TRIGGER reservations_notify_released AFTER UPDATE OF released_at ON reservations "
    "FOR EACH ROW WHEN (OLD.released_at IS NULL AND NEW.released_at IS NOT NULL) "
    "EXECUTE FUNCTION gangq_notify_wakeup('release')",
    "CREATE TRIGGER tenant_quotas_notify_changed AFTER INSERT OR UPDATE OR DELETE "
    "ON tenant_quotas FOR EACH STATEMENT EXECUTE FUNCTION gangq_notify_wakeup('quota')",
)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("uid", sa.Text(), nullable=False),
        sa.Column("namespace", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("tier", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("devices_per_replica", sa.Integer(), nullable=False),
        sa.Column("device_class", sa.Text(), nullable=False),
        sa.Column(
            "spec",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("phase", sa.Text(), server_default=sa.text("'Queued'"), nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column("max_runtime_s", sa.Integer(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("preemptions", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("restarts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("borrowed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("evicting", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("pending_code", sa.Text(), nullable=True),
        sa.Column("pending_message", sa.Text(), nullable=True),
        sa.Column("queue_position", sa.Integer(), nullable=True),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "phase IN ('Queued', 'Admitted', 'Running', 'Succeeded', 'Failed', 'Suspended')",
            name=op.f("ck_jobs_phase_known"),
        ),
        sa.CheckConstraint("borrowed >= 0", name=op.f("ck_jobs_borrowed_not_negative")),
        sa.CheckConstraint(
            "devices_per_replica > 0", name=op.f("ck_jobs_devices_per_replica_positive")
        ),
        sa.CheckConstraint(
            "max_runtime_s IS NULL OR max_runtime_s > 0", name=op.f("ck_jobs_max_runtime_positive")
        ),
        sa.CheckConstraint("replicas > 0", name=op.f("ck_jobs_replicas_positive")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("uid", name=op.f("uq_jobs_uid")),
    )
    op.create_index(
        "ix_jobs_queued",
        "jobs",
        ["tier", "submitted_at"],
        unique=False,
        postgresql_where=sa.text("phase = 'Queued'"),
    )
    op.create_index("ix_jobs_tenant_phase", "jobs", ["tenant", "phase"], unique=False)
    op.create_index(
        "uq_jobs_live_key",
        "jobs",
        ["namespace", "name"],
        unique=True,
        postgresql_where=sa.text("phase NOT IN ('Succeeded', 'Failed')"),
    )
    op.create_table(
        "leadership",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("holder", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("id = 1", name=op.f("ck_leadership_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leadership")),
    )
    op.create_table(
        "tenants",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("name <> ''", name=op.f("ck_tenants_name_not_empty")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tenants")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("job_key", sa.Text(), nullable=True),
        sa.Column("tenant", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), server_default=sa.text("''"), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column(
            "details",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "kind IN ('enqueued', 'admitted', 'started', 'released', 'preempted', 'requeued', "
            "'failed', 'succeeded', 'suspended', 'resumed', 'quota_changed')",
            name=op.f("ck_events_kind_known"),
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_events_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index("ix_events_at", "events", ["at"], unique=False)
    op.create_index("ix_events_job_id", "events", ["job_id"], unique=False)
    op.create_table(
        "reservations",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("replica", sa.Integer(), nullable=False),
        sa.Column("node", sa.Text(), nullable=True),
        sa.Column("driver", sa.Text(), nullable=False),
        sa.Column("pool", sa.Text(), nullable=False),
        sa.Column("device", sa.Text(), nullable=False),
        sa.Column("reserved_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "released_at IS NULL OR released_at >= reserved_at",
            name=op.f("ck_reservations_interval_ordered"),
        ),
        sa.CheckConstraint("replica >= 0", name=op.f("ck_reservations_replica_not_negative")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_reservations_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reservations")),
    )
    op.create_index(
        "ix_reservations_active_job",
        "reservations",
        ["job_id"],
        unique=False,
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.create_index(
        "ix_reservations_interval", "reservations", ["reserved_at", "released_at"], unique=False
    )
    op.create_index(
        "uq_reservations_active_device",
        "reservations",
        ["driver", "pool", "device"],
        unique=True,
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.create_table(
        "tenant_quotas",
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("device_class", sa.Text(), nullable=False),
        sa.Column("nominal", sa.Integer(), nullable=False),
        sa.Column("borrowing_limit", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("weight", sa.Double(), server_default=sa.text("1"), nullable=False),
        sa.Column(
            "allowed_tiers",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "borrowing_limit >= 0",
            name=op.f("ck_tenant_quotas_borrowing_limit_not_negative"),
        ),
        sa.CheckConstraint("nominal >= 0", name=op.f("ck_tenant_quotas_nominal_not_negative")),
        sa.CheckConstraint("weight > 0", name=op.f("ck_tenant_quotas_weight_positive")),
        sa.ForeignKeyConstraint(
            ["tenant"],
            ["tenants.name"],
            name=op.f("fk_tenant_quotas_tenant_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant", "device_class", name=op.f("pk_tenant_quotas")),
    )
    op.execute("INSERT INTO leadership (id, epoch, holder) VALUES (1, 0, '')")
    op.execute(NOTIFY_FUNCTION)
    for trigger in TRIGGERS:
        op.execute(trigger)


def downgrade() -> None:
    op.drop_table("tenant_quotas")
    op.drop_index(
        "uq_reservations_active_device",
        table_name="reservations",
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.drop_index("ix_reservations_interval", table_name="reservations")
    op.drop_index(
        "ix_reservations_active_job",
        table_name="reservations",
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.drop_table("reservations")
    op.drop_index("ix_events_job_id", table_name="events")
    op.drop_index("ix_events_at", table_name="events")
    op.drop_table("events")
    op.drop_table("tenants")
    op.drop_table("leadership")
    op.drop_index(
        "uq_jobs_live_key",
        table_name="jobs",
        postgresql_where=sa.text("phase NOT IN ('Succeeded', 'Failed')"),
    )
    op.drop_index("ix_jobs_tenant_phase", table_name="jobs")
    op.drop_index("ix_jobs_queued", table_name="jobs", postgresql_where=sa.text("phase = 'Queued'"))
    op.drop_table("jobs")
    op.execute("DROP FUNCTION gangq_notify_wakeup()")
