"""Capacity views for `/v1/capacity`: devices by state per device class, node and topology domain.

Owns the counting: each device of a class is reserved (by gangq), held by others, unavailable
(tainted device, NotReady or cordoned node) or free, and the largest gang of whole-node replicas
that the free devices allow now. It reads an inventory and the reserved set it is handed; it
must not decide admissions (CPU, memory and job selectors are the cycle's business).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gangq.queue.core import model
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import Device, DeviceId

STATES = ("free", "reserved", "held_by_others", "unavailable")


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

    total: int
    by_state: Mapping[str, int]
    largest_replica: int
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


def _state(device: Device, inventory: model.Inventory, *, reserved: frozenset[DeviceId]) -> str:
    if device.id in reserved:
        return "reserved"
    if device.id in inventory.held_by_others:
        return "held_by_others"
    node = inventory.nodes.get(model.NodeName(device.node or ""))
    if device.is_tainted or node is None or not node.ready or node.unschedulable:
        return "unavailable"
    return "free"


def _usage(per_node: Mapping[str, Counter[str]], *, devices_per_node: int) -> Usage:
    by_state: Counter[str] = Counter()
    for counts in per_node.values():
        by_state.update(counts)
    return Usage(
        total=sum(by_state.values()),
        by_state={state: by_state[state] for state in STATES},
        largest_replica=max((c["free"] for c in per_node.values()), default=0),
        whole_node_replicas=sum(
            1 for c in per_node.values() if c["free"] == devices_per_node and devices_per_node > 0
        ),
        devices_per_node=devices_per_node,
    )


def summarize(
    inventory: model.Inventory, reserved: frozenset[DeviceId], *, matcher: DeviceMatcher
) -> CapacityReport:
    """Count every device of every known device class by state and scope."""
    return summarize_states(inventory, device_states(inventory, reserved, matcher=matcher))


def summarize_states(
    inventory: model.Inventory, device_states: Mapping[str, list[tuple[Device, str]]]
) -> CapacityReport:
    """`summarize` of states already found (a caller that also draws each device)."""
    counts: dict[str, dict[str, Counter[str]]] = {}
    for class_name, states in device_states.items():
        counted = counts.setdefault(class_name, {})
        for device, state in states:
            counted.setdefault(device.node or "", Counter())[state] += 1
    classes: dict[str, Usage] = {}
    nodes: dict[str, dict[str, Usage]] = {}
    domains: dict[tuple[str, str], dict[str, Usage]] = {}
    for class_name, per_node in counts.items():
        size = max((sum(c.values()) for c in per_node.values()), default=0)
        classes[class_name] = _usage(per_node, devices_per_node=size)
        for node_name, node_counts in per_node.items():
            nodes.setdefault(node_name, {})[class_name] = _usage(
                {node_name: node_counts}, devices_per_node=size
            )
        for domain, members in _domains(inventory, per_node).items():
            domains.setdefault(domain, {})[class_name] = _usage(members, devices_per_node=size)
    return CapacityReport(classes=classes, nodes=nodes, domains=domains)


def device_states(
    inventory: model.Inventory, reserved: frozenset[DeviceId], *, matcher: DeviceMatcher
) -> dict[str, list[tuple[Device, str]]]:
    """Every device of every known device class on a node, with its state (one of STATES)."""
    return {
        device_class.name: [
            (device, _state(device, inventory, reserved=reserved))
            for device in _members(inventory.devices.values(), device_class, matcher=matcher)
        ]
        for device_class in inventory.device_classes.values()
    }


def _members(
    devices: Iterable[Device], device_class: model.DeviceClass, *, matcher: DeviceMatcher
) -> Iterable[Device]:
    return (d for d in devices if d.node and matcher.matches_all(device_class.selectors, d))


def _domains(
    inventory: model.Inventory, per_node: Mapping[str, Counter[str]]
) -> dict[tuple[str, str], dict[str, Counter[str]]]:
    grouped: dict[tuple[str, str], dict[str, Counter[str]]] = {}
    for node_name, node_counts in per_node.items():
        node = inventory.nodes.get(model.NodeName(node_name))
        if node is None:
            continue
        for key in inventory.topology_keys:
            value = node.labels.get(key)
            if value is not None:
                grouped.setdefault((key, value), {})[node_name] = node_counts
    return grouped
