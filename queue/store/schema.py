"""Schema versions: apply the Alembic migrations and tell whether a database is up to date.

Owns the Alembic configuration (built in code, no alembic.ini needed) and the location of the
migration scripts, found next to this module so that source checkouts, editable installs and
installed wheels behave the same. It must not define DDL: `migrations/` is the only source of it.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.store.errors import SchemaBehindError

MIGRATION_LOCK_KEY = 0x6761_6E67_7102
"""Serializes migrations: every new pod of the Deployment runs `gangq migrate` as it starts."""


def migrations_dir() -> Path:
    """The folder holding env.py and versions/, shipped as package data of this package.

    Found next to this module rather than through `importlib.resources`, which cannot read a
    package of setuptools' default editable install; the path holds in every install mode.
    """
    return Path(__file__).parent / "migrations"


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations folder holds no revision"
    return head


def _upgrade(connection: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def upgrade(engine: AsyncEngine, *, revision: str = "head") -> str | None:
    """Bring the schema to `revision` in one transaction; returns the revision now in force.

    A second migration waits for the first (a transaction-level advisory lock), then reads the
    version the first committed and has nothing left to do.
    """
    async with engine.begin() as connection:
        await connection.execute(
            text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
        )
        await connection.run_sync(_upgrade, revision)
    return await current_revision(engine)


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as connection:
        return await connection.run_sync(_current)


async def ensure_current(engine: AsyncEngine) -> None:
    """Refuse to run on a schema that is behind: old columns would lose or misread data."""
    current = await current_revision(engine)
    head = head_revision()
    if current != head:
        raise SchemaBehindError(
            f"database schema is at revision {current or 'none (empty database)'}, this gangq "
            f"needs {head}: run `gangq migrate` (with the same DATABASE_URL) first"
        )
