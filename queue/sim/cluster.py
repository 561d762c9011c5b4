"""The simulated cluster: a `ClusterSpec` turned into the core's `Inventory`.

Owns the shape of simulated nodes and devices (rack labels, NUMA attributes, a DeviceClass that
selects the driver's devices), mirroring what a DRA GPU driver publishes. Static: the simulator
has no node failures, so it is built once per run.
"""

from __future__ import annotations

from gangq.queue.core.device import Device
from gangq.queue.core.model import DeviceClass, Inventory, Node, NodeName
from gangq.queue.sim.trace import ClusterSpec

RACK_LABEL = "gangq.dev/rack"
DRIVER = "gpu.nvidia.com"
NUMA_ATTRIBUTE = f"{DRIVER}/numa"
_MEMORY_MILLI = 80 * 1024**3 * 1000


def node_name(index: int) -> NodeName:
    return NodeName(f"gpu-{index}")


def rack_of(index: int, *, cluster: ClusterSpec) -> str:
    """Nodes are split into `racks` contiguous groups, the first racks one node larger."""
    per_rack, extra = divmod(cluster.nodes, cluster.racks)
    boundary = extra * (per_rack + 1)
    if index < boundary:
        return f"rack-{index // (per_rack + 1)}"
    return f"rack-{extra + (index - boundary) // per_rack}"


def _devices(index: int, *, cluster: ClusterSpec) -> list[Device]:
    name = node_name(index)
    per_numa = -(-cluster.devices_per_node // cluster.numa_per_node)
    return [
        Device(
            driver=DRIVER,
            pool=name,
            name=f"gpu-{slot}",
            node=name,
            attributes={
                f"{DRIVER}/productName": cluster.product_name,
                NUMA_ATTRIBUTE: slot // per_numa,
                f"{DRIVER}/index": slot,
            },
            capacity={f"{DRIVER}/memory": _MEMORY_MILLI},
        )
        for slot in range(cluster.devices_per_node)
    ]


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
    devices = {
        device.id: device for i in range(cluster.nodes) for device in _devices(i, cluster=cluster)
    }
    device_class = DeviceClass(
        name=cluster.device_class, selectors=(f'device.driver == "{DRIVER}"',)
    )
    return Inventory(
        nodes=nodes,
        devices=devices,
        device_classes={device_class.name: device_class},
        topology_keys=(RACK_LABEL,),
    )
