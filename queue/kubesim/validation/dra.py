"""resource.k8s.io/v1: ResourceClaim, ResourceClaimTemplate, DeviceClass and ResourceSlice rules.

Owns the structural validation the real API server applies (corpus section 5): request names,
counts and CEL compilation on create; an immutable spec; an allocation whose results name the
claim's requests and that can only be set or cleared, never changed; `reservedFor` only with an
allocation and each consumer in it once. Like the real server it accepts devices no
ResourceSlice publishes, but it records each such allocation in `phantom_allocations` for
tests. It must not allocate (see scheduler.py).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gangq.queue.core import cel as core_cel
from gangq.queue.core.errors import SelectorError
from gangq.queue.kubesim import authorization, kinds, status
from gangq.queue.kubesim.strategy import Strategy
from gangq.queue.kubesim.validation import meta, slices

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
_REQUEST_MESSAGE = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)


def go_dump(value: Any) -> str:
    """Approximates the Go struct dump of field-is-immutable messages (keys capitalised)."""

    def convert(item: Any) -> Any:
        if isinstance(item, dict):
            return {
                (key.upper() if key == "cel" else key[:1].upper() + key[1:]): convert(v)
                for key, v in item.items()
            }
        if isinstance(item, list):
            return [convert(v) for v in item]
        return item

    return json.dumps(convert(value), separators=(",", ":"))


def _immutable(path: str, value: Any) -> status.Cause:
    return status.Cause(
        path, "FieldValueInvalid", f"Invalid value: {go_dump(value)}: field is immutable"
    )


def _default_request(request: dict[str, Any]) -> None:
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in request.get("tolerations") or []:
        if isinstance(toleration, dict):
            toleration.setdefault("operator", "Equal")


def _toleration_causes(path: str, tolerations: list[Any]) -> list[status.Cause]:
    """Device tolerations (corpus 10-19, 10-20): Exists takes no value; effects as taints'."""
    causes: list[status.Cause] = []
    for index, given in enumerate(tolerations):
        where = f"{path}[{index}]"
        toleration = given or {}
        key = str(toleration.get("key") or "")
        if key:
            causes += meta.qualified_name_causes(f"{where}.key", key)
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" and toleration.get("value"):
            causes.append(
                status.invalid_value(
                    f"{where}.value", toleration["value"], "must be empty for operator `Exists`"
                )
            )
        elif operator not in ("Exists", "Equal"):
            causes.append(status.not_supported(f"{where}.operator", operator, ["Equal", "Exists"]))
        causes += slices.effect_causes(f"{where}.effect", toleration.get("effect"), required=False)
    return causes


def _share_id_causes(path: str, share_id: Any) -> list[status.Cause]:
    """shareID must be a UUID in lowercase normalized form (corpus 10-23)."""
    text = str(share_id)
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        if len(text) not in (32, 36, 38, 45):
            return [
                status.invalid_value(
                    path, text, f"error validating uid: invalid UUID length: {len(text)}"
                )
            ]
        return [status.invalid_value(path, text, "error validating uid: invalid UUID format")]
    if str(parsed) != text:
        return [
            status.invalid_value(
                path,
                text,
                "uid must be in RFC 4122 normalized form, "
                "`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase hexadecimal characters",
            )
        ]
    return []


def default_claim_spec(spec: dict[str, Any]) -> None:
    for request in (spec.get("devices") or {}).get("requests") or []:
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            _default_request(sub)


def _selector_causes(path: str, selectors: list[Any]) -> list[status.Cause]:
    causes: list[status.Cause] = []
    for index, selector in enumerate(selectors or []):
        expression = str(((selector or {}).get("cel") or {}).get("expression", ""))
        try:
            core_cel.compile_selector(expression)
        except SelectorError as error:
            problem = error.problem.replace("\n|", "\n |")
            causes.append(
                status.invalid_value(
                    f"{path}[{index}].cel.expression", expression, f"compilation failed: {problem}"
                )
            )
    return causes


def _request_causes(
    path: str, request: dict[str, Any], *, admin_allowed: bool
) -> list[status.Cause]:
    causes: list[status.Cause] = []
    if not request.get("deviceClassName"):
        causes.append(status.required(f"{path}.deviceClassName"))
    count = request.get("count")
    if isinstance(count, int) and count < 0:
        causes.append(status.invalid_value(f"{path}.count", count, "must be greater than zero"))
    causes += _selector_causes(f"{path}.selectors", request.get("selectors") or [])
    causes += _toleration_causes(f"{path}.tolerations", request.get("tolerations") or [])
    if request.get("adminAccess") and not admin_allowed:
        causes.append(
            status.forbidden(
                f"{path.rsplit('.', 1)[0]}.adminAccess",
                f"admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the "
                "containing namespace",
            )
        )
    return causes


def claim_spec_causes(
    path: str, spec: dict[str, Any], *, admin_allowed: bool
) -> list[status.Cause]:
    causes: list[status.Cause] = []
    names: set[str] = set()
    for index, request in enumerate((spec.get("devices") or {}).get("requests") or []):
        where = f"{path}.devices.requests[{index}]"
        name = str(request.get("name") or "")
        if not meta.is_dns_label(name):
            causes.append(status.invalid_value(f"{where}.name", name, meta.DNS_LABEL_MESSAGE))
        elif name in names:
            causes.append(status.duplicate(f"{where}.name", name))
        names.add(name)
        if isinstance(request.get("exactly"), dict):
            causes += _request_causes(
                f"{where}.exactly", request["exactly"], admin_allowed=admin_allowed
            )
        elif request.get("firstAvailable"):
            for sub_index, sub in enumerate(request["firstAvailable"]):
                causes += _request_causes(
                    f"{where}.firstAvailable[{sub_index}]", sub, admin_allowed=admin_allowed
                )
        else:
            causes.append(
                status.required(where, "exactly one of `exactly` or `firstAvailable` is required")
            )
    return causes


def request_names(spec: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for request in (spec.get("devices") or {}).get("requests") or []:
        names.add(str(request.get("name")))
        for sub in request.get("firstAvailable") or []:
            names.add(f"{request.get('name')}/{sub.get('name')}")
    return names


@dataclass(frozen=True, slots=True)
class PhantomAllocation:
    """An allocation naming a device that no ResourceSlice publishes (accepted, as upstream)."""

    claim: str
    driver: str
    pool: str
    device: str


def _admin_allowed(registry: Registry, namespace: str) -> bool:
    found = registry.storage.peek(kinds.NAMESPACES.key, "", namespace)
    labels = ((found or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(ADMIN_ACCESS_LABEL) == "true"


@dataclass(eq=False)
class ResourceClaimStrategy(Strategy):
    phantom_allocations: list[PhantomAllocation] = field(default_factory=list)
    tracks_generation = False
    returns_deleted_object = True
    empty_structs = (("spec", "devices"), ("status",))

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        default_claim_spec(obj.setdefault("spec", {}))
        obj["status"] = {}

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        admin = _admin_allowed(registry, obj["metadata"].get("namespace") or "")
        return claim_spec_causes("spec", obj.get("spec") or {}, admin_allowed=admin)

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        default_claim_spec(new.setdefault("spec", {}))
        if new.get("spec") != old.get("spec"):
            return [_immutable("spec", new.get("spec"))]
        return []

    def validate_status_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        new_status, old_status = new.get("status") or {}, old.get("status") or {}
        causes = authorization.binding_causes(new_status, old_status)
        causes += _status_causes(new, new_status, old_status)
        allocation = new_status.get("allocation")
        if not causes and allocation and not old_status.get("allocation"):
            self._record_phantoms(new, allocation, registry)
        return causes

    def _record_phantoms(
        self, claim: dict[str, Any], allocation: dict[str, Any], registry: Registry
    ) -> None:
        published = registry.storage.derived(
            kinds.RESOURCE_SLICES.key, "published-devices", _published_devices
        )
        key = f"{claim['metadata'].get('namespace')}/{claim['metadata'].get('name')}"
        for result in (allocation.get("devices") or {}).get("results") or []:
            triple = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            if triple not in published:
                self.phantom_allocations.append(PhantomAllocation(key, *triple))


def _status_causes(
    new: dict[str, Any], new_status: dict[str, Any], old_status: dict[str, Any]
) -> list[status.Cause]:
    allocation, previous = new_status.get("allocation"), old_status.get("allocation")
    if new_status.get("reservedFor") and not allocation:
        return [
            status.forbidden(
                "status.reservedFor", "may not be specified when `allocated` is not set"
            )
        ]
    duplicates = _duplicate_consumers(new_status.get("reservedFor") or [])
    if duplicates:
        return duplicates
    if previous and allocation and allocation != previous:
        return [_immutable("status.allocation", allocation)]
    if not allocation or previous:
        return []
    causes: list[status.Cause] = []
    names = request_names(new.get("spec") or {})
    for index, result in enumerate((allocation.get("devices") or {}).get("results") or []):
        path = f"status.allocation.devices.results[{index}]"
        request = str(result.get("request") or "")
        if request not in names:
            causes.append(status.invalid_value(f"{path}.request", request, _REQUEST_MESSAGE))
        driver = str(result.get("driver") or "")
        if not meta.is_dns_subdomain(driver):
            causes.append(
                status.invalid_value(f"{path}.driver", driver, meta.DNS_SUBDOMAIN_MESSAGE)
            )
        device = str(result.get("device") or "")
        if not meta.is_dns_label(device):
            causes.append(status.invalid_value(f"{path}.device", device, meta.DNS_LABEL_MESSAGE))
        if result.get("shareID") is not None:
            causes += _share_id_causes(f"{path}.shareID", result["shareID"])
    return causes


def _duplicate_consumers(reserved: list[Any]) -> list[status.Cause]:
    """Each consumer once, by uid (corpus 12-74: kube-scheduler's second PreBind of a pod group
    claim was refused so)."""
    seen: set[str] = set()
    causes: list[status.Cause] = []
    for index, consumer in enumerate(reserved):
        uid = str((consumer or {}).get("uid") or "")
        if uid in seen:
            causes.append(status.duplicate(f"status.reservedFor[{index}]", uid))
        seen.add(uid)
    return causes


def _published_devices(slices: Iterable[dict[str, Any]]) -> frozenset[tuple[str, str, str]]:
    """Every (driver, pool, device) some ResourceSlice publishes."""
    published = set()
    for resource_slice in slices:
        spec = resource_slice.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name")
        for device in spec.get("devices") or []:
            published.add((str(spec.get("driver")), str(pool), str(device.get("name"))))
    return frozenset(published)


class ResourceClaimTemplateStrategy(Strategy):
    tracks_generation = False
    empty_structs = (("spec", "spec", "devices"),)

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        default_claim_spec(obj.setdefault("spec", {}).setdefault("spec", {}))

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        admin = _admin_allowed(registry, obj["metadata"].get("namespace") or "")
        return claim_spec_causes(
            "spec.spec", (obj.get("spec") or {}).get("spec") or {}, admin_allowed=admin
        )


class DeviceClassStrategy(Strategy):
    empty_structs = (("spec",),)

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        return _selector_causes("spec.selectors", (obj.get("spec") or {}).get("selectors") or [])

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return self.validate_create(new, registry)


class ResourceSliceStrategy(Strategy):
    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        slices.default_taints(obj.get("spec") or {}, now=registry.now())

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        return slices.spec_causes(obj.get("spec") or {})

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return self.validate_create(new, registry)
