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

AttributeValue = str | int | bool
"""DRA attribute values: string, int, bool, or version (kept as its semver string)."""

NO_EXECUTE = "NoExecute"
NO_SCHEDULE = "NoSchedule"


def device_id(driver: str, pool: str, name: str) -> DeviceId:
    return DeviceId(f"{driver}/{pool}/{name}")


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

    @property
    def id(self) -> DeviceId:
        return device_id(self.driver, self.pool, self.name)

    @property
    def is_tainted(self) -> bool:
        """True when a taint keeps new work off the device (NoSchedule or NoExecute)."""
        return any(t.effect in (NO_SCHEDULE, NO_EXECUTE) for t in self.taints)

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


def devices_from_slice(resource_slice: Mapping[str, Any]) -> list[Device]:
    """Translate one ResourceSlice into devices; a malformed slice raises InvalidInputError."""
    name = resource_slice.get("metadata", {}).get("name", "?")
    spec = resource_slice.get("spec") or {}
    driver = spec.get("driver")
    pool = (spec.get("pool") or {}).get("name")
    if not driver or not pool:
        raise InvalidInputError(
            f"ResourceSlice {name!r}: spec.driver and spec.pool.name are required"
        )
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
        devices.append(
            Device(
                driver=driver,
                pool=pool,
                name=raw["name"],
                node=node,
                attributes=attributes,
                capacity=capacity,
                taints=taints,
            )
        )
    return devices
