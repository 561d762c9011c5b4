"""PRODUCT rule 1 by the database: raw SQL cannot reserve one device twice, even concurrently."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.store import database, jobs, reservations
from gangq.queue.store.errors import ConflictError

from .samples import T0, hold, job, placement, until_blocked

JOB = (
    "INSERT INTO jobs (uid, namespace, name, tenant, tier, replicas, devices_per_replica, "
    "device_class, submitted_at) VALUES ($1, 'ns', $1, 't', 'small', 1, 1, 'gpu', now()) "
    "RETURNING id"
)
RESERVE = (
    "INSERT INTO reservations (job_id, replica, node, driver, pool, device, reserved_at) "
    "VALUES ($1, 0, 'node-1', 'gpu.nvidia.com', 'node-1', 'gpu-0', now())"
)


async def _connect(url: str) -> asyncpg.Connection:
    return await asyncpg.connect(database.libpq_url(url))


async def test_a_device_cannot_have_two_active_reservations(database_url: str) -> None:
    connection = await _connect(database_url)
    try:
        first = await connection.fetchval(JOB, "a")
        second = await connection.fetchval(JOB, "b")
        await connection.execute(RESERVE, first)
        with pytest.raises(asyncpg.UniqueViolationError, match="uq_reservations_active_device"):
            await connection.execute(RESERVE, second)
        count = await connection.fetchval("SELECT count(*) FROM reservations")
        assert count == 1
    finally:
        await connection.close()


async def test_a_released_device_can_be_reserved_again(database_url: str) -> None:
    connection = await _connect(database_url)
    try:
        first = await connection.fetchval(JOB, "a")
        second = await connection.fetchval(JOB, "b")
        await connection.execute(RESERVE, first)
        await connection.execute("UPDATE reservations SET released_at = now() + interval '1s'")
        await connection.execute(RESERVE, second)
        rows = await connection.fetch("SELECT job_id, released_at FROM reservations ORDER BY id")
        assert [row["job_id"] for row in rows] == [first, second]
        assert rows[1]["released_at"] is None
    finally:
        await connection.close()


async def test_reactivating_a_released_reservation_over_a_live_one_fails(database_url: str) -> None:
    connection = await _connect(database_url)
    try:
        first = await connection.fetchval(JOB, "a")
        second = await connection.fetchval(JOB, "b")
        await connection.execute(RESERVE, first)
        await connection.execute("UPDATE reservations SET released_at = now() + interval '1s'")
        await connection.execute(RESERVE, second)
        with pytest.raises(asyncpg.UniqueViolationError):
            await connection.execute("UPDATE reservations SET released_at = NULL")
    finally:
        await connection.close()


async def test_two_concurrent_transactions_cannot_both_reserve(database_url: str) -> None:
    """Both transactions insert before either commits: exactly one may win."""
    setup, left, right = [await _connect(database_url) for _ in range(3)]
    try:
        first = await setup.fetchval(JOB, "a")
        second = await setup.fetchval(JOB, "b")
        left_tx, right_tx = left.transaction(), right.transaction()
        await left_tx.start()
        await right_tx.start()
        await left.execute(RESERVE, first)
        blocked = asyncio.ensure_future(right.execute(RESERVE, second))
        await until_blocked(setup, RESERVE[:30])
        await left_tx.commit()
        with pytest.raises(asyncpg.UniqueViolationError):
            await blocked
        await right_tx.rollback()
        rows = await setup.fetch("SELECT job_id FROM reservations WHERE released_at IS NULL")
        assert [row["job_id"] for row in rows] == [first]
    finally:
        for connection in (setup, left, right):
            await connection.close()


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        ("INSERT INTO tenants (name) VALUES ('')", "ck_tenants_name_not_empty"),
        (
            "INSERT INTO tenants (name) VALUES ('t'); INSERT INTO tenant_quotas "
            "(tenant, device_class, nominal) VALUES ('t', 'gpu', -1)",
            "ck_tenant_quotas_nominal_not_negative",
        ),
        ("UPDATE jobs SET phase = 'Sleeping'", "ck_jobs_phase_known"),
        ("UPDATE jobs SET replicas = 0", "ck_jobs_replicas_positive"),
        (
            "INSERT INTO reservations (job_id, replica, driver, pool, device, reserved_at, "
            "released_at) SELECT id, 0, 'd', 'p', 'x', now(), now() - interval '1h' FROM jobs",
            "ck_reservations_interval_ordered",
        ),
        ("INSERT INTO leadership (id) VALUES (2)", "ck_leadership_single_row"),
    ],
    ids=[
        "empty-tenant",
        "negative-nominal",
        "unknown-phase",
        "zero-replicas",
        "reversed-interval",
        "second-leadership-row",
    ],
)
async def test_check_constraints_refuse_malformed_rows(
    database_url: str, statement: str, constraint: str
) -> None:
    connection = await _connect(database_url)
    try:
        await connection.fetchval(JOB, "a")
        with pytest.raises(asyncpg.CheckViolationError, match=constraint):
            await connection.execute(statement)
    finally:
        await connection.close()


async def test_the_store_turns_a_double_reservation_into_a_clear_error(
    session_factory: async_sessionmaker[AsyncSession],
) -> None:
    async with session_factory() as session, session.begin():
        await jobs.enqueue(session, [job("a/one"), job("a/two")], actor="test", now=T0)
        await hold(session, "a/one", placement("node-1", 0, 1), at=T0)
    async with session_factory() as session, session.begin():
        with pytest.raises(ConflictError) as raised:
            await hold(session, "a/two", placement("node-1", 1), at=T0)
    assert str(raised.value) == (
        "device gpu.nvidia.com/node-1/gpu-1 is already reserved by another job (rule 1)"
    )
    async with session_factory() as session:
        assert len(await reservations.reserved_devices(session)) == 2


async def test_a_job_with_reservations_cannot_be_deleted(database_url: str) -> None:
    """Released reservations are the usage record: deleting their job must not erase them."""
    connection = await _connect(database_url)
    try:
        first = await connection.fetchval(JOB, "a")
        await connection.execute(RESERVE, first)
        await connection.execute("UPDATE reservations SET released_at = now() + interval '1h'")
        with pytest.raises(asyncpg.ForeignKeyViolationError, match="fk_reservations_job_id_jobs"):
            await connection.execute("DELETE FROM jobs")
    finally:
        await connection.close()
