"""Leadership: one leader at a time, takeover after its connection dies, stale cycles fenced."""

from __future__ import annotations

import asyncio
import contextlib
import gc

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import database, jobs, leader
from gangq.queue.store.errors import NotLeaderError

from .samples import T0, hold, job, placement, until_blocked


async def _terminate(url: str, pid: int) -> None:
    admin = await asyncpg.connect(database.libpq_url(url))
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


async def test_only_one_process_leads(database_url: str) -> None:
    first, second = (
        leader.Leadership(database_url, holder="a"),
        leader.Leadership(database_url, holder="b"),
    )
    try:
        assert await first.try_acquire()
        assert not await second.try_acquire()
        assert await first.try_acquire()
        assert first.epoch == 1
        assert second.epoch is None
    finally:
        await first.release()
        await second.release()


async def test_takeover_after_release_raises_the_epoch(database_url: str) -> None:
    first, second = (
        leader.Leadership(database_url, holder="a"),
        leader.Leadership(database_url, holder="b"),
    )
    try:
        assert await first.try_acquire()
        await first.release()
        assert first.epoch is None
        assert await second.try_acquire()
        assert second.epoch == 2
    finally:
        await second.release()


async def test_a_dead_leader_connection_hands_over_and_fences_the_old_epoch(
    database_url: str, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    old, new = (
        leader.Leadership(database_url, holder="old"),
        leader.Leadership(database_url, holder="new"),
    )
    try:
        assert await old.try_acquire()
        old_term = old.term
        assert old_term is not None
        async with session_factory() as session, session.begin():
            await leader.fence(session, old_term)
        assert old._connection is not None
        await _terminate(database_url, old._connection.get_server_pid())
        assert await new.try_acquire()
        assert not await old.is_held()
        async with session_factory() as session, session.begin():
            with pytest.raises(NotLeaderError, match=f"this process had {old_term.epoch}\\)"):
                await leader.fence(session, old_term)
    finally:
        await old.release()
        await new.release()


async def test_the_same_epoch_handed_out_again_fences_the_deposed_term(
    database_url: str, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    """A failover that lost the last epoch raise (asynchronous replication) lets the promoted
    database hand out an epoch a deposed leader still holds: its token must still fail."""
    old, new = (
        leader.Leadership(database_url, holder="old"),
        leader.Leadership(database_url, holder="new"),
    )
    try:
        assert await old.try_acquire()
        deposed = old.term
        assert deposed is not None
        await old.release()
        async with session_factory() as session, session.begin():
            # What the promoted standby holds: the row as it was before `old` raised it.
            await session.execute(text("UPDATE leadership SET epoch = epoch - 1, term = ''"))
        assert await new.try_acquire()
        assert new.term is not None and new.term.epoch == deposed.epoch
        async with session_factory() as session, session.begin():
            with pytest.raises(NotLeaderError, match="of another term"):
                await leader.fence(session, deposed)
            await leader.fence(session, new.term)
    finally:
        await old.release()
        await new.release()


async def test_a_takeover_waits_for_the_cycle_in_flight(
    database_url: str, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    """The fence row is held FOR SHARE until commit: the new epoch lands after it."""
    old, new = (
        leader.Leadership(database_url, holder="old"),
        leader.Leadership(database_url, holder="new"),
    )
    try:
        assert await old.try_acquire()
        assert old.term is not None
        async with session_factory() as session, session.begin():
            await leader.fence(session, old.term)
            await old.release()
            takeover = asyncio.ensure_future(new.try_acquire())
            observer = await asyncpg.connect(database.libpq_url(database_url))
            try:
                await until_blocked(observer, "UPDATE leadership")
            finally:
                await observer.close()
            assert not takeover.done(), "the new leader raised the epoch under an open cycle"
        assert await takeover
        assert new.epoch == 2
    finally:
        await new.release()


async def test_a_deposed_leaders_lifecycle_writes_commit_nothing(
    database_url: str, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    async with session_factory() as session, session.begin():
        await jobs.enqueue(session, [job("a/one")], actor="test", now=T0)
        await hold(session, "a/one", placement("node-1", 3), at=T0 + 10)
    old, new = (
        leader.Leadership(database_url, holder="old"),
        leader.Leadership(database_url, holder="new"),
    )
    deposed = leader.Fenced(session_factory)
    try:
        assert await old.try_acquire()
        deposed.term = old.term
        async with deposed.transaction() as session:
            await jobs.start_all(session, [jobs.Start("a/one")], at=T0 + 20, actor="old")
        await old.release()
        assert await new.try_acquire()
        writes = (
            lambda s: jobs.finish(s, "a/one", succeeded=True, at=T0 + 30, actor="old", reason="x"),
            lambda s: jobs.requeue(s, "a/one", at=T0 + 30, actor="old", reason="x"),
            lambda s: jobs.suspend(s, "a/one", at=T0 + 30, actor="old", reason="x"),
            lambda s: jobs.shrink(s, "a/one", replicas=1, at=T0 + 30, actor="old"),
            lambda s: jobs.enqueue(s, [job("a/two")], actor="old", now=T0 + 30),
        )
        for write in writes:
            with pytest.raises(NotLeaderError):
                async with deposed.transaction() as session:
                    await write(session)
    finally:
        await old.release()
        await new.release()
    async with session_factory() as session:
        detail = await jobs.get_job(session, "a/one")
        listed = await jobs.list_jobs(session)
    assert detail is not None
    assert (detail.job.phase, detail.placement) == ("Running", (placement("node-1", 3),))
    assert [e.actor for e in detail.history] == ["test", "old"]
    assert [r.key for r in listed.items] == ["a/one"]


async def test_a_process_that_never_led_cannot_write(
    session_factory: async_sessionmaker[AsyncSession],
) -> None:
    with pytest.raises(NotLeaderError, match="does not lead"):
        async with leader.Fenced(session_factory).transaction() as session:
            await jobs.enqueue(session, [job("a/one")], actor="follower", now=T0)
    async with session_factory() as session:
        assert (await jobs.list_jobs(session)).total == 0


@pytest.mark.parametrize("steps", range(1, 6))
async def test_a_release_cut_off_by_a_second_cancellation_still_frees_the_lock(
    database_url: str, steps: int
) -> None:
    """A stopping controller is cancelled while it releases (a second Ctrl-C, a supervisor
    giving up): the lock's connection must close anyway, not linger until the collector
    finds it, holding the lock with it. The collector is off so only the fix can free it."""
    first, second = (
        leader.Leadership(database_url, holder="a"),
        leader.Leadership(database_url, holder="b"),
    )
    assert await first.try_acquire()
    gc.disable()
    try:
        releasing = asyncio.create_task(first.release())
        for _ in range(steps):
            await asyncio.sleep(0)
        releasing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await releasing
        assert await second.try_acquire()
    finally:
        gc.enable()
        await second.release()
        await first.release()
