"""Growing a running elastic gang (rule 13) in the store: the grow decision, its end, its undo.

Owns the three writes of a grow. The cycle stores a `Grow` in its own transaction, beside the
admissions: the added replicas' devices are reserved on the job's row (the reservations'
constraints make double allocation impossible, as for an admission), `grown_from` keeps the
size it started from and `size` becomes the new one. The controller ends it once every added
replica runs (`finish`), or undoes it (`undo`) when they do not, after their pods and claims
are gone. Each write checks the row is still where the decision left it, so a stale decision
or a second leader's retry changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model
from gangq.queue.store import events, jobs, reservations, snapshot, timestamps
from gangq.queue.store.models import RUNNING, EventKind, JobRow, ReservationRow

logger = logging.getLogger(__name__)

MARK_GROWING = text(
    f"""
    UPDATE jobs SET grown_from = jobs.size, size = u.size, borrowed = jobs.borrowed + u.borrowed,
           updated_at = :at
    FROM unnest(CAST(:ids AS bigint[]), CAST(:froms AS integer[]), CAST(:sizes AS integer[]),
                CAST(:borrowed AS integer[]))
         AS u(id, size_from, size, borrowed)
    WHERE jobs.id = u.id AND jobs.phase = '{RUNNING}' AND jobs.size = u.size_from
      AND u.size <= jobs.replicas AND jobs.min_replicas IS NOT NULL AND NOT jobs.evicting
      AND jobs.shrink_to IS NULL AND jobs.grown_from IS NULL
    RETURNING jobs.id
    """
)
"""Only a row still Running at the size the grow numbers on from, and neither evicting,
shrinking nor growing, takes its grow."""


def _is_whole(grow: model.Grow, size: int) -> bool:
    """The grow adds each replica from `size` to its new size exactly once."""
    added = sorted(p.replica for p in grow.placement)
    return added == list(range(size, size + len(added))) and bool(added)


def _placement_details(placement: Sequence[model.ReplicaPlacement]) -> list[dict[str, object]]:
    return [{"replica": r.replica, "node": r.node, "devices": list(r.devices)} for r in placement]


async def write(
    session: AsyncSession,
    grows: Sequence[model.Grow],
    *,
    holding: Mapping[model.JobKey, snapshot.JobColumns],
    inventory: model.Inventory,
    now: float,
    actor: str,
) -> tuple[model.JobKey, ...]:
    """Store the grows in the caller's transaction (the cycle's); returns the jobs that took
    theirs. A grow whose gang is no longer Running at the size it numbers on from is skipped:
    the decision was made on a row that has moved since."""
    at = timestamps.to_datetime(now)
    fitting = [
        grow
        for grow in grows
        if grow.job in holding
        and holding[grow.job].size is not None
        and _is_whole(grow, holding[grow.job].size)
    ]
    for grow in grows:
        if grow not in fitting:
            logger.warning("grow of %s skipped: it does not number on from its size", grow.job)
    if not fitting:
        return ()
    rows = [holding[grow.job] for grow in fitting]
    taken = set(
        (
            await session.execute(
                MARK_GROWING,
                {
                    "at": at,
                    "ids": [row.id for row in rows],
                    "froms": [row.size for row in rows],
                    "sizes": [grow.size for grow in fitting],
                    "borrowed": [grow.borrowed for grow in fitting],
                },
            )
        ).scalars()
    )
    stored = [(grow, row) for grow, row in zip(fitting, rows, strict=True) if row.id in taken]
    for grow, row in zip(fitting, rows, strict=True):
        if row.id not in taken:
            logger.info("grow of %s skipped: the gang changed since the cycle read it", grow.job)
    await reservations.reserve(
        session, [(row.id, grow.placement) for grow, row in stored], at=at, inventory=inventory
    )
    # The whole placement, as an admission's event has it: where the job runs from now on.
    placements = await reservations.active_by_job(session, [row.id for _, row in stored])
    await events.record(
        session,
        [
            (
                row.id,
                events.Event(
                    kind=EventKind.ADMITTED,
                    actor=actor,
                    at=now,
                    job_key=grow.job,
                    tenant=row.tenant,
                    reason=f"growing from {row.size} to {grow.size} replicas: "
                    f"{sum(len(r.devices) for r in grow.placement)} devices reserved for "
                    f"{len(grow.placement)} replicas, {grow.borrowed} borrowed",
                    details={
                        "grow": {"from": row.size, "to": grow.size},
                        "placement": _placement_details(placements.get(row.id, ())),
                    },
                ),
            )
            for grow, row in stored
        ],
    )
    return tuple(grow.job for grow, _ in stored)


async def started_at(session: AsyncSession, job_ids: Sequence[int]) -> dict[int, datetime]:
    """When each of these growing jobs' grow was decided: its added replicas' reservations
    are the job's latest active ones (the deadline of its startup runs from here)."""
    if not job_ids:
        return {}
    rows = await session.execute(
        select(ReservationRow.job_id, func.max(ReservationRow.reserved_at))
        .where(ReservationRow.job_id.in_(list(job_ids)), ReservationRow.released_at.is_(None))
        .group_by(ReservationRow.job_id)
    )
    return {job_id: at for job_id, at in rows}


async def _growing(session: AsyncSession, key: str, *, grown_from: int) -> JobRow | None:
    """The job's live row, locked, when it still grows from `grown_from`."""
    namespace, _, name = key.partition("/")
    return await session.scalar(
        select(JobRow)
        .where(JobRow.namespace == namespace, JobRow.name == name)
        .where(JobRow.phase == RUNNING, JobRow.grown_from == grown_from)
        .with_for_update()
    )


async def finish(
    session: AsyncSession, key: str, *, grown_from: int, at: float, actor: str
) -> bool:
    """Every added replica runs: the grow is over. False when the job was not growing from
    `grown_from` any more (finished by an earlier leader, or ended meanwhile)."""
    row = await _growing(session, key, grown_from=grown_from)
    if row is None:
        return False
    row.grown_from = None
    row.updated_at = timestamps.to_datetime(at)
    await jobs.record_event(
        session,
        row,
        kind=EventKind.STARTED,
        actor=actor,
        at=at,
        reason=f"grew from {grown_from} to {row.size} replicas, all pods running",
        details={"grow": {"from": grown_from, "to": row.size}},
    )
    return True


async def undo(
    session: AsyncSession, key: str, *, grown_from: int, at: float, actor: str, reason: str
) -> int:
    """The added replicas did not all come up, and their pods and claims are gone: their
    devices are released as a shrink's are (`jobs.release_from`: borrowed ones first, the
    grow over), the job keeps running at `grown_from` replicas. Returns the devices released
    (0 when the job was not growing from `grown_from` any more)."""
    row = await _growing(session, key, grown_from=grown_from)
    if row is None:
        return 0
    tried = row.size
    freed = await jobs.release_from(session, row, keep=grown_from, at=at)
    row.updated_at = timestamps.to_datetime(at)
    await jobs.record_event(
        session,
        row,
        kind=EventKind.RELEASED,
        actor=actor,
        at=at,
        reason=reason,
        details={"devices_released": freed, "grow": {"from": grown_from, "to": tried}},
    )
    return freed
