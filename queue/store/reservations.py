"""Device reservations: which job holds which device, from when until when.

Owns writing and releasing reservations and reading the active ones. PRODUCT rule 1 is the
partial unique index `uq_reservations_active_device`: a second active reservation of a device
is refused by PostgreSQL and surfaces here as a `ConflictError` naming the device.
Released rows are kept: their intervals are the usage record.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model
from gangq.queue.core.device import DeviceId, device_id
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store.errors import ConflictError
from gangq.queue.store.models import ReservationRow

ACTIVE_DEVICE_INDEX = "uq_reservations_active_device"
RESERVE = text(
    """
    INSERT INTO reservations (job_id, replica, node, driver, pool, device, reserved_at)
    SELECT u.job_id, u.replica, u.node, u.driver, u.pool, u.device, :at
    FROM unnest(CAST(:job_ids AS bigint[]), CAST(:replicas AS integer[]),
                CAST(:nodes AS text[]), CAST(:drivers AS text[]), CAST(:pools AS text[]),
                CAST(:devices AS text[])) AS u(job_id, replica, node, driver, pool, device)
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
    if ACTIVE_DEVICE_INDEX not in str(error.orig):
        return None
    detail = str(getattr(getattr(error.orig, "__cause__", None), "detail", "") or "")
    found = _DUPLICATE_DETAIL.search(detail)
    device = found["device"].replace(", ", "/") if found else "a device"
    return ConflictError(f"device {device} is already reserved by another job (rule 1)")


async def reserve(
    session: AsyncSession,
    placements: Sequence[tuple[int, Sequence[model.ReplicaPlacement]]],
    *,
    at: datetime,
) -> None:
    """Reserve every device of these (job id, placement) pairs in one statement.

    A device already held by an active reservation raises ConflictError naming it.
    """
    columns: dict[str, list[object]] = {
        "job_ids": [],
        "replicas": [],
        "nodes": [],
        "drivers": [],
        "pools": [],
        "devices": [],
    }
    for job_id, placement in placements:
        for replica in placement:
            for device in replica.devices:
                driver, pool, name = split_device_id(device)
                columns["job_ids"].append(job_id)
                columns["replicas"].append(replica.replica)
                columns["nodes"].append(replica.node)
                columns["drivers"].append(driver)
                columns["pools"].append(pool)
                columns["devices"].append(name)
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
    query = select(
        ReservationRow.job_id,
        ReservationRow.replica,
        ReservationRow.node,
        ReservationRow.driver,
        ReservationRow.pool,
        ReservationRow.device,
    ).where(ReservationRow.released_at.is_(None))
    if job_ids is not None:
        query = query.where(ReservationRow.job_id.in_(list(job_ids)))
    replicas: dict[int, dict[int, tuple[str, list[DeviceId]]]] = defaultdict(dict)
    for job_id, replica, node, driver, pool, name in await session.execute(query):
        entry = replicas[job_id].setdefault(replica, (node or "", []))
        entry[1].append(device_id(driver, pool, name))
    return {
        job_id: tuple(
            model.ReplicaPlacement(
                replica=replica, node=model.NodeName(node), devices=tuple(sorted(devices))
            )
            for replica, (node, devices) in sorted(per_replica.items())
        )
        for job_id, per_replica in replicas.items()
    }


async def reserved_devices(session: AsyncSession) -> frozenset[DeviceId]:
    """Every device gangq holds right now (what the capacity view shows as reserved)."""
    rows = await session.execute(
        select(ReservationRow.driver, ReservationRow.pool, ReservationRow.device).where(
            ReservationRow.released_at.is_(None)
        )
    )
    return frozenset(device_id(driver, pool, name) for driver, pool, name in rows)
