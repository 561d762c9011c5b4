"""The migrations are the schema: they produce exactly the models, and `run` refuses an old one."""

from __future__ import annotations

import asyncio

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.store import database, models, schema
from gangq.queue.store.errors import SchemaBehindError
from tests import databases


def _differences(connection: Connection) -> list[object]:
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, models.Base.metadata))


async def test_migrations_on_an_empty_database_match_the_models(server_url: str) -> None:
    async with databases.scratch(server_url, "gangq_test_empty_schema") as url:
        engine = database.create_engine(url)
        try:
            with pytest.raises(SchemaBehindError, match="run `gangq migrate`"):
                await schema.ensure_current(engine)
            assert await schema.upgrade(engine) == schema.head_revision()
            await schema.ensure_current(engine)
            async with engine.connect() as connection:
                assert await connection.run_sync(_differences) == []
        finally:
            await engine.dispose()


def _downgrade_to_base(connection: Connection) -> None:
    config = schema.alembic_config()
    config.attributes["connection"] = connection
    command.downgrade(config, "base")


async def test_downgrade_then_upgrade_round_trips(engine: AsyncEngine) -> None:
    async with engine.begin() as connection:
        await connection.run_sync(_downgrade_to_base)
    with pytest.raises(SchemaBehindError) as raised:
        await schema.ensure_current(engine)
    assert "none (empty database)" in str(raised.value)
    assert schema.head_revision() in str(raised.value)
    assert await schema.upgrade(engine) == schema.head_revision()


def test_migrations_ship_inside_the_package() -> None:
    folder = schema.migrations_dir()
    assert (folder / "env.py").is_file()
    assert any(path.name.startswith("0001_") for path in (folder / "versions").iterdir())


async def test_two_migrations_at_once_both_succeed(server_url: str) -> None:
    """Every new pod migrates as it starts (deploy/base's init container): the second waits
    for the first, then finds nothing left to do."""
    async with databases.scratch(server_url, "gangq_test_concurrent_migrations") as url:
        engines = [database.create_engine(url, pool_size=1) for _ in range(2)]
        try:
            async with asyncio.timeout(60):  # without the lock the two block each other
                revisions = await asyncio.gather(*(schema.upgrade(engine) for engine in engines))
            assert revisions == [schema.head_revision()] * 2
            await schema.ensure_current(engines[0])
        finally:
            for engine in engines:
                await engine.dispose()
