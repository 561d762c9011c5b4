"""The two-server rig of the failover tests, on real PostgreSQL 18 servers: a commit survives a
failover (synchronous), a commit made while replication is paused does not (asynchronous), and
dump and restore bring a database back as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from gangq.queue.bench.postgres_pair import PostgresPair, PostgresPairError, dump, restore

pytestmark = pytest.mark.slow

CONNECTION_FAILED = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


async def _execute(url: str, statement: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def _values(url: str, query: str) -> list[Any]:
    connection = await asyncpg.connect(url)
    try:
        return [row[0] for row in await connection.fetch(query)]
    finally:
        await connection.close()


async def test_a_synchronous_pair_fails_over_to_the_promoted_standby_with_every_commit() -> None:
    with PostgresPair(synchronous=True) as pair:
        standby_url = pair.standby_url
        await _execute(pair.url, "CREATE TABLE t (x text); INSERT INTO t VALUES ('committed')")
        with pytest.raises(PostgresPairError, match="asynchronous"):
            pair.pause_replication()

        pair.kill_primary()

        with pytest.raises(CONNECTION_FAILED):
            await asyncpg.connect(pair.url)
        # Refused for being read-only, not for being down.
        assert await _values(standby_url, "SHOW transaction_read_only") == ["on"]

        pair.promote()

        assert pair.primary_url == standby_url
        with pytest.raises(PostgresPairError):
            _ = pair.standby_url
        connection = await asyncpg.connect(pair.url)
        try:
            port = await connection.fetchval("SELECT inet_server_port()")
            assert f":{port}/" in standby_url
            assert await connection.fetchval("SELECT array_agg(x) FROM t") == ["committed"]
            await connection.execute("INSERT INTO t VALUES ('after the failover')")
        finally:
            await connection.close()
        assert await _values(pair.url, "SELECT x FROM t ORDER BY x") == [
            "after the failover",
            "committed",
        ]


async def test_commits_made_while_replication_is_paused_are_lost_by_a_failover() -> None:
    with PostgresPair(synchronous=False) as pair:
        await _execute(pair.url, "CREATE TABLE t (x text); INSERT INTO t VALUES ('A')")
        pair.pause_replication()
        await _execute(pair.url, "INSERT INTO t VALUES ('B')")
        assert await _values(pair.primary_url, "SELECT x FROM t ORDER BY x") == ["A", "B"]

        pair.kill_primary()
        pair.promote()

        assert await _values(pair.url, "SELECT x FROM t ORDER BY x") == ["A"]


async def test_restore_brings_back_the_database_as_dumped(tmp_path: Path) -> None:
    dump_file = tmp_path / "backup.dump"
    pair = PostgresPair(synchronous=False)
    with pair:
        await _execute(pair.url, "CREATE TABLE t (x text); INSERT INTO t VALUES ('dumped')")
        dump(pair.url, dump_file)
        await _execute(pair.url, "UPDATE t SET x = 'changed'; INSERT INTO t VALUES ('added')")

        restore(dump_file, pair.primary_url)

        assert await _values(pair.url, "SELECT x FROM t") == ["dumped"]
        servers = (pair.primary_url, pair.standby_url)

    for url in servers:
        with pytest.raises(CONNECTION_FAILED):
            await asyncpg.connect(url)
    pair.stop()  # a second stop does nothing
    with pytest.raises(PostgresPairError, match="not started"):
        _ = pair.url


async def test_a_rebuilt_standby_takes_the_dead_port_and_fails_over_again() -> None:
    """The soak's repeated failovers: after each promotion a new standby follows the new
    primary on the dead server's port, so `url` stays right, in the pair's mode."""
    with PostgresPair(synchronous=True) as pair:
        url = pair.url
        await _execute(url, "CREATE TABLE t (x text); INSERT INTO t VALUES ('first')")
        first_primary = pair.primary_url
        pair.kill_primary()
        pair.promote()
        pair.rebuild_standby()
        assert pair.url == url
        assert pair.standby_url == first_primary
        await _execute(url, "INSERT INTO t VALUES ('second')")
        assert await _values(pair.standby_url, "SHOW transaction_read_only") == ["on"]
        pair.kill_primary()
        pair.promote()
        assert await _values(url, "SELECT x FROM t ORDER BY x") == ["first", "second"]

        pair.rebuild_standby()
        pair.set_synchronous(False)
        pair.pause_replication()
        await _execute(url, "INSERT INTO t VALUES ('lost')")
        pair.kill_primary()
        pair.promote()
        assert await _values(url, "SELECT x FROM t ORDER BY x") == ["first", "second"]
