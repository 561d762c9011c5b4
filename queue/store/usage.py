"""Usage accounting: device-hours used per tenant, tier and device class, and lost to evictions.

Owns the chargeback query (a reservation counts for the part of its interval inside the report
window; one still active counts until the window's end) and the preemption ledger (evictions by
victim and preemptor, with the work each lost, from the `preempted` history entries). Hours are
GPU-equivalent hours, the unit of quotas: each reservation row weighs by its `equivalent` (a
whole device 1, a 1g.10gb partition of a 7-slice GPU 1/7 rounded up to the thousandth, a
quarter share 0.25). It must not read anything but the reservations, the events and the jobs
they belong to.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import timestamps

DEVICE_HOURS = text(
    """
    SELECT j.tenant, j.tier, j.device_class,
           COUNT(DISTINCT j.id) AS jobs,
           SUM(r.equivalent / 1000.0 * EXTRACT(EPOCH FROM
               LEAST(COALESCE(r.released_at, :until), :until) - GREATEST(r.reserved_at, :since)
           )) / 3600.0 AS device_hours
    FROM reservations r JOIN jobs j ON j.id = r.job_id
    WHERE r.reserved_at < :until
      AND (r.released_at IS NULL OR r.released_at > :since)
      AND (CAST(:tenant AS text) IS NULL OR j.tenant = :tenant)
    GROUP BY j.tenant, j.tier, j.device_class
    ORDER BY j.tenant, j.tier, j.device_class
    """
)


@dataclass(frozen=True, slots=True)
class UsageRow:
    tenant: str
    tier: str
    device_class: str
    jobs: int
    device_hours: float


async def report(
    session: AsyncSession, *, since: float, until: float, tenant: str | None = None
) -> tuple[UsageRow, ...]:
    """Device-hours used in [since, until) (unix seconds), what a chargeback report needs."""
    if until <= since:
        raise InvalidInputError("usage window is empty: `since` must be before `until`")
    rows = await session.execute(
        DEVICE_HOURS,
        {
            "since": timestamps.to_datetime(since),
            "until": timestamps.to_datetime(until),
            "tenant": tenant,
        },
    )
    return tuple(
        UsageRow(
            tenant=row.tenant,
            tier=row.tier,
            device_class=row.device_class,
            jobs=int(row.jobs),
            device_hours=float(row.device_hours),
        )
        for row in rows
    )


PREEMPTION_LEDGER = text(
    """
    SELECT v.tenant AS victim_tenant, v.tier AS victim_tier,
           p.tenant AS by_tenant, p.tier AS by_tier,
           COUNT(*) FILTER (WHERE e.kind = 'preempted' AND NOT e.details ? 'to') AS evictions,
           COUNT(*) FILTER (WHERE e.kind = 'preempted' AND e.details ? 'to') AS shrinks,
           SUM(COALESCE(CAST(e.details->>'lost_device_h' AS double precision), 0))
               AS lost_device_hours
    FROM events e JOIN jobs v ON v.id = e.job_id
    LEFT JOIN LATERAL (
        SELECT j.tenant, j.tier FROM jobs j
        WHERE j.namespace = split_part(e.details->>'for', '/', 1)
          AND j.name = split_part(e.details->>'for', '/', 2)
        ORDER BY j.id DESC LIMIT 1
    ) p ON true
    WHERE (e.kind = 'preempted' OR (e.kind = 'released' AND e.details->>'for' IS NOT NULL))
      AND e.at >= :since AND e.at < :until
    GROUP BY 1, 2, 3, 4
    ORDER BY 1, 2, 3, 4
    """
)


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """Evictions that `victim_tenant`'s jobs of `victim_tier` suffered for `by_tenant`'s jobs of
    `by_tier` (None when the preemptor is gone from the store), and the work they lost."""

    victim_tenant: str
    victim_tier: str
    by_tenant: str | None
    by_tier: str | None
    evictions: int
    shrinks: int
    """Elastic gangs shrunk instead of evicted (rule 13): their history entry names the size
    they keep (`to`)."""
    lost_device_hours: float


async def preemption_ledger(
    session: AsyncSession, *, since: float, until: float
) -> tuple[LedgerRow, ...]:
    """Evictions and shrinks in [since, until): who suffered them, who caused them, what they
    cost."""
    if until <= since:
        raise InvalidInputError("ledger window is empty: `since` must be before `until`")
    rows = await session.execute(
        PREEMPTION_LEDGER,
        {"since": timestamps.to_datetime(since), "until": timestamps.to_datetime(until)},
    )
    return tuple(
        LedgerRow(
            victim_tenant=row.victim_tenant,
            victim_tier=row.victim_tier,
            by_tenant=row.by_tenant,
            by_tier=row.by_tier,
            evictions=int(row.evictions),
            shrinks=int(row.shrinks),
            lost_device_hours=float(row.lost_device_hours),
        )
        for row in rows
    )
