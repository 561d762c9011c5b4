"""The device-plugin world: every pod is placed on its own, as kube-scheduler does with
`nvidia.com/gpu: N`. No gang, no preemption: a job may start some pods and wait for the rest.

The scheduler sees only a count of free GPUs per node (no selectors, NUMA or topology) and
scores nodes LeastAllocated (most free GPUs first), kube-scheduler's default. A namespace
ResourceQuota caps each tenant at `nominal + borrowingLimit` devices. Pods are tried in order
of tier (priority class), then creation time; a pod that does not fit is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping

from gangq.queue.core import explain
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import (
    Admission,
    CycleResult,
    JobKey,
    NodeName,
    ReplicaPlacement,
    Snapshot,
    Tenant,
)
from gangq.queue.sim import fifo


def free_devices(snapshot: Snapshot) -> dict[NodeName, list[DeviceId]]:
    """Devices no job holds, per node, in name order."""
    held = {d for job in snapshot.running for replica in job.placement for d in replica.devices}
    free: dict[NodeName, list[DeviceId]] = {name: [] for name in snapshot.inventory.nodes}
    for device_id in sorted(snapshot.inventory.devices):
        device = snapshot.inventory.devices[device_id]
        if device.node is not None and device_id not in held:
            free.setdefault(NodeName(device.node), []).append(device_id)
    return free


def _least_allocated(free: Mapping[NodeName, list[DeviceId]], count: int) -> NodeName | None:
    fitting = [node for node, devices in free.items() if len(devices) >= count]
    if not fitting:
        return None
    return min(fitting, key=lambda node: (-len(free[node]), node))


class DevicePluginPolicy:
    name = "device-plugin"
    whole_gangs = False
    serving_tiers: frozenset[str] = frozenset()

    def decide(self, snapshot: Snapshot, *, now: float) -> CycleResult:
        """Place each missing pod greedily; what does not fit waits for a later cycle."""
        free = free_devices(snapshot)
        placed = {job.key: {r.replica for r in job.placement} for job in snapshot.running}
        used: dict[Tenant, int] = {}
        for gang in snapshot.running:
            used[gang.tenant] = used.get(gang.tenant, 0) + gang.device_count
        limits = {q.tenant: q.nominal + q.borrowing_limit for q in snapshot.quotas}
        admissions: list[Admission] = []
        pending: dict[JobKey, explain.PendingReason] = {}
        for job in sorted(snapshot.pending, key=fifo.fifo_key):
            count = job.devices_per_replica
            new: list[ReplicaPlacement] = []
            for replica in range(job.replicas):
                if replica in placed.get(job.key, ()):
                    continue
                if used.get(job.tenant, 0) + count > limits.get(job.tenant, 0):
                    pending[job.key] = fifo.OVER_LIMIT
                    break
                node = _least_allocated(free, count)
                if node is None:
                    pending[job.key] = fifo.NO_ROOM
                    break
                devices, free[node] = free[node][:count], free[node][count:]
                new.append(ReplicaPlacement(replica=replica, node=node, devices=tuple(devices)))
                used[job.tenant] = used.get(job.tenant, 0) + count
            if new:
                admissions.append(Admission(job=job.key, placement=tuple(new)))
        return CycleResult(admissions=tuple(admissions), pending=pending)

    def wake_at(self, snapshot: Snapshot, *, now: float) -> float | None:
        """Pods wait for events only; rendezvous timeouts are the simulator's own timers."""
        return None
