"""Usage accounting: device-hours per tenant, tier and device class, from reservation intervals.

Owns the chargeback query. A reservation counts for the part of its interval inside the report
window; one still active counts until the window's end. Hours are GPU-equivalent hours, the unit
of quotas: each row weighs by its `equivalent` (a whole device 1, a 1g.10gb partition of a
7-slice GPU 1/7 rounded up to the thousandth, a quarter share 0.25). It must not read anything
but the reservations and the jobs they belong to.
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
