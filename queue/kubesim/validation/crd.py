"""CustomResourceDefinitions and the custom resources they install.

Owns the CRD lifecycle the emulator models (created without conditions, Established right
after, resource types installed for each served version and removed with the CRD) and the
strategy of custom resources: pruning with warnings, defaults, schema and CEL validation with
the extra "rules not checked" cause the real server appends. It must not know TrainingJob.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import deletion, kinds, status
from gangq.queue.kubesim.strategy import Strategy
from gangq.queue.kubesim.validation import schema

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry


_ENVELOPE = ("apiVersion", "kind", "metadata")
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


@dataclass(eq=False)
class CustomResourceStrategy(Strategy):
    openapi: dict[str, Any]
    status_subresource: bool

    def prune(self, obj: dict[str, Any]) -> list[str]:
        return schema.prune(obj, self.openapi, root=True)

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        """With a status subresource, a create cannot set status (corpus 6-06)."""
        if self.status_subresource:
            obj.pop("status", None)
        schema.apply_defaults(obj, self.openapi)

    def _causes(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[status.Cause]:
        schema.apply_defaults(obj, self.openapi)
        body = {
            key: value
            for key, value in obj.items()
            if key not in ("apiVersion", "kind", "metadata")
        }
        causes = schema.validate(body, self.openapi) + schema.list_causes(body, self.openapi)
        if not schema.has_rules(self.openapi):
            return causes
        if any(cause.reason in schema.BLOCKING for cause in causes):
            return [*causes, status.not_checked()]
        old_body = None if old is None else _rule_view(old)
        return causes + schema.rule_causes(
            _rule_view(obj), old_body, self.openapi, has_old=old is not None
        )

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        return self._causes(obj, None)

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        return self._causes(new, old)


class CustomResourceDefinitionStrategy(Strategy):
    returns_deleted_object = True

    def default(self, obj: dict[str, Any], registry: Registry) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("conversion", {"strategy": "None"})
        names = spec.setdefault("names", {})
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        stored = [v.get("name") for v in spec.get("versions") or [] if v.get("storage")]
        obj["status"] = {
            "conditions": None,
            "acceptedNames": {"plural": "", "kind": ""},
            "storedVersions": stored,
        }

    def validate_create(self, obj: dict[str, Any], registry: Registry) -> list[status.Cause]:
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        causes: list[status.Cause] = []
        for key in ("plural", "kind"):
            if not names.get(key):
                causes.append(status.required(f"spec.names.{key}"))
        if not spec.get("group"):
            causes.append(status.required("spec.group"))
        expected = f"{names.get('plural')}.{spec.get('group')}"
        if not causes and obj["metadata"].get("name") != expected:
            causes.append(
                status.invalid_value(
                    "metadata.name",
                    obj["metadata"].get("name"),
                    'must be spec.names.plural+"."+spec.group',
                )
            )
        if not any(version.get("storage") for version in spec.get("versions") or []):
            causes.append(
                status.invalid_value(
                    "spec.versions",
                    spec.get("versions"),
                    "must have exactly one version marked as storage version",
                )
            )
        return causes

    def validate_update(
        self, new: dict[str, Any], old: dict[str, Any], registry: Registry
    ) -> list[status.Cause]:
        causes = self.validate_create(new, registry)
        for key in ("group", "scope"):
            if (new.get("spec") or {}).get(key) != (old.get("spec") or {}).get(key):
                causes.append(
                    status.invalid_value(
                        f"spec.{key}", (new.get("spec") or {}).get(key), "field is immutable"
                    )
                )
        return causes

    def deletion_finalizers(self, obj: dict[str, Any]) -> list[str]:
        return [CLEANUP_FINALIZER]

    def after_write(self, obj: dict[str, Any], registry: Registry) -> None:
        if obj["metadata"].get("deletionTimestamp"):
            if CLEANUP_FINALIZER in (obj["metadata"].get("finalizers") or []):
                _soon(lambda: _clean_up(registry, obj))
            return
        for rt in kinds.from_crd(obj):
            current = registry.types.get(rt.key)
            if current is None or current.version != rt.version or current.schema != rt.schema:
                registry.install(rt, CustomResourceStrategy(rt.schema or {}, rt.has_status))
        if not (obj.get("status") or {}).get("conditions"):
            _soon(lambda: _establish(registry, obj["metadata"]["name"]))

    def after_delete(self, obj: dict[str, Any], registry: Registry) -> None:
        for rt in kinds.from_crd(obj):
            registry.uninstall(rt)


def _rule_view(obj: dict[str, Any]) -> dict[str, Any]:
    """What CEL rules see: the body, plus at the root only `metadata.name` and
    `metadata.generateName`, as the real server exposes them to root-level rules."""
    view = {key: value for key, value in obj.items() if key not in _ENVELOPE}
    meta = obj.get("metadata") or {}
    view["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
    return view


def _soon(action: Any) -> None:
    try:
        asyncio.get_running_loop().call_soon(action)
    except RuntimeError:
        action()


def _clean_up(registry: Registry, crd: dict[str, Any]) -> None:
    """Delete every instance, then let the CRD go (corpus 6-38)."""
    for rt in kinds.from_crd(crd):
        registry.uninstall(rt)
    deletion.finish(registry, kinds.CRDS, crd, CLEANUP_FINALIZER)


def _establish(registry: Registry, name: str) -> None:
    crd = registry.find(kinds.CRDS, "", name)
    if crd is None or (crd.get("status") or {}).get("conditions"):
        return
    now = registry.now()
    names = (crd.get("spec") or {}).get("names") or {}
    crd["status"] = {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "acceptedNames": dict(names),
        "storedVersions": (crd.get("status") or {}).get("storedVersions") or [],
    }
    registry.storage.put(kinds.CRDS.key, crd)
