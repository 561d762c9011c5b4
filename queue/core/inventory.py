"""Builders from Kubernetes-shaped dicts (ResourceSlice, Node, Pod, ResourceClaim, DeviceClass)
into the core's `Inventory` and `PodRequirements`.

The watch caches hand plain dicts (the JSON of the API objects) to these functions; they own the
reading of those shapes and nothing else. Malformed input raises `InvalidInputError` naming the
object; this module never talks to the API server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from gangq.queue.core import quantity
from gangq.queue.core.device import (
    CounterSetId,
    Device,
    DeviceId,
    counters_from_slice,
    device_id,
    devices_from_slice,
    qualify,
)
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.model import (
    DeviceClass,
    Inventory,
    Node,
    NodeName,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodRequirements,
    Taint,
    Toleration,
)

SliceT = TypeVar("SliceT", bound=Mapping[str, Any])

JOB_NAME_LABEL = "gangq.dev/job-name"
"""Pods and ResourceClaims carrying this label belong to gangq jobs (PRODUCT §5)."""

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name", "?"))
    return f"{namespace}/{name}" if namespace else name


def _quantity(value: Any, *, what: str, owner: str) -> int:
    try:
        return quantity.parse_milli(value)
    except InvalidInputError as error:
        raise InvalidInputError(f"{owner}: {what}: {error}") from error


def node_from_dict(node: Mapping[str, Any]) -> Node:
    """A Node object without the usage of bound pods (see `build_inventory`)."""
    owner = f"Node {_name(node)}"
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    conditions: list[Mapping[str, Any]] = status.get("conditions") or []
    condition = next((c for c in conditions if c.get("type") == "Ready"), {})
    ready = condition.get("status") == "True"
    said = ": ".join(str(condition[k]) for k in ("reason", "message") if condition.get(k))
    taints = tuple(
        Taint(key=t.get("key", ""), value=t.get("value", ""), effect=t.get("effect", ""))
        for t in spec.get("taints") or []
    )
    return Node(
        name=NodeName(str(metadata.get("name", ""))),
        labels=dict(metadata.get("labels") or {}),
        taints=taints,
        ready=ready,
        unready_reason="" if ready else said or "no Ready condition",
        unschedulable=bool(spec.get("unschedulable", False)),
        allocatable_cpu_milli=_quantity(allocatable.get("cpu", 0), what="cpu", owner=owner),
        allocatable_memory_bytes=_quantity(allocatable.get("memory", 0), what="memory", owner=owner)
        // 1000,
        allocatable_pods=_quantity(allocatable.get("pods", 110), what="pods", owner=owner) // 1000,
    )


def _container_requests(containers: Iterable[Mapping[str, Any]], *, owner: str) -> tuple[int, int]:
    cpu = memory = 0
    for container in containers:
        requests = (container.get("resources") or {}).get("requests") or {}
        cpu += _quantity(requests.get("cpu", 0), what="cpu request", owner=owner)
        memory += _quantity(requests.get("memory", 0), what="memory request", owner=owner)
    return cpu, memory


def _requests(pod_spec: Mapping[str, Any], *, owner: str) -> tuple[int, int]:
    """Effective requests as kube-scheduler counts them: max(sum of containers, largest init)."""
    cpu, memory = _container_requests(pod_spec.get("containers") or [], owner=owner)
    for init in pod_spec.get("initContainers") or []:
        init_cpu, init_memory = _container_requests([init], owner=owner)
        cpu, memory = max(cpu, init_cpu), max(memory, init_memory)
    return cpu, -(-memory // 1000)


def _affinity_terms(pod_spec: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...]:
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return tuple(
        NodeSelectorTerm(
            match_expressions=tuple(
                NodeSelectorRequirement(
                    key=str(expression.get("key", "")),
                    operator=str(expression.get("operator", "In")),
                    values=tuple(str(v) for v in expression.get("values") or []),
                )
                for expression in term.get("matchExpressions") or []
            )
        )
        for term in required.get("nodeSelectorTerms") or []
    )


def tolerations_of(pod_spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    """A pod spec's tolerations (`tolerationSeconds` aside: a bound only delays an eviction)."""
    return tuple(
        Toleration(
            key=str(t.get("key", "")),
            operator=str(t.get("operator", "Equal")),
            value=str(t.get("value", "")),
            effect=str(t.get("effect", "")),
        )
        for t in pod_spec.get("tolerations") or []
    )


def pod_requirements(
    template: Mapping[str, Any], *, owner: str = "pod template"
) -> PodRequirements:
    """What one replica needs from its node, read from a PodTemplateSpec (or a Pod)."""
    spec = template.get("spec") or {}
    cpu, memory = _requests(spec, owner=owner)
    tolerations = tolerations_of(spec)
    selector = tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))
    return PodRequirements(
        cpu_milli=cpu,
        memory_bytes=memory,
        tolerations=tolerations,
        node_selector=selector,
        required_node_affinity=_affinity_terms(spec),
    )


def device_class_from_dict(device_class: Mapping[str, Any]) -> DeviceClass:
    """A DeviceClass with its CEL selectors (`spec.selectors[].cel.expression`)."""
    selectors = []
    for selector in (device_class.get("spec") or {}).get("selectors") or []:
        expression = (selector.get("cel") or {}).get("expression")
        if not isinstance(expression, str) or not expression:
            raise InvalidInputError(
                f"DeviceClass {_name(device_class)}: every selector needs cel.expression"
            )
        selectors.append(expression)
    return DeviceClass(name=_name(device_class), selectors=tuple(selectors))


def claim_devices(claim: Mapping[str, Any]) -> list[DeviceId]:
    """Devices an allocated ResourceClaim holds (`status.allocation.devices.results`)."""
    return [device for device, _ in claim_results(claim)]


def claim_results(claim: Mapping[str, Any]) -> list[tuple[DeviceId, Mapping[str, Any] | None]]:
    """Each allocated device with its `consumedCapacity` (None: the device is held whole)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    devices: list[tuple[DeviceId, Mapping[str, Any] | None]] = []
    for result in results:
        driver, pool, device = (result.get(k) for k in ("driver", "pool", "device"))
        if not (isinstance(driver, str) and isinstance(pool, str) and isinstance(device, str)):
            raise InvalidInputError(
                f"ResourceClaim {_name(claim)}: every allocation result needs driver, pool "
                f"and device, got {dict(result)!r}"
            )
        consumed = result.get("consumedCapacity")
        devices.append(
            (device_id(driver, pool, device), consumed if isinstance(consumed, Mapping) else None)
        )
    return devices


def is_gangq_object(obj: Mapping[str, Any]) -> bool:
    return JOB_NAME_LABEL in ((obj.get("metadata") or {}).get("labels") or {})


def with_pod_usage(
    nodes: Mapping[NodeName, Node], pods: Iterable[Mapping[str, Any]]
) -> dict[NodeName, Node]:
    """The nodes less what bound pods gangq did not make request; gangq's own gangs are
    counted by the cycle."""
    usage: dict[NodeName, list[int]] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node_name = spec.get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node_name or phase in _FINISHED_PHASES or is_gangq_object(pod):
            continue
        cpu, memory = _requests(spec, owner=f"Pod {_name(pod)}")
        entry = usage.setdefault(NodeName(node_name), [0, 0, 0])
        entry[0] += cpu
        entry[1] += memory
        entry[2] += 1
    used = dict(nodes)
    for name, (cpu, memory, count) in usage.items():
        node = used.get(name)
        if node is not None:
            used[name] = dataclasses.replace(
                node, requested_cpu_milli=cpu, requested_memory_bytes=memory, pod_count=count
            )
    return used


def _pool_of(resource_slice: Mapping[str, Any]) -> tuple[tuple[object, object], object]:
    """((driver, pool name), generation) of a slice."""
    spec = resource_slice.get("spec") or {}
    pool = spec.get("pool") or {}
    return (spec.get("driver"), pool.get("name")), pool.get("generation")


def current_slices(slices: Iterable[SliceT]) -> list[SliceT]:
    """The slices of each pool's newest generation: while a driver republishes a pool, slices
    of the old generation may linger, and DRA says only the newest counts (a device or a
    counter set would otherwise be read from either generation)."""
    kept = list(slices)
    newest: dict[tuple[object, object], int] = {}
    for resource_slice in kept:
        key, generation = _pool_of(resource_slice)
        if isinstance(generation, int):
            newest[key] = max(newest.get(key, generation), generation)
    current = []
    for resource_slice in kept:
        key, generation = _pool_of(resource_slice)
        if not isinstance(generation, int) or generation == newest[key]:
            current.append(resource_slice)
    return current


def devices_by_id(slices: Iterable[Mapping[str, Any]]) -> dict[DeviceId, Device]:
    return {device.id: device for s in slices for device in devices_from_slice(s)}


def held_by_others(claims: Iterable[Mapping[str, Any]]) -> frozenset[DeviceId]:
    """Devices allocated whole by claims gangq did not make: never free for gangq."""
    return frozenset(
        device
        for claim in claims
        if not is_gangq_object(claim)
        for device, consumed in claim_results(claim)
        if consumed is None
    )


def shared_by_others(
    claims: Iterable[Mapping[str, Any]],
) -> dict[DeviceId, tuple[tuple[str, int], ...]]:
    """Capacity that claims gangq did not make consume (`consumedCapacity`), summed per device.
    On a device that is not multi-allocatable such a result still holds the device whole."""
    summed: dict[DeviceId, dict[str, int]] = {}
    for claim in claims:
        if is_gangq_object(claim):
            continue
        owner = f"ResourceClaim {_name(claim)}"
        for device, consumed in claim_results(claim):
            if consumed is None:
                continue
            driver = device.partition("/")[0]
            used = summed.setdefault(device, {})
            for name, value in consumed.items():
                qualified = qualify(str(name), driver=driver)
                amount = _quantity(value, what=f"consumedCapacity {name}", owner=owner)
                used[qualified] = used.get(qualified, 0) + amount
    return {device: tuple(sorted(used.items())) for device, used in summed.items()}


def counters_by_set(slices: Iterable[Mapping[str, Any]]) -> dict[CounterSetId, dict[str, int]]:
    """Every counter set of every pool, whichever slice of the pool declares it."""
    return {set_id: counters for s in slices for set_id, counters in counters_from_slice(s).items()}


def build_inventory(
    *,
    slices: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    claims: Iterable[Mapping[str, Any]] = (),
    device_classes: Iterable[Mapping[str, Any]] = (),
    topology_keys: tuple[str, ...] = (),
) -> Inventory:
    """The inventory the cycle reads; devices held by claims gangq did not make are never free."""
    node_map = {node.name: node for node in (node_from_dict(n) for n in nodes)}
    slices, claims = current_slices(slices), list(claims)
    return Inventory(
        nodes=with_pod_usage(node_map, pods),
        devices=devices_by_id(slices),
        device_classes={dc.name: dc for dc in (device_class_from_dict(d) for d in device_classes)},
        held_by_others=held_by_others(claims),
        counters=counters_by_set(slices),
        shared_by_others=shared_by_others(claims),
        topology_keys=topology_keys,
    )
