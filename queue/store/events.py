"""The history: one row per enqueue, admission, release, preemption, failure or quota change.

Owns writing and reading events. Every write that changes a job or a quota records its event in
the same transaction, so the history never disagrees with the state. Events are never updated.
Their kinds are `models.EventKind` alone: no caller spells a kind as a string.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model
from gangq.queue.core.device import DeviceId
from gangq.queue.store import timestamps
from gangq.queue.store.models import EventKind, EventRow

APPEND = text(
    """
    INSERT INTO events (at, kind, job_id, job_key, tenant, reason, actor, details)
    SELECT u.at, u.kind, u.job_id, u.job_key, u.tenant, u.reason, u.actor, CAST(u.details AS jsonb)
    FROM unnest(CAST(:ats AS timestamptz[]), CAST(:kinds AS text[]), CAST(:job_ids AS bigint[]),
                CAST(:job_keys AS text[]), CAST(:tenants AS text[]), CAST(:reasons AS text[]),
                CAST(:actors AS text[]), CAST(:details AS text[]))
         AS u(at, kind, job_id, job_key, tenant, reason, actor, details)
    """
)


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of the history; `at` is unix seconds, `actor` who or what caused it."""

    kind: EventKind
    actor: str
    at: float
    job_key: str | None = None
    tenant: str | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict, hash=False)


async def record(session: AsyncSession, entries: Sequence[tuple[int | None, Event]]) -> None:
    """Append events in one statement; each comes with its job's id (None for tenant events)."""
    if not entries:
        return
    await session.execute(
        APPEND,
        {
            "ats": [timestamps.to_datetime(event.at) for _, event in entries],
            "kinds": [str(event.kind) for _, event in entries],
            "job_ids": [job_id for job_id, _ in entries],
            "job_keys": [event.job_key for _, event in entries],
            "tenants": [event.tenant for _, event in entries],
            "reasons": [event.reason for _, event in entries],
            "actors": [event.actor for _, event in entries],
            "details": [json.dumps(event.details) for _, event in entries],
        },
    )


def _event(row: EventRow) -> Event:
    return Event(
        kind=EventKind(row.kind),
        actor=row.actor,
        at=timestamps.to_unix(row.at),
        job_key=row.job_key,
        tenant=row.tenant,
        reason=row.reason,
        details=dict(row.details),
    )


async def for_job(session: AsyncSession, job_key: str) -> tuple[Event, ...]:
    """The job's whole history, oldest first, across requeues and resubmissions of the key."""
    rows = await session.scalars(
        select(EventRow).where(EventRow.job_key == job_key).order_by(EventRow.id)
    )
    return tuple(_event(row) for row in rows)


async def for_rows(session: AsyncSession, job_ids: Sequence[int]) -> dict[int, tuple[Event, ...]]:
    """The histories of these job rows, oldest first: each queue entry's own, even where
    several entries share a key (a job's scale-ups to the same replica, one after another)."""
    found: dict[int, list[Event]] = {job_id: [] for job_id in job_ids}
    rows = await session.scalars(
        select(EventRow).where(EventRow.job_id.in_(list(job_ids))).order_by(EventRow.id)
    )
    for row in rows:
        found[cast(int, row.job_id)].append(_event(row))
    return {job_id: tuple(history) for job_id, history in found.items()}


async def last_placements(
    session: AsyncSession, job_ids: Sequence[int]
) -> dict[int, tuple[model.ReplicaPlacement, ...]]:
    """Per job row, the placement its latest admission recorded: where it ran last, which
    outlives the reservations' release (a finished or requeued job's last attempt); rows
    never admitted are left out. An elastic gang's resizes since count (rule 13): a shrink
    (`released` naming the size kept, `to`) or an undone grow (`released` naming the grow,
    whose added replicas start at `grow.from`) leaves out the replicas that went."""
    latest = (
        select(func.max(EventRow.id))
        .where(EventRow.job_id.in_(list(job_ids)), EventRow.kind == EventKind.ADMITTED)
        .group_by(EventRow.job_id)
    )
    rows = (
        await session.execute(
            select(EventRow.job_id, EventRow.id, EventRow.details).where(EventRow.id.in_(latest))
        )
    ).all()
    admitted_at = {cast(int, job_id): cast(int, event_id) for job_id, event_id, _ in rows}
    kept = await _sizes_after_resizes(session, admitted_at)
    return {
        cast(int, job_id): tuple(
            model.ReplicaPlacement(
                replica=int(replica["replica"]),
                node=model.NodeName(str(replica["node"])),
                devices=tuple(DeviceId(str(device)) for device in replica["devices"]),
            )
            for replica in details.get("placement") or ()
            if int(replica["replica"]) < kept.get(cast(int, job_id), int(replica["replica"]) + 1)
        )
        for job_id, _, details in rows
    }


async def _sizes_after_resizes(
    session: AsyncSession, admitted_at: dict[int, int]
) -> dict[int, int]:
    """Per job row, the fewest replicas a shrink or an undone grow left it since the event
    `admitted_at` names; jobs with no such resize are left out."""
    if not admitted_at:
        return {}
    released = await session.execute(
        select(EventRow.job_id, EventRow.id, EventRow.details).where(
            EventRow.job_id.in_(list(admitted_at)), EventRow.kind == EventKind.RELEASED
        )
    )
    kept: dict[int, int] = {}
    for job_id, event_id, details in released:
        job = cast(int, job_id)
        if event_id <= admitted_at[job] or not details:
            continue
        grow = details.get("grow")
        size = grow.get("from") if isinstance(grow, dict) else details.get("to")
        if isinstance(size, int):
            kept[job] = min(kept.get(job, size), size)
    return kept


async def recent(
    session: AsyncSession,
    *,
    limit: int = 100,
    tenant: str | None = None,
    kind: EventKind | None = None,
) -> tuple[Event, ...]:
    """The latest events, newest first (for the API and the CLI)."""
    query = select(EventRow).order_by(EventRow.id.desc()).limit(limit)
    if tenant is not None:
        query = query.where(EventRow.tenant == tenant)
    if kind is not None:
        query = query.where(EventRow.kind == kind)
    rows = await session.scalars(query)
    return tuple(_event(row) for row in rows)
