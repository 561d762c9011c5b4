"""The shapes of the reads a controller step makes over the whole queue: rows and parameters
that cost little per element, since every step reads every live job, and the cost of a row or
an element is paid a thousand times per step on a long queue.

A step's selects are built once, at import, with their parameters bound at execution: a
select built anew for each execution is a different object from the one SQLAlchemy compiled
and cached, and then every execution maps the new select's columns onto the cached result
map, comparing each ORM column with `==` (which builds a SQL expression per column: about a
fifth of a millisecond per read of the job table's twenty-five columns, the largest cost of
a step when steps are many and small).

It must not know any table: callers bring their selects and columns.
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import JSON, Select, Text, bindparam, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession


async def column_rows(
    session: AsyncSession,
    statement: Select[*tuple[Any, ...]],
    parameters: Mapping[str, Any] | None = None,
) -> list[Any]:
    """The rows of a select of plain columns as named tuples, run on the session's connection
    (in its transaction, if any) with its `parameters`.

    Core skips the ORM's set-up per statement and per row (a quarter of the CPU per row), and
    a named tuple's field is a C-level read where a SQLAlchemy `Row`'s attribute goes through
    its key lookup (about 30 ns against 300 ns here): building a job's view reads some twenty
    of them, for every queued job at every step."""
    connection = await session.connection()
    result = await connection.execute(statement, parameters)
    shape = _named_row(tuple(result.keys()))
    return [shape._make(row) for row in result]


@functools.lru_cache(maxsize=32)
def _named_row(fields: tuple[str, ...]) -> Any:
    """The named tuple type of one select's columns (made once per select)."""
    return collections.namedtuple("Columns", fields)


def text_set(name: str) -> Select[tuple[str]]:
    """A select of the strings of the parameter `name`, for `column.in_(...)`: the strings
    are bound as one JSON text (`text_set_value`).

    asyncpg encodes a `text[]` parameter by checking every element against three abstract
    base classes (about 0.6 µs each element, 0.6 ms for a thousand uids); one JSON text costs
    a third of that, and, unlike a separator, holds any string exactly."""
    return select(func.json_array_elements_text(cast(bindparam(name, type_=Text), JSON)))


def text_set_value(values: Collection[str]) -> str:
    """The value of a `text_set` parameter."""
    return json.dumps(list(values))
