"""Databases of a test's own on the server the test folders share (`conftest.server_url`)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg

from gangq.queue.store import database


async def admin(url: str, statement: str) -> None:
    """Run one statement on its own connection (CREATE and DROP DATABASE need no transaction)."""
    connection = await asyncpg.connect(database.libpq_url(url))
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextlib.asynccontextmanager
async def scratch(
    server_url: str, prefix: str, *, template: str | None = None
) -> AsyncIterator[str]:
    """URL of a new database named after `prefix`, dropped afterwards whatever connects to it
    still: a clone of `template` (a migrated database), else empty, as a new cluster's is
    before `gangq migrate`."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    await admin(server_url, f'CREATE DATABASE "{name}"{copy}')
    try:
        yield database.with_database(server_url, name)
    finally:
        await admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
