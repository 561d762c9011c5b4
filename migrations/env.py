"""Alembic environment of gangq: runs the versions in this folder on one connection.

`gangq.queue.store.schema` builds the Alembic configuration in code (there is no alembic.ini)
and hands over an open connection (`config.attributes["connection"]`). Without one, as when a
new revision is generated from the models, a connection is opened to `sqlalchemy.url`, else
`DATABASE_URL`, else the embedded server:

    config = schema.alembic_config()
    config.set_main_option("sqlalchemy.url", "postgresql://postgres@127.0.0.1/scratch")
    alembic.command.revision(config, message="...", autogenerate=True)
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from gangq.queue.store import database, models

config = context.config
target_metadata = models.Base.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine(url: str) -> None:
    engine = database.create_engine(url, pool_size=1)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_configure_and_run)
            await connection.commit()
    finally:
        await engine.dispose()


def _url() -> str:
    explicit = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url"
    )
    return database.resolve_url(explicit)


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
elif (given := config.attributes.get("connection")) is not None:
    _configure_and_run(given)
else:
    asyncio.run(_run_with_own_engine(_url()))
