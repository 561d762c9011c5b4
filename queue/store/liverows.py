"""The rows a leader step reads over the whole queue, kept between reads and brought up to date
with only the rows written since.

A step reads every queued job, every gang holding devices and every active reservation; at
fleet scale (50,000 queued jobs) that read cost more than a second a step, though most steps
change a few rows. Every write of a job or reservation row stamps it with its transaction's id
(`changed_by`, a trigger of migration 0014). A read first takes the oldest transaction still
running (`pg_snapshot_xmin`): a transaction whose rows this read cannot see is that one or a
newer one, so the next read asks only for the rows stamped at or after it. Rows are never
deleted from these tables, so none can vanish unseen: a job that leaves the queue or stops
holding devices comes back with its new phase and is dropped, a reservation with its release.
Reading a row twice is harmless: the newer version replaces the older one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from sqlalchemy import Select, bindparam, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model
from gangq.queue.core.device import DeviceId, device_id
from gangq.queue.store import bulk
from gangq.queue.store.models import HOLDING_PHASES, QUEUED, JobRow, ReservationRow

_OLDEST_RUNNING = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
_OLDEST_RUNNING_KEY = "gangq.oldest_running"
_LIVE_PHASES = (QUEUED, *HOLDING_PHASES)
_RESERVATION_COLUMNS = (
    ReservationRow.id,
    ReservationRow.job_id,
    ReservationRow.replica,
    ReservationRow.node,
    ReservationRow.driver,
    ReservationRow.pool,
    ReservationRow.device,
    ReservationRow.share_id,
    ReservationRow.consumed,
    ReservationRow.released_at,
)
ACTIVE_RESERVATIONS = select(*_RESERVATION_COLUMNS).where(ReservationRow.released_at.is_(None))
"""Every active reservation, built once: a step reads it (see `bulk`)."""
_RESERVATIONS_WRITTEN = select(*_RESERVATION_COLUMNS).where(
    ReservationRow.changed_by >= bindparam("since")
)

Row = Any
"""A row as `bulk.column_rows` returns it: a named tuple of the select's columns."""
Placements = dict[int, tuple[model.ReplicaPlacement, ...]]
"""Active placements by job id, replicas in order."""


async def oldest_running(session: AsyncSession) -> int:
    """The oldest transaction still running: a read that takes it before its selects sees
    every row stamped below it, so the next read needs only the rows stamped from it on.

    Asked once per session: the step's readers share one (the job records and the gangs
    after the cycle), and an instant taken earlier is never above a later one, so it only
    makes the next read start a little earlier."""
    found = session.info.get(_OLDEST_RUNNING_KEY)
    if found is None:
        found = session.info[_OLDEST_RUNNING_KEY] = int(
            (await session.execute(_OLDEST_RUNNING)).scalar_one()
        )
    return int(found)


def job_selects(columns: Sequence[Any]) -> tuple[Select[Any], Select[Any]]:
    """The full read and the read of rows written since, of the live jobs' `columns` (which
    must include the id, phase and `not_before`)."""
    return (
        select(*columns).where(JobRow.phase.in_(_LIVE_PHASES)).order_by(JobRow.id),
        select(*columns).where(JobRow.changed_by >= bindparam("since")),
    )


class LiveRows:
    """Queued and holding job rows and active reservations, as of the last `read`."""

    def __init__(self, full: Select[Any], written: Select[Any]) -> None:
        """`full` and `written` come from `job_selects`."""
        self._full, self._written = full, written
        self._since: int | None = None
        self._jobs: dict[int, Row] = {}
        self._by_job: dict[int, dict[int, Row]] = defaultdict(dict)
        """Active reservation rows by job id, then by reservation id."""
        self._placements: Placements = {}
        self._top = -1
        """The highest job id kept: `_jobs` is in id order, and a new job nearly always comes
        above it (one that does not, such as a refused job queued again, has them sorted)."""

    async def read(self, session: AsyncSession) -> None:
        """Bring the rows up to date (all of them at the first read)."""
        since = await oldest_running(session)
        if self._since is None:
            jobs = await bulk.column_rows(session, self._full)
            reservations = await bulk.column_rows(session, ACTIVE_RESERVATIONS)
        else:
            parameters = {"since": self._since}
            jobs = await bulk.column_rows(session, self._written, parameters)
            reservations = await bulk.column_rows(session, _RESERVATIONS_WRITTEN, parameters)
        self._take_jobs(jobs)
        self._take_reservations(reservations)
        self._since = since

    def _take_jobs(self, rows: Iterable[Row]) -> None:
        disordered = False
        for row in sorted(rows, key=attrgetter("id")):
            if row.phase not in _LIVE_PHASES:
                self._jobs.pop(row.id, None)
                continue
            if row.id not in self._jobs and row.id < self._top:
                disordered = True
            self._jobs[row.id] = row
            self._top = max(self._top, row.id)
        if disordered:
            self._jobs = dict(sorted(self._jobs.items()))

    def _take_reservations(self, rows: Iterable[Row]) -> None:
        changed: set[int] = set()
        for row in rows:
            changed.add(row.job_id)
            if row.released_at is None:
                self._by_job[row.job_id][row.id] = row
            else:
                self._by_job[row.job_id].pop(row.id, None)
        for job_id in changed:
            held = self._by_job.get(job_id)
            if held:
                self._placements[job_id] = placements_of(held.values())
            else:
                self._by_job.pop(job_id, None)
                self._placements.pop(job_id, None)

    def queued(self, *, at: datetime) -> list[Row]:
        """Queued rows whose backoff is over at `at`, in id order."""
        return [
            row
            for row in self._jobs.values()
            if row.phase == QUEUED and (row.not_before is None or row.not_before <= at)
        ]

    def holding(self) -> list[Row]:
        """Rows of the gangs holding devices, in id order."""
        return [row for row in self._jobs.values() if row.phase in HOLDING_PHASES]

    def placements(self) -> Placements:
        return dict(self._placements)


def placements_of(rows: Iterable[Row]) -> tuple[model.ReplicaPlacement, ...]:
    """One job's active reservation rows as its placement, replica by replica."""
    replicas: dict[int, tuple[str, list[DeviceId], list[model.Share]]] = {}
    for row in rows:
        entry = replicas.setdefault(row.replica, (row.node or "", [], []))
        device = device_id(row.driver, row.pool, row.device)
        entry[1].append(device)
        if row.share_id is not None:
            amounts = tuple(
                sorted((key, int(value[0])) for key, value in (row.consumed or {}).items())
            )
            entry[2].append(model.Share(device, amounts, str(row.share_id)))
    return tuple(
        model.ReplicaPlacement(
            replica=replica,
            node=model.NodeName(node),
            devices=tuple(sorted(devices)),
            shares=tuple(sorted(shares)),
        )
        for replica, (node, devices, shares) in sorted(replicas.items())
    )
