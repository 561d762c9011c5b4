"""Device reservations: which job holds which device, from when until when.

Owns writing and releasing reservations and reading the active ones. PRODUCT rule 1 is the
partial unique index `uq_reservations_active_device`: a second active reservation of a device
is refused by PostgreSQL and surfaces here as a `ConflictError` naming the device.
Released rows are kept: their intervals are the usage record.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, bindparam, func, select, text, type_coerce, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model, sharing
from gangq.queue.core.device import DeviceId, device_id
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import bulk, liverows, timestamps
from gangq.queue.store.errors import ConflictError
from gangq.queue.store.models import JobRow, ReservationRow

ACTIVE_DEVICE_INDEX = "uq_reservations_active_device"
FIT_CHECK = "reservations_fit"
"""The trigger (migration 0004) refusing counter and capacity over-commits (rule 12)."""
RESERVE = text(
    """
    INSERT INTO reservations (job_id, replica, node, driver, pool, device, reserved_at,
                              share_id, consumed, counters, equivalent)
    SELECT u.job_id, u.replica, u.node, u.driver, u.pool, u.device, :at,
           CAST(u.share_id AS uuid), CAST(u.consumed AS jsonb), CAST(u.counters AS jsonb),
           u.equivalent
    FROM unnest(CAST(:job_ids AS bigint[]), CAST(:replicas AS integer[]),
                CAST(:nodes AS text[]), CAST(:drivers AS text[]), CAST(:pools AS text[]),
                CAST(:devices AS text[]), CAST(:share_ids AS text[]),
                CAST(:consumed AS text[]), CAST(:counters AS text[]),
                CAST(:equivalents AS integer[]))
         AS u(job_id, replica, node, driver, pool, device, share_id, consumed, counters,
              equivalent)
    """
)
_DUPLICATE_DETAIL = re.compile(r"\(driver, pool, device\)=\((?P<device>[^)]*)\)")


def split_device_id(device: DeviceId) -> tuple[str, str, str]:
    """`driver/pool/device` into its parts; the driver is a domain name and holds no slash."""
    driver, _, rest = device.partition("/")
    pool, _, name = rest.rpartition("/")
    if not driver or not pool or not name:
        raise InvalidInputError(f"device id {device!r} is not driver/pool/device")
    return driver, pool, name


def conflict_from(error: IntegrityError) -> ConflictError | None:
    """A clear error for a broken reservation constraint, or None for other violations."""
    if FIT_CHECK in str(getattr(getattr(error.orig, "__cause__", None), "constraint_name", "")):
        message = str(getattr(error.orig, "__cause__", error.orig))
        return ConflictError(f"{message}: another job holds it")
    if ACTIVE_DEVICE_INDEX not in str(error.orig):
        return None
    detail = str(getattr(getattr(error.orig, "__cause__", None), "detail", "") or "")
    found = _DUPLICATE_DETAIL.search(detail)
    device = found["device"].replace(", ", "/") if found else "a device"
    return ConflictError(f"device {device} is already reserved by another job (rule 1)")


def _parts(
    device_id: DeviceId, consumed: sharing.Consumed | None, inventory: model.Inventory
) -> tuple[str | None, str | None, str | None, int]:
    """What one row holds besides the device: share id and capacity of a share, counters the
    device consumes (each with its total, so the database can sum them) and GPU-equivalents."""
    device = inventory.devices.get(device_id)
    if device is None:
        return None, None, None, sharing.WHOLE
    counters = None
    if device.consumes:
        counters = json.dumps(
            {
                set_id: {
                    name: [amount, inventory.counters.get(set_id, {}).get(name, 0)]
                    for name, amount in amounts.items()
                }
                for set_id, amounts in device.consumes
            },
            sort_keys=True,
        )
    share_id = shared = None
    if consumed is not None:
        share_id = str(uuid.uuid4())
        shared = json.dumps(
            {name: [amount, device.capacity.get(name, 0)] for name, amount in consumed},
            sort_keys=True,
        )
    return (
        share_id,
        shared,
        counters,
        sharing.rounded_up(sharing.equivalent(device, consumed or (), inventory.counters)),
    )


async def reserve(
    session: AsyncSession,
    placements: Sequence[tuple[int, Sequence[model.ReplicaPlacement]]],
    *,
    at: datetime,
    inventory: model.Inventory,
) -> None:
    """Reserve every device of these (job id, placement) pairs in one statement; each row says
    which counters and capacity it holds, as `inventory` publishes them.

    A device already held by an active reservation, or a counter or capacity it would
    over-commit, raises ConflictError naming it.
    """
    columns: dict[str, list[object]] = {
        key: []
        for key in (
            "job_ids",
            "replicas",
            "nodes",
            "drivers",
            "pools",
            "devices",
            "share_ids",
            "consumed",
            "counters",
            "equivalents",
        )
    }
    for job_id, placement in placements:
        for replica in placement:
            shares = {share.device: share.consumed for share in replica.shares}
            for device in replica.devices:
                driver, pool, name = split_device_id(device)
                share_id, consumed, counters, equivalent = _parts(
                    device, shares.get(device), inventory
                )
                columns["job_ids"].append(job_id)
                columns["replicas"].append(replica.replica)
                columns["nodes"].append(replica.node)
                columns["drivers"].append(driver)
                columns["pools"].append(pool)
                columns["devices"].append(name)
                columns["share_ids"].append(share_id)
                columns["consumed"].append(consumed)
                columns["counters"].append(counters)
                columns["equivalents"].append(equivalent)
    if not columns["job_ids"]:
        return
    try:
        await session.execute(RESERVE, {"at": at, **columns})
    except IntegrityError as error:
        conflict = conflict_from(error)
        if conflict is None:
            raise
        raise conflict from error


async def release(
    session: AsyncSession, job_ids: Iterable[int], *, at: datetime, from_replica: int = 0
) -> Counter[int]:
    """End the active reservations of these jobs (of their replicas from `from_replica` on:
    a scale-down gives back the highest ones); returns how many devices came free per job."""
    ids = list(job_ids)
    if not ids:
        return Counter()
    result = await session.execute(
        update(ReservationRow)
        .where(
            ReservationRow.job_id.in_(ids),
            ReservationRow.released_at.is_(None),
            ReservationRow.replica >= from_replica,
        )
        .values(released_at=at)
        .returning(ReservationRow.job_id)
    )
    return Counter(result.scalars())


async def active_by_job(
    session: AsyncSession, job_ids: Iterable[int] | None = None
) -> dict[int, tuple[model.ReplicaPlacement, ...]]:
    """Active placements per job id (all jobs, or only the given ones)."""
    query = liverows.ACTIVE_RESERVATIONS
    if job_ids is not None:
        query = query.where(ReservationRow.job_id.in_(list(job_ids)))
    rows: dict[int, list[Any]] = defaultdict(list)
    for row in await bulk.column_rows(session, query):
        rows[row.job_id].append(row)
    return {job_id: liverows.placements_of(held) for job_id, held in rows.items()}


async def reserved_devices(session: AsyncSession) -> frozenset[DeviceId]:
    """Every device gangq holds right now (what the capacity view shows as reserved)."""
    rows = await session.execute(
        select(ReservationRow.driver, ReservationRow.pool, ReservationRow.device).where(
            ReservationRow.released_at.is_(None)
        )
    )
    return frozenset(device_id(driver, pool, name) for driver, pool, name in rows)


@dataclass(frozen=True, slots=True)
class Holder:
    """The job that holds a device: what a device cell of the cluster page names."""

    job: model.JobKey
    tenant: str
    tier: str


async def holders(session: AsyncSession) -> dict[DeviceId, Holder]:
    """Every device gangq holds right now and the job holding it."""
    rows = await session.execute(
        select(
            ReservationRow.driver,
            ReservationRow.pool,
            ReservationRow.device,
            JobRow.namespace,
            JobRow.name,
            JobRow.tenant,
            JobRow.tier,
        )
        .join(JobRow, JobRow.id == ReservationRow.job_id)
        .where(ReservationRow.released_at.is_(None))
    )
    return {
        device_id(driver, pool, name): Holder(model.JobKey(f"{namespace}/{job}"), tenant, tier)
        for driver, pool, name, namespace, job, tenant, tier in rows
    }


COMMIT_OVERLAP_S = 60.0
"""A reservation or release is stamped before its transaction commits: a read of the rows
stamped since the last read goes back this far before the latest stamp it saw, so one that
committed late is still read (`ReleaseLog`, `serving.ServingLog`)."""
_RELEASES = (
    select(
        ReservationRow.driver,
        ReservationRow.pool,
        ReservationRow.device,
        type_coerce(func.max(ReservationRow.released_at), DateTime(timezone=True)),
    )
    .where(ReservationRow.released_at >= bindparam("since"))
    .group_by(ReservationRow.driver, ReservationRow.pool, ReservationRow.device)
)


class ReleaseLog:
    """When each device last came free (`Snapshot.free_since`), kept from one cycle to the
    next so that a cycle reads only the releases since the previous one (index
    `ix_reservations_released`), not the whole usage record.

    Only releases since `floor`, the earliest instant idle time is counted from (a queued
    job's wait, a growable gang's start at its size), matter: a device freed before it counts
    as free since then anyway, so older entries are dropped, and a floor that moves back (a
    job long in backoff queues again) reads the releases from there once more."""

    def __init__(self) -> None:
        self._latest: dict[DeviceId, float] = {}
        self._floor: float | None = None
        self._seen_to: float | None = None

    async def read(self, session: AsyncSession, *, floor: float) -> Mapping[DeviceId, float]:
        if self._floor is None or self._seen_to is None or floor < self._floor:
            since = floor
        else:
            since = max(floor, self._seen_to - COMMIT_OVERLAP_S)
        rows = await session.execute(_RELEASES, {"since": timestamps.to_datetime(since)})
        for driver, pool, name, released_at in rows:
            device, at = device_id(driver, pool, name), timestamps.to_unix(released_at)
            if at > self._latest.get(device, -math.inf):
                self._latest[device] = at
            self._seen_to = max(self._seen_to if self._seen_to is not None else since, at)
        if self._seen_to is None:
            self._seen_to = since
        self._floor = floor
        self._latest = {device: at for device, at in self._latest.items() if at >= floor}
        return dict(self._latest)
