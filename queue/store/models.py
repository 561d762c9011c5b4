"""The tables of the durable queue, as SQLAlchemy models (the migrations create them).

Owns column names, types and the constraints that make PRODUCT rules hold in the database,
above all rule 1: one device is never in two active reservations. The models never leave
`gangq.queue.store`; other packages get core dataclasses or the store's frozen rows.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Identity,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

QUEUED: Final = "Queued"
ADMITTED: Final = "Admitted"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
SUSPENDED: Final = "Suspended"
PHASES: Final = (QUEUED, ADMITTED, RUNNING, SUCCEEDED, FAILED, SUSPENDED)
HOLDING_PHASES: Final = (ADMITTED, RUNNING)
"""Phases in which a job holds reserved devices."""
FINISHED_PHASES: Final = (SUCCEEDED, FAILED)


class EventKind(StrEnum):
    """What an event records; the values are stored, and the `kind_known` check lists them.

    Adding a member needs a migration that widens `ck_events_kind_known`.
    """

    ENQUEUED = "enqueued"
    ADMITTED = "admitted"
    STARTED = "started"
    RELEASED = "released"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    SUSPENDED = "suspended"
    RESUMED = "resumed"
    QUOTA_CHANGED = "quota_changed"
    RECOVERED = "recovered"
    """What a new leader did to make the store agree with the cluster (module `recovery`)."""


NAMING: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class TenantRow(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (CheckConstraint("name <> ''", name="name_not_empty"),)


class QuotaRow(Base):
    __tablename__ = "tenant_quotas"

    tenant: Mapped[str] = mapped_column(
        Text, ForeignKey("tenants.name", ondelete="CASCADE"), primary_key=True
    )
    device_class: Mapped[str] = mapped_column(Text, primary_key=True)
    nominal: Mapped[int] = mapped_column(Integer)
    borrowing_limit: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    weight: Mapped[float] = mapped_column(Double, server_default=text("1"))
    allowed_tiers: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    """Empty: every tier is allowed."""
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        CheckConstraint("nominal >= 0", name="nominal_not_negative"),
        CheckConstraint("borrowing_limit >= 0", name="borrowing_limit_not_negative"),
        CheckConstraint("weight > 0", name="weight_positive"),
    )


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    uid: Mapped[str] = mapped_column(Text, unique=True)
    namespace: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    tenant: Mapped[str] = mapped_column(Text)
    tier: Mapped[str] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    replicas: Mapped[int] = mapped_column(Integer)
    devices_per_replica: Mapped[int] = mapped_column(Integer)
    device_class: Mapped[str] = mapped_column(Text)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    """The rest of the job as the decision core needs it (selectors, constraints, topology)."""
    phase: Mapped[str] = mapped_column(Text, server_default=text(f"'{QUEUED}'"))
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    """First submission; a requeue keeps it (PRODUCT rule 6)."""
    not_before: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Backoff after a failed start: not considered before this time (PRODUCT rule 8)."""
    max_runtime_s: Mapped[int | None] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    preemptions: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    restarts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    borrowed: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    evicting: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    checkpoint_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """An evicting job that opted in (`spec.preemption.checkpointGraceSeconds`): when gangq
    asked it for a checkpoint; kept with the decision so a new leader continues the wait."""
    evict_by: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """The end of that grace: evicted then at the latest, with or without a checkpoint."""
    evicted_for: Mapped[str | None] = mapped_column(Text)
    """The preemptor an evicting job makes room for (`namespace/name`), told to its owner."""
    pending_code: Mapped[str | None] = mapped_column(Text)
    pending_message: Mapped[str | None] = mapped_column(Text)
    queue_position: Mapped[int | None] = mapped_column(Integer)
    reserved_start_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """Backfill reservation of a queued job: its earliest start, the ETA shown (rule 5)."""
    reserved_nodes: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    """The nodes that reservation holds for the job; NULL whenever `reserved_start_at` is."""
    admitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    family: Mapped[str | None] = mapped_column(Text)
    """Label `gangq.dev/family`; NULL: the name without its numeric suffix (rule 5)."""
    checkpoint_interval_s: Mapped[int | None] = mapped_column(Integer)
    """`spec.checkpointIntervalSeconds`: an eviction loses at most this much work (rule 6)."""
    last_checkpoint_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """The latest checkpoint the job reported (annotation `gangq.dev/last-checkpoint`)."""
    lost_device_s: Mapped[float] = mapped_column(Double, server_default=text("0"))
    """Work its evictions destroyed so far: it counts against evicting it again (rule 6)."""
    queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """When it last entered the queue again (a requeue); NULL: at `submitted_at`."""
    preempted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    """When it last evicted or shrank gangs for itself: its wait pays for one eviction only
    (`PendingJob.preempted_at`, rule 6)."""
    min_replicas: Mapped[int | None] = mapped_column(Integer)
    """`spec.elastic.minReplicas` (rule 13): the least the job runs at, `replicas` the
    most; NULL: not elastic."""
    size: Mapped[int | None] = mapped_column(Integer)
    """Replicas its latest admission placed (an elastic job may start below `replicas`),
    kept once it ends; NULL until admitted and while queued again."""
    shrink_to: Mapped[int | None] = mapped_column(Integer)
    """The replicas a gang chosen to shrink keeps (rule 13); with `evicting` set it is a
    shrink, not an eviction. NULL: not shrinking."""
    grown_from: Mapped[int | None] = mapped_column(Integer)
    """The size a grow under way started from (rule 13): its replicas from this one on are
    being added, and are released together once all exist. NULL: no grow under way."""
    changed_by: Mapped[int] = mapped_column(BigInteger)
    """The transaction that last wrote the row, stamped by a trigger (migration 0014): a
    leader reads again only the rows written since its last read (`liverows`)."""

    __table_args__ = (
        CheckConstraint(f"phase IN ({_quoted(PHASES)})", name="phase_known"),
        CheckConstraint(
            "checkpoint_interval_s IS NULL OR checkpoint_interval_s > 0",
            name="checkpoint_interval_positive",
        ),
        CheckConstraint("replicas > 0", name="replicas_positive"),
        CheckConstraint(
            "min_replicas IS NULL OR (min_replicas >= 1 AND min_replicas <= replicas)",
            name="min_replicas_in_range",
        ),
        CheckConstraint("size IS NULL OR size > 0", name="size_positive"),
        CheckConstraint("shrink_to IS NULL OR shrink_to > 0", name="shrink_to_positive"),
        CheckConstraint("grown_from IS NULL OR grown_from > 0", name="grown_from_positive"),
        CheckConstraint("devices_per_replica > 0", name="devices_per_replica_positive"),
        CheckConstraint("borrowed >= 0", name="borrowed_not_negative"),
        CheckConstraint("lost_device_s >= 0", name="lost_not_negative"),
        CheckConstraint("max_runtime_s IS NULL OR max_runtime_s > 0", name="max_runtime_positive"),
        # One live job per namespace/name; finished jobs stay for history and usage.
        Index(
            "uq_jobs_live_key",
            "namespace",
            "name",
            unique=True,
            postgresql_where=text(f"phase NOT IN ({_quoted(FINISHED_PHASES)})"),
        ),
        Index(
            "ix_jobs_queued", "tier", "submitted_at", postgresql_where=text(f"phase = '{QUEUED}'")
        ),
        Index("ix_jobs_tenant_phase", "tenant", "phase"),
        Index("ix_jobs_changed_by", "changed_by"),
    )


class ReservationRow(Base):
    __tablename__ = "reservations"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("jobs.id"))
    """No cascade: a job with reservations cannot be deleted, its intervals are usage history."""
    replica: Mapped[int] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(Text)
    driver: Mapped[str] = mapped_column(Text)
    pool: Mapped[str] = mapped_column(Text)
    device: Mapped[str] = mapped_column(Text)
    reserved_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    share_id: Mapped[str | None] = mapped_column(UUID(as_uuid=False))
    """A share of a multi-allocatable device: the claim's `shareID`; NULL: held whole."""
    consumed: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """A share's capacity, `{"capacity": [amount, capacity]}` in thousandths."""
    counters: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """Shared counters the device consumes, `{"driver/pool/set": {"counter": [amount,
    total]}}` in thousandths; NULL when it consumes none."""
    equivalent: Mapped[int] = mapped_column(Integer, server_default=text("1000"))
    """GPU-equivalents the row counts for in quotas and usage, in thousandths."""
    changed_by: Mapped[int] = mapped_column(BigInteger)
    """The transaction that last wrote the row (see `JobRow.changed_by`)."""

    __table_args__ = (
        CheckConstraint("replica >= 0", name="replica_not_negative"),
        CheckConstraint(
            "released_at IS NULL OR released_at >= reserved_at", name="interval_ordered"
        ),
        CheckConstraint("equivalent > 0 AND equivalent <= 1000", name="equivalent_bounded"),
        CheckConstraint("(share_id IS NULL) = (consumed IS NULL)", name="share_has_consumed"),
        # PRODUCT rule 1, enforced by the database: one active exclusive reservation per device.
        # Counters and shares (rule 12) are summed by the trigger `reservations_fit`
        # (migration 0004): no index can hold a sum.
        Index(
            "uq_reservations_active_device",
            "driver",
            "pool",
            "device",
            unique=True,
            postgresql_where=text("released_at IS NULL AND share_id IS NULL"),
        ),
        Index(
            "ix_reservations_active_shares",
            "driver",
            "pool",
            "device",
            postgresql_where=text("released_at IS NULL AND share_id IS NOT NULL"),
        ),
        Index(
            "ix_reservations_active_counters",
            "counters",
            postgresql_using="gin",
            postgresql_where=text("released_at IS NULL AND counters IS NOT NULL"),
        ),
        Index("ix_reservations_active_job", "job_id", postgresql_where=text("released_at IS NULL")),
        Index("ix_reservations_interval", "reserved_at", "released_at"),
        Index(
            "ix_reservations_released",
            "released_at",
            postgresql_where=text("released_at IS NOT NULL"),
        ),
        Index("ix_reservations_changed_by", "changed_by"),
    )


class RunRow(Base):
    """An attempt that ran to its own end: the history runtime predictions read (rule 5)."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("jobs.id", ondelete="SET NULL")
    )
    job_key: Mapped[str] = mapped_column(Text)
    tenant: Mapped[str] = mapped_column(Text)
    tier: Mapped[str] = mapped_column(Text)
    replicas: Mapped[int] = mapped_column(Integer)
    devices_per_replica: Mapped[int] = mapped_column(Integer)
    family: Mapped[str] = mapped_column(Text)
    device_class: Mapped[str] = mapped_column(Text)
    succeeded: Mapped[bool] = mapped_column(Boolean)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    runtime_s: Mapped[float] = mapped_column(Double)
    """The run at `replicas`: an elastic job that ran smaller is recorded with the time its
    work takes at its maximum (`elastic.work_of`), the size predictions are made at."""

    __table_args__ = (
        CheckConstraint("ended_at >= started_at", name="interval_ordered"),
        CheckConstraint("runtime_s >= 0", name="runtime_not_negative"),
        CheckConstraint("replicas > 0", name="replicas_positive"),
        CheckConstraint("devices_per_replica > 0", name="devices_per_replica_positive"),
        # One row per attempt: recording the end of an attempt twice is a no-op.
        Index("uq_runs_attempt", "job_id", "started_at", unique=True),
        # The last runs of one shape come from the index alone (rule 5).
        Index(
            "ix_runs_shape_recent",
            "tenant",
            "tier",
            "replicas",
            "devices_per_replica",
            "family",
            "ended_at",
        ),
    )


class EventRow(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    kind: Mapped[str] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("jobs.id", ondelete="SET NULL")
    )
    job_key: Mapped[str | None] = mapped_column(Text)
    tenant: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text, server_default=text("''"))
    actor: Mapped[str] = mapped_column(Text)
    details: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))

    __table_args__ = (
        CheckConstraint(f"kind IN ({_quoted(tuple(EventKind))})", name="kind_known"),
        Index("ix_events_job_id", "job_id"),
        Index("ix_events_at", "at"),
    )


class LeadershipRow(Base):
    """One row: the fencing epoch, raised by every new leader (see `leader`)."""

    __tablename__ = "leadership"

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    holder: Mapped[str] = mapped_column(Text, server_default=text("''"))
    term: Mapped[str] = mapped_column(Text, server_default=text("''"))
    """Drawn by each new leader: unique per acquisition, where the epoch is unique only on
    one database's history (a promoted standby may not have seen the last raise)."""
    acquired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)
