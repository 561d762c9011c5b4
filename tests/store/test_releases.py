"""When each device last came free (`reservations.ReleaseLog`, `Snapshot.free_since`): read
from the usage record, since the last cycle's read, on a real PostgreSQL."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core.device import device_id
from gangq.queue.store import jobs, reservations, snapshot, tenants

from .samples import T0, inventory, job, placement, quota, ran

Sessions = async_sessionmaker[AsyncSession]


def _gpu(node: str, index: int) -> str:
    return device_id("gpu.nvidia.com", node, f"gpu-{index}")


async def _run_and_release(
    sessions: Sessions, key: str, *devices: int, node: str, held_at: float, released_at: float
) -> None:
    async with sessions() as session, session.begin():
        queued = job(key, submitted_at=held_at)
        await ran(session, queued, placement(node, *devices), at=held_at, until=released_at)


async def _free_since(sessions: Sessions, views: snapshot.Views, *, now: float) -> dict[str, float]:
    async with sessions() as session:
        loaded = await snapshot.load(session, inventory(2), now=now, views=views)
    return dict(loaded.snapshot.free_since)


async def test_a_cycle_sees_each_device_free_since_its_last_release(
    session_factory: Sessions,
) -> None:
    async with session_factory() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=16),), actor="admin", now=T0
        )
        await jobs.enqueue(session, [job("ml-train/waiting", submitted_at=T0)], actor="t", now=T0)
    # Freed before the queued job waited: it counts from the job's queueing, so is left out.
    await _run_and_release(
        session_factory, "ml-train/early", 0, node="node-0", held_at=T0 - 900, released_at=T0 - 60
    )
    await _run_and_release(
        session_factory, "ml-train/first", 1, 2, node="node-0", held_at=T0, released_at=T0 + 100
    )
    views = snapshot.Views()
    assert await _free_since(session_factory, views, now=T0 + 200) == {
        _gpu("node-0", 1): T0 + 100,
        _gpu("node-0", 2): T0 + 100,
    }

    # Device 1 is held and freed again; device 3's release, stamped before the last one the
    # previous read saw, committed after that read: the overlap still reads it.
    await _run_and_release(
        session_factory, "ml-train/again", 1, node="node-0", held_at=T0 + 150, released_at=T0 + 400
    )
    await _run_and_release(
        session_factory, "ml-train/late", 3, node="node-0", held_at=T0 + 50, released_at=T0 + 90
    )
    assert await _free_since(session_factory, views, now=T0 + 500) == {
        _gpu("node-0", 1): T0 + 400,
        _gpu("node-0", 2): T0 + 100,
        _gpu("node-0", 3): T0 + 90,
    }


async def test_an_earlier_floor_reads_the_releases_from_there_again(
    session_factory: Sessions,
) -> None:
    """Releases before the earliest queued job's wait are dropped; when a job that waited
    from earlier queues (back from its backoff), the log reads from its wait again."""
    await _run_and_release(
        session_factory, "ml-train/old", 0, node="node-1", held_at=T0 - 900, released_at=T0 - 300
    )
    log = reservations.ReleaseLog()
    async with session_factory() as session:
        assert await log.read(session, floor=T0) == {}
        assert await log.read(session, floor=T0 - 600) == {_gpu("node-1", 0): T0 - 300}
