"""The admission transaction: read the queue, run the decision core, write its decisions.

One scheduling cycle is one transaction: it takes a transaction-level advisory lock (cycles
never interleave), checks the leadership fence, reads quotas, gangs holding devices and the
queue, calls `run_cycle` with the inventory the caller observed, then writes reservations, job
states, events, positions and pending reasons, and commits, or changes nothing. Policy is
decided only by the core; this module maps rows to core types and back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.planner import Planner
from gangq.queue.store import (
    database,
    events,
    grows,
    leader,
    reservations,
    runs,
    snapshot,
    timestamps,
)
from gangq.queue.store.errors import StoreError
from gangq.queue.store.models import EventKind

CYCLE_LOCK_KEY = 0x6761_6E67_7101
SERIALIZE_CYCLES = text("SELECT pg_advisory_xact_lock(:key)")
MARK_ADMITTED = text(
    """
    UPDATE jobs SET phase = 'Admitted', admitted_at = :at, updated_at = :at,
           borrowed = u.borrowed, size = u.size, attempts = jobs.attempts + 1,
           pending_code = NULL, pending_message = NULL, queue_position = NULL,
           reserved_start_at = NULL, reserved_nodes = NULL
    FROM unnest(CAST(:ids AS bigint[]), CAST(:borrowed AS integer[]), CAST(:sizes AS integer[]))
         AS u(id, borrowed, size)
    WHERE jobs.id = u.id AND jobs.phase = 'Queued'
    """
)
MARK_EVICTING = text(
    """
    UPDATE jobs SET evicting = true, updated_at = :at, lost_device_s = lost_device_s + u.lost,
           evicted_for = u.preemptor, evict_by = u.evict_by, shrink_to = u.shrink_to,
           checkpoint_requested_at = CASE WHEN u.evict_by IS NULL THEN NULL
                                          ELSE CAST(:at AS timestamptz) END
    FROM unnest(CAST(:ids AS bigint[]), CAST(:losts AS double precision[]),
                CAST(:preemptors AS text[]), CAST(:evict_bys AS timestamptz[]),
                CAST(:shrink_tos AS integer[]))
         AS u(id, lost, preemptor, evict_by, shrink_to)
    WHERE jobs.id = u.id AND NOT jobs.evicting
    """
)
MARK_PREEMPTED = text(
    "UPDATE jobs SET preempted_at = :at WHERE id = ANY(CAST(:ids AS bigint[])) AND phase = 'Queued'"
)
SET_PENDING = text(
    """
    UPDATE jobs SET pending_code = u.code, pending_message = u.message,
           queue_position = u.position, reserved_start_at = u.reserved_start_at,
           reserved_nodes = string_to_array(u.nodes, ',')
    FROM unnest(CAST(:ids AS bigint[]), CAST(:codes AS text[]), CAST(:messages AS text[]),
                CAST(:positions AS integer[]), CAST(:starts AS timestamptz[]),
                CAST(:nodes AS text[]))
         AS u(id, code, message, position, reserved_start_at, nodes)
    WHERE jobs.id = u.id
    """
)
FAIL_INVALID = text(
    """
    UPDATE jobs SET phase = 'Failed', finished_at = :at, updated_at = :at,
           pending_code = 'invalid', pending_message = u.message, queue_position = NULL,
           reserved_start_at = NULL, reserved_nodes = NULL
    FROM unnest(CAST(:ids AS bigint[]), CAST(:messages AS text[])) AS u(id, message)
    WHERE jobs.id = u.id AND jobs.phase = 'Queued'
    """
)
RETRY_DELAYS_S = (0.1, 0.5, 2.0)
"""Pauses before re-running a cycle whose connection was lost."""

logger = logging.getLogger(__name__)


def _job_event(
    row: snapshot.JobColumns,
    key: model.JobKey,
    *,
    kind: EventKind,
    actor: str,
    now: float,
    reason: str,
    details: dict[str, object],
) -> tuple[int, events.Event]:
    """A history entry about one job of this cycle, paired with the job's id for `events.record`."""
    event = events.Event(
        kind=kind,
        actor=actor,
        at=now,
        job_key=key,
        tenant=row.tenant,
        reason=reason,
        details=details,
    )
    return row.id, event


async def _write_admissions(
    session: AsyncSession,
    admissions: Sequence[model.Admission],
    *,
    queued: dict[model.JobKey, snapshot.JobColumns],
    inventory: model.Inventory,
    now: float,
    actor: str,
) -> None:
    if not admissions:
        return
    at = timestamps.to_datetime(now)
    await reservations.reserve(
        session,
        [(queued[a.job].id, a.placement) for a in admissions],
        at=at,
        inventory=inventory,
    )
    job_ids = [queued[admission.job].id for admission in admissions]
    result = await session.execute(
        MARK_ADMITTED,
        {
            "at": at,
            "ids": job_ids,
            "borrowed": [a.borrowed for a in admissions],
            "sizes": [len(a.placement) for a in admissions],
        },
    )
    if getattr(result, "rowcount", len(job_ids)) != len(job_ids):
        raise StoreError("queued jobs changed during the cycle; nothing was committed")
    await events.record(
        session,
        [
            _job_event(
                queued[admission.job],
                admission.job,
                kind=EventKind.ADMITTED,
                actor=actor,
                now=now,
                reason=f"{sum(len(r.devices) for r in admission.placement)} devices reserved "
                f"for {len(admission.placement)} replicas, {admission.borrowed} borrowed",
                details={
                    "placement": [
                        {"replica": r.replica, "node": r.node, "devices": list(r.devices)}
                        for r in admission.placement
                    ]
                },
            )
            for admission in admissions
        ],
    )


def _preempted_event(
    row: snapshot.JobColumns,
    victim: model.Victim,
    *,
    preemptor: str,
    grace: float | None,
    actor: str,
    now: float,
) -> tuple[int, events.Event]:
    """The victim's history entry in the core's words (`shrinking from 4 to 2 replicas:
    preempted by ...` for a shrink, whose details name both sizes)."""
    details: dict[str, object] = {"for": preemptor}
    reason = victim.reason
    if victim.keep is not None:
        details |= {"from": row.size or row.replicas, "to": victim.keep}
    elif grace is None:
        details["lost_device_h"] = round(victim.lost_device_s / 3600.0, 3)
    if grace is not None:
        verb = "evicting" if victim.keep is None else "shrinking"
        reason = f"{reason}; checkpoint requested, {verb} within {grace:.0f}s"
        details["checkpoint_grace_s"] = grace
    return _job_event(
        row,
        victim.job,
        kind=EventKind.PREEMPTED,
        actor=actor,
        now=now,
        reason=reason,
        details=details,
    )


async def write_preemptions(
    session: AsyncSession,
    preemptions: Sequence[model.Preemption],
    *,
    holding: dict[model.JobKey, snapshot.JobColumns],
    queued: Mapping[model.JobKey, snapshot.JobColumns],
    now: float,
    actor: str,
) -> None:
    """Mark victims as evicting (the actuator evicts them and requeues them after release) and
    add the work they lose to what their evictions destroyed so far.

    A victim that opted in to be asked first (`checkpoint_grace_s`) is asked for a checkpoint
    now and evicted by the end of its grace: the work it loses is known only then (module
    `gangs` adds it at the eviction), so none is counted here. A victim with `keep` is a
    shrink (rule 13): marked evicting with `shrink_to`, it keeps running on its replicas
    below `keep`; the work a shrink loses is counted when it is carried out, whether or not
    it was asked first, since the whole gang re-forms from its checkpoint then.
    """
    fresh = [
        (preemption.job, victim)
        for preemption in preemptions
        for victim in preemption.victims
        if victim.job in holding and not holding[victim.job].evicting
    ]
    if not fresh:
        return
    at = timestamps.to_datetime(now)
    # the preemptor's wait has paid for these evictions (PendingJob.paying_since)
    preemptors = sorted({queued[p].id for p, _ in fresh if p in queued})
    await session.execute(MARK_PREEMPTED, {"at": at, "ids": preemptors})
    specs = snapshot.SpecMemo()
    graces = [specs.parse(holding[victim.job].spec).checkpoint_grace_s for _, victim in fresh]
    await session.execute(
        MARK_EVICTING,
        {
            "at": at,
            "ids": [holding[victim.job].id for _, victim in fresh],
            "losts": [
                victim.lost_device_s if grace is None and victim.keep is None else 0.0
                for (_, victim), grace in zip(fresh, graces, strict=True)
            ],
            "preemptors": [preemptor for preemptor, _ in fresh],
            "evict_bys": [
                None if grace is None else timestamps.to_datetime(now + grace) for grace in graces
            ],
            "shrink_tos": [victim.keep for _, victim in fresh],
        },
    )
    await events.record(
        session,
        [
            _preempted_event(
                holding[victim.job], victim, preemptor=preemptor, grace=grace, actor=actor, now=now
            )
            for (preemptor, victim), grace in zip(fresh, graces, strict=True)
        ],
    )


async def _write_pending(
    session: AsyncSession,
    result: model.CycleResult,
    *,
    loaded: snapshot.Loaded,
    now: float,
    actor: str,
) -> None:
    """Store reasons, positions and reserved starts, touching only the jobs whose values changed.

    A reserved start belongs to the job the core reserved for in this cycle (rule 5); a job that
    no longer holds the reservation loses it, so a stale ETA is never shown. A job found
    invalid ends Failed with its reason (module `refusals` queues it again once fixed).
    """
    admitted = {admission.job for admission in result.admissions}
    held = {reservation.job: reservation for reservation in result.reservations}
    changed: list[
        tuple[int, str | None, str | None, int | None, datetime | None, list[str] | None]
    ] = []
    invalid: list[tuple[snapshot.JobColumns, str]] = []
    for row in loaded.queued:
        key = snapshot.key_of(row)
        if key in admitted:
            continue
        reason = result.pending.get(key)
        code, message = (str(reason.code), reason.message) if reason else (None, None)
        if row.id in loaded.unreadable:
            code, message = "invalid", loaded.unreadable[row.id]
        if code == "invalid" and message is not None:
            invalid.append((row, message))
            continue
        reservation = held.get(key)
        values = (
            code,
            message,
            result.positions.get(key),
            None if reservation is None else timestamps.to_datetime(reservation.start_at),
            None if reservation is None else sorted(str(node) for node in reservation.nodes),
        )
        stored = (
            row.pending_code,
            row.pending_message,
            row.queue_position,
            row.reserved_start_at,
            row.reserved_nodes,
        )
        if values != stored:
            changed.append((row.id, *values))
    if changed:
        ids, codes, messages, positions, reserved, nodes = zip(*changed, strict=True)
        await session.execute(
            SET_PENDING,
            {
                "ids": list(ids),
                "codes": list(codes),
                "messages": list(messages),
                "positions": list(positions),
                "starts": list(reserved),
                "nodes": [None if names is None else ",".join(names) for names in nodes],
            },
        )
    await _fail_invalid(session, invalid, now=now, actor=actor)


async def _fail_invalid(
    session: AsyncSession,
    invalid: Sequence[tuple[snapshot.JobColumns, str]],
    *,
    now: float,
    actor: str,
) -> None:
    """Queued jobs the core found invalid (the configuration changed since they were queued,
    or their stored spec cannot be read) end Failed: a spec to fix is not a wait."""
    if not invalid:
        return
    await session.execute(
        FAIL_INVALID,
        {
            "at": timestamps.to_datetime(now),
            "ids": [row.id for row, _ in invalid],
            "messages": [message for _, message in invalid],
        },
    )
    await events.record(
        session,
        [
            _job_event(
                row,
                snapshot.key_of(row),
                kind=EventKind.FAILED,
                actor=actor,
                now=now,
                reason=message,
                details={},
            )
            for row, message in invalid
        ],
    )


async def cycle_in_transaction(
    session: AsyncSession,
    inventory: model.Inventory,
    *,
    policy: model.Policy,
    now: float,
    planner: Planner,
    term: leader.Term,
    actor: str = "controller",
    estimator: runs.Estimator | None = None,
    views: snapshot.Views | None = None,
    held_back: Collection[str] = (),
) -> model.CycleResult:
    """One cycle inside the caller's transaction; the caller commits or rolls back.

    With an `estimator` the core plans on predicted runtimes (rule 5), else on runtime bounds;
    `planner` answers a queue, gangs and inventory that did not change since its last cycle
    with that cycle's result (module `planner`); `views` keeps the jobs' core views from one
    cycle to the next (`snapshot.Views`). Queued jobs whose uid is in `held_back` sit this
    cycle out, their stored reason and position left as they were (a wait of a step or two,
    seldom news).
    """
    await session.execute(SERIALIZE_CYCLES, {"key": CYCLE_LOCK_KEY})
    await leader.fence(session, term)
    loaded = await snapshot.load(
        session,
        inventory,
        now=now,
        estimator=estimator,
        views=views,
        policy=policy,
        held_back=held_back,
    )
    result = planner.run(snapshot=loaded.snapshot, policy=policy, now=now)
    await _write_admissions(
        session,
        result.admissions,
        queued=loaded.pending,
        inventory=inventory,
        now=now,
        actor=actor,
    )
    await grows.write(
        session,
        result.grows,
        holding=loaded.holding,
        inventory=inventory,
        now=now,
        actor=actor,
    )
    await write_preemptions(
        session,
        result.preemptions,
        holding=loaded.holding,
        queued=loaded.pending,
        now=now,
        actor=actor,
    )
    await _write_pending(session, result, loaded=loaded, now=now, actor=actor)
    # An idle cycle (nothing admitted, preempted or grown) runs every few seconds: DEBUG.
    logger.log(
        logging.INFO if result.admissions or result.preemptions or result.grows else logging.DEBUG,
        "cycle at %.0f (epoch %d): %d admitted, %d preempting, %d growing, %d pending",
        now,
        term.epoch,
        len(result.admissions),
        len(result.preemptions),
        len(result.grows),
        len(result.pending),
    )
    return result


async def run(
    sessions: async_sessionmaker[AsyncSession],
    inventory: model.Inventory,
    *,
    policy: model.Policy,
    now: float,
    planner: Planner,
    term: leader.Term,
    actor: str = "controller",
    retry_delays_s: Sequence[float] = RETRY_DELAYS_S,
    estimator: runs.Estimator | None = None,
    views: snapshot.Views | None = None,
    held_back: Collection[str] = (),
) -> model.CycleResult:
    """Run one cycle in its own transaction; a lost connection re-runs it on a new one.

    A failed attempt committed nothing, so re-running it cannot double-admit: the queue it
    reads again is exactly the one the failed attempt saw, minus what others committed.
    """
    for attempt, delay_s in enumerate((*retry_delays_s, None), start=1):
        try:
            async with sessions() as session, session.begin():
                return await cycle_in_transaction(
                    session,
                    inventory,
                    policy=policy,
                    now=now,
                    planner=planner,
                    term=term,
                    actor=actor,
                    estimator=estimator,
                    views=views,
                    held_back=held_back,
                )
        except (DBAPIError, OSError) as error:
            problem = getattr(error, "orig", None) or error
            if not database.is_connection_failure(error) or delay_s is None:
                raise StoreError(
                    f"scheduling cycle failed, nothing committed: {problem}"
                ) from error
            logger.warning("cycle attempt %d lost its connection (%s); retrying", attempt, problem)
            await asyncio.sleep(delay_s)
    raise AssertionError("unreachable")
