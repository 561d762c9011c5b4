"""Devices as DRA drivers publish them in ResourceSlices (`resource.k8s.io/v1`), as plain data.

Owns the translation of one ResourceSlice dict into `Device` values. Attribute and capacity
names are stored fully qualified (`domain/name`); an unqualified name belongs to the driver's
domain, exactly as the DRA API defines it. Nothing here knows which job a device serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NewType

from gangq.queue.core import quantity
from gangq.queue.core.errors import InvalidInputError

DeviceId = NewType("DeviceId", str)
"""`driver/pool/device`: unique in a cluster, the identity the database constraint guards."""

CounterSetId = NewType("CounterSetId", str)
"""`driver/pool/counter set`: counters are shared by the devices of one pool, whichever slice
of the pool declares them (ResourceSlice `sharedCounters`)."""

AttributeValue = str | int | bool
"""DRA attribute values: string, int, bool, or version (kept as its semver string)."""

NO_EXECUTE = "NoExecute"
NO_SCHEDULE = "NoSchedule"


def device_id(driver: str, pool: str, name: str) -> DeviceId:
    return DeviceId(f"{driver}/{pool}/{name}")


def counter_set_id(driver: str, pool: str, name: str) -> CounterSetId:
    return CounterSetId(f"{driver}/{pool}/{name}")


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """How a share of a multi-allocatable device's capacity is rounded (`requestPolicy`), all
    amounts in thousandths. Without `valid_values` and range a request is taken as asked."""

    default: int | None = None
    valid_values: tuple[int, ...] = ()
    min: int | None = None
    max: int | None = None
    step: int | None = None

    def round_up(self, amount: int) -> int | None:
        """The amount a request of `amount` consumes, None when the policy allows none that
        large (the device cannot serve the request)."""
        if self.valid_values:
            return next((value for value in self.valid_values if value >= amount), None)
        if self.min is not None:
            amount = max(amount, self.min)
            if self.step:
                amount = self.min + -(-(amount - self.min) // self.step) * self.step
        if self.max is not None and amount > self.max:
            return None
        return amount


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Device:
    """One allocatable device. `node` is None for devices not bound to a single node."""

    driver: str
    pool: str
    name: str
    node: str | None
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict, hash=False)
    capacity: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Qualified capacity name -> value in thousandths (see `quantity.parse_milli`)."""
    taints: tuple[DeviceTaint, ...] = ()
    consumes: tuple[tuple[CounterSetId, Mapping[str, int]], ...] = field(default=(), hash=False)
    """Counters the device uses up while allocated (`consumesCounters`), in thousandths: a whole
    GPU and its partitions consume the same set, so they can never all be allocated."""
    multi: bool = False
    """`allowMultipleAllocations`: several claims share it, each taking part of `capacity`."""
    policies: Mapping[str, RequestPolicy] = field(default_factory=dict, hash=False)
    """Qualified capacity name -> its `requestPolicy` (multi-allocatable devices only)."""

    @property
    def is_plain(self) -> bool:
        """Neither consumes counters nor is shared: allocated whole, by itself, or not at all."""
        return not self.consumes and not self.multi

    @property
    def id(self) -> DeviceId:
        return device_id(self.driver, self.pool, self.name)

    @property
    def is_tainted(self) -> bool:
        """True when a taint keeps new work off the device (NoSchedule or NoExecute)."""
        # most devices carry no taint, and fleet-wide counts ask this of every device
        return bool(self.taints) and any(t.effect in (NO_SCHEDULE, NO_EXECUTE) for t in self.taints)

    @property
    def is_evicting(self) -> bool:
        """True when a NoExecute taint means work already on the device must leave."""
        return any(t.effect == NO_EXECUTE for t in self.taints)


def qualify(name: str, *, driver: str) -> str:
    """Qualify an attribute or capacity name with the driver's domain when it has none."""
    return name if "/" in name else f"{driver}/{name}"


def _attribute_value(name: str, raw: Mapping[str, Any]) -> AttributeValue:
    for kind in ("string", "version", "int", "bool"):
        if kind in raw:
            value = raw[kind]
            if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                break
            if kind == "bool" and not isinstance(value, bool):
                break
            if kind in ("string", "version") and not isinstance(value, str):
                break
            return value  # type: ignore[no-any-return]
    raise InvalidInputError(
        f"attribute {name!r}: expected one of string, version, int or bool, got {dict(raw)!r}"
    )


def _driver_and_pool(resource_slice: Mapping[str, Any]) -> tuple[str, str]:
    name = resource_slice.get("metadata", {}).get("name", "?")
    spec = resource_slice.get("spec") or {}
    driver = spec.get("driver")
    pool = (spec.get("pool") or {}).get("name")
    if not driver or not pool:
        raise InvalidInputError(
            f"ResourceSlice {name!r}: spec.driver and spec.pool.name are required"
        )
    return str(driver), str(pool)


def _counters(raw: Mapping[str, Any] | None, *, owner: str) -> dict[str, int]:
    try:
        return {
            str(key): quantity.parse_milli((value or {}).get("value", "0"))
            for key, value in (raw or {}).items()
        }
    except InvalidInputError as error:
        raise InvalidInputError(f"{owner}: {error}") from error


def counters_from_slice(resource_slice: Mapping[str, Any]) -> dict[CounterSetId, dict[str, int]]:
    """The counter sets a slice declares (`sharedCounters`), each counter in thousandths."""
    driver, pool = _driver_and_pool(resource_slice)
    name = resource_slice.get("metadata", {}).get("name", "?")
    return {
        counter_set_id(driver, pool, str(raw.get("name", ""))): _counters(
            raw.get("counters"), owner=f"ResourceSlice {name!r} counter set {raw.get('name')!r}"
        )
        for raw in (resource_slice.get("spec") or {}).get("sharedCounters") or []
    }


def _policy(raw: Mapping[str, Any] | None) -> RequestPolicy | None:
    if not raw:
        return None
    valid_range = raw.get("validRange") or {}

    def milli(value: Any) -> int | None:
        return None if value is None else quantity.parse_milli(value)

    return RequestPolicy(
        default=milli(raw.get("default")),
        valid_values=tuple(sorted(quantity.parse_milli(v) for v in raw.get("validValues") or [])),
        min=milli(valid_range.get("min")),
        max=milli(valid_range.get("max")),
        step=milli(valid_range.get("step")),
    )


def devices_from_slice(resource_slice: Mapping[str, Any]) -> list[Device]:
    """Translate one ResourceSlice into devices; a malformed slice raises InvalidInputError."""
    name = resource_slice.get("metadata", {}).get("name", "?")
    spec = resource_slice.get("spec") or {}
    driver, pool = _driver_and_pool(resource_slice)
    node = spec.get("nodeName")
    devices: list[Device] = []
    for raw in spec.get("devices") or []:
        if not raw.get("name"):
            raise InvalidInputError(f"ResourceSlice {name!r}: a device has no name")
        attributes = {
            qualify(key, driver=driver): _attribute_value(key, value)
            for key, value in (raw.get("attributes") or {}).items()
        }
        capacity = {
            qualify(key, driver=driver): quantity.parse_milli((value or {}).get("value", "0"))
            for key, value in (raw.get("capacity") or {}).items()
        }
        taints = tuple(
            DeviceTaint(key=t.get("key", ""), value=t.get("value", ""), effect=t.get("effect", ""))
            for t in raw.get("taints") or []
        )
        owner = f"ResourceSlice {name!r} device {raw['name']!r}"
        consumes = tuple(
            (
                counter_set_id(driver, pool, str(entry.get("counterSet", ""))),
                _counters(entry.get("counters"), owner=owner),
            )
            for entry in raw.get("consumesCounters") or []
        )
        policies = {
            qualify(key, driver=driver): policy
            for key, value in (raw.get("capacity") or {}).items()
            if (policy := _policy((value or {}).get("requestPolicy"))) is not None
        }
        devices.append(
            Device(
                driver=driver,
                pool=pool,
                name=raw["name"],
                node=node,
                attributes=attributes,
                capacity=capacity,
                taints=taints,
                consumes=consumes,
                multi=raw.get("allowMultipleAllocations") is True,
                policies=policies,
            )
        )
    return devices
