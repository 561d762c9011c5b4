"""The live rows a step keeps (`liverows`): after any writes, reading only the rows written
since gives what a full read gives, a transaction that commits after a read began included."""

from __future__ import annotations

import random

from sqlalchemy import text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import jobs, liverows, snapshot, timestamps
from gangq.queue.store.models import JobRow

from .samples import T0, job

Sessions = async_sessionmaker[AsyncSession]
PHASES = ("Queued", "Queued", "Admitted", "Running", "Succeeded", "Failed")
RESERVE = text(
    "INSERT INTO reservations (job_id, replica, node, driver, pool, device, reserved_at) "
    "VALUES (:job, :replica, :node, 'gpu.nvidia.com', 'pool', :device, :at)"
)
RELEASE = text("UPDATE reservations SET released_at = :at WHERE id = :id")


async def _queue(sessions: Sessions, *keys: str) -> list[str]:
    """Queue a job under each key, in order; their uids."""
    queued = [job(key, submitted_at=T0 + index) for index, key in enumerate(keys)]
    async with sessions() as session, session.begin():
        await jobs.enqueue(session, queued, actor="test", now=T0)
    return [pending.uid for pending in queued]


def _kept() -> liverows.LiveRows:
    return snapshot.Views().rows


async def _same_as_a_full_read(sessions: Sessions, kept: liverows.LiveRows) -> None:
    fresh = _kept()
    async with sessions() as session:
        await kept.read(session)
        await fresh.read(session)
    for offset in (0.0, 30.0, 90.0):
        at = timestamps.to_datetime(T0 + offset)
        assert kept.queued(at=at) == fresh.queued(at=at)
    assert kept.holding() == fresh.holding()
    assert kept.placements() == fresh.placements()


async def test_rows_written_since_bring_the_kept_rows_to_a_full_reads(
    session_factory: Sessions,
) -> None:
    rng = random.Random(7)
    await _queue(session_factory, *(f"ml-train/j-{i}" for i in range(40)))
    kept = _kept()
    await _same_as_a_full_read(session_factory, kept)
    active: list[int] = []
    devices = iter(range(10_000))
    for _ in range(25):
        async with session_factory() as session, session.begin():
            ids = list((await session.execute(text("SELECT id FROM jobs"))).scalars())
            for job_id in rng.sample(ids, 6):
                values: dict[str, object] = {"phase": rng.choice(PHASES)}
                if rng.random() < 0.3:
                    values["not_before"] = timestamps.to_datetime(T0 + rng.choice((10, 60, 120)))
                if rng.random() < 0.3:
                    values["priority"] = rng.randint(0, 9)
                await session.execute(update(JobRow).where(JobRow.id == job_id).values(**values))
            for job_id in rng.sample(ids, 3):
                await session.execute(
                    RESERVE,
                    {
                        "job": job_id,
                        "replica": rng.randint(0, 2),
                        "node": f"node-{rng.randint(0, 3)}",
                        "device": f"gpu-{next(devices)}",
                        "at": timestamps.to_datetime(T0),
                    },
                )
            active = list(
                (
                    await session.execute(
                        text("SELECT id FROM reservations WHERE released_at IS NULL")
                    )
                ).scalars()
            )
            for reservation in rng.sample(active, min(2, len(active))):
                await session.execute(
                    RELEASE, {"id": reservation, "at": timestamps.to_datetime(T0 + 5)}
                )
        await _same_as_a_full_read(session_factory, kept)
    assert active, "the rounds held some reservations"


async def test_a_write_that_commits_after_a_read_began_is_read_the_next_time(
    session_factory: Sessions,
) -> None:
    """The read after a slow transaction's commit finds its rows, though a newer transaction
    committed before the first read: stamps are not in commit order, so the next read starts
    from the oldest transaction still running, not from the newest stamp seen."""
    await _queue(session_factory, "ml-train/slow", "ml-train/fast")
    kept = _kept()
    await _same_as_a_full_read(session_factory, kept)
    async with session_factory() as slow:
        await slow.begin()
        await slow.execute(update(JobRow).where(JobRow.name == "slow").values(priority=7))
        async with session_factory() as fast, fast.begin():
            await fast.execute(update(JobRow).where(JobRow.name == "fast").values(priority=3))
        await _same_as_a_full_read(session_factory, kept)
        await slow.commit()
    await _same_as_a_full_read(session_factory, kept)
    priorities = {row.name: row.priority for row in kept.queued(at=timestamps.to_datetime(T0))}
    assert priorities == {"slow": 7, "fast": 3}


async def test_the_job_records_read_since_are_the_records_a_full_read_gives(
    session_factory: Sessions,
) -> None:
    """`jobs.LiveRecords` keeps the live records and reads the rows written since: after each
    round of writes it gives what a fresh one gives, the finished jobs asked for included."""
    rng = random.Random(11)
    uids = [*await _queue(session_factory, *(f"ml-train/r-{i}" for i in range(30))), "uid-stray"]
    kept = jobs.LiveRecords()
    finished_asked = 0
    for _ in range(15):
        async with session_factory() as session, session.begin():
            for uid in rng.sample(uids[:-1], 5):
                values: dict[str, object] = {"phase": rng.choice(PHASES)}
                if rng.random() < 0.5:
                    values["pending_message"] = f"waits {rng.randint(0, 99)}"
                await session.execute(update(JobRow).where(JobRow.uid == uid).values(**values))
        chosen = set(rng.sample(uids, 8))
        async with session_factory() as session:
            mine = await kept.read(session, uids=chosen)
            fresh = await jobs.LiveRecords().read(session, uids=chosen)
        assert mine == fresh
        finished_asked += sum(record.phase in ("Succeeded", "Failed") for record in mine.values())
    assert finished_asked, "some rounds asked for finished jobs"
