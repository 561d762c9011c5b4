"""Rule 12 by the database: a whole GPU and its partition, or shares above a device's capacity,
are refused even from two transactions at once, and the rows say what each one holds."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.device import Device, DeviceId, RequestPolicy, device_id
from gangq.queue.store import database, jobs, reservations, timestamps
from gangq.queue.store.errors import ConflictError

from .samples import GIB, T0, job, partitioned_inventory, until_blocked

Sessions = async_sessionmaker[AsyncSession]
INVENTORY = partitioned_inventory(1)
NODE = model.NodeName("node-0")
SHARED = Device(
    driver="gpu.nvidia.com",
    pool="node-0",
    name="shared-0",
    node="node-0",
    capacity={"gpu.nvidia.com/memory": 80 * GIB},
    multi=True,
    policies={"gpu.nvidia.com/memory": RequestPolicy(default=10 * GIB, min=GIB, step=GIB)},
)
WITH_SHARED = model.Inventory(
    nodes=INVENTORY.nodes,
    devices={**INVENTORY.devices, SHARED.id: SHARED},
    counters=INVENTORY.counters,
)


def _gpu(name: str) -> DeviceId:
    return device_id("gpu.nvidia.com", "node-0", name)


def _replica(*names: str, shares: tuple[model.Share, ...] = ()) -> model.ReplicaPlacement:
    return model.ReplicaPlacement(0, NODE, tuple(_gpu(n) for n in names), shares)


def _share(gib: int) -> model.ReplicaPlacement:
    return _replica(
        "shared-0", shares=(model.Share(SHARED.id, (("gpu.nvidia.com/memory", gib * GIB),)),)
    )


async def _ids(url: str, count: int, sessions: Sessions) -> list[int]:
    async with sessions() as session, session.begin():
        await jobs.enqueue(
            session, [job(f"ml-train/j{i}") for i in range(count)], actor="test", now=T0
        )
    connection = await asyncpg.connect(database.libpq_url(url))
    try:
        rows = await connection.fetch("SELECT id FROM jobs ORDER BY name")
    finally:
        await connection.close()
    return [row["id"] for row in rows]


async def _reserve(session: AsyncSession, job_id: int, replica: model.ReplicaPlacement) -> None:
    await reservations.reserve(
        session, [(job_id, (replica,))], at=timestamps.to_datetime(T0), inventory=WITH_SHARED
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("gpu-0",), ("gpu-0-mig-3",)),
        (("gpu-0-mig-0",), ("gpu-0",)),
        (("gpu-0-mig-0", "gpu-0-mig-1", "gpu-0-mig-2"), ("gpu-0-mig-3", "gpu-0-mig-4", "gpu-0")),
    ],
    ids=["whole-then-partition", "partition-then-whole", "partitions-then-whole-in-one-go"],
)
async def test_a_whole_gpu_and_its_partition_are_never_both_reserved(
    database_url: str, session_factory: Sessions, first: tuple[str, ...], second: tuple[str, ...]
) -> None:
    left, right = await _ids(database_url, 2, session_factory)
    async with session_factory() as session, session.begin():
        await _reserve(session, left, _replica(*first))
    with pytest.raises(ConflictError, match=r"node-0/gpu-0-cs counter .*rule 12"):
        async with session_factory() as session, session.begin():
            await _reserve(session, right, _replica(*second))
    async with session_factory() as session, session.begin():
        # the other GPU's counters are untouched, and all seven 1g slices of one GPU fit
        await _reserve(session, right, _replica(*(f"gpu-1-mig-{i}" for i in range(7))))


async def test_rows_say_which_counters_and_share_they_hold(
    database_url: str, session_factory: Sessions
) -> None:
    left, right = await _ids(database_url, 2, session_factory)
    async with session_factory() as session, session.begin():
        await _reserve(session, left, _replica("gpu-0-mig-0"))
        await _reserve(session, right, _share(20))
    connection = await asyncpg.connect(database.libpq_url(database_url))
    try:
        rows = await connection.fetch(
            "SELECT device, share_id, consumed::text, counters::text, equivalent "
            "FROM reservations ORDER BY device"
        )
    finally:
        await connection.close()
    partition, share = rows
    assert partition["equivalent"] == 143  # one slice of seven, rounded up
    assert partition["share_id"] is None
    assert '"gpu.nvidia.com/node-0/gpu-0-cs"' in partition["counters"]
    assert share["equivalent"] == 250  # 20 of 80 GiB
    assert share["counters"] is None
    assert share["consumed"] == f'{{"gpu.nvidia.com/memory": [{20 * GIB}, {80 * GIB}]}}'
    async with session_factory() as session:
        held = await reservations.active_by_job(session, [right])
    (replica,) = held[right]
    (stored,) = replica.shares
    assert stored.consumed == (("gpu.nvidia.com/memory", 20 * GIB),)
    assert str(stored.share_id) == str(share["share_id"])


async def test_shares_never_exceed_the_capacity_nor_mix_with_a_whole_holder(
    database_url: str, session_factory: Sessions
) -> None:
    a, b, c, d = await _ids(database_url, 4, session_factory)
    async with session_factory() as session, session.begin():
        await _reserve(session, a, _share(50))
        await _reserve(session, b, _share(30))
    with pytest.raises(ConflictError, match=r"shared-0 capacity gpu\.nvidia\.com/memory"):
        async with session_factory() as session, session.begin():
            await _reserve(session, c, _share(1))
    with pytest.raises(ConflictError, match="reserved whole and shared"):
        async with session_factory() as session, session.begin():
            await _reserve(session, d, _replica("shared-0"))


async def test_two_concurrent_transactions_cannot_overcommit_a_counter_set(
    database_url: str, session_factory: Sessions
) -> None:
    """Both insert before either commits, as two leaders would: the second waits for the
    first's lock on the counter set, then sees its row and is refused."""
    left_id, right_id = await _ids(database_url, 2, session_factory)
    observer = await asyncpg.connect(database.libpq_url(database_url))
    try:
        async with session_factory() as left, left.begin():
            await _reserve(left, left_id, _replica("gpu-0"))

            async def right_side() -> None:
                async with session_factory() as right, right.begin():
                    await _reserve(right, right_id, _replica("gpu-0-mig-6"))

            blocked = asyncio.ensure_future(right_side())
            await until_blocked(observer, "\n    INSERT INTO reservations")
        with pytest.raises(ConflictError, match="gpu-0-cs"):
            await blocked
        rows = await observer.fetch("SELECT job_id FROM reservations WHERE released_at IS NULL")
        assert [row["job_id"] for row in rows] == [left_id]
    finally:
        await observer.close()
