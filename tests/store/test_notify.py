"""Wake-ups: triggers notify on enqueue, release and quota change; timeouts and reconnects."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import database, jobs, notify, tenants

from .samples import T0, hold, job, placement, quota

Sessions = async_sessionmaker[AsyncSession]


async def test_each_change_wakes_the_listener_with_its_reason(
    database_url: str, session_factory: Sessions
) -> None:
    async with notify.Listener(database_url) as listener:
        assert await listener.wait(timeout_s=0.05) == frozenset()
        async with session_factory() as session, session.begin():
            await jobs.enqueue(session, [job("a/one")], actor="test", now=T0)
        assert await listener.wait(timeout_s=5) == {notify.JOB}

        async with session_factory() as session, session.begin():
            await hold(session, "a/one", placement("n", 0), at=T0)
        async with session_factory() as session, session.begin():
            await jobs.finish(
                session, "a/one", succeeded=True, at=T0 + 5, actor="test", reason="done"
            )
        assert await listener.wait(timeout_s=5) == {notify.RELEASE}

        async with session_factory() as session, session.begin():
            await tenants.upsert_tenant(session, "ml", (quota("ml"),), actor="admin", now=T0)
        assert await listener.wait(timeout_s=5) == {notify.QUOTA}


async def test_a_rolled_back_change_does_not_wake(
    database_url: str, session_factory: Sessions
) -> None:
    async with notify.Listener(database_url) as listener:
        async with session_factory() as session:
            await session.begin()
            await jobs.enqueue(session, [job("a/one")], actor="test", now=T0)
            await session.rollback()
        assert await listener.wait(timeout_s=0.2) == frozenset()


async def test_a_lost_listen_connection_reconnects_and_says_so(
    database_url: str, session_factory: Sessions
) -> None:
    async with notify.Listener(database_url) as listener:
        assert listener._connection is not None
        admin = await asyncpg.connect(database.libpq_url(database_url))
        await admin.execute(
            "SELECT pg_terminate_backend($1)", listener._connection.get_server_pid()
        )
        await admin.close()
        assert notify.RECONNECTED in await listener.wait(timeout_s=5)
        async with session_factory() as session, session.begin():
            await jobs.enqueue(session, [job("a/one")], actor="test", now=T0)
        assert await listener.wait(timeout_s=5) == {notify.JOB}


async def test_a_requeue_wakes_for_the_release_and_the_job(
    database_url: str, session_factory: Sessions
) -> None:
    async with session_factory() as session, session.begin():
        await jobs.enqueue(session, [job("a/one")], actor="test", now=T0)
        await hold(session, "a/one", placement("n", 0, 1), at=T0)
    async with notify.Listener(database_url) as listener:
        async with session_factory() as session, session.begin():
            await jobs.requeue(
                session,
                "a/one",
                at=T0 + 9,
                actor="controller",
                reason="gang not ready in time",
                backoff_s=30,
            )
        assert await listener.wait(timeout_s=5) == {notify.RELEASE, notify.JOB}
    async with session_factory() as session:
        detail = await jobs.get_job(session, "a/one")
    assert detail is not None
    assert (detail.job.phase, detail.job.restarts, detail.job.preemptions) == ("Queued", 1, 0)


async def test_closing_the_listener_logs_no_lost_connection(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A clean shutdown says nothing alarming; the lost connection above still warns."""
    caplog.set_level(logging.DEBUG, logger="gangq")
    async with notify.Listener(database_url) as listener:
        assert await listener.wait(timeout_s=0.01) == frozenset()
    await asyncio.sleep(0.1)  # asyncpg calls termination listeners from the event loop
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
