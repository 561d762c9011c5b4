"""Builders for decision-core inputs: small clusters, jobs, gangs and quotas with sane defaults."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gangq.queue.core.device import (
    CounterSetId,
    Device,
    DeviceId,
    DeviceTaint,
    RequestPolicy,
    counter_set_id,
)
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
    Taint,
    Tenant,
    TenantQuota,
    Topology,
    TopologyMode,
)

DRIVER = "gpu.example.com"
GPU = "gpu"
"""The device class every builder uses unless told otherwise."""
RACK = "gangq.dev/rack"
NUMA = f"{DRIVER}/numa"
NO_POD = PodRequirements()
GPU_CLASS = DeviceClass(name=GPU, selectors=(f'device.driver == "{DRIVER}"',))


def node(
    name: str,
    *,
    rack: str = "rack-0",
    cpu_milli: int = 64_000,
    memory_bytes: int = 512 * 2**30,
    taints: Sequence[Taint] = (),
    ready: bool = True,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
) -> Node:
    return Node(
        name=NodeName(name),
        labels={RACK: rack, "kubernetes.io/hostname": name, **(labels or {})},
        taints=tuple(taints),
        ready=ready,
        unschedulable=unschedulable,
        allocatable_cpu_milli=cpu_milli,
        allocatable_memory_bytes=memory_bytes,
    )


def gpus(
    node_name: str,
    count: int = 8,
    *,
    numa_nodes: int = 2,
    product: str = "H100",
    tainted: Iterable[int] = (),
) -> list[Device]:
    """Devices gpu-0.. on NUMA node index*numa_nodes//count; `tainted` get a NoSchedule taint."""
    bad = set(tainted)
    return [
        Device(
            driver=DRIVER,
            pool=node_name,
            name=f"gpu-{index}",
            node=node_name,
            attributes={NUMA: index * numa_nodes // count, f"{DRIVER}/productName": product},
            capacity={f"{DRIVER}/memory": 80 * 2**30 * 1000},
            taints=(DeviceTaint("broken", "", "NoSchedule"),) if index in bad else (),
        )
        for index in range(count)
    ]


def device_id(node_name: str, index: int) -> DeviceId:
    return DeviceId(f"{DRIVER}/{node_name}/gpu-{index}")


def cluster(
    nodes: int = 4,
    *,
    per_node: int = 8,
    racks: int = 1,
    held_by_others: Iterable[DeviceId] = (),
    extra_nodes: Iterable[Node] = (),
) -> Inventory:
    """`nodes` nodes `node-0..` spread over `racks` racks in blocks, `per_node` GPUs each."""
    built = [
        node(f"node-{i}", rack=f"rack-{i * racks // max(nodes, 1)}") for i in range(nodes)
    ] + list(extra_nodes)
    devices = {d.id: d for n in built for d in gpus(n.name, per_node)}
    return Inventory(
        nodes={n.name: n for n in built},
        devices=devices,
        device_classes={GPU: GPU_CLASS},
        held_by_others=frozenset(held_by_others),
        topology_keys=(RACK,),
    )


def job(
    name: str,
    *,
    tenant: str = "team-a",
    tier: str = "training",
    priority: int = 0,
    replicas: int = 1,
    per_replica: int = 1,
    selectors: Sequence[str] = (),
    constraints: Sequence[str] = (),
    topology: TopologyMode = TopologyMode.NONE,
    submitted_at: float = 0.0,
    max_runtime_s: float | None = 3600.0,
    pod: PodRequirements = NO_POD,
    device_class: str = GPU,
    predicted_runtime_s: float | None = None,
    min_replicas: int | None = None,
) -> PendingJob:
    return PendingJob(
        key=JobKey(f"{tenant}/{name}"),
        uid=f"uid-{tenant}-{name}",
        tenant=Tenant(tenant),
        tier=tier,
        priority=priority,
        replicas=replicas,
        devices_per_replica=per_replica,
        device_class=device_class,
        selectors=tuple(selectors),
        constraints=tuple(constraints),
        topology=Topology(key=RACK if topology is not TopologyMode.NONE else "", mode=topology),
        pod=pod,
        submitted_at=submitted_at,
        max_runtime_s=max_runtime_s,
        predicted_runtime_s=predicted_runtime_s,
        min_replicas=min_replicas,
    )


def gang(
    name: str,
    placement: Sequence[tuple[str, Sequence[int]]],
    *,
    tenant: str = "team-b",
    tier: str = "small",
    priority: int = 0,
    started_at: float = 0.0,
    max_runtime_s: float | None = 3600.0,
    borrowed: int = 0,
    evicting: bool = False,
    pod: PodRequirements = NO_POD,
) -> RunningJob:
    """A gang holding devices: `placement` lists (node, device indexes) per replica."""
    return RunningJob(
        key=JobKey(f"{tenant}/{name}"),
        uid=f"uid-{tenant}-{name}",
        tenant=Tenant(tenant),
        tier=tier,
        priority=priority,
        device_class=GPU,
        placement=tuple(
            ReplicaPlacement(
                replica=i,
                node=NodeName(n),
                devices=tuple(device_id(n, index) for index in indexes),
            )
            for i, (n, indexes) in enumerate(placement)
        ),
        started_at=started_at,
        max_runtime_s=max_runtime_s,
        borrowed=borrowed,
        is_evicting=evicting,
        pod=pod,
    )


def quota(
    tenant: str,
    nominal: int,
    *,
    borrowing_limit: int = 0,
    weight: float = 1.0,
    allowed_tiers: Sequence[str] = (),
) -> TenantQuota:
    return TenantQuota(
        tenant=Tenant(tenant),
        device_class=GPU,
        nominal=nominal,
        borrowing_limit=borrowing_limit,
        weight=weight,
        allowed_tiers=tuple(allowed_tiers),
    )


PROFILE = f"{DRIVER}/profile"
"""Attribute naming what a device is: `whole`, a partition profile or `shared`."""
PARTITIONS = {"1g.10gb": (10, 1, 7), "3g.40gb": (40, 3, 2)}
"""Profile -> (memory GiB, compute slices, partitions per GPU) of a 7-slice 80 GiB GPU."""
GIB_MILLI = 2**30 * 1000


def profile_selector(profile: str) -> str:
    return f'device.attributes["{DRIVER}"].profile == "{profile}"'


def partitioned_gpus(
    node_name: str, count: int = 2
) -> tuple[list[Device], dict[CounterSetId, dict[str, int]]]:
    """`count` GPUs of 7 compute slices and 80 GiB, each published whole and as 1g.10gb and
    3g.40gb partitions consuming the GPU's counter set, as NVIDIA's driver publishes MIG."""
    devices: list[Device] = []
    counters: dict[CounterSetId, dict[str, int]] = {}
    for index in range(count):
        counter_set = counter_set_id(DRIVER, node_name, f"gpu-{index}-cs")
        counters[counter_set] = {"memory": 80 * GIB_MILLI, "slices": 7_000}
        shapes = [("whole", f"gpu-{index}", 80, 7)] + [
            (profile, f"gpu-{index}-{profile}-{part}", memory, slices)
            for profile, (memory, slices, parts) in PARTITIONS.items()
            for part in range(parts)
        ]
        for profile, name, memory, slices in shapes:
            devices.append(
                Device(
                    driver=DRIVER,
                    pool=node_name,
                    name=name,
                    node=node_name,
                    attributes={PROFILE: profile},
                    capacity={f"{DRIVER}/memory": memory * GIB_MILLI},
                    consumes=(
                        (counter_set, {"memory": memory * GIB_MILLI, "slices": slices * 1000}),
                    ),
                )
            )
    return devices, counters


def shared_gpus(node_name: str, count: int = 1) -> list[Device]:
    """Multi-allocatable GPUs of 80 GiB: shares of 1 GiB steps, 10 GiB by default."""
    policy = RequestPolicy(
        default=10 * GIB_MILLI, min=GIB_MILLI, max=80 * GIB_MILLI, step=GIB_MILLI
    )
    return [
        Device(
            driver=DRIVER,
            pool=node_name,
            name=f"shared-{index}",
            node=node_name,
            attributes={PROFILE: "shared"},
            capacity={f"{DRIVER}/memory": 80 * GIB_MILLI},
            multi=True,
            policies={f"{DRIVER}/memory": policy},
        )
        for index in range(count)
    ]
