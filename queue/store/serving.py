"""Admissions of the tiers that always preempt, read from the usage record: what the core
forecasts daily serving scale-ups from (`Snapshot.serving_starts`, core module `serving`).

Owns `ServingLog`, which keeps them from one cycle to the next: each admission is one set of
reservations of a job with the same `reserved_at`, and a cycle reads only the reservations
made since the previous one (index `ix_reservations_interval`, which leads with
`reserved_at`), never the whole week again.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model
from gangq.queue.core.serving import DAY_S
from gangq.queue.store import reservations, timestamps
from gangq.queue.store.models import JobRow, ReservationRow

_ADMISSIONS = (
    select(
        ReservationRow.job_id,
        ReservationRow.reserved_at,
        JobRow.tenant,
        JobRow.device_class,
        JobRow.devices_per_replica,
        func.count(func.distinct(ReservationRow.replica)),
    )
    .join(JobRow, JobRow.id == ReservationRow.job_id)
    .where(
        ReservationRow.reserved_at >= bindparam("since"),
        JobRow.tier.in_(bindparam("tiers", expanding=True)),
    )
    .group_by(
        ReservationRow.job_id,
        ReservationRow.reserved_at,
        JobRow.tenant,
        JobRow.device_class,
        JobRow.devices_per_replica,
    )
)


class ServingLog:
    """The serving tiers' admissions of the last days, read since the last cycle."""

    def __init__(self) -> None:
        self._starts: dict[tuple[int, float], model.ServingStart] = {}
        self._seen_to: float | None = None
        self._tiers: frozenset[str] = frozenset()

    async def read(
        self, session: AsyncSession, *, tiers: Collection[str], days: int, now: float
    ) -> tuple[model.ServingStart, ...]:
        """Admissions of `tiers` since `days` days before `now`, oldest first. A change of
        tiers (new settings) reads the whole window again."""
        window = now - days * DAY_S
        wanted = frozenset(tiers)
        if not wanted:
            return ()
        if wanted != self._tiers or self._seen_to is None:
            self._starts, self._tiers, since = {}, wanted, window
        else:
            since = max(window, self._seen_to - reservations.COMMIT_OVERLAP_S)
        rows = await session.execute(
            _ADMISSIONS,
            {"since": timestamps.to_datetime(since), "tiers": sorted(wanted)},
        )
        seen_to = since if self._seen_to is None else self._seen_to
        for job_id, reserved_at, tenant, device_class, per_replica, replicas in rows:
            at = timestamps.to_unix(reserved_at)
            self._starts[(job_id, at)] = model.ServingStart(
                tenant=model.Tenant(tenant),
                device_class=device_class,
                replicas=replicas,
                devices_per_replica=per_replica,
                at=at,
            )
            seen_to = max(seen_to, at)
        self._seen_to = seen_to
        self._starts = {key: start for key, start in self._starts.items() if start.at >= window}
        return tuple(sorted(self._starts.values(), key=lambda start: start.at))
