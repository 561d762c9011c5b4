"""The shapes of the step's queue-long reads, on a real PostgreSQL: named-tuple rows and a
set of strings bound as one parameter."""

from __future__ import annotations

from sqlalchemy import column, select, table, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import bulk

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
    nothing."""
    odd = ["a,b", 'say "hi"', "back\\slash", "größe", "two words"]
    async with session_factory() as session, session.begin():
        await _seen(session, *odd, "a", "b", "other")
        query = select(SEEN.c.name).order_by(SEEN.c.id)
        chosen = await session.scalars(
            query.where(SEEN.c.name.in_(bulk.text_set("chosen", [*odd, "missing"])))
        )
        assert list(chosen) == odd
        none = await session.scalars(query.where(SEEN.c.name.in_(bulk.text_set("chosen", []))))
        assert list(none) == []
