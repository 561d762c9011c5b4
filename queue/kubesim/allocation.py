"""Device allocation for one claim on one node, as kube-scheduler's DRA plugin does it.

Owns choosing devices for a ResourceClaim's requests: DeviceClass and request CEL selectors
(through the shared `core.cel.DeviceMatcher`, on devices from `core.device.devices_from_slice`),
exact counts, prioritized lists (first alternative that fits), `matchAttribute` constraints,
device taints and the request's tolerations, shared counters of partitionable devices, and
the consumable capacity of devices that allow multiple allocations. What is free is counted
from every claim's allocation (`Usage`), whoever wrote it: the scheduler trusts external
allocations but counts them (corpus 10-34, 10-38). Pure: it reads the objects it is given and
returns results; writing them is the scheduler's job.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.core import device as core_device
from gangq.queue.core import quantity
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kubesim import filters

DeviceKey = tuple[str, str, str]
"""(driver, pool, device) as allocation results name a device."""
CounterSetKey = tuple[str, str, str]
"""(driver, pool, counter set): shared counters are scoped to their pool."""
BLOCKING_EFFECTS = (core_device.NO_SCHEDULE, core_device.NO_EXECUTE)


@dataclass(frozen=True, slots=True)
class Traits:
    """What allocation needs of a device beyond `core.device.Device`."""

    shared: bool = False
    """allowMultipleAllocations: several claims may hold it, each consuming capacity."""
    capacity: Mapping[str, int] = field(default_factory=dict)
    """Capacity name as published -> value in thousandths."""
    policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    consumes: tuple[tuple[str, Mapping[str, int]], ...] = ()
    """(counter set, counter -> thousandths) the device takes from its pool when allocated."""


@dataclass(frozen=True, slots=True)
class Published:
    """Every ResourceSlice's devices, their traits and the pools' shared counters."""

    devices: dict[str, list[core_device.Device]]
    """Node name -> devices published for that node."""
    traits: dict[DeviceKey, Traits]
    counters: dict[CounterSetKey, dict[str, int]]


def _milli(value: Any) -> int | None:
    try:
        return quantity.parse_milli(str(value))
    except InvalidInputError:
        return None


def _quantities(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """name -> quantity, in thousandths; unparsable values are left out."""
    parsed = {name: _milli(value) for name, value in (raw or {}).items()}
    return {name: value for name, value in parsed.items() if value is not None}


def _amounts(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """name -> {value: quantity} (capacities, counters), in thousandths."""
    return _quantities({name: (entry or {}).get("value") for name, entry in (raw or {}).items()})


def _traits(raw: Mapping[str, Any]) -> Traits:
    capacity = raw.get("capacity") or {}
    return Traits(
        shared=bool(raw.get("allowMultipleAllocations")),
        capacity=_amounts(capacity),
        policies={
            name: entry["requestPolicy"]
            for name, entry in capacity.items()
            if isinstance((entry or {}).get("requestPolicy"), dict)
        },
        consumes=tuple(
            (str(entry.get("counterSet")), _amounts(entry.get("counters")))
            for entry in raw.get("consumesCounters") or []
        ),
    )


def published(slices: Iterable[Mapping[str, Any]]) -> Published:
    """Index every slice; a slice that cannot be read publishes nothing (as the allocator
    skips it)."""
    found = Published(devices={}, traits={}, counters={})
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        driver, pool = str(spec.get("driver")), str((spec.get("pool") or {}).get("name"))
        try:
            devices = core_device.devices_from_slice(resource_slice)
        except InvalidInputError:
            continue
        for counter_set in spec.get("sharedCounters") or []:
            key = (driver, pool, str(counter_set.get("name")))
            found.counters[key] = _amounts(counter_set.get("counters"))
        raw_devices = {str(raw.get("name")): raw for raw in spec.get("devices") or []}
        for entry in devices:
            found.traits[(driver, pool, entry.name)] = _traits(raw_devices[entry.name])
            if entry.node:
                found.devices.setdefault(entry.node, []).append(entry)
    return found


@dataclass(slots=True)
class Usage:
    """What allocations take: exclusive devices, counters, shared capacity.

    A trial is a `child()` that records only its own additions over its parent, so trying a
    node or an alternative costs nothing for the rest of the cluster; `merge()` keeps it."""

    parent: Usage | None = None
    held: set[DeviceKey] = field(default_factory=set)
    """Allocated devices that allow one allocation."""
    in_use: set[DeviceKey] = field(default_factory=set)
    """Every allocated device: its counters are consumed once, however many claims share it."""
    counters: dict[CounterSetKey, dict[str, int]] = field(default_factory=dict)
    consumed: dict[DeviceKey, dict[str, int]] = field(default_factory=dict)
    """Capacity taken from shared devices by the allocations holding them."""

    def child(self) -> Usage:
        return Usage(parent=self)

    def holds(self, key: DeviceKey) -> bool:
        return key in self.held or (self.parent is not None and self.parent.holds(key))

    def uses(self, key: DeviceKey) -> bool:
        return key in self.in_use or (self.parent is not None and self.parent.uses(key))

    def counter(self, key: CounterSetKey, name: str) -> int:
        own = self.counters.get(key, {}).get(name, 0)
        return own + (self.parent.counter(key, name) if self.parent is not None else 0)

    def taken(self, key: DeviceKey, name: str) -> int:
        own = self.consumed.get(key, {}).get(name, 0)
        return own + (self.parent.taken(key, name) if self.parent is not None else 0)

    def add(self, result: Mapping[str, Any], traits: Traits) -> None:
        key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
        if not traits.shared:
            self.held.add(key)
        else:
            _add_amounts(self.consumed, key, _quantities(result.get("consumedCapacity")))
        if self.uses(key):
            return
        self.in_use.add(key)
        for counter_set, counters in traits.consumes:
            _add_amounts(self.counters, (key[0], key[1], counter_set), counters)

    def merge(self) -> None:
        """Move this trial's additions into its parent."""
        parent = self.parent
        if parent is None:
            return
        parent.held.update(self.held)
        parent.in_use.update(self.in_use)
        for counter_key, amounts in self.counters.items():
            _add_amounts(parent.counters, counter_key, amounts)
        for device_key, amounts in self.consumed.items():
            _add_amounts(parent.consumed, device_key, amounts)


def _add_amounts(totals: dict[Any, dict[str, int]], key: Any, amounts: Mapping[str, int]) -> None:
    found = totals.setdefault(key, {})
    for name, amount in amounts.items():
        found[name] = found.get(name, 0) + amount


def usage(claims: Iterable[Mapping[str, Any]], inventory: Published) -> Usage:
    """What every claim's allocation takes, whoever wrote it."""
    found = Usage()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            found.add(result, inventory.traits.get(key, Traits()))
    return found


def _alternatives(claim: Mapping[str, Any]) -> list[list[tuple[str, dict[str, Any]]]]:
    """Per request, (result request name, spec) in the order the allocator tries them."""
    requests: list[list[tuple[str, dict[str, Any]]]] = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if isinstance(request.get("exactly"), dict):
            requests.append([(str(request.get("name")), request["exactly"])])
        elif request.get("firstAvailable"):
            requests.append(
                [
                    (f"{request.get('name')}/{sub.get('name')}", sub)
                    for sub in request["firstAvailable"]
                ]
            )
    return requests


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


def _policy_amount(requested: int | None, value: int, policy: Mapping[str, Any]) -> int | None:
    """What a share consumes: the request (or the policy's default, or everything) rounded
    up to a valid value or range step; None when no valid amount covers the request."""
    if not policy:
        return value if requested is None else requested
    default = _milli(policy.get("default"))
    amount = requested if requested is not None else (value if default is None else default)
    if policy.get("validValues"):
        valid = sorted(v for v in (_milli(x) for x in policy["validValues"]) if v is not None)
        return next((v for v in valid if v >= amount), None)
    bounds = policy.get("validRange") or {}
    low = _milli(bounds.get("min")) or 0
    high = _milli(bounds.get("max")) if bounds.get("max") is not None else None
    step = _milli(bounds.get("step")) if bounds.get("step") is not None else None
    amount = max(amount, low)
    if step:
        amount = low + -(-(amount - low) // step) * step
    return None if high is not None and amount > high else amount


def _format_milli(value: int) -> str:
    """A canonical quantity for thousandths: binary suffixes for whole byte-like amounts."""
    if value % 1000:
        return f"{value}m"
    units = value // 1000
    for suffix, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if units and units % size == 0:
            return f"{units // size}{suffix}"
    return str(units)


def _capacity(
    spec: Mapping[str, Any], traits: Traits, key: DeviceKey, used: Usage
) -> dict[str, int] | None:
    """Capacity this request would consume on the device, or None if it does not fit."""
    requests = _quantities((spec.get("capacity") or {}).get("requests"))
    if any(name not in traits.capacity for name in requests):
        return None
    if not traits.shared:
        if any(amount > traits.capacity[name] for name, amount in requests.items()):
            return None
        return {}
    consumed: dict[str, int] = {}
    for name, value in traits.capacity.items():
        amount = _policy_amount(requests.get(name), value, traits.policies.get(name) or {})
        if amount is None or used.taken(key, name) + amount > value:
            return None
        consumed[name] = amount
    return consumed


def _counters_fit(key: DeviceKey, traits: Traits, inventory: Published, used: Usage) -> bool:
    if used.uses(key):
        return True
    for counter_set, counters in traits.consumes:
        set_key = (key[0], key[1], counter_set)
        available = inventory.counters.get(set_key)
        if available is None:
            return False
        for name, amount in counters.items():
            if name not in available or used.counter(set_key, name) + amount > available[name]:
                return False
    return True


def _tolerated(found: core_device.Device, tolerations: list[Mapping[str, Any]]) -> bool:
    return all(
        filters.tolerates(tolerations, {"key": t.key, "value": t.value, "effect": t.effect})
        for t in found.taints
        if t.effect in BLOCKING_EFFECTS
    )


@dataclass(frozen=True, slots=True)
class Context:
    """What one allocation reads besides the claim and the node's devices."""

    inventory: Published
    classes: Mapping[str, Mapping[str, Any]]
    matcher: DeviceMatcher


def allocate(
    claim: Mapping[str, Any],
    devices: list[core_device.Device],
    *,
    used: Usage,
    context: Context,
) -> list[dict[str, Any]] | None:
    """Allocation results for the claim from these (one node's) devices, or None if
    impossible; on success `used` includes them."""
    for candidates in _group(devices, _constraint_attributes(claim)):
        trial = used.child()
        results = _fill(claim, candidates, trial, context=context)
        if results is not None:
            trial.merge()
            return results
    return None


def _fill(
    claim: Mapping[str, Any],
    candidates: list[core_device.Device],
    used: Usage,
    *,
    context: Context,
) -> list[dict[str, Any]] | None:
    results: list[dict[str, Any]] = []
    for alternatives in _alternatives(claim):
        for request_name, spec in alternatives:
            trial = used.child()
            chosen = _choose(spec, candidates, trial, context=context)
            if chosen is not None:
                trial.merge()
                results += [{"request": request_name, **result} for result in chosen]
                break
        else:
            return None
    return results


def _choose(
    spec: Mapping[str, Any],
    candidates: list[core_device.Device],
    used: Usage,
    *,
    context: Context,
) -> list[dict[str, Any]] | None:
    """Devices for one request (`count` of them, or every match for All), taken in `used`."""
    expressions = _expressions(spec, context.classes)
    if expressions is None:
        return None
    wanted = 0 if spec.get("allocationMode") == "All" else int(spec.get("count") or 1)
    tolerations = list(spec.get("tolerations") or [])
    chosen: list[dict[str, Any]] = []
    for found in candidates:
        key = (found.driver, found.pool, found.name)
        traits = context.inventory.traits.get(key, Traits())
        if used.holds(key) or not _tolerated(found, tolerations):
            continue
        consumed = _capacity(spec, traits, key, used)
        if consumed is None or not _counters_fit(key, traits, context.inventory, used):
            continue
        try:
            matched = context.matcher.matches_all(expressions, found)
        except InvalidInputError:
            return None
        if not matched:
            continue
        result: dict[str, Any] = {"driver": found.driver, "pool": found.pool, "device": found.name}
        if traits.shared:
            result["shareID"] = str(uuid.uuid4())
            result["consumedCapacity"] = {k: _format_milli(v) for k, v in consumed.items()}
        if tolerations:
            result["tolerations"] = copy.deepcopy(tolerations)
        used.add(result, traits)
        chosen.append(result)
        if wanted and len(chosen) == wanted:
            break
    if (wanted and len(chosen) < wanted) or not chosen:
        return None
    return chosen
