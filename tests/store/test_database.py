"""Database location: URL forms, the embedded server, and the commands that open the database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.cli import main
from gangq.queue.cli import usage as usage_command
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import database
from tests import databases


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/gangq", "postgresql+asyncpg://u:p@db:5432/gangq"),
        ("postgres://u@db/gangq", "postgresql+asyncpg://u@db/gangq"),
        ("postgresql+asyncpg://u@db/gangq", "postgresql+asyncpg://u@db/gangq"),
        (
            "postgresql://postgres@/postgres?host=/run/pg",
            "postgresql+asyncpg://postgres@/postgres?host=%2Frun%2Fpg",
        ),
    ],
    ids=["plain", "short-scheme", "already-async", "unix-socket"],
)
def test_urls_are_normalised_to_asyncpg(given: str, expected: str) -> None:
    assert database.normalize_url(given) == expected


@pytest.mark.parametrize(
    ("given", "expected", "libpq"),
    [
        (
            "postgresql://u@h1:5432,h2:5433/gangq?target_session_attrs=read-write",
            "postgresql+asyncpg://u@/gangq?host=h1%3A5432&host=h2%3A5433"
            "&target_session_attrs=read-write",
            "postgresql://u@h1:5432,h2:5433/gangq?target_session_attrs=read-write",
        ),
        (
            "postgres://u:p@rw,ro:6000/gangq",
            "postgresql+asyncpg://u:p@/gangq?host=rw%3A5432&host=ro%3A6000",
            "postgresql://u:p@rw:5432,ro:6000/gangq",
        ),
    ],
    ids=["libpq-hosts", "default-port"],
)
def test_several_hosts_reach_both_drivers(given: str, expected: str, libpq: str) -> None:
    """libpq's host list becomes SQLAlchemy's `host=` values and back again for raw asyncpg
    connections (leadership, LISTEN), so every connection tries the same servers in order."""
    assert database.normalize_url(given) == expected
    assert database.libpq_url(expected) == libpq


async def test_several_hosts_connect_to_the_one_that_answers(database_url: str) -> None:
    """The first host refuses; the engine and a raw connection both reach the second one,
    which must accept writes (`target_session_attrs=read-write`)."""
    live = make_url(database.normalize_url(database_url))
    server = live.host or live.query["host"]  # a TCP host, or the embedded server's socket
    url = (
        f"postgresql://{live.username}@127.0.0.1:1,{server}:{live.port or 5432}/"
        f"{live.database}?target_session_attrs=read-write"
    )
    engine = database.create_engine(url, pool_size=1)
    try:
        async with engine.connect() as connection:
            assert (await connection.execute(text("SHOW transaction_read_only"))).scalar() == "off"
    finally:
        await engine.dispose()
    raw = await asyncpg.connect(database.libpq_url(database.normalize_url(url)))
    try:
        assert await raw.fetchval("SELECT 1") == 1
    finally:
        await raw.close()


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("mysql://u@db/gangq", "scheme 'mysql' is not supported"),
        ("not a url", "cannot be parsed"),
        ("postgresql://u@h1,,h2/gangq", "empty host"),
    ],
)
def test_bad_urls_get_a_clear_error(given: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        database.normalize_url(given)


def test_the_environment_wins_over_the_embedded_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@db/gangq")
    assert database.resolve_url() == "postgresql+asyncpg://u@db/gangq"
    assert database.resolve_url("postgres://x@y/z") == "postgresql+asyncpg://x@y/z"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400.0), ("12h", 43200.0), ("90m", 5400.0), ("2w", 1209600.0)],
)
def test_usage_windows(text: str, seconds: float) -> None:
    assert usage_command.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "-1d", "0d", "3x", ""])
def test_bad_usage_windows_are_refused(text: str) -> None:
    with pytest.raises(InvalidInputError, match="expected a positive amount"):
        usage_command.parse_duration(text)


def _gangq(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the real command line in this process; returns (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


def test_migrate_then_usage_through_the_command_line(
    server_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"gangq_test_cli_{uuid.uuid4().hex[:8]}"
    asyncio.run(databases.admin(server_url, f'CREATE DATABASE "{name}"'))
    monkeypatch.setenv("DATABASE_URL", database.libpq_url(database.with_database(server_url, name)))
    try:
        code, _, err = _gangq(capsys, "usage")
        assert (code, "run `gangq migrate`" in err) == (2, True)
        code, out, err = _gangq(capsys, "migrate", "--json")
        assert code == 0, err
        assert json.loads(out)["before"] is None
        code, out, _ = _gangq(capsys, "migrate")
        assert out.startswith("database schema already at revision")
        code, out, err = _gangq(capsys, "usage", "--since", "7d", "--json")
        assert code == 0, err
        assert json.loads(out)["rows"] == []
        code, out, _ = _gangq(capsys, "usage")
        assert out.splitlines()[0].split() == [
            "TENANT",
            "TIER",
            "DEVICE",
            "CLASS",
            "JOBS",
            "DEVICE-HOURS",
        ]
        code, _, err = _gangq(capsys, "usage", "--since", "soon")
        assert code == 2
        assert "--since 'soon'" in err
    finally:
        asyncio.run(databases.admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


EMBEDDED_RUN = """
import asyncio, pathlib, sys
import asyncpg
from gangq.queue.store import database

async def main(url, step):
    connection = await asyncpg.connect(database.libpq_url(url))
    if step == "create":
        await connection.execute("CREATE TABLE kept (note text)")
        await connection.execute("INSERT INTO kept VALUES ('from the first run')")
    print(await connection.fetchval("SELECT note FROM kept"))
    await connection.close()

asyncio.run(main(database.start_embedded(pathlib.Path(sys.argv[1])), sys.argv[2]))
"""


@pytest.mark.slow
def test_the_embedded_server_keeps_its_data_and_stops_on_exit() -> None:
    """A second run reuses the data directory of the first; each run stops the server on exit.

    As root the server runs as a system user that must traverse the parent folders, so the
    data directory lives in a folder of its own rather than under pytest's private tmp root.
    """
    parent = Path(tempfile.mkdtemp(prefix="gangq-embedded-"))
    data_dir = parent / "pg"
    try:
        for step in ("create", "read"):
            run = subprocess.run(
                [sys.executable, "-c", EMBEDDED_RUN, str(data_dir), step],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert run.returncode == 0, run.stderr[-3000:]
            assert run.stdout.strip() == "from the first run"
            assert not (data_dir / "postmaster.pid").exists(), "the server was left running"
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_the_db_bench_reports_its_figures(
    server_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _gangq(
        capsys,
        "bench",
        "db",
        "--nodes",
        "4",
        "--pending",
        "40",
        "--batch",
        "7",
        "--single",
        "5",
        "--json",
        "--database-url",
        server_url,
    )
    assert code == 0, err
    figures = json.loads(out)
    assert figures["enqueued"] == 40
    assert 0 < figures["admitted"] <= 40
    assert figures["enqueued"] == figures["admitted"] + figures["pending"]
    assert (figures["batch"], figures["single"]) == (7, 5)
    assert figures["enqueue_per_s"] > 0 and figures["enqueue_single_per_s"] > 0
    assert figures["admit_per_s"] > 0
    assert figures["unchanged_cycle_ms"] > 0 and figures["unchanged_reused"] is True


async def _pooled(engine: AsyncEngine, count: int) -> list[tuple[int, asyncpg.Connection]]:
    """`count` connections checked out at once and returned: the pool holds them all then."""
    async with contextlib.AsyncExitStack() as stack:
        found = []
        for _ in range(count):
            connection = await stack.enter_async_context(engine.connect())
            pid = await connection.scalar(text("SELECT pg_backend_pid()"))
            raw = await connection.get_raw_connection()
            found.append((int(pid), raw.driver_connection))
        return found


async def test_the_pool_replaces_connections_the_server_closed(database_url: str) -> None:
    engine = database.create_engine(database_url, pool_size=2)
    try:
        pooled = await _pooled(engine, 2)
        pids = sorted(pid for pid, _ in pooled)
        closed = [asyncio.Event() for _ in pooled]
        for (_, driver), event in zip(pooled, closed, strict=True):
            driver.add_termination_listener(lambda _, event=event: event.set())
        await databases.admin(
            database_url, f"SELECT pg_terminate_backend(pid) FROM unnest(ARRAY{pids}) pid"
        )
        async with asyncio.timeout(10):
            await asyncio.gather(*(event.wait() for event in closed))
        assert all(driver.is_closed() for _, driver in pooled)
        async with engine.connect() as connection:
            assert await connection.scalar(text("SELECT pg_backend_pid()")) not in pids
    finally:
        await engine.dispose()


async def test_a_checkout_asks_the_server_nothing(database_url: str) -> None:
    """Checking a live connection out of the pool costs no round trip (no pre-ping query)."""
    engine = database.create_engine(database_url, pool_size=1)
    try:
        [(pid, driver)] = await _pooled(engine, 1)
        sent: list[str] = []
        driver.add_query_logger(lambda record: sent.append(record.query))
        async with engine.connect() as connection:
            assert await connection.scalar(text("SELECT pg_backend_pid()")) == pid
        # The connection's own transaction is all it sent (its SELECT goes as a prepared
        # statement, which the logger does not see); a pre-ping adds BEGIN, ";" and ROLLBACK.
        assert sent == ["BEGIN;", "ROLLBACK;"]
    finally:
        await engine.dispose()


async def test_a_read_session_sends_no_transaction(database_url: str) -> None:
    """A read session's statements go alone, and the connection it returns to the pool
    begins transactions again for the sessions that write."""
    engine = database.create_engine(database_url, pool_size=1)
    try:
        [(pid, driver)] = await _pooled(engine, 1)
        sent: list[str] = []
        driver.add_query_logger(lambda record: sent.append(record.query))
        async with database.read_session_factory(engine)() as session:
            assert await session.scalar(text("SELECT pg_backend_pid()")) == pid
            assert await session.scalar(text("SELECT count(*) FROM pg_class")) > 0
        assert sent == []
        async with database.session_factory(engine)() as session, session.begin():
            assert await session.scalar(text("SELECT pg_backend_pid()")) == pid
        # The pool's reset names the default level the read session's had set aside.
        assert sent in (["BEGIN;", "COMMIT;"], ["BEGIN ISOLATION LEVEL READ COMMITTED;", "COMMIT;"])
    finally:
        await engine.dispose()


async def test_gangq_run_waits_for_a_database_that_does_not_answer_yet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A replica started during a failover waits (and says so) rather than exiting into the
    kubelet's restart back-off; a schema that is behind still ends the start at once."""
    from gangq.queue.cli import run as run_command

    engine = database.create_engine("postgresql://postgres@127.0.0.1:1/gangq", pool_size=1)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.5):
                await run_command.until_schema_checked(engine)
    finally:
        await engine.dispose()
    assert caplog.text.count("no writable PostgreSQL yet") == 1


async def test_gangq_run_refuses_a_schema_behind_without_waiting(server_url: str) -> None:
    from gangq.queue.cli import run as run_command
    from gangq.queue.store.errors import SchemaBehindError

    async with databases.scratch(server_url, "gangq_behind") as url:
        engine = database.create_engine(url, pool_size=1)
        try:
            with pytest.raises(SchemaBehindError, match="gangq migrate"):
                async with asyncio.timeout(10):
                    await run_command.until_schema_checked(engine)
        finally:
            await engine.dispose()


async def test_a_connection_to_a_server_that_stopped_taking_writes_is_replaced(
    server_url: str,
) -> None:
    """A primary demoted while connections stay open refuses their writes for good: the pool
    drops such a connection (as if disconnected), so the next one reaches a writable server.
    Here the database itself turns read-only for new sessions, then writable again."""
    async with databases.scratch(server_url, "gangq_read_only") as url:
        name = make_url(url).database
        engine = database.create_engine(url, pool_size=1)
        try:
            await databases.admin(
                server_url, f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'
            )
            async with engine.connect() as connection:
                first = await connection.scalar(text("SELECT pg_backend_pid()"))
            await databases.admin(
                server_url, f'ALTER DATABASE "{name}" RESET default_transaction_read_only'
            )
            with pytest.raises(DBAPIError) as refused:
                async with engine.begin() as connection:
                    await connection.execute(text("CREATE TABLE t (x int)"))
            assert database.is_connection_failure(refused.value)
            async with engine.begin() as connection:
                await connection.execute(text("CREATE TABLE t (x int)"))
                assert await connection.scalar(text("SELECT pg_backend_pid()")) != first
        finally:
            await engine.dispose()
