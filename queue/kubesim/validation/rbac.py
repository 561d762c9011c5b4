"""rbac.authorization.k8s.io/v1: Role, ClusterRole, RoleBinding, ClusterRoleBinding rules.

Owns the structural checks of pkg/apis/rbac/validation: every rule has verbs, resource rules
name groups and resources, only ClusterRoles grant non-resource URLs, a binding's roleRef names
a role of a kind it may bind and never changes. RBAC objects have no generation. It must not
decide access (`authorization.py` reads these objects) and does not check escalation (who may
grant what), which only matters for non-admin writers of RBAC objects.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import status
from gangq.queue.kubesim.authorization import RBAC_GROUP
from gangq.queue.kubesim.strategy import Strategy

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

_SUBJECT_KINDS = ["ServiceAccount", "User", "Group"]


def _go_strings(values: list[Any]) -> str:
    return "[]string{" + ", ".join(json.dumps(str(v)) for v in values) + "}"


def rule_causes(rules: Any, *, namespaced: bool) -> list[status.Cause]:
    causes: list[status.Cause] = []
    for index, given in enumerate(rules if isinstance(rules, list) else []):
        path = f"rules[{index}]"
        rule = given if isinstance(given, dict) else {}
        if not rule.get("verbs"):
            causes.append(status.required(f"{path}.verbs", "verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs") or []
        if urls:
            value = f"Invalid value: {_go_strings(urls)}: "
            if namespaced:
                causes.append(
                    status.Cause(
                        f"{path}.nonResourceURLs",
                        "FieldValueInvalid",
                        value + "namespaced rules cannot apply to non-resource URLs",
                    )
                )
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                causes.append(
                    status.Cause(
                        f"{path}.nonResourceURLs",
                        "FieldValueInvalid",
                        value
                        + "rules cannot apply to both regular resources and non-resource URLs",
                    )
                )
            continue
        if not rule.get("apiGroups"):
            causes.append(
                status.required(
                    f"{path}.apiGroups", "resource rules must supply at least one api group"
                )
            )
        if not rule.get("resources"):
            causes.append(
                status.required(
                    f"{path}.resources", "resource rules must supply at least one resource"
                )
            )
    return causes


def path_segment_name_causes(obj: dict[str, Any]) -> list[status.Cause]:
    """RBAC names only need to fit in a URL path segment ("system:discovery" is one)."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    if not name:
        return [status.required("metadata.name", "name or generateName is required")]
    if name in (".", ".."):
        return [status.invalid_value("metadata.name", name, f"may not be '{name}'")]
    return [
        status.invalid_value("metadata.name", name, f"may not contain '{bad}'")
        for bad in ("/", "%")
        if bad in name
    ]


class _RbacStrategy(Strategy):
    tracks_generation = False

    def name_causes(self, obj: dict[str, Any]) -> list[status.Cause]:
        return path_segment_name_causes(obj)


class RoleStrategy(_RbacStrategy):
    def __init__(self, *, namespaced: bool) -> None:
        self.namespaced = namespaced

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        return rule_causes(obj.get("rules"), namespaced=self.namespaced)

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return self.validate_create(new, registry)


def _ref(binding: dict[str, Any]) -> dict[str, Any]:
    ref = binding.get("roleRef")
    return ref if isinstance(ref, dict) else {}


def _role_ref(ref: dict[str, Any]) -> str:
    """A RoleRef as Go's %#v prints it in a field error."""
    fields = ", ".join(
        f"{key}:{json.dumps(str(ref.get(name) or ''))}"
        for key, name in (("APIGroup", "apiGroup"), ("Kind", "kind"), ("Name", "name"))
    )
    return f"rbac.RoleRef{{{fields}}}"


class BindingStrategy(_RbacStrategy):
    def __init__(self, *, namespaced: bool) -> None:
        self.role_kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        ref = _ref(obj)
        causes: list[status.Cause] = []
        if ref.get("apiGroup") != RBAC_GROUP:
            causes.append(
                status.not_supported("roleRef.apiGroup", ref.get("apiGroup") or "", [RBAC_GROUP])
            )
        if ref.get("kind") not in self.role_kinds:
            causes.append(
                status.not_supported("roleRef.kind", ref.get("kind") or "", self.role_kinds)
            )
        if not ref.get("name"):
            causes.append(status.required("roleRef.name"))
        for index, given in enumerate(obj.get("subjects") or []):
            subject = given if isinstance(given, dict) else {}
            if not subject.get("name"):
                causes.append(status.required(f"subjects[{index}].name"))
            if subject.get("kind") not in _SUBJECT_KINDS:
                causes.append(
                    status.not_supported(
                        f"subjects[{index}].kind", subject.get("kind") or "", _SUBJECT_KINDS
                    )
                )
        return causes

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        causes = self.validate_create(new, registry)
        ref = _ref(new)
        if ref != _ref(old):
            causes.insert(
                0,
                status.Cause(
                    "roleRef",
                    "FieldValueInvalid",
                    f"Invalid value: {_role_ref(ref)}: cannot change roleRef",
                ),
            )
        return causes
