"""Leadership: one leader at a time, takeover after its connection dies, stale cycles fenced."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import database, leader
from gangq.queue.store.errors import NotLeaderError

from .samples import until_blocked


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
        old_epoch = old.epoch
        assert old_epoch is not None
        async with session_factory() as session, session.begin():
            await leader.fence(session, old_epoch)
        assert old._connection is not None
        await _terminate(database_url, old._connection.get_server_pid())
        assert await new.try_acquire()
        assert not await old.is_held()
        async with session_factory() as session, session.begin():
            with pytest.raises(NotLeaderError, match=f"this process had {old_epoch}"):
                await leader.fence(session, old_epoch)
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
        assert old.epoch is not None
        async with session_factory() as session, session.begin():
            await leader.fence(session, old.epoch)
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
