"""Event kinds are defined once (`EventKind`); the migrated database accepts exactly those."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import database, events
from gangq.queue.store.models import EventKind

from .samples import T0

Sessions = async_sessionmaker[AsyncSession]


async def test_every_kind_is_stored_and_read_back(session_factory: Sessions) -> None:
    written = [
        events.Event(kind=kind, actor="test", at=T0 + index, tenant="t1", reason=kind.value)
        for index, kind in enumerate(EventKind)
    ]
    async with session_factory() as session, session.begin():
        await events.record(session, [(None, event) for event in written])
    async with session_factory() as session:
        newest_first = await events.recent(session, limit=len(written))
        quota_changes = await events.recent(session, kind=EventKind.QUOTA_CHANGED)
    assert list(reversed(newest_first)) == written
    assert all(type(event.kind) is EventKind for event in newest_first)
    assert [event.reason for event in quota_changes] == ["quota_changed"]


async def test_the_database_refuses_an_unknown_kind(database_url: str) -> None:
    connection = await asyncpg.connect(database.libpq_url(database_url))
    try:
        with pytest.raises(asyncpg.CheckViolationError, match="ck_events_kind_known"):
            await connection.execute(
                "INSERT INTO events (kind, actor) VALUES ('quota_change', 'test')"
            )
    finally:
        await connection.close()
