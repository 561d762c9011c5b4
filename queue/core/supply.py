"""What-if supply for one job shape: free devices plus the devices of gangs assumed gone.

The victim search adds gangs one at a time (and gives some back) and asks "does it fit now?".
This module answers incrementally: only the nodes a gang touches are re-examined, so a search
costs what the gangs it tries hold, not the cluster. It reads the pool and never changes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from gangq.queue.core import placement
from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.model import NodeName, RunningJob, TopologyMode
from gangq.queue.core.pool import Pool

_ZERO_ROOM = (0, 0, 0)


class Supply:
    """Free matching devices per node plus those of added gangs, and which nodes qualify."""

    __slots__ = (
        "_domains",
        "_excluded",
        "_extra_room",
        "_full_domains",
        "_pool",
        "_qualified",
        "_released",
        "_shape",
        "_view",
    )

    def __init__(
        self,
        shape: placement.Shape,
        pool: Pool,
        *,
        excluded: frozenset[DeviceId] = frozenset(),
        held_room: Mapping[NodeName, tuple[int, int, int]] | None = None,
        scope: Collection[NodeName] | None = None,
    ) -> None:
        self._shape = shape
        self._pool = pool
        self._view = pool.view(shape.selector)
        self._excluded = excluded
        self._released: dict[NodeName, list[Device]] = {}
        self._extra_room: dict[NodeName, list[int]] = {
            node: [-room[0], -room[1], -room[2]] for node, room in (held_room or {}).items()
        }
        self._qualified: dict[NodeName, str | None] = {}
        self._domains: dict[str, int] = {}
        self._full_domains = 0
        """Domains with at least `replicas` qualifying nodes."""
        count = shape.devices_per_replica
        if scope is None:
            nodes: Iterable[NodeName] = self._view.nodes_with_at_least(count)
        else:
            nodes = (n for n in scope if len(self._view.by_node.get(n, ())) >= count)
        for node in nodes:
            self._refresh(node)
        for node in self._extra_room:
            self._refresh(node)

    def available(self, node: NodeName) -> list[Device]:
        devices = [*self._view.by_node.get(node, ()), *self._released.get(node, [])]
        if self._excluded:
            devices = [device for device in devices if device.id not in self._excluded]
        return sorted(devices, key=lambda device: device.name)

    def _qualifies(self, node: NodeName) -> bool:
        pod = self._shape.pod
        if node not in self._pool.headroom or not self._pool.is_accepted(node, pod):
            return False
        count = len(self._view.by_node.get(node, ())) + len(self._released.get(node, ()))
        if count < self._shape.devices_per_replica:
            return False
        devices = self.available(node)
        if len(devices) < self._shape.devices_per_replica:
            return False
        constraints = self._shape.constraints
        if (
            placement.pick_devices(
                devices, self._shape.devices_per_replica, constraints=constraints
            )
            is None
        ):
            return False
        return self._pool.has_room(node, pod, extra=self._extra_room.get(node, _ZERO_ROOM))

    def _refresh(self, node: NodeName) -> None:
        was = node in self._qualified
        now = self._qualifies(node)
        if was == now:
            return
        domain: str | None = None
        if self._shape.topology.mode is not TopologyMode.NONE:
            known = self._pool.inventory.nodes.get(node)
            domain = known.labels.get(self._shape.topology.key) if known is not None else None
        wanted = self._shape.replicas
        if now:
            self._qualified[node] = domain
            if domain is not None:
                count = self._domains.get(domain, 0) + 1
                self._domains[domain] = count
                self._full_domains += count == wanted
        else:
            domain = self._qualified.pop(node)
            if domain is not None:
                count = self._domains[domain]
                self._domains[domain] = count - 1
                self._full_domains -= count == wanted

    def _apply(self, job: RunningJob, *, sign: int) -> None:
        pod = job.pod
        for node, matching in self._pool.held_matching(self._shape.selector, job):
            room = self._extra_room.setdefault(node, [0, 0, 0])
            room[0] += sign * pod.cpu_milli
            room[1] += sign * pod.memory_bytes
            room[2] += sign
            if sign > 0:
                self._released.setdefault(node, []).extend(matching)
            else:
                gone = {id(device) for device in matching}
                kept = [d for d in self._released.get(node, []) if id(d) not in gone]
                self._released[node] = kept
            self._refresh(node)

    def contributes(self, job: RunningJob) -> bool:
        """The gang holds at least one matching device on a node the job's pod accepts."""
        pod = self._shape.pod
        return any(
            matching and self._pool.is_accepted(node, pod)
            for node, matching in self._pool.held_matching(self._shape.selector, job)
        )

    def add(self, job: RunningJob) -> None:
        """Assume the gang is gone: its matching devices and pod room become available."""
        self._apply(job, sign=1)

    def remove(self, job: RunningJob) -> None:
        """Undo `add` for a gang (fill-back of the preemption search)."""
        self._apply(job, sign=-1)

    def fits(self) -> bool:
        wanted = self._shape.replicas
        if self._shape.topology.mode is TopologyMode.REQUIRED:
            return self._full_domains > 0
        return len(self._qualified) >= wanted

    def choose(self) -> placement.Choice | placement.Shortfall:
        """A concrete placement on the current supply, best fit first."""
        nodes = sorted(self._qualified, key=lambda node: (len(self.available(node)), node))
        return placement.select_nodes(
            self._shape,
            nodes=nodes,
            devices_of=self.available,
            has_room=lambda node: True,
            known=self._pool.inventory.nodes,
        )
