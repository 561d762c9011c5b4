"""Usage: device-hours per tenant, tier and device class from reservation intervals."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.device import device_id
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import jobs, usage

from .samples import T0, hold, job, partitioned_inventory, placement

HOUR = 3600.0
Sessions = async_sessionmaker[AsyncSession]


async def _run(sessions: Sessions, key: str, devices: int, start: float, end: float | None) -> None:
    """A job that held `devices` devices from `start` to `end` (None: still holding)."""
    async with sessions() as session, session.begin():
        await jobs.enqueue(session, [_job(key)], actor="test", now=start)
        node = key.replace("/", "-")
        await hold(session, key, placement(node, *range(devices)), at=start, phase="Running")
        if end is not None:
            await jobs.finish(session, key, succeeded=True, at=end, actor="test", reason="done")


def _job(key: str) -> object:
    tenant, _, _ = key.partition("/")
    return job(key, tenant=tenant, tier="small" if "small" in key else "training")


async def test_device_hours_are_clipped_to_the_window(session_factory: Sessions) -> None:
    await _run(session_factory, "ml/train", 8, T0 - 2 * HOUR, T0 + 3 * HOUR)  # 3 h in window
    await _run(session_factory, "ml/small", 1, T0 + HOUR, None)  # 4 h, still running
    await _run(session_factory, "cv/train", 2, T0 + HOUR, T0 + 1.5 * HOUR)  # 0.5 h
    await _run(session_factory, "cv/old", 4, T0 - 9 * HOUR, T0 - 8 * HOUR)  # before window
    async with session_factory() as session:
        rows = await usage.report(session, since=T0, until=T0 + 5 * HOUR)
        only_ml = await usage.report(session, since=T0, until=T0 + 5 * HOUR, tenant="ml")
    assert [(r.tenant, r.tier, r.device_class, r.jobs, r.device_hours) for r in rows] == [
        ("cv", "training", "gpu.nvidia.com", 1, pytest.approx(2 * 0.5)),
        ("ml", "small", "gpu.nvidia.com", 1, pytest.approx(1 * 4.0)),
        ("ml", "training", "gpu.nvidia.com", 1, pytest.approx(8 * 3.0)),
    ]
    assert only_ml == rows[1:]


async def test_an_empty_window_is_refused(session_factory: Sessions) -> None:
    async with session_factory() as session:
        with pytest.raises(InvalidInputError, match="usage window is empty"):
            await usage.report(session, since=T0, until=T0)


async def test_partitions_count_as_their_gpu_equivalent(session_factory: Sessions) -> None:
    """Two 1g.10gb partitions of a 7-slice GPU for 7 h: 2/7 of a GPU each hour (rounded up to
    the thousandth, as stored), beside a whole GPU of the same node for 1 h."""
    cluster = partitioned_inventory(1)
    node = "node-0"
    async with session_factory() as session, session.begin():
        await jobs.enqueue(session, [_job("ai/small"), _job("ai/whole")], actor="test", now=T0)
        slices = model.ReplicaPlacement(
            0,
            model.NodeName(node),
            tuple(device_id("gpu.nvidia.com", node, f"gpu-0-mig-{i}") for i in range(2)),
        )
        whole = model.ReplicaPlacement(
            0, model.NodeName(node), (device_id("gpu.nvidia.com", node, "gpu-1"),)
        )
        await hold(session, "ai/small", slices, at=T0, phase="Running", inventory=cluster)
        await hold(session, "ai/whole", whole, at=T0, phase="Running", inventory=cluster)
        await jobs.finish(session, "ai/whole", succeeded=True, at=T0 + HOUR, actor="t", reason="")
    async with session_factory() as session:
        rows = await usage.report(session, since=T0, until=T0 + 7 * HOUR)
    assert [(r.tier, r.device_hours) for r in rows] == [
        ("small", pytest.approx(2 * 0.143 * 7)),
        ("training", pytest.approx(1.0)),
    ]
