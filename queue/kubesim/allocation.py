"""Device allocation for one claim on one node, as kube-scheduler's DRA plugin does it.

Owns choosing devices for a ResourceClaim's requests: DeviceClass and request CEL selectors
(through the shared `core.cel.DeviceMatcher`, on devices from `core.device.devices_from_slice`),
exact counts, `matchAttribute` constraints, device taints, and never a device another claim
holds. Pure: it reads the objects it is given and returns results; writing them is the
scheduler's job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gangq.queue.core import device as core_device
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import InvalidInputError

DeviceKey = tuple[str, str, str]
"""(driver, pool, device) as allocation results name a device."""


def devices_by_node(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[core_device.Device]]:
    by_node: dict[str, list[core_device.Device]] = {}
    for resource_slice in slices:
        try:
            devices = core_device.devices_from_slice(resource_slice)
        except InvalidInputError:
            continue
        for found in devices:
            if found.node:
                by_node.setdefault(found.node, []).append(found)
    return by_node


def allocated_devices(claims: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, str]:
    """Every device some claim's allocation holds -> that claim's namespace/name."""
    held: dict[DeviceKey, str] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        metadata = claim.get("metadata") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            held[key] = f"{metadata.get('namespace')}/{metadata.get('name')}"
    return held


def _request_specs(claim: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(result request name, request spec); a prioritized list contributes its first choice."""
    specs: list[tuple[str, dict[str, Any]]] = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if isinstance(request.get("exactly"), dict):
            specs.append((str(request.get("name")), request["exactly"]))
        elif request.get("firstAvailable"):
            first = request["firstAvailable"][0]
            specs.append((f"{request.get('name')}/{first.get('name')}", first))
    return specs


def _expressions(
    spec: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]
) -> list[str] | None:
    device_class = classes.get(str(spec.get("deviceClassName")))
    if device_class is None:
        return None
    selectors = list((device_class.get("spec") or {}).get("selectors") or []) + list(
        spec.get("selectors") or []
    )
    return [str((s.get("cel") or {}).get("expression", "true")) for s in selectors]


def _constraint_attributes(claim: Mapping[str, Any]) -> list[str]:
    constraints = ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []
    return [str(c["matchAttribute"]) for c in constraints if c.get("matchAttribute")]


def _group(
    devices: list[core_device.Device], attributes: list[str]
) -> list[list[core_device.Device]]:
    """Candidate sets in which every device agrees on each matchAttribute."""
    if not attributes:
        return [devices]
    groups: dict[tuple[Any, ...], list[core_device.Device]] = {}
    for found in devices:
        values = tuple(found.attributes.get(attribute) for attribute in attributes)
        if None not in values:
            groups.setdefault(values, []).append(found)
    return [groups[key] for key in sorted(groups, key=str)]


def allocate(
    claim: Mapping[str, Any],
    devices: list[core_device.Device],
    *,
    held: Mapping[DeviceKey, str],
    classes: Mapping[str, Mapping[str, Any]],
    matcher: DeviceMatcher,
) -> list[dict[str, Any]] | None:
    """Allocation results for the claim from these (one node's) devices, or None if impossible."""
    free = [d for d in devices if (d.driver, d.pool, d.name) not in held and not d.is_tainted]
    for candidates in _group(free, _constraint_attributes(claim)):
        results = _fill(claim, candidates, classes=classes, matcher=matcher)
        if results is not None:
            return results
    return None


def _fill(
    claim: Mapping[str, Any],
    candidates: list[core_device.Device],
    *,
    classes: Mapping[str, Mapping[str, Any]],
    matcher: DeviceMatcher,
) -> list[dict[str, Any]] | None:
    taken: set[core_device.DeviceId] = set()
    results: list[dict[str, Any]] = []
    for request_name, spec in _request_specs(claim):
        expressions = _expressions(spec, classes)
        if expressions is None:
            return None
        wanted = int(spec.get("count") or 1)
        if spec.get("allocationMode") == "All":
            wanted = 0
        chosen = []
        for found in candidates:
            if found.id in taken:
                continue
            try:
                matched = matcher.matches_all(expressions, found)
            except InvalidInputError:
                return None
            if matched:
                chosen.append(found)
                if wanted and len(chosen) == wanted:
                    break
        if (wanted and len(chosen) < wanted) or not chosen:
            return None
        for found in chosen:
            taken.add(found.id)
            results.append(
                {
                    "request": request_name,
                    "driver": found.driver,
                    "pool": found.pool,
                    "device": found.name,
                }
            )
    return results
