"""Small builders of core values for the store tests (the store takes and returns core types)."""

from __future__ import annotations

import asyncio
import dataclasses

import asyncpg
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model
from gangq.queue.core.device import CounterSetId, Device, DeviceId, counter_set_id, device_id
from gangq.queue.store import jobs, reservations, snapshot, timestamps
from gangq.queue.store.models import SUCCEEDED, JobRow

T0 = 1_790_000_000.0
"""A fixed instant (unix seconds) the tests count from."""


async def queued_rows(session: AsyncSession, *, now: float) -> list[snapshot.JobColumns]:
    """The queued rows a cycle at `now` reads (backoff over), in id order."""
    rows = snapshot.Views().rows
    await rows.read(session)
    return rows.queued(at=timestamps.to_datetime(now))


async def holding_rows(session: AsyncSession) -> list[snapshot.JobColumns]:
    """The rows of the gangs holding devices, in id order."""
    rows = snapshot.Views().rows
    await rows.read(session)
    return rows.holding()


def job(
    key: str,
    *,
    tenant: str = "ml-train",
    tier: str = "training",
    replicas: int = 1,
    devices_per_replica: int = 1,
    submitted_at: float = T0,
    priority: int = 0,
    uid: str | None = None,
    device_class: str = "gpu.nvidia.com",
    selectors: tuple[str, ...] = (),
    constraints: tuple[str, ...] = (),
) -> model.PendingJob:
    return model.PendingJob(
        key=model.JobKey(key),
        uid=uid or f"uid-{key}",
        tenant=model.Tenant(tenant),
        tier=tier,
        priority=priority,
        replicas=replicas,
        devices_per_replica=devices_per_replica,
        device_class=device_class,
        selectors=selectors,
        constraints=constraints,
        topology=model.Topology("gangq.dev/rack", model.TopologyMode.PREFERRED),
        pod=model.PodRequirements(
            cpu_milli=500,
            memory_bytes=2**30,
            tolerations=(model.Toleration(key="gpu", operator="Exists"),),
            node_selector=(("pool", "h100"),),
            required_node_affinity=(
                model.NodeSelectorTerm((model.NodeSelectorRequirement("zone", "In", ("a", "b")),)),
            ),
        ),
        submitted_at=submitted_at,
        max_runtime_s=3600.0,
    )


def quota(
    tenant: str,
    *,
    nominal: int = 8,
    borrowing_limit: int = 0,
    device_class: str = "gpu.nvidia.com",
    allowed_tiers: tuple[str, ...] = ("training", "small"),
) -> model.TenantQuota:
    return model.TenantQuota(
        tenant=model.Tenant(tenant),
        device_class=device_class,
        nominal=nominal,
        borrowing_limit=borrowing_limit,
        weight=1.0,
        allowed_tiers=allowed_tiers,
    )


def placement(node: str, *devices: int, replica: int = 0) -> model.ReplicaPlacement:
    return model.ReplicaPlacement(
        replica=replica,
        node=model.NodeName(node),
        devices=tuple(device_id("gpu.nvidia.com", node, f"gpu-{d}") for d in devices),
    )


def inventory(nodes: int = 2, *, devices_per_node: int = 8) -> model.Inventory:
    """`nodes` ready nodes of `devices_per_node` GPUs each, two NUMA nodes per node, racks of 4."""
    node_map: dict[model.NodeName, model.Node] = {}
    devices: dict[DeviceId, Device] = {}
    for index in range(nodes):
        name = model.NodeName(f"node-{index}")
        node_map[name] = model.Node(
            name=name,
            labels={"pool": "h100", "zone": "a", "gangq.dev/rack": f"rack-{index // 4}"},
            allocatable_cpu_milli=64_000,
            allocatable_memory_bytes=512 * 2**30,
        )
        for number in range(devices_per_node):
            device = Device(
                driver="gpu.nvidia.com",
                pool=name,
                name=f"gpu-{number}",
                node=name,
                attributes={"gpu.nvidia.com/numa": number * 2 // devices_per_node},
            )
            devices[device.id] = device
    return model.Inventory(
        nodes=node_map,
        devices=devices,
        device_classes={
            "gpu.nvidia.com": model.DeviceClass(
                "gpu.nvidia.com", ('device.driver == "gpu.nvidia.com"',)
            )
        },
        topology_keys=("gangq.dev/rack",),
    )


EMPTY = model.Inventory()
GIB = 2**30 * 1000
"""No devices published: reservations of plain devices."""

POLICY = model.Policy(managed_device_classes=("gpu.nvidia.com",))


BLOCKED = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND query LIKE $1"
)


async def until_blocked(observer: asyncpg.Connection, query_prefix: str, *, count: int = 1) -> None:
    """Return once `count` backends run a statement starting with `query_prefix` and wait
    for a lock."""
    for _ in range(3000):
        if await observer.fetchval(BLOCKED, query_prefix + "%") >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no statement {query_prefix!r} ever waited for a lock")


async def hold(
    session: AsyncSession,
    key: str,
    *placements: model.ReplicaPlacement,
    at: float,
    phase: str = "Admitted",
    inventory: model.Inventory = EMPTY,
) -> None:
    """Give a queued job devices the way an admission does, without running a cycle; devices
    that `inventory` publishes say which counters and capacity they hold."""
    namespace, name = key.split("/")
    job_id = await session.scalar(
        select(JobRow.id).where(
            JobRow.namespace == namespace, JobRow.name == name, JobRow.phase == "Queued"
        )
    )
    assert job_id is not None, f"no queued job {key}"
    instant = timestamps.to_datetime(at)
    await reservations.reserve(session, [(job_id, placements)], at=instant, inventory=inventory)
    await session.execute(
        update(JobRow).where(JobRow.id == job_id).values(phase=phase, admitted_at=instant)
    )


async def ran(
    session: AsyncSession,
    queued: model.PendingJob,
    *placements: model.ReplicaPlacement,
    at: float,
    until: float,
) -> None:
    """A job that held these devices from `at` and ended at `until`: its released
    reservations stay as the usage record."""
    await jobs.enqueue(session, [queued], actor="test", now=at)
    await hold(session, queued.key, *placements, at=at)
    namespace, name = queued.key.split("/")
    job_id = await session.scalar(
        select(JobRow.id).where(JobRow.namespace == namespace, JobRow.name == name)
    )
    assert job_id is not None
    await reservations.release(session, [job_id], at=timestamps.to_datetime(until))
    await session.execute(update(JobRow).where(JobRow.id == job_id).values(phase=SUCCEEDED))


PROFILE = 'device.attributes["gpu.nvidia.com"].profile == "{}"'
"""A job selector on the partition profile, as a TrainingJob writes it."""


def partitioned_inventory(nodes: int = 1, *, gpus: int = 2) -> model.Inventory:
    """`nodes` nodes of `gpus` GPUs, each published whole (profile `whole`) and as seven
    1g.10gb partitions (profile `1g.10gb`), all consuming the GPU's counter set."""
    base = inventory(nodes, devices_per_node=0)
    devices: dict[DeviceId, Device] = {}
    counters: dict[CounterSetId, dict[str, int]] = {}
    for node in base.nodes:
        for number in range(gpus):
            counter_set = counter_set_id("gpu.nvidia.com", node, f"gpu-{number}-cs")
            counters[counter_set] = {"memory": 80 * GIB, "slices": 7000}
            shapes = [("whole", f"gpu-{number}", 80, 7)] + [
                ("1g.10gb", f"gpu-{number}-mig-{part}", 10, 1) for part in range(7)
            ]
            for profile, name, memory, slices in shapes:
                device = Device(
                    driver="gpu.nvidia.com",
                    pool=node,
                    name=name,
                    node=node,
                    attributes={"gpu.nvidia.com/profile": profile},
                    consumes=((counter_set, {"memory": memory * GIB, "slices": slices * 1000}),),
                )
                devices[device.id] = device
    return dataclasses.replace(base, devices=devices, counters=counters)
