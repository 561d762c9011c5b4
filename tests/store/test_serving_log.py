"""The serving tiers' admissions a cycle forecasts scale-ups from (`serving.ServingLog`,
`Snapshot.serving_starts`): read from the usage record, since the last cycle's read, on a
real PostgreSQL."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.store import snapshot

from .samples import T0, inventory, job, placement, ran

Sessions = async_sessionmaker[AsyncSession]
DAY = 86_400.0
POLICY = model.Policy()


async def _scale_up(
    sessions: Sessions, name: str, *, at: float, tier: str = "prod-inference"
) -> None:
    """A serving replica admitted at `at` on node 0, scaled down an hour later."""
    queued = job(f"prod/{name}", tenant="prod", tier=tier, devices_per_replica=8, submitted_at=at)
    async with sessions() as session, session.begin():
        await ran(session, queued, placement("node-0", *range(8)), at=at, until=at + 3_600)


async def _starts(sessions: Sessions, views: snapshot.Views, *, now: float) -> list[float]:
    async with sessions() as session:
        loaded = await snapshot.load(session, inventory(2), now=now, views=views, policy=POLICY)
    assert all(
        (s.tenant, s.replicas, s.devices_per_replica) == ("prod", 1, 8)
        for s in loaded.snapshot.serving_starts
    )
    return [start.at for start in loaded.snapshot.serving_starts]


async def test_a_cycle_reads_the_serving_admissions_of_the_last_days(
    session_factory: Sessions,
) -> None:
    await _scale_up(session_factory, "old", at=T0 - 8 * DAY)
    await _scale_up(session_factory, "day-1", at=T0 - 2 * DAY)
    await _scale_up(session_factory, "training", at=T0 - DAY, tier="training")
    views = snapshot.Views()
    assert await _starts(session_factory, views, now=T0) == [T0 - 2 * DAY]

    # Read since the last cycle: a new admission, and one stamped before the latest seen
    # that committed after that read (the overlap still reads it).
    await _scale_up(session_factory, "day-0", at=T0 + 100)
    assert await _starts(session_factory, views, now=T0 + 200) == [T0 - 2 * DAY, T0 + 100]
    await _scale_up(session_factory, "late", at=T0 + 90)
    assert await _starts(session_factory, views, now=T0 + 300) == [
        T0 - 2 * DAY,
        T0 + 90,
        T0 + 100,
    ]
    # A week later the first has left the window.
    assert await _starts(session_factory, views, now=T0 + 5.5 * DAY) == [T0 + 90, T0 + 100]


async def test_without_the_forecast_nothing_is_read(session_factory: Sessions) -> None:
    await _scale_up(session_factory, "day-1", at=T0 - DAY)
    async with session_factory() as session:
        off = model.Policy(serving_forecast_days=None)
        loaded = await snapshot.load(session, inventory(2), now=T0, policy=off)
    assert loaded.snapshot.serving_starts == ()
