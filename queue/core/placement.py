"""All-or-nothing gang placement: R replicas on R distinct nodes, D devices each (rules 2, 7).

Owns the choice of nodes and devices: best fit (nodes with the fewest free matching devices
first, so whole nodes stay free for big gangs), `matchAttribute` constraints inside a replica,
and the topology modes (Required: one domain; Preferred: one domain if any fits; the first
domain to gather R usable nodes, walking nodes fullest first, is taken, which keeps whole
domains free). It reads the pool and never changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gangq.queue.core.device import Device, DeviceId
from gangq.queue.core.model import (
    Node,
    NodeName,
    PendingJob,
    PodRequirements,
    ReplicaPlacement,
    Topology,
    TopologyMode,
)
from gangq.queue.core.pool import Chooser, Pool, SelectorKey, first_devices


class Shape(NamedTuple):
    """Everything placement depends on; jobs of one shape succeed or fail together in a cycle.
    A named tuple: every pending job builds and hashes one per cycle, and tuples are cheap."""

    selector: SelectorKey
    replicas: int
    devices_per_replica: int
    constraints: tuple[str, ...]
    topology: Topology
    pod: PodRequirements

    @classmethod
    def of(cls, job: PendingJob) -> Shape:
        return cls(
            (job.device_class, job.selectors, job.capacity_requests),
            job.replicas,
            job.devices_per_replica,
            job.constraints,
            job.topology,
            job.pod,
        )


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why no placement exists, with the numbers a capacity reason shows."""

    with_devices: int
    """Nodes with enough free matching devices (meeting the constraints)."""
    with_room: int
    """Of those, nodes the pod also fits on (taints, selectors, CPU, memory)."""
    best_domain: int | None = None
    """Most usable nodes in one topology domain, for Required topology."""


Choice = list[tuple[NodeName, tuple[Device, ...]]]


@dataclass(frozen=True, slots=True)
class NodeSubset:
    """The nodes of `domain` (every node when None) but those in `besides`: where a grow may
    add replicas. Kept as the two sets rather than their difference, which would cost a copy
    of a big cluster's node names per gang and cycle."""

    besides: frozenset[NodeName]
    domain: frozenset[NodeName] | None = None

    def __contains__(self, node: object) -> bool:
        return node not in self.besides and (self.domain is None or node in self.domain)


def pick_devices(
    devices: Sequence[Device],
    count: int,
    *,
    constraints: tuple[str, ...],
    choose: Chooser = first_devices,
) -> tuple[Device, ...] | None:
    """`count` devices sharing every constrained attribute, from the smallest group that fits."""
    if len(devices) < count:
        return None
    if not constraints:
        if choose is first_devices:
            return tuple(devices[:count])
        picked = choose(devices, count)
        return None if picked is None else tuple(picked)
    groups: dict[tuple[object, ...], list[Device]] = {}
    for device in devices:
        values = tuple(device.attributes.get(name) for name in constraints)
        if None not in values:
            groups.setdefault(values, []).append(device)
    fitting = sorted(
        (group for group in groups.values() if len(group) >= count),
        key=lambda group: (len(group), group[0].name),
    )
    for group in fitting:
        picked = choose(group, count)
        if picked is not None:
            return tuple(picked)
    return None


def select_nodes(
    shape: Shape,
    *,
    nodes: Iterable[NodeName],
    devices_of: Callable[[NodeName], Sequence[Device]],
    has_room: Callable[[NodeName], bool],
    known: Mapping[NodeName, Node],
    choose: Chooser = first_devices,
) -> Choice | Shortfall:
    """Walk candidate nodes in preference order and pick R of them, honouring topology."""
    count, wanted = shape.devices_per_replica, shape.replicas
    mode, key = shape.topology.mode, shape.topology.key
    chosen: Choice = []
    domains: dict[str, Choice] = {}
    with_devices = 0
    for node in nodes:
        available = devices_of(node)
        devices = pick_devices(available, count, constraints=shape.constraints, choose=choose)
        if devices is None:
            continue
        with_devices += 1
        if not has_room(node):
            continue
        chosen.append((node, devices))
        if mode is TopologyMode.NONE:
            if len(chosen) == wanted:
                return chosen
            continue
        domain = known[node].labels.get(key) if node in known else None
        if domain is not None:
            members = domains.setdefault(domain, [])
            members.append((node, devices))
            if len(members) == wanted:
                # nodes come fullest first, so this domain is made of the most used nodes
                return members
    if mode is TopologyMode.PREFERRED and len(chosen) >= wanted:
        return chosen[:wanted]
    best_domain = max((len(members) for members in domains.values()), default=0)
    return Shortfall(
        with_devices=with_devices,
        with_room=len(chosen),
        best_domain=best_domain if mode is TopologyMode.REQUIRED else None,
    )


def is_possible(shape: Shape, pool: Pool) -> bool:
    """Whether the shape could fit were every gang gone: otherwise no eviction or wait helps."""
    capable = [
        node
        for node in pool.capable_nodes(shape.selector, shape.devices_per_replica)
        if pool.is_accepted(node, shape.pod)
    ]
    if shape.topology.mode is not TopologyMode.REQUIRED:
        return len(capable) >= shape.replicas
    per_domain: dict[str, int] = {}
    for node in capable:
        domain = pool.inventory.nodes[node].labels.get(shape.topology.key)
        if domain is not None:
            per_domain[domain] = per_domain.get(domain, 0) + 1
    return any(count >= shape.replicas for count in per_domain.values())


def _negated(
    held_room: Mapping[NodeName, tuple[int, int, int]] | None, node: NodeName
) -> tuple[int, ...]:
    held = held_room.get(node) if held_room else None
    return (-held[0], -held[1], -held[2]) if held else ()


def as_placement(choice: Choice, shape: Shape, pool: Pool) -> tuple[ReplicaPlacement, ...]:
    """The placement of a choice, with the share each replica takes of shared devices."""
    return tuple(
        ReplicaPlacement(
            replica=index,
            node=node,
            devices=tuple(d.id for d in devices),
            shares=pool.shares_of(shape.selector, devices) if pool.partitioned else (),
        )
        for index, (node, devices) in enumerate(choice)
    )


def place(
    shape: Shape,
    pool: Pool,
    *,
    excluded: frozenset[DeviceId] = frozenset(),
    held_room: Mapping[NodeName, tuple[int, int, int]] | None = None,
    within: NodeSubset | None = None,
) -> Choice | Shortfall:
    """Place on the pool's free devices, leaving `excluded` devices and `held_room` (kept for
    backfill reservations) alone, on the nodes `within` only when given."""
    view = pool.view(shape.selector)
    pod = shape.pod
    if excluded and pool.partitioned:
        excluded = pool.siblings(excluded)
    nodes = (
        n
        for n in view.nodes_with_at_least(shape.devices_per_replica)
        if (within is None or n in within) and pool.is_accepted(n, pod)
    )

    def devices_of(node: NodeName) -> Sequence[Device]:
        devices = view.by_node[node]
        if excluded:
            return [device for device in devices if device.id not in excluded]
        return devices

    return select_nodes(
        shape,
        nodes=nodes,
        devices_of=devices_of,
        has_room=lambda node: pool.has_room(node, pod, extra=_negated(held_room, node)),
        known=pool.inventory.nodes,
        choose=pool.chooser(shape.selector),
    )
