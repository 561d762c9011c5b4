"""What the running gangs leave free of one inventory: the start of every cycle's pool.

Each node's free devices and its room for pods (CPU, memory, pod count) once every running
gang is counted. Built from all of their placements it costs a pass over every gang and device
(about 300 ms at 8,000 nodes and 44,000 gangs), at every cycle however short the queue. Between
two cycles a few gangs start or end, so for inventories of plain devices the last state is
kept, per inventory, and brought up to date by those gangs alone: their devices change hands,
their pods' room is given back or taken, and only their nodes' free devices are listed again,
in the inventory's order, so the pool is the one a fresh count would give. Partitioned or
shared devices tie devices together through counters (module `sharing`); such inventories
are counted afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gangq.queue.core import derived
from gangq.queue.core.device import CounterSetId, Device, DeviceId
from gangq.queue.core.model import Inventory, NodeName, PodRequirements, RunningJob

Room = tuple[int, int, int]
"""CPU (thousandths), memory (bytes) and pods a node has left for gangq pods."""
REBUILD_SHARE = 4
"""Counted afresh when more than a 1/4 of the gangs changed: updating costs more then."""


@dataclass(frozen=True, slots=True)
class Candidates:
    """The devices of an inventory that are free unless a gangq gang holds them: on a known
    node, untainted, not allocated by others. The same for every cycle on one inventory."""

    by_node: dict[NodeName, tuple[Device, ...]]
    """Sorted by node, and each node's devices by name."""
    ids: dict[int, DeviceId]
    """`id()` of each candidate -> its DeviceId."""
    consumers: dict[CounterSetId, tuple[Device, ...]]
    """Candidates per counter set they consume."""
    partitioned: bool
    """Some device of the inventory consumes counters or is shared, or others hold shares."""


def _by_name(device: Device) -> str:
    return device.name


def _free_candidates(inventory: Inventory) -> Candidates:
    by_node: dict[NodeName, list[Device]] = {}
    ids: dict[int, DeviceId] = {}
    consumers: dict[CounterSetId, list[Device]] = {}
    partitioned = bool(inventory.shared_by_others)
    for device_id, device in inventory.devices.items():
        consumes = device.consumes
        if consumes or device.multi:
            partitioned = True
        if (
            device.node is None
            or device.node not in inventory.nodes
            or device_id in inventory.held_by_others
            or device.is_tainted
        ):
            continue
        by_node.setdefault(NodeName(device.node), []).append(device)
        ids[id(device)] = device_id
        for set_id, _ in consumes:
            consumers.setdefault(set_id, []).append(device)
    return Candidates(
        by_node={
            node: tuple(sorted(devices, key=_by_name)) for node, devices in sorted(by_node.items())
        },
        ids=ids,
        consumers={set_id: tuple(devices) for set_id, devices in consumers.items()},
        partitioned=partitioned,
    )


candidates = derived.PerInventory(_free_candidates)
"""Rebuilt when the cycle gets a new inventory, not at every cycle (see `derived`)."""


@dataclass(slots=True)
class Occupancy:
    """The free devices and room that one set of running gangs leaves on an inventory."""

    running: dict[int, RunningJob]
    """The gangs counted, by `id()`: holding them keeps their ids from being reused."""
    gone: set[int]
    """`id()` of the candidates gangs hold whole."""
    by_node: dict[NodeName, Sequence[Device]]
    """Every candidate node's free devices in the inventory's order, empty when none (the
    node keeps its place in the order): the candidates' own tuple while none is taken, else
    a new list; never changed in place."""
    free: set[DeviceId]
    free_ids: dict[int, DeviceId]
    """`id()` of each free device -> its DeviceId."""
    headroom: dict[NodeName, Room]
    incremental: bool
    """Gangs can be added and removed one by one: no device is held in part (shares) or by
    two gangs at once, so a gang's end frees exactly its devices."""

    def free_by_node(self) -> dict[NodeName, Sequence[Device]]:
        return {node: devices for node, devices in self.by_node.items() if devices}


def count(inventory: Inventory, candidates: Candidates, running: Sequence[RunningJob]) -> Occupancy:
    """The occupancy of `running`, kept for the next call on the same inventory when its
    devices are plain; counted afresh otherwise."""
    if candidates.partitioned:
        return _fresh(inventory, candidates, running)
    keeper = _kept(inventory)
    last = keeper.last
    if last is None or not last.incremental or not _advance(last, inventory, candidates, running):
        last = keeper.last = _fresh(inventory, candidates, running)
    return last


class _Keeper:
    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: Occupancy | None = None


_kept = derived.PerInventory(lambda inventory: _Keeper())
"""The last occupancy counted on the current inventory (see `derived`)."""


def _fresh(
    inventory: Inventory, candidates: Candidates, running: Sequence[RunningJob]
) -> Occupancy:
    held: set[DeviceId] = set()
    shared: set[DeviceId] = set()
    placed = 0
    for job in running:
        for replica in job.placement:
            held.update(replica.devices)
            placed += len(replica.devices)
            if replica.shares:
                shared.update(share.device for share in replica.shares)
    incremental = not shared and placed == len(held)
    held -= shared
    known, ids = inventory.devices, candidates.ids
    taken = [known[d] for d in held if d in known and id(known[d]) in ids]
    gone = {id(device) for device in taken}
    by_node: dict[NodeName, Sequence[Device]] = dict(candidates.by_node)
    for node in {NodeName(device.node or "") for device in taken}:
        by_node[node] = [d for d in candidates.by_node[node] if id(d) not in gone]
    free = set(ids.values())
    free -= held
    free_ids = dict(ids)
    for device in gone:
        del free_ids[device]
    headroom: dict[NodeName, Room] = {
        name: (
            node.allocatable_cpu_milli - node.requested_cpu_milli,
            node.allocatable_memory_bytes - node.requested_memory_bytes,
            node.allocatable_pods - node.pod_count,
        )
        for name, node in inventory.nodes.items()
    }
    for job in running:
        _charge_pods(headroom, job, sign=1)
    return Occupancy(
        running={id(job): job for job in running},
        gone=gone,
        by_node=by_node,
        free=free,
        free_ids=free_ids,
        headroom=headroom,
        incremental=incremental,
    )


def _advance(
    last: Occupancy,
    inventory: Inventory,
    candidates: Candidates,
    running: Sequence[RunningJob],
) -> bool:
    """Bring `last` to `running` by the gangs that ended and started since; False when it
    must be counted afresh instead: too many changed, or a gang holds shares or a device
    another gang holds too."""
    current = {id(job): job for job in running}
    ended = [job for key, job in last.running.items() if key not in current]
    started = [job for key, job in current.items() if key not in last.running]
    if len(ended) + len(started) > len(running) // REBUILD_SHARE + 1:
        return False
    replicas = [replica for job in started for replica in job.placement]
    devices = [d for replica in replicas for d in replica.devices]
    if any(replica.shares for replica in replicas) or len(set(devices)) != len(devices):
        return False
    known, ids = inventory.devices, candidates.ids
    touched: set[NodeName] = set()
    for job in ended:
        _charge_pods(last.headroom, job, sign=-1)
        for replica in job.placement:
            for device_id in replica.devices:
                device = known.get(device_id)
                if device is not None and id(device) in ids:
                    last.gone.discard(id(device))
                    last.free.add(device_id)
                    last.free_ids[id(device)] = device_id
                    touched.add(NodeName(device.node or ""))
    for job in started:
        _charge_pods(last.headroom, job, sign=1)
        for replica in job.placement:
            for device_id in replica.devices:
                device = known.get(device_id)
                if device is not None and id(device) in ids:
                    if id(device) in last.gone:
                        # held by a gang still counted: the input holds it twice
                        last.incremental = False
                    last.gone.add(id(device))
                    last.free.discard(device_id)
                    last.free_ids.pop(id(device), None)
                    touched.add(NodeName(device.node or ""))
    for node in touched:
        every = candidates.by_node[node]
        kept = [d for d in every if id(d) not in last.gone]
        last.by_node[node] = every if len(kept) == len(every) else kept
    last.running = current
    return last.incremental


def _charge_pods(headroom: dict[NodeName, Room], job: RunningJob, *, sign: int) -> None:
    pod: PodRequirements = job.pod
    for replica in job.placement:
        room = headroom.get(replica.node)
        if room is not None:
            headroom[replica.node] = (
                room[0] - sign * pod.cpu_milli,
                room[1] - sign * pod.memory_bytes,
                room[2] - sign,
            )
