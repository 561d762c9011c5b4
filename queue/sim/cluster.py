"""The simulated cluster: a `ClusterSpec` turned into the core's `Inventory`.

Owns the shape of simulated nodes and devices (rack labels, NUMA attributes, a DeviceClass that
selects the driver's devices), mirroring what a DRA GPU driver publishes. Static: the simulator
has no node failures, so it is built once per run.
"""

from __future__ import annotations

from gangq.queue.core.device import AttributeValue, CounterSetId, Device, counter_set_id
from gangq.queue.core.model import DeviceClass, Inventory, Node, NodeName
from gangq.queue.sim.trace import SLICE_PROFILES, ClusterSpec

RACK_LABEL = "gangq.dev/rack"
DRIVER = "gpu.nvidia.com"
NUMA_ATTRIBUTE = f"{DRIVER}/numa"
_GIB_MILLI = 1024**3 * 1000
_MEMORY_MILLI = 80 * _GIB_MILLI
PROFILE_ATTRIBUTE = f"{DRIVER}/profile"
"""`whole` on a whole GPU, the profile name on a partition: what jobs select."""
WHOLE_PROFILE = "whole"


def profile_selector(profile: str) -> str:
    return f'device.attributes["{DRIVER}"].profile == "{profile}"'


def node_name(index: int) -> NodeName:
    return NodeName(f"gpu-{index}")


def rack_of(index: int, *, cluster: ClusterSpec) -> str:
    """Nodes are split into `racks` contiguous groups, the first racks one node larger."""
    per_rack, extra = divmod(cluster.nodes, cluster.racks)
    boundary = extra * (per_rack + 1)
    if index < boundary:
        return f"rack-{index // (per_rack + 1)}"
    return f"rack-{extra + (index - boundary) // per_rack}"


def _devices(
    index: int, *, cluster: ClusterSpec, counters: dict[CounterSetId, dict[str, int]]
) -> list[Device]:
    """A node's GPUs; on a partitioned node each also as partitions of every profile, whole GPU
    and partitions consuming the GPU's counter set (added to `counters`)."""
    name = node_name(index)
    per_numa = -(-cluster.devices_per_node // cluster.numa_per_node)
    partitioned = index < cluster.partitioned_nodes
    devices = []
    for slot in range(cluster.devices_per_node):
        attributes: dict[str, AttributeValue] = {
            f"{DRIVER}/productName": cluster.product_name,
            NUMA_ATTRIBUTE: slot // per_numa,
            f"{DRIVER}/index": slot,
        }
        counter_set = counter_set_id(DRIVER, name, f"gpu-{slot}-cs")
        shapes = [(WHOLE_PROFILE, f"gpu-{slot}", 80, 7)]
        if partitioned:
            counters[counter_set] = {"memory": _MEMORY_MILLI, "slices": 7000}
            shapes += [
                (profile, f"gpu-{slot}-{profile.replace('.', '')}-{part}", memory, slices)
                for profile, (memory, slices, parts) in SLICE_PROFILES.items()
                for part in range(parts)
            ]
        for profile, device_name, memory, slices in shapes:
            consumed = {"memory": memory * _GIB_MILLI, "slices": slices * 1000}
            devices.append(
                Device(
                    driver=DRIVER,
                    pool=name,
                    name=device_name,
                    node=name,
                    attributes={**attributes, PROFILE_ATTRIBUTE: profile},
                    capacity={f"{DRIVER}/memory": memory * _GIB_MILLI},
                    consumes=((counter_set, consumed),) if partitioned else (),
                )
            )
    return devices


def build_inventory(cluster: ClusterSpec) -> Inventory:
    """Ready nodes with ample CPU and memory: only devices limit placement in the simulation."""
    nodes = {
        node_name(i): Node(
            name=node_name(i),
            labels={
                RACK_LABEL: rack_of(i, cluster=cluster),
                "kubernetes.io/hostname": node_name(i),
            },
            allocatable_cpu_milli=192_000,
            allocatable_memory_bytes=2 * 1024**4,
        )
        for i in range(cluster.nodes)
    }
    counters: dict[CounterSetId, dict[str, int]] = {}
    devices = {
        device.id: device
        for i in range(cluster.nodes)
        for device in _devices(i, cluster=cluster, counters=counters)
    }
    device_class = DeviceClass(
        name=cluster.device_class, selectors=(f'device.driver == "{DRIVER}"',)
    )
    return Inventory(
        nodes=nodes,
        devices=devices,
        device_classes={device_class.name: device_class},
        topology_keys=(RACK_LABEL,),
        counters=counters,
    )
