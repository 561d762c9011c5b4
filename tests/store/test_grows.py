"""Growing a running elastic gang in PostgreSQL (rule 13): which gangs the cycle may grow, the
grow stored with its reservations, and its end or undo."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.device import device_id
from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, grows, jobs, leader, snapshot, tenants
from gangq.queue.store.errors import ConflictError

from .samples import POLICY, T0, holding_rows, inventory, job, placement, quota, ran

Sessions = async_sessionmaker[AsyncSession]
KEY = "ml-train/elastic"
WIDE = inventory(4)


async def _cycle(
    database_url: str, sessions: Sessions, cluster: model.Inventory, *, now: float
) -> model.CycleResult:
    leadership = leader.Leadership(database_url, holder="test")
    assert await leadership.try_acquire() and leadership.term is not None
    try:
        return await admission.run(
            sessions,
            cluster,
            policy=POLICY,
            now=now,
            planner=Planner(),
            term=leadership.term,
        )
    finally:
        await leadership.release()


async def _running_at_two(database_url: str, sessions: Sessions) -> None:
    """4 x 8 at most, 2 at least, without a runtime bound but with checkpoints (so growing
    it pays): two nodes hold 2 replicas, which start."""
    elastic = dataclasses.replace(
        job(KEY, replicas=4, devices_per_replica=8), min_replicas=2, max_runtime_s=None
    )
    async with sessions() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=32),), actor="admin", now=T0
        )
        await jobs.enqueue(session, [elastic], actor="test", now=T0)
        # as the job's spec reports it (checkpoints.describe)
        await session.execute(text("UPDATE jobs SET checkpoint_interval_s = 600"))
    result = await _cycle(database_url, sessions, inventory(2), now=T0 + 10)
    assert [len(a.placement) for a in result.admissions] == [2]
    async with sessions() as session, session.begin():
        await jobs.start_all(session, [jobs.Start(KEY)], at=T0 + 20, actor="controller")


def _grow(*, first: int = 2, borrowed: int = 8) -> model.Grow:
    return model.Grow(
        model.JobKey(KEY),
        (
            placement("node-2", *range(8), replica=first),
            placement("node-3", *range(8), replica=first + 1),
        ),
        borrowed=borrowed,
    )


async def _holding(session: AsyncSession) -> dict[model.JobKey, snapshot.JobColumns]:
    return {snapshot.key_of(row): row for row in await holding_rows(session)}


async def _store(
    sessions: Sessions,
    grow: model.Grow,
    holding: dict[model.JobKey, snapshot.JobColumns] | None = None,
) -> tuple[model.JobKey, ...]:
    async with sessions() as session, session.begin():
        return await grows.write(
            session,
            [grow],
            holding=holding if holding is not None else await _holding(session),
            inventory=WIDE,
            now=T0 + 30,
            actor="controller",
        )


async def _growable(sessions: Sessions) -> tuple[model.PendingJob, ...]:
    async with sessions() as session:
        return (await snapshot.load(session, WIDE, now=T0 + 30)).snapshot.growable


async def test_with_no_job_queued_a_growable_gang_still_sees_when_devices_came_free(
    database_url: str, session_factory: Sessions
) -> None:
    """A grow weighs the idle time of the devices it would add since the gang started (T0 +
    20): the releases since then are read although nothing is queued, the older ones are
    not."""
    await _running_at_two(database_url, session_factory)
    async with session_factory() as session, session.begin():
        await ran(session, job("ml-train/before"), placement("node-2", 0), at=T0 - 600, until=T0)
        await ran(session, job("ml-train/after"), placement("node-3", 0), at=T0, until=T0 + 100)
    async with session_factory() as session:
        loaded = await snapshot.load(session, WIDE, now=T0 + 200)
    assert loaded.snapshot.pending == ()
    assert dict(loaded.snapshot.free_since) == {
        device_id("gpu.nvidia.com", "node-3", "gpu-0"): T0 + 100
    }


async def test_a_running_gang_below_its_maximum_is_growable_as_its_job_at_the_maximum(
    database_url: str, session_factory: Sessions
) -> None:
    await _running_at_two(database_url, session_factory)
    async with session_factory() as session:
        loaded = await snapshot.load(session, WIDE, now=T0 + 30)
        (row,) = await holding_rows(session)
    (growable,) = loaded.snapshot.growable
    assert growable == snapshot.pending_job(row, specs=snapshot.SpecMemo())
    assert (growable.replicas, growable.min_replicas) == (4, 2)
    (running,) = loaded.snapshot.running
    assert (running.size, running.min_replicas) == (2, 2)


@pytest.mark.parametrize(
    "change",
    [
        "started_at = NULL, phase = 'Admitted'",
        "evicting = true",
        "shrink_to = 1",
        "grown_from = 1",
        "size = 4",
        "min_replicas = NULL",
    ],
    ids=["not-started", "evicting", "shrinking", "growing", "at-maximum", "not-elastic"],
)
async def test_a_gang_that_is_not_running_below_its_maximum_undisturbed_is_not_growable(
    database_url: str, session_factory: Sessions, change: str
) -> None:
    await _running_at_two(database_url, session_factory)
    async with session_factory() as session, session.begin():
        await session.execute(text(f"UPDATE jobs SET {change}"))
    assert await _growable(session_factory) == ()


async def test_a_grow_reserves_the_added_replicas_on_the_jobs_row_and_records_its_start(
    database_url: str, session_factory: Sessions
) -> None:
    await _running_at_two(database_url, session_factory)
    assert await _store(session_factory, _grow()) == (KEY,)
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    record = detail.job
    assert (record.phase, record.size, record.grown_from, record.borrowed) == ("Running", 4, 2, 8)
    assert [p.replica for p in detail.placement] == [0, 1, 2, 3]
    assert [p.node for p in detail.placement][2:] == ["node-2", "node-3"]
    event = detail.history[-1]
    assert (str(event.kind), event.reason) == (
        "admitted",
        "growing from 2 to 4 replicas: 16 devices reserved for 2 replicas, 8 borrowed",
    )
    assert [p["replica"] for p in event.details["placement"]] == [0, 1, 2, 3]
    assert await _growable(session_factory) == (), "a growing gang grows once at a time"


async def test_a_grow_decided_on_a_row_that_moved_since_is_skipped(
    database_url: str, session_factory: Sessions
) -> None:
    """The cycle read the gang Running at 2; it was queued again before the grow was stored.
    A grow that does not number on from the gang's size is skipped too."""
    await _running_at_two(database_url, session_factory)
    assert await _store(session_factory, _grow(first=3)) == ()
    async with session_factory() as session:
        read_before = await _holding(session)
    async with session_factory() as session, session.begin():
        await jobs.requeue(session, KEY, at=T0 + 25, actor="controller", reason="node lost")
    assert await _store(session_factory, _grow(), read_before) == ()
    async with session_factory() as session:
        active = await session.scalar(
            text("SELECT count(*) FROM reservations WHERE released_at IS NULL")
        )
        detail = await jobs.get_job(session, KEY)
    assert active == 0
    assert detail is not None and (detail.job.size, detail.job.grown_from) == (None, None)


async def test_a_grow_onto_reserved_devices_is_refused_whole_by_the_database(
    database_url: str, session_factory: Sessions
) -> None:
    await _running_at_two(database_url, session_factory)
    onto_itself = model.Grow(
        model.JobKey(KEY),
        (placement("node-2", *range(8), replica=2), placement("node-0", 0, replica=3)),
    )
    with pytest.raises(ConflictError):
        await _store(session_factory, onto_itself)
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    assert (detail.job.size, detail.job.grown_from, len(detail.placement)) == (2, None, 2)


async def test_a_finished_grow_runs_at_the_new_size_and_is_finished_once(
    database_url: str, session_factory: Sessions
) -> None:
    await _running_at_two(database_url, session_factory)
    await _store(session_factory, _grow())
    async with session_factory() as session, session.begin():
        started = await grows.started_at(session, [(await _holding(session))[KEY].id])
        assert await grows.finish(session, KEY, grown_from=2, at=T0 + 40, actor="controller")
        assert not await grows.finish(session, KEY, grown_from=2, at=T0 + 41, actor="controller")
    assert [at.timestamp() for at in started.values()] == [T0 + 30]
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    assert (detail.job.size, detail.job.grown_from, len(detail.placement)) == (4, None, 4)
    assert detail.history[-1].reason == "grew from 2 to 4 replicas, all pods running"


async def test_an_undone_grow_releases_the_added_replicas_and_keeps_the_old_size(
    database_url: str, session_factory: Sessions
) -> None:
    await _running_at_two(database_url, session_factory)
    await _store(session_factory, _grow(borrowed=8))
    reason = "grow to 4 failed: replica 2 on node-2: not Ready in time"
    async with session_factory() as session, session.begin():
        freed = await grows.undo(
            session, KEY, grown_from=2, at=T0 + 40, actor="controller", reason=reason
        )
    assert freed == 16
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    record = detail.job
    assert (record.phase, record.size, record.grown_from) == ("Running", 2, None)
    assert record.borrowed == 0, "the devices given back were the borrowed ones"
    assert [p.replica for p in detail.placement] == [0, 1]
    assert [p.replica for p in detail.last_placement] == [0, 1], "where it ran last, undone"
    assert (str(detail.history[-1].kind), detail.history[-1].reason) == ("released", reason)
    (growable,) = await _growable(session_factory)
    assert growable.key == KEY, "once undone, the gang may grow again"


async def test_a_gang_queued_again_while_growing_is_queued_without_its_grow(
    database_url: str, session_factory: Sessions
) -> None:
    await _running_at_two(database_url, session_factory)
    await _store(session_factory, _grow())
    async with session_factory() as session, session.begin():
        await jobs.requeue(session, KEY, at=T0 + 40, actor="controller", reason="preempted")
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    assert (detail.job.size, detail.job.grown_from, detail.placement) == (None, None, ())


async def test_the_cycle_stores_the_cores_grow_in_its_transaction(
    database_url: str, session_factory: Sessions
) -> None:
    """Two more nodes come: once they have idled as long as re-forming destroys (16 devices x
    the 600 s since the gang's checkpoint, and a 300-s restart on 32: 19,200 device-s, 1,200 s
    after its start), the cycle grows the gang without end onto them, and what it decided is
    what the store holds."""
    await _running_at_two(database_url, session_factory)
    assert (await _cycle(database_url, session_factory, WIDE, now=T0 + 1219)).grows == ()
    result = await _cycle(database_url, session_factory, WIDE, now=T0 + 1220)
    (grow,) = result.grows
    assert grow.job == KEY and [p.replica for p in grow.placement] == [2, 3]
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    assert (detail.job.size, detail.job.grown_from, detail.job.borrowed) == (4, 2, grow.borrowed)
    assert detail.placement[2:] == grow.placement
    assert detail.history[-1].reason.startswith("growing from 2 to 4 replicas")
    again = await _cycle(database_url, session_factory, WIDE, now=T0 + 1230)
    assert again.grows == (), "a growing gang is not grown again"


@pytest.mark.parametrize(
    ("keep", "grown_from"), [(2, None), (3, 2)], ids=["grow-gone", "grow-goes-on"]
)
async def test_a_shrink_of_a_growing_gang_ends_the_grow_only_with_all_its_added_replicas(
    database_url: str, session_factory: Sessions, keep: int, grown_from: int | None
) -> None:
    """Shrunk to 2, the replicas the grow was adding are gone and so is the grow; shrunk to
    3, replica 2 is still being added."""
    await _running_at_two(database_url, session_factory)
    await _store(session_factory, _grow())
    async with session_factory() as session, session.begin():
        # as a shrink decision leaves the row (admission.write_preemptions)
        await session.execute(text(f"UPDATE jobs SET evicting = true, shrink_to = {keep}"))
        await jobs.shrunk(
            session, KEY, reason="shrunk", lost_device_s=0.0, at=T0 + 40, actor="controller"
        )
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
    assert detail is not None
    assert (detail.job.size, detail.job.grown_from) == (keep, grown_from)
    assert [p.replica for p in detail.placement] == list(range(keep))
