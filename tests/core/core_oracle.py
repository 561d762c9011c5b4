"""An independent feasibility check for small instances, written without `placement`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import builders

from gangq.queue.core import fit
from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.model import NodeName, PendingJob, RunningJob, Snapshot, TopologyMode


def is_matching(job: PendingJob, device: Device) -> bool:
    """Devices of the builders' class; any job selector asks for H100."""
    product = device.attributes.get(f"{builders.DRIVER}/productName")
    return device.driver == builders.DRIVER and (not job.selectors or product == "H100")


def initially_free(snapshot: Snapshot, *, gone: Iterable[RunningJob] = ()) -> set[DeviceId]:
    """Devices free once the `gone` gangs have left."""
    leaving = {g.key for g in gone}
    inventory = snapshot.inventory
    used = {
        d for g in snapshot.running if g.key not in leaving for r in g.placement for d in r.devices
    }
    return {
        device_id
        for device_id, device in inventory.devices.items()
        if device_id not in used
        and device_id not in inventory.held_by_others
        and not device.is_tainted
    }


def cpu_left(snapshot: Snapshot, *, gone: Iterable[RunningJob] = ()) -> dict[NodeName, int]:
    leaving = {g.key for g in gone}
    cpu = {
        name: node.allocatable_cpu_milli - node.requested_cpu_milli
        for name, node in snapshot.inventory.nodes.items()
    }
    for gang in snapshot.running:
        if gang.key in leaving:
            continue
        for replica in gang.placement:
            cpu[replica.node] -= gang.pod.cpu_milli
    return cpu


def is_feasible(
    job: PendingJob, snapshot: Snapshot, free: set[DeviceId], cpu: Mapping[NodeName, int]
) -> bool:
    """R distinct usable nodes (in one rack when Required), each with D free matching devices
    sharing the constrained attribute and room for the pod."""
    usable: list[NodeName] = []
    for name, node in snapshot.inventory.nodes.items():
        if not fit.is_accepted(node, job.pod) or cpu[name] < job.pod.cpu_milli:
            continue
        groups: dict[object, int] = {}
        for device_id in free:
            device = snapshot.inventory.devices[device_id]
            if device.node != name or not is_matching(job, device):
                continue
            key = device.attributes.get(builders.NUMA) if job.constraints else None
            groups[key] = groups.get(key, 0) + 1
        if max(groups.values(), default=0) >= job.devices_per_replica:
            usable.append(name)
    if job.topology.mode is TopologyMode.REQUIRED:
        racks: dict[str, int] = {}
        for name in usable:
            rack = snapshot.inventory.nodes[name].labels[builders.RACK]
            racks[rack] = racks.get(rack, 0) + 1
        return max(racks.values(), default=0) >= job.replicas
    return len(usable) >= job.replicas
