"""Namespaces, Nodes, Services, ConfigMaps, Events and Leases: their few server-side rules.

Owns defaults (namespace phase and metadata.name label), core/v1 Event checks (corpus 8-03,
8-04), Lease MicroTime decoding and duration checks (7-05, 7-06). It must not touch pods, DRA
or custom resources.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import status
from gangq.queue.kubesim.strategy import Strategy
from gangq.queue.kubesim.validation import meta

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

_MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
_LOOSE_MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")


class NamespaceStrategy(Strategy):
    tracks_generation = False
    returns_deleted_object = True
    dns_label_names = True

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        name = obj["metadata"].get("name") or ""
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}


NODE_INFO_KEYS = (
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
)
"""NodeSystemInfo's string fields, which the real server prints even when empty (corpus 10-01)."""


class NodeStrategy(Strategy):
    tracks_generation = False
    empty_structs = (("spec",), ("status",))

    def normalize(self, obj: dict[str, Any]) -> None:
        super().normalize(obj)
        node_status = obj["status"]
        endpoints = node_status.setdefault("daemonEndpoints", {})
        endpoints.setdefault("kubeletEndpoint", {}).setdefault("Port", 0)
        info = node_status.setdefault("nodeInfo", {})
        for key in NODE_INFO_KEYS:
            info.setdefault(key, "")


class ServiceStrategy(Strategy):
    tracks_generation = False
    returns_deleted_object = True
    dns_label_names = True

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj["status"] = {"loadBalancer": {}}


class ConfigMapStrategy(Strategy):
    tracks_generation = False


class EventStrategy(Strategy):
    tracks_generation = False

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        obj.setdefault("firstTimestamp", None)
        obj.setdefault("lastTimestamp", None)
        obj.setdefault("eventTime", None)
        obj.setdefault("source", {})
        obj.setdefault("reportingComponent", "")
        obj.setdefault("reportingInstance", "")

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        return _event_causes(obj)

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return _event_causes(new)


def _event_causes(obj: dict[str, Any]) -> list[status.Cause]:
    causes: list[status.Cause] = []
    involved = obj.get("involvedObject") or {}
    namespace = obj["metadata"].get("namespace") or ""
    if involved.get("namespace") and involved["namespace"] != namespace:
        causes.append(
            status.invalid_value(
                "involvedObject.namespace", involved["namespace"], "does not match event.namespace"
            )
        )
    if obj.get("eventTime"):
        component = str(obj.get("reportingComponent") or "")
        if not component:
            causes.append(status.required("reportingComponent"))
        causes += meta.qualified_name_causes("reportingComponent", component)
        if not obj.get("reportingInstance"):
            causes.append(status.required("reportingInstance"))
        if not obj.get("action"):
            causes.append(status.required("action"))
    return causes


_RENAMED = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)
"""core/v1 Event field -> events.k8s.io/v1 Event field."""


class EventsV1Strategy(Strategy):
    """events.k8s.io/v1: the same objects as core/v1 Events under other field names."""

    tracks_generation = False

    def present(self, stored: dict[str, Any]) -> dict[str, Any]:
        shown = {key: value for key, value in stored.items() if key not in dict(_RENAMED)}
        for core, renamed in _RENAMED:
            if (core in stored and stored[core] not in ("", None)) or core in ("source",):
                shown[renamed] = stored.get(core, {})
        shown.setdefault("deprecatedFirstTimestamp", None)
        shown.setdefault("deprecatedLastTimestamp", None)
        shown["apiVersion"] = "events.k8s.io/v1"
        return shown

    def accept(self, obj: dict[str, Any]) -> dict[str, Any]:
        stored = {key: value for key, value in obj.items() if key not in dict(_RENAMED).values()}
        for core, renamed in _RENAMED:
            if renamed in obj:
                stored[core] = obj[renamed]
        stored["apiVersion"] = "v1"
        for key, empty in (("source", {}), ("firstTimestamp", None), ("lastTimestamp", None)):
            stored.setdefault(key, empty)
        return stored

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        if not obj.get("eventTime"):
            return [status.required("eventTime")]
        return []

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return self.validate_create(new, registry)


class LeaseStrategy(Strategy):
    tracks_generation = False
    empty_structs = (("spec",),)

    def decode(self, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        for key in [key for key in spec if key in ("acquireTime", "renewTime")]:
            value = spec[key]
            if isinstance(value, str) and not _LOOSE_MICRO_TIME.fullmatch(value):
                raise status.bad_request(
                    f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" '
                    'as "2006-01-02T15:04:05.000000Z07:00": cannot parse "'
                    f'{value[19:]}" as ".000000"'
                )
            if isinstance(value, str) and "." not in value:
                raise status.bad_request(
                    f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" '
                    'as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"'
                )

    def normalize(self, obj: dict[str, Any]) -> None:
        super().normalize(obj)
        spec = obj["spec"]
        for key in ("acquireTime", "renewTime"):
            value = spec.get(key)
            if isinstance(value, str) and not _MICRO_TIME.fullmatch(value):
                seconds, _, fraction = value.rstrip("Z").partition(".")
                spec[key] = f"{seconds}.{(fraction + '000000')[:6]}Z"

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        return _lease_causes(obj)

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return _lease_causes(new)


def _lease_causes(obj: dict[str, Any]) -> list[status.Cause]:
    duration = (obj.get("spec") or {}).get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        return [
            status.invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0")
        ]
    return []
