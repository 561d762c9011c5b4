"""The resource types the emulator serves: names, scope, verbs and selectable fields.

Owns the static table of built-in types and the `ResourceType` value that custom resources of
installed CRDs also use. It must not hold objects or behaviour; per-kind rules live in
`validation/` and storage in `storage.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")
METADATA_FIELDS = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    has_status: bool = False
    field_labels: tuple[str, ...] = ()
    """Field selector labels beyond metadata.name and metadata.namespace."""
    schema: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    """openAPIV3Schema of a custom resource version; None for built-in types."""
    printer_columns: tuple[dict[str, Any], ...] = field(default=(), hash=False, compare=False)
    storage: str | None = None
    """Key of another type whose objects this one presents in its own shape (events.k8s.io)."""

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    @property
    def error_group(self) -> str:
        """The group validation errors name: a view type reports as the type it stores."""
        return self.storage.split("/", 1)[0] if self.storage else self.group

    @property
    def store_key(self) -> str:
        return self.storage or self.key

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def is_custom(self) -> bool:
        return self.schema is not None

    def supports_field(self, label: str) -> bool:
        return label in METADATA_FIELDS or label in self.field_labels


def _core(plural: str, kind: str, **kwargs: Any) -> ResourceType:
    return ResourceType(
        "", "v1", plural, plural[:-1] if plural != "services" else "service", kind, **kwargs
    )


BUILTIN: tuple[ResourceType, ...] = (
    _core(
        "namespaces",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        has_status=True,
        field_labels=("status.phase",),
    ),
    _core(
        "nodes",
        "Node",
        namespaced=False,
        short_names=("no",),
        has_status=True,
        field_labels=("spec.unschedulable",),
    ),
    _core(
        "pods",
        "Pod",
        namespaced=True,
        short_names=("po",),
        categories=("all",),
        has_status=True,
        field_labels=(
            "spec.nodeName",
            "status.phase",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.restartPolicy",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    _core(
        "services",
        "Service",
        namespaced=True,
        short_names=("svc",),
        categories=("all",),
        has_status=True,
        field_labels=("spec.clusterIP", "spec.type"),
    ),
    _core("configmaps", "ConfigMap", namespaced=True, short_names=("cm",)),
    _core(
        "events",
        "Event",
        namespaced=True,
        short_names=("ev",),
        field_labels=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "lease", "Lease", namespaced=True),
    ResourceType(
        "resource.k8s.io", "v1", "deviceclasses", "deviceclass", "DeviceClass", namespaced=False
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "resourceclaim",
        "ResourceClaim",
        namespaced=True,
        has_status=True,
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "resourceclaimtemplate",
        "ResourceClaimTemplate",
        namespaced=True,
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "resourceslice",
        "ResourceSlice",
        namespaced=False,
        field_labels=("spec.nodeName", "spec.driver"),
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "role", "Role", namespaced=True),
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "clusterrole",
        "ClusterRole",
        namespaced=False,
    ),
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        namespaced=True,
    ),
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        namespaced=False,
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        namespaced=False,
        short_names=("crd", "crds"),
        categories=("api-extensions",),
        has_status=True,
    ),
)

EVENTS_V1 = ResourceType(
    "events.k8s.io",
    "v1",
    "events",
    "event",
    "Event",
    namespaced=True,
    short_names=("ev",),
    storage="/events",
)
"""events.k8s.io/v1 Events: a view of the core/v1 Events (one storage, two shapes)."""

WORKLOADS = ResourceType(
    "scheduling.k8s.io", "v1alpha2", "workloads", "workload", "Workload", namespaced=True
)
PODGROUPS = ResourceType(
    "scheduling.k8s.io",
    "v1alpha2",
    "podgroups",
    "podgroup",
    "PodGroup",
    namespaced=True,
    has_status=True,
)
GANG_SCHEDULING = (WORKLOADS, PODGROUPS)
"""scheduling.k8s.io/v1alpha2: served only with the alpha feature gates GenericWorkload and
GangScheduling on (`Emulator(podgroups=True)`); Workloads have no status subresource (12-01)."""

PODS = BUILTIN[2]
NAMESPACES = BUILTIN[0]
NODES = BUILTIN[1]
EVENTS = BUILTIN[5]
LEASES = BUILTIN[6]
DEVICE_CLASSES = BUILTIN[7]
RESOURCE_CLAIMS = BUILTIN[8]
RESOURCE_SLICES = BUILTIN[10]
ROLES = BUILTIN[11]
CLUSTER_ROLES = BUILTIN[12]
ROLE_BINDINGS = BUILTIN[13]
CLUSTER_ROLE_BINDINGS = BUILTIN[14]
CRDS = BUILTIN[15]


def from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of a CRD."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    types: list[ResourceType] = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
        selectable = tuple(
            str(entry.get("jsonPath", "")).lstrip(".")
            for entry in version.get("selectableFields") or []
        )
        types.append(
            ResourceType(
                group=spec.get("group", ""),
                version=version.get("name", ""),
                plural=names.get("plural", ""),
                singular=names.get("singular") or str(names.get("kind", "")).lower(),
                kind=names.get("kind", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                has_status="status" in (version.get("subresources") or {}),
                field_labels=selectable,
                schema=schema,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return types
