"""Shared PostgreSQL fixtures: one migrated template database per session, one database per test.

The server is `DATABASE_URL` when set, else the one on 127.0.0.1:5432 when it answers, else the
embedded PostgreSQL (kept in a cache folder and reused across runs). Each test gets its own
database cloned from the template (fast), dropped afterwards; nothing here fakes the database.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import platformdirs
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gangq.queue.store import database, schema
from tests import databases

LOCAL_SERVER = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"


def _resolve_server() -> str:
    explicit = os.environ.get(database.ENVIRONMENT_VARIABLE)
    if explicit:
        return database.normalize_url(explicit)
    if asyncio.run(database.is_reachable(LOCAL_SERVER)):
        return LOCAL_SERVER
    data_dir = Path(platformdirs.user_cache_dir("gangq")) / "test-postgres"
    return database.start_embedded(data_dir)


async def _migrate(url: str) -> None:
    engine = database.create_engine(url, pool_size=1)
    try:
        await schema.upgrade(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def server_url() -> str:
    """URL of the maintenance database (`postgres`) on the server every test folder shares."""
    return database.with_database(_resolve_server(), "postgres")


@pytest.fixture(scope="session")
def template_database(server_url: str) -> Iterator[str]:
    """Name of a database migrated to head once per session; tests clone it."""
    name = f"gangq_template_{uuid.uuid4().hex[:12]}"
    asyncio.run(databases.admin(server_url, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(_migrate(database.with_database(server_url, name)))
        yield name
    finally:
        asyncio.run(databases.admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def database_url(server_url: str, template_database: str) -> AsyncIterator[str]:
    """asyncpg SQLAlchemy URL of a fresh, migrated database owned by this test alone."""
    async with databases.scratch(server_url, "gangq_test", template=template_database) as url:
        yield url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    created = database.create_engine(database_url)
    try:
        yield created
    finally:
        await created.dispose()


@pytest.fixture
def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return database.session_factory(engine)
