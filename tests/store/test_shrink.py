"""Shrinking an elastic gang in PostgreSQL (rule 13): a preemption's victim with `keep` is
stored as a shrink, the core sees the gang as its kept and leaving parts, and carrying out the
shrink releases the leaving replicas' devices in one transaction while the job runs on."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import admission, events, jobs, reservations, snapshot, tenants, usage
from gangq.queue.store.models import EventKind, JobRow

from .samples import T0, hold, inventory, job, placement, quota

Sessions = async_sessionmaker[AsyncSession]
KEY = model.JobKey("ml-train/elastic")
SERVING = model.JobKey("serving/llm")


async def _running(sessions: Sessions, *, grace_s: float | None, borrowed: int = 0) -> None:
    """A 4 x 8 elastic job (2 at least) running for an hour on node-0..node-3, `borrowed`
    of its devices above nominal."""
    elastic = dataclasses.replace(
        job(KEY, replicas=4, devices_per_replica=8), min_replicas=2, checkpoint_grace_s=grace_s
    )
    async with sessions() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=64),), actor="admin", now=T0
        )
        await jobs.enqueue(session, [elastic], actor="test", now=T0 - 7200)
        gang = [placement(f"node-{r}", *range(8), replica=r) for r in range(4)]
        await hold(session, KEY, *gang, at=T0 - 3600, phase="Running")
        await session.execute(
            update(JobRow)
            .where(JobRow.name == "elastic")
            .values(size=4, borrowed=borrowed, started_at=JobRow.admitted_at)
        )


async def _admitted_on_four_nodes(sessions: Sessions) -> None:
    """The history entry an admission writes, with the placement where the job ran."""
    row = await _row(sessions)
    placement = [
        {"replica": r, "node": f"node-{r}", "devices": [f"gpu/node-{r}/{d}" for d in range(8)]}
        for r in range(4)
    ]
    admitted = events.Event(
        kind=EventKind.ADMITTED,
        actor="test",
        at=T0 - 3600,
        job_key=KEY,
        tenant="ml-train",
        details={"placement": placement},
    )
    async with sessions() as session, session.begin():
        await events.record(session, [(row.id, admitted)])


async def _preempt(sessions: Sessions, *, keep: int, lost_device_s: float = 0.0) -> None:
    """The store writes a cycle's preemption whose one victim shrinks to `keep`."""
    reason = f"shrinking from 4 to {keep} replicas: preempted by {SERVING}"
    victim = model.Victim(KEY, reason, lost_device_s=lost_device_s, keep=keep)
    async with sessions() as session, session.begin():
        loaded = await snapshot.load(session, inventory(4), now=T0)
        await admission.write_preemptions(
            session,
            [model.Preemption(SERVING, (victim,))],
            holding=loaded.holding,
            queued=loaded.pending,
            now=T0,
            actor="test",
        )


async def _row(sessions: Sessions) -> JobRow:
    async with sessions() as session:
        row = await session.scalar(select(JobRow).where(JobRow.name == "elastic"))
    assert row is not None
    return row


async def test_a_shrink_is_stored_with_its_request_and_seen_by_the_core_as_two_parts(
    session_factory: Sessions,
) -> None:
    await _running(session_factory, grace_s=60.0, borrowed=16)
    await _preempt(session_factory, keep=2, lost_device_s=32 * 3600.0)
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
        loaded = await snapshot.load(session, inventory(4), now=T0 + 5)
    assert detail is not None
    record = detail.job
    assert (record.is_evicting, record.shrink_to, record.evicted_for) == (True, 2, SERVING)
    assert (record.checkpoint_requested_at, record.evict_by) == (T0, T0 + 60)
    (asked,) = [e for e in detail.history if e.kind == "preempted"]
    assert asked.reason == (
        "shrinking from 4 to 2 replicas: preempted by serving/llm; "
        "checkpoint requested, shrinking within 60s"
    )
    assert asked.details == {"for": SERVING, "from": 4, "to": 2, "checkpoint_grace_s": 60.0}
    # Nothing is lost yet: the whole gang's loss is known only when the shrink is done.
    assert (await _row(session_factory)).lost_device_s == 0.0
    kept, leaving = sorted(loaded.snapshot.running, key=lambda g: g.is_evicting)
    assert [p.replica for p in kept.placement] == [0, 1]
    assert [p.replica for p in leaving.placement] == [2, 3]
    assert (kept.is_evicting, kept.borrowed, kept.min_replicas, kept.size) == (False, 0, 2, 2)
    assert (leaving.is_evicting, leaving.borrowed, leaving.evicting_by) == (True, 16, T0 + 60)


async def test_a_shrink_without_grace_asks_for_nothing(session_factory: Sessions) -> None:
    await _running(session_factory, grace_s=None)
    await _preempt(session_factory, keep=3, lost_device_s=32 * 3600.0)
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    assert (detail.job.shrink_to, detail.job.checkpoint_requested_at, detail.job.evict_by) == (
        3,
        None,
        None,
    )
    (asked,) = [e for e in detail.history if e.kind == "preempted"]
    assert asked.reason == "shrinking from 4 to 3 replicas: preempted by serving/llm"
    assert asked.details == {"for": SERVING, "from": 4, "to": 3}
    assert (await _row(session_factory)).lost_device_s == 0.0


async def test_a_done_shrink_releases_the_leaving_replicas_and_runs_on(
    session_factory: Sessions,
) -> None:
    await _running(session_factory, grace_s=60.0, borrowed=24)
    await _admitted_on_four_nodes(session_factory)
    await _preempt(session_factory, keep=2)
    async with session_factory() as session, session.begin():
        freed = await jobs.shrunk(
            session,
            KEY,
            reason="shrunk from 4 to 2 replicas after the checkpoint it was asked for",
            lost_device_s=32 * 90.0,
            at=T0 + 30,
            actor="test",
        )
    assert freed == 16
    row = await _row(session_factory)
    assert (row.phase, row.size, row.replicas, row.borrowed) == ("Running", 2, 4, 8)
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    assert [p.replica for p in detail.last_placement] == [0, 1], "where it runs last, shrunk"
    assert (row.evicting, row.shrink_to, row.evicted_for) == (False, None, None)
    assert (row.checkpoint_requested_at, row.evict_by) == (None, None)
    assert row.lost_device_s == 32 * 90.0
    async with session_factory() as session:
        held = (await reservations.active_by_job(session, [row.id]))[row.id]
        detail = await jobs.get_job(session, KEY)
        loaded = await snapshot.load(session, inventory(4), now=T0 + 40)
        ledger = await usage.preemption_ledger(session, since=T0, until=T0 + 100)
    assert sorted({p.replica for p in held}) == [0, 1]
    assert detail is not None and detail.job.shrink_to is None and detail.job.size == 2
    (shrunk,) = [e for e in detail.history if e.kind == "released"]
    assert shrunk.reason == (
        "shrunk from 4 to 2 replicas after the checkpoint it was asked for, lost 0.8 device-h"
    )
    assert shrunk.details == {
        "for": SERVING,
        "from": 4,
        "to": 2,
        "devices_released": 16,
        "lost_device_h": 0.8,
    }
    (gang,) = loaded.snapshot.running
    assert (gang.size, gang.is_evicting, gang.lost_before_device_s) == (2, False, 32 * 90.0)
    assert [(r.victim_tenant, r.evictions, r.shrinks, r.lost_device_hours) for r in ledger] == [
        ("ml-train", 0, 1, 0.8)
    ]
    with pytest.raises(InvalidInputError, match="not shrinking"):
        async with session_factory() as session, session.begin():
            await jobs.shrunk(
                session, KEY, reason="again", lost_device_s=0.0, at=T0 + 50, actor="t"
            )


async def test_a_shrinking_gang_requeued_or_ended_is_no_longer_shrinking(
    session_factory: Sessions,
) -> None:
    """A failure or a deletion wins over a shrink: the row says no shrink once it is gone."""
    await _running(session_factory, grace_s=60.0)
    await _preempt(session_factory, keep=2)
    async with session_factory() as session, session.begin():
        await jobs.requeue(session, KEY, at=T0 + 10, actor="test", reason="pod failed")
    row = await _row(session_factory)
    assert (row.phase, row.evicting, row.shrink_to, row.size) == ("Queued", False, None, None)
    async with session_factory() as session, session.begin():
        await hold(session, KEY, placement("node-0", *range(8)), at=T0 + 20, phase="Running")
    await _preempt(session_factory, keep=1)
    assert (await _row(session_factory)).shrink_to == 1
    async with session_factory() as session, session.begin():
        await jobs.finish(session, KEY, succeeded=False, at=T0 + 30, actor="t", reason="deleted")
    row = await _row(session_factory)
    assert (row.phase, row.evicting, row.shrink_to) == ("Failed", False, None)
