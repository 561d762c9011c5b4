"""Capacity views for `/v1/capacity`: devices by state per device class, node and topology domain.

Owns the counting: each device of a class is reserved (by gangq), held by others, unavailable
(tainted device, NotReady or cordoned node), tainted (on a node whose NoSchedule/NoExecute
taints only a job tolerating them may pass, judged by `fit` as the cycle judges a job's pods)
or free, and the largest gang of whole-node replicas that the free devices allow now. Counts
are GPU-equivalents: the devices consuming one counter set (a GPU published whole and as
partitions) count as one GPU, split between the states by the equivalents of the members
reserved or held (module `sharing`); a plain device counts one. It reads an inventory and the
reserved set it is handed; it must not decide admissions (CPU, memory and job selectors are the
cycle's business).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gangq.queue.core import derived, fit, model, sharing
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import Device, DeviceId

STATES = ("free", "reserved", "held_by_others", "unavailable", "tainted")
Amount = int | float
"""GPU-equivalents: an integer where whole (always, without partitions), else 3 decimals."""
Tally = dict[str, sharing.Equivalent]
"""State -> GPU-equivalents in thousandths, of one node."""


class ClusterView(Protocol):
    """What the process knows of the cluster now; None until its caches have synced."""

    def inventory(self) -> model.Inventory | None: ...


@dataclass(frozen=True, slots=True)
class FixedClusterView:
    """A cluster view that never changes (an inventory built once)."""

    value: model.Inventory

    def inventory(self) -> model.Inventory | None:
        return self.value


@dataclass(frozen=True, slots=True)
class Usage:
    """Device counts of one class in one scope (whole cluster, one node or one domain)."""

    total: Amount
    by_state: Mapping[str, Amount]
    largest_replica: Amount
    """Most free devices on a single node."""
    whole_node_replicas: int
    """Nodes whose every device of the class is free."""
    devices_per_node: int
    """Most devices of the class any node has: the size of a whole-node replica."""

    @property
    def largest_gang_devices(self) -> int:
        return self.whole_node_replicas * self.devices_per_node


@dataclass(frozen=True, slots=True)
class CapacityReport:
    classes: Mapping[str, Usage]
    nodes: Mapping[str, Mapping[str, Usage]]
    """node -> device class -> usage"""
    domains: Mapping[tuple[str, str], Mapping[str, Usage]]
    """(topology key, value) -> device class -> usage"""
    tainted_nodes: Mapping[str, tuple[model.Taint, ...]]
    """Ready, uncordoned nodes with devices and taints a job must tolerate -> those taints
    (their devices not held are `tainted`)."""


NO_TOLERATIONS = model.PodRequirements()
"""A pod that tolerates nothing: a device is free only where such a pod may go, so the largest
placeable gang is one any job could take, not only one that tolerates a node's taints."""


def blocking_taints(node: model.Node) -> tuple[model.Taint, ...]:
    """The node's taints a job must tolerate to use its devices."""
    return fit.untolerated(node.taints, NO_TOLERATIONS.tolerations)


def _unreserved_state(
    device: Device, device_id: DeviceId, inventory: model.Inventory, accepting: dict[str, bool]
) -> str:
    """A device's state were it not reserved: the same while the inventory is. `accepting`
    remembers per node whether a pod that tolerates nothing may go there."""
    if device_id in inventory.held_by_others:
        return "held_by_others"
    node = inventory.nodes.get(model.NodeName(device.node or ""))
    if device.is_tainted or node is None or not node.is_schedulable:
        return "unavailable"
    accepted = accepting.get(node.name)
    if accepted is None:
        accepted = accepting[node.name] = fit.is_accepted(node, NO_TOLERATIONS)
    return "free" if accepted else "tainted"


_Row = tuple[Device, DeviceId, str]
_rows: derived.PerInventory[dict[tuple[str, ...], tuple[_Row, ...]]] = derived.PerInventory(
    lambda inventory: {}
)
"""Per device class selectors: each member device with its id and `_unreserved_state`, kept
while the inventory is: the gauges count every device of the fleet every few seconds, and only
which are reserved changes between two of their counts."""


def _class_rows(
    inventory: model.Inventory, selectors: tuple[str, ...], *, matcher: DeviceMatcher
) -> tuple[_Row, ...]:
    known = _rows(inventory)
    found = known.get(selectors)
    if found is None:
        accepting: dict[str, bool] = {}
        rows = []
        for device in matcher.members(selectors, inventory.devices):
            device_id = device.id
            rows.append(
                (device, device_id, _unreserved_state(device, device_id, inventory, accepting))
            )
        found = known[selectors] = tuple(rows)
    return found


def _amount(milli: sharing.Equivalent) -> Amount:
    if milli % sharing.WHOLE == 0:
        return int(milli // sharing.WHOLE)
    return round(float(milli) / sharing.WHOLE, 3)


def _usage(per_node: Mapping[str, Tally], *, devices_per_node: int) -> Usage:
    by_state: Tally = dict.fromkeys(STATES, 0)
    for counts in per_node.values():
        for state, amount in counts.items():
            by_state[state] += amount
    return Usage(
        total=_amount(sum(by_state.values())),
        by_state={state: _amount(by_state[state]) for state in STATES},
        largest_replica=_amount(max((c.get("free", 0) for c in per_node.values()), default=0)),
        whole_node_replicas=sum(
            1
            for c in per_node.values()
            if c.get("free", 0) == devices_per_node * sharing.WHOLE and devices_per_node > 0
        ),
        devices_per_node=devices_per_node,
    )


def summarize(
    inventory: model.Inventory,
    reserved: frozenset[DeviceId],
    *,
    matcher: DeviceMatcher,
    scopes: bool = True,
) -> CapacityReport:
    """Count every device of every known device class by state and scope; without `scopes`
    only the classes' totals (the metrics' gauges), sparing a usage per node and domain."""
    states = device_states(inventory, reserved, matcher=matcher)
    return summarize_states(inventory, states, scopes=scopes)


def summarize_states(
    inventory: model.Inventory,
    device_states: Mapping[str, list[tuple[Device, str]]],
    *,
    scopes: bool = True,
) -> CapacityReport:
    """`summarize` of states already found (a caller that also draws each device)."""
    counts: dict[str, dict[str, Tally]] = {}
    for class_name, states in device_states.items():
        per_node = counts.setdefault(class_name, {})
        groups: dict[str, list[tuple[Device, str]]] = {}
        for device, state in states:
            counted = per_node.get(device.node or "")
            if counted is None:
                counted = per_node[device.node or ""] = {}
            if device.consumes:
                groups.setdefault(device.consumes[0][0], []).append((device, state))
            else:
                # a plain device is a GPU of its own, all in its state
                counted[state] = counted.get(state, 0) + sharing.WHOLE
        for group_states in groups.values():
            counted = per_node[group_states[0][0].node or ""]
            for state, amount in _split(group_states, inventory):
                counted[state] = counted.get(state, 0) + amount
    classes: dict[str, Usage] = {}
    nodes: dict[str, dict[str, Usage]] = {}
    domains: dict[tuple[str, str], dict[str, Usage]] = {}
    for class_name, per_node in counts.items():
        size = int(max((sum(c.values()) for c in per_node.values()), default=0) // sharing.WHOLE)
        classes[class_name] = _usage(per_node, devices_per_node=size)
        if not scopes:
            continue
        for node_name, node_counts in per_node.items():
            nodes.setdefault(node_name, {})[class_name] = _usage(
                {node_name: node_counts}, devices_per_node=size
            )
        for domain, members in _domains(inventory, per_node).items():
            domains.setdefault(domain, {})[class_name] = _usage(members, devices_per_node=size)
    tainted_nodes: dict[str, tuple[model.Taint, ...]] = {}
    for node_name in sorted({name for per_node in counts.values() for name in per_node}):
        node = inventory.nodes.get(model.NodeName(node_name))
        taints = () if node is None or not node.is_schedulable else blocking_taints(node)
        if taints:
            tainted_nodes[node_name] = taints
    return CapacityReport(
        classes=classes, nodes=nodes, domains=domains, tainted_nodes=tainted_nodes
    )


def device_states(
    inventory: model.Inventory, reserved: frozenset[DeviceId], *, matcher: DeviceMatcher
) -> dict[str, list[tuple[Device, str]]]:
    """Every device of every known device class on a node, with its state (one of STATES).
    The matcher forgets the devices this inventory no longer has: every long-lived process
    (the controller's gauges, the API's views) counts through here."""
    matcher.follow(inventory.devices)
    return {
        device_class.name: [
            (device, "reserved" if device_id in reserved else state)
            for device, device_id, state in _class_rows(
                inventory, device_class.selectors, matcher=matcher
            )
        ]
        for device_class in inventory.device_classes.values()
    }


def _split(
    members: list[tuple[Device, str]], inventory: model.Inventory
) -> list[tuple[str, sharing.Equivalent]]:
    """One GPU (a plain device, or the devices consuming one counter set) between the states:
    what reserved and held members take of it, the rest free, else tainted, else unavailable."""
    if len(members) == 1 and not members[0][0].consumes:
        return [(members[0][1], sharing.WHOLE)]
    taken: dict[str, sharing.Equivalent] = {"reserved": 0, "held_by_others": 0}
    left: sharing.Equivalent = sharing.WHOLE
    rests: set[str] = set()
    for device, state in members:
        if state in taken:
            share = min(left, sharing.equivalent(device, (), inventory.counters))
            taken[state] += share
            left -= share
        else:
            rests.add(state)
    rest = next((s for s in ("free", "tainted") if s in rests), "unavailable")
    return [*taken.items(), (rest, left)]


def _domains(
    inventory: model.Inventory, per_node: Mapping[str, Tally]
) -> dict[tuple[str, str], dict[str, Tally]]:
    grouped: dict[tuple[str, str], dict[str, Tally]] = {}
    for node_name, node_counts in per_node.items():
        node = inventory.nodes.get(model.NodeName(node_name))
        if node is None:
            continue
        for key in inventory.topology_keys:
            value = node.labels.get(key)
            if value is not None:
                grouped.setdefault((key, value), {})[node_name] = node_counts
    return grouped
