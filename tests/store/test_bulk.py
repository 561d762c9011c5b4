"""The shapes of the step's queue-long reads, on a real PostgreSQL: named-tuple rows and a
set of strings bound as one parameter."""

from __future__ import annotations

from sqlalchemy import column, event, select, table, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gangq.queue.store import bulk, jobs, reservations, snapshot, tenants

SEEN = table("seen", column("id"), column("name"))


async def _seen(session: AsyncSession, *names: str) -> None:
    await session.execute(text("CREATE TEMP TABLE seen (id int, name text)"))
    for index, name in enumerate(names, start=1):
        await session.execute(
            text("INSERT INTO seen VALUES (:id, :name)"), {"id": index, "name": name}
        )


async def test_column_rows_read_in_the_sessions_transaction_as_named_tuples(
    session_factory: async_sessionmaker[AsyncSession],
) -> None:
    """The session's own uncommitted writes are seen, and each row reads by column name and
    compares as the plain tuple of its values."""
    async with session_factory() as session, session.begin():
        await _seen(session, "a", "b")
        rows = await bulk.column_rows(session, select(SEEN.c.id, SEEN.c.name).order_by(SEEN.c.id))
    assert [(row.id, row.name) for row in rows] == [(1, "a"), (2, "b")]
    assert rows == [(1, "a"), (2, "b")]
    assert rows[1][0:1] == (2,)


async def test_a_text_set_matches_exactly_its_strings_whatever_they_hold(
    session_factory: async_sessionmaker[AsyncSession],
) -> None:
    """Separators, quotes, backslashes and non-ASCII text stay whole; an empty set matches
    nothing. One select serves every set: the strings are its parameter."""
    odd = ["a,b", 'say "hi"', "back\\slash", "größe", "two words"]
    query = select(SEEN.c.name).where(SEEN.c.name.in_(bulk.text_set("chosen"))).order_by(SEEN.c.id)
    async with session_factory() as session, session.begin():
        await _seen(session, *odd, "a", "b", "other")
        chosen = await bulk.column_rows(
            session, query, {"chosen": bulk.text_set_value([*odd, "missing"])}
        )
        assert [row.name for row in chosen] == odd
        none = await bulk.column_rows(session, query, {"chosen": bulk.text_set_value([])})
        assert none == []


async def test_a_steps_reads_execute_the_statements_built_at_import(
    engine: AsyncEngine, session_factory: async_sessionmaker[AsyncSession]
) -> None:
    """Every read a step makes runs one select object, whatever its parameters: a select
    built per call costs each execution a column-by-column remap onto the cached compiled
    form (see `bulk`)."""
    executed: list[object] = []

    def note(conn: object, clauseelement: object, *args: object) -> None:
        executed.append(clauseelement)

    event.listen(engine.sync_engine, "before_execute", note)
    try:
        for uids in (["a"], ["b", "c"]):
            rows, live = snapshot.Views().rows, jobs.LiveRecords()
            async with session_factory() as session, session.begin():
                await rows.read(session)  # everything
                await rows.read(session)  # what was written since
                await live.read(session, uids=uids)  # everything
                await live.read(session, uids=uids)  # what was written since
                await live.read_again(session, uids=uids)
                await reservations.active_by_job(session)
                await tenants.all_quotas(session)
    finally:
        event.remove(engine.sync_engine, "before_execute", note)
    first, second = executed[: len(executed) // 2], executed[len(executed) // 2 :]
    assert len(first) == 12
    assert all(a is b for a, b in zip(first, second, strict=True))
