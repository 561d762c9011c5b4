"""The shapes of the reads a controller step makes over the whole queue: rows and parameters
that cost little per element, since every step reads every live job, and the cost of a row or
an element is paid a thousand times per step on a long queue.

It must not know any table: callers bring their selects and columns.
"""

from __future__ import annotations

import collections
import functools
import json
from collections.abc import Collection
from typing import Any

from sqlalchemy import JSON, Select, Text, bindparam, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession


async def column_rows(session: AsyncSession, statement: Select[*tuple[Any, ...]]) -> list[Any]:
    """The rows of a select of plain columns as named tuples, run on the session's connection
    (in its transaction, if any).

    Core skips the ORM's set-up per statement and per row (a quarter of the CPU per row), and
    a named tuple's field is a C-level read where a SQLAlchemy `Row`'s attribute goes through
    its key lookup (about 30 ns against 300 ns here): building a job's view reads some twenty
    of them, for every queued job at every step."""
    connection = await session.connection()
    result = await connection.execute(statement)
    shape = _named_row(tuple(result.keys()))
    return [shape._make(row) for row in result]


@functools.lru_cache(maxsize=32)
def _named_row(fields: tuple[str, ...]) -> Any:
    """The named tuple type of one select's columns (made once per select)."""
    return collections.namedtuple("Columns", fields)


def text_set(name: str, values: Collection[str]) -> Select[tuple[str]]:
    """A select of `values`, for `column.in_(...)`, bound as one JSON text parameter.

    asyncpg encodes a `text[]` parameter by checking every element against three abstract
    base classes (about 0.6 µs each element, 0.6 ms for a thousand uids); one JSON text costs
    a third of that, and, unlike a separator, holds any string exactly."""
    chosen = bindparam(name, json.dumps(list(values)), type_=Text)
    return select(func.json_array_elements_text(cast(chosen, JSON)))
