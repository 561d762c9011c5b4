"""Synthetic clusters and queues for the planner benchmark, deterministic for a given seed.

The cluster: 8 devices per node with NUMA and product attributes, racks of 8 nodes, a quarter
of the nodes with smaller GPUs. The queue: 1-GPU, 8-GPU, 4x8 and 8x8 gangs over 3 tiers and
10 tenants, some with selectors. Only builds inputs; measuring is the suite's job.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.model import (
    DeviceClass,
    Inventory,
    JobKey,
    Node,
    NodeName,
    PendingJob,
    PodRequirements,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
    Tenant,
    TenantQuota,
    Topology,
    TopologyMode,
)

DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
RACK = "gangq.dev/rack"
DEVICES_PER_NODE = 8
NODES_PER_RACK = 8
TENANTS = tuple(Tenant(f"team-{index}") for index in range(10))
BIG_MEMORY = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("60Gi")) >= 0'
H100 = f'device.attributes["{DRIVER}"].productName == "NVIDIA H100 80GB HBM3"'
POD = PodRequirements(cpu_milli=4000, memory_bytes=16 * 2**30)


@dataclass(frozen=True, slots=True)
class JobKind:
    replicas: int
    devices_per_replica: int
    topology: TopologyMode


KINDS = (
    (JobKind(1, 1, TopologyMode.NONE), 0.70),
    (JobKind(1, 8, TopologyMode.NONE), 0.15),
    (JobKind(4, 8, TopologyMode.PREFERRED), 0.10),
    (JobKind(8, 8, TopologyMode.REQUIRED), 0.05),
)


def _devices(node: str, *, big: bool) -> list[Device]:
    product = "NVIDIA H100 80GB HBM3" if big else "NVIDIA A100 40GB"
    memory = (80 if big else 40) * 2**30 * 1000
    return [
        Device(
            driver=DRIVER,
            pool=node,
            name=f"gpu-{index}",
            node=node,
            attributes={f"{DRIVER}/numa": index // 4, f"{DRIVER}/productName": product},
            capacity={f"{DRIVER}/memory": memory},
        )
        for index in range(DEVICES_PER_NODE)
    ]


def inventory(nodes: int) -> Inventory:
    built: dict[NodeName, Node] = {}
    devices: dict[DeviceId, Device] = {}
    for index in range(nodes):
        name = NodeName(f"gpu-{index:05d}")
        built[name] = Node(
            name=name,
            labels={RACK: f"rack-{index // NODES_PER_RACK:04d}"},
            allocatable_cpu_milli=128_000,
            allocatable_memory_bytes=1024 * 2**30,
        )
        for device in _devices(name, big=index % 4 != 3):
            devices[device.id] = device
    selector = f'device.driver == "{DRIVER}"'
    return Inventory(
        nodes=built,
        devices=devices,
        device_classes={DEVICE_CLASS: DeviceClass(DEVICE_CLASS, (selector,))},
        topology_keys=(RACK,),
    )


def quotas(nodes: int) -> tuple[TenantQuota, ...]:
    share = nodes * DEVICES_PER_NODE // len(TENANTS)
    return tuple(
        TenantQuota(
            tenant=tenant,
            device_class=DEVICE_CLASS,
            nominal=share,
            borrowing_limit=share * 3,
            weight=1.0 + index % 3,
        )
        for index, tenant in enumerate(TENANTS)
    )


def _kind(rng: random.Random) -> JobKind:
    return rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]


def pending(
    count: int, *, rng: random.Random, tiers: tuple[str, ...], now: float, first: int = 0
) -> list[PendingJob]:
    jobs = []
    for index in range(first, first + count):
        kind = _kind(rng)
        tenant = rng.choice(TENANTS)
        roll = rng.random()
        selectors = (H100,) if roll < 0.2 else (BIG_MEMORY,) if roll < 0.3 else ()
        jobs.append(
            PendingJob(
                key=JobKey(f"{tenant}/job-{index}"),
                uid=f"uid-{index:06d}",
                tenant=tenant,
                tier=rng.choice(tiers),
                priority=rng.choice((0, 0, 0, 10)),
                replicas=kind.replicas,
                devices_per_replica=kind.devices_per_replica,
                device_class=DEVICE_CLASS,
                selectors=selectors,
                constraints=(f"{DRIVER}/numa",) if kind.devices_per_replica == 4 else (),
                topology=Topology(RACK, kind.topology)
                if kind.topology is not TopologyMode.NONE
                else Topology(),
                pod=POD,
                submitted_at=now - rng.uniform(0, 86_400),
                max_runtime_s=rng.choice((600.0, 3600.0, 14_400.0)),
            )
        )
    return jobs


def running(
    cluster: Inventory, *, fill: float, rng: random.Random, tiers: tuple[str, ...], now: float
) -> list[RunningJob]:
    """Gangs filling about `fill` of the devices: whole 8-GPU nodes and 1-GPU jobs."""
    gangs: list[RunningJob] = []
    for node_index, node in enumerate(sorted(cluster.nodes)):
        used = min(DEVICES_PER_NODE, round(rng.gauss(fill * DEVICES_PER_NODE, 1.5)))
        if used <= 0:
            continue
        ids = [DeviceId(f"{DRIVER}/{node}/gpu-{i}") for i in range(DEVICES_PER_NODE)]
        if used == DEVICES_PER_NODE and rng.random() < 0.5:
            groups = [ids]
        else:
            groups = [[device] for device in ids[:used]]
        for group_index, group in enumerate(groups):
            tenant = rng.choice(TENANTS)
            gangs.append(
                RunningJob(
                    key=JobKey(f"{tenant}/run-{node_index}-{group_index}"),
                    uid=f"run-{node_index:05d}-{group_index}",
                    tenant=tenant,
                    tier=rng.choice(tiers),
                    priority=rng.choice((0, 10)),
                    device_class=DEVICE_CLASS,
                    placement=(ReplicaPlacement(0, node, tuple(group)),),
                    started_at=now - rng.uniform(700, 20_000),
                    max_runtime_s=rng.choice((3600.0, 28_800.0, 86_400.0)),
                    borrowed=len(group) if rng.random() < 0.3 else 0,
                    pod=POD,
                )
            )
    return gangs


def snapshot(
    *, nodes: int, pending_count: int, preemption: bool, seed: int, now: float
) -> Snapshot:
    """Without preemption: a cluster about 85% used and jobs of every tier. With it: a full
    cluster of small and training gangs, a third of the queue in tiers above them."""
    rng = random.Random(seed)
    cluster = inventory(nodes)
    if preemption:
        gangs = running(cluster, fill=1.0, rng=rng, tiers=("small",), now=now)
        jobs = pending(pending_count * 2 // 3, rng=rng, tiers=("small",), now=now)
        jobs += pending(
            pending_count - len(jobs),
            rng=rng,
            tiers=("prod-inference", "training"),
            now=now,
            first=len(jobs),
        )
    else:
        tiers = ("prod-inference", "training", "small")
        gangs = running(cluster, fill=0.85, rng=rng, tiers=tiers, now=now)
        jobs = pending(pending_count, rng=rng, tiers=tiers, now=now)
    return Snapshot(
        inventory=cluster, quotas=quotas(nodes), running=tuple(gangs), pending=tuple(jobs)
    )
