"""Generic create/read/update/patch semantics shared by every resource type.

Owns what the API server does for any kind: metadata (uid, generation, timestamps, generated
names), resourceVersion preconditions, the status subresource split, finalizer rules on update
and removal once the last finalizer is gone. Per-kind rules come from `Strategy` objects,
DELETE from `deletion.py`, cascading deletion from `gc.py`. It must not parse HTTP.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gangq.queue.kubesim import gc, kinds, patch, status
from gangq.queue.kubesim.clone import clone
from gangq.queue.kubesim.storage import Storage
from gangq.queue.kubesim.strategy import Strategy
from gangq.queue.kubesim.validation import decoding, meta

Clock = Callable[[], datetime]
_NAME_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
GENERATE_NAME_DRAWS = 8
_IMMUTABLE_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
    "generateName",
)


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class Written:
    """The object a write returned, plus `Warning` header texts."""

    object: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    created: bool = False


@dataclass(eq=False)
class Registry:
    storage: Storage
    clock: Clock = field(default=lambda: datetime.now(UTC))
    strategies: dict[str, Strategy] = field(default_factory=dict)
    types: dict[str, kinds.ResourceType] = field(default_factory=dict)
    """By `ResourceType.key`; custom resources are added when their CRD is created."""

    def install(self, resource_type: kinds.ResourceType, strategy: Strategy) -> None:
        self.types[resource_type.key] = resource_type
        self.strategies[resource_type.key] = strategy

    def uninstall(self, resource_type: kinds.ResourceType) -> None:
        self.types.pop(resource_type.key, None)
        self.strategies.pop(resource_type.key, None)
        self.storage.drop_resource(resource_type.key)

    def resolve(self, group: str, version: str, plural: str) -> kinds.ResourceType | None:
        found = self.types.get(f"{group}/{plural}")
        return found if found is not None and found.version == version else None

    def strategy(self, resource_type: kinds.ResourceType) -> Strategy:
        return self.strategies.get(resource_type.key) or Strategy()

    def now(self, *, after_seconds: float = 0) -> str:
        return timestamp(self.clock() + timedelta(seconds=after_seconds))

    # reads

    def get(self, rt: kinds.ResourceType, namespace: str, name: str) -> dict[str, Any]:
        found = self.find(rt, namespace, name)
        if found is None:
            raise status.not_found(rt.plural, rt.group, name)
        return found

    def peek(self, rt: kinds.ResourceType, namespace: str, name: str) -> dict[str, Any]:
        """The stored object itself, for a caller that only reads it (no copy made)."""
        found = self.storage.peek(rt.store_key, namespace if rt.namespaced else "", name)
        if found is None:
            raise status.not_found(rt.plural, rt.group, name)
        return self.strategy(rt).present(found)

    def find(self, rt: kinds.ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.storage.get(rt.store_key, namespace if rt.namespaced else "", name)
        return None if found is None else self.strategy(rt).present(found)

    # writes

    def commit(self, rt: kinds.ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        strategy = self.strategy(rt)
        stored = self.storage.put(rt.store_key, strategy.accept(obj))
        strategy.after_write(stored, self)
        return strategy.present(stored)

    def _check_namespace(self, rt: kinds.ResourceType, namespace: str) -> None:
        if rt.namespaced and self.storage.peek(kinds.NAMESPACES.key, "", namespace) is None:
            raise status.not_found("namespaces", "", namespace)

    def create(
        self,
        rt: kinds.ResourceType,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        strict: bool = False,
    ) -> Written:
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise status.bad_request(
                f"the object provided is unrecognized (must be of type {rt.kind}): "
                "couldn't get version/kind"
            )
        obj = clone(body)
        metadata = obj.setdefault("metadata", {})
        self._scope(rt, metadata, namespace)
        strategy = self.strategy(rt)
        warnings = self._decode(rt, strategy, obj, strict=strict)
        self._check_kind(rt, obj)
        name = self._new_metadata(rt, strategy, metadata)
        if name:
            self._check_namespace(rt, namespace)
        strategy.default(obj, self)
        strategy.normalize(obj)
        causes = strategy.name_causes(obj)
        if name:
            causes += meta.owner_reference_causes(obj) + meta.label_causes(obj)
            causes += meta.finalizer_causes(obj) + strategy.validate_create(obj, self)
        if causes:
            raise status.invalid(rt.kind, rt.error_group, name, causes)
        strategy.admit(obj, self)
        name = self._free_name(rt, metadata, name)
        if dry_run:
            return Written(obj, warnings, created=True)
        stored = self.commit(rt, obj)
        gc.check_owners(self, rt, stored)
        return Written(stored, warnings, created=True)

    @staticmethod
    def _scope(rt: kinds.ResourceType, metadata: dict[str, Any], namespace: str) -> None:
        if not rt.namespaced:
            metadata.pop("namespace", None)
            return
        if metadata.get("namespace") and metadata["namespace"] != namespace:
            raise status.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        metadata["namespace"] = namespace

    def _free_name(self, rt: kinds.ResourceType, metadata: dict[str, Any], name: str) -> str:
        """The name to store under: a generated one that is taken is drawn again, as the real
        API server does (RetryGenerateName, GA in 1.32: up to 8 draws) before it answers 409."""
        namespace = metadata.get("namespace") or ""
        draws = GENERATE_NAME_DRAWS if metadata.get("generateName") else 1
        for _ in range(draws - 1):
            if self.storage.peek(rt.store_key, namespace, name) is None:
                return name
            name = metadata["name"] = self._generated(metadata["generateName"])
        if self.storage.peek(rt.store_key, namespace, name) is not None:
            raise status.already_exists(rt.plural, rt.group, name)
        return name

    @staticmethod
    def _generated(prefix: str) -> str:
        return prefix + "".join(random.choice(_NAME_SUFFIX) for _ in range(5))

    def _new_metadata(
        self, rt: kinds.ResourceType, strategy: Strategy, metadata: dict[str, Any]
    ) -> str:
        """Server-owned metadata of a new object; returns its (possibly generated) name."""
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = self._generated(metadata["generateName"])
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            metadata.pop(key, None)
        metadata.pop("managedFields", None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = self.now()
        if strategy.tracks_generation:
            metadata["generation"] = 1
        else:
            metadata.pop("generation", None)
        return str(metadata.get("name") or "")

    def _decode(
        self, rt: kinds.ResourceType, strategy: Strategy, obj: dict[str, Any], *, strict: bool
    ) -> list[str]:
        decoding.check(rt.key, rt.kind, rt.version, obj)
        strategy.decode(obj)
        unknown = strategy.prune(obj)
        if unknown and strict:
            listed = ", ".join(f'unknown field "{path}"' for path in unknown)
            raise status.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"strict decoding error: {listed}"
            )
        return [f'unknown field "{path}"' for path in unknown]

    def _check_kind(self, rt: kinds.ResourceType, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        name = str((obj.get("metadata") or {}).get("name") or "")
        if kind and kind != rt.kind:
            cause = status.invalid_value("kind", kind, f"must be {rt.kind}")
            raise status.invalid(str(kind), rt.group, name, [cause])
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version

    def update(
        self,
        rt: kinds.ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        strict: bool = False,
    ) -> Written:
        old = self.get(rt, namespace, name)
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise status.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}'
            )
        new = clone(body)
        metadata = new.setdefault("metadata", {})
        if metadata.get("name") and metadata["name"] != name:
            raise status.bad_request(
                f"the name of the object ({metadata['name']}) does not match the name on the URL "
                f"({name})"
            )
        stale = metadata.get("resourceVersion")
        if stale and stale != old["metadata"].get("resourceVersion"):
            raise status.conflict(rt.plural, rt.group, name)
        strategy = self.strategy(rt)
        warnings = self._decode(rt, strategy, new, strict=strict)
        self._check_kind(rt, new)
        new = self._split_status(rt, strategy, new, old, subresource=subresource)
        for key in _IMMUTABLE_METADATA:
            if key in old["metadata"]:
                new["metadata"][key] = old["metadata"][key]
            else:
                new["metadata"].pop(key, None)
        new["metadata"].pop("managedFields", None)
        for key in ("finalizers", "ownerReferences", "labels", "annotations"):
            if key in new["metadata"] and not new["metadata"][key]:
                del new["metadata"][key]
        strategy.normalize(new)
        causes = meta.new_finalizers_while_terminating(new, old)
        causes += meta.owner_reference_causes(new) + meta.label_causes(new)
        if subresource == "status":
            causes += strategy.validate_status_update(new, old, self)
        else:
            causes += strategy.validate_update(new, old, self)
        if causes:
            raise status.invalid(rt.kind, rt.error_group, name, causes)
        if strategy.tracks_generation and strategy.is_spec_changed(new, old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation") or 1) + 1
        return Written(self.save(rt, new, old), warnings)

    def _split_status(
        self,
        rt: kinds.ResourceType,
        strategy: Strategy,
        new: dict[str, Any],
        old: dict[str, Any],
        *,
        subresource: str | None,
    ) -> dict[str, Any]:
        if subresource == "status":
            merged = clone(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            if strategy.status_applies_metadata:
                for key in ("labels", "annotations"):
                    if key in new["metadata"]:
                        merged["metadata"][key] = new["metadata"][key]
                    else:
                        merged["metadata"].pop(key, None)
            return merged
        if rt.has_status:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        return new

    def save(
        self, rt: kinds.ResourceType, new: dict[str, Any], old: dict[str, Any]
    ) -> dict[str, Any]:
        new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
        terminating = bool(new["metadata"].get("deletionTimestamp"))
        graceful = int(new["metadata"].get("deletionGracePeriodSeconds") or 0) > 0
        if terminating and not graceful and not new["metadata"].get("finalizers"):
            new["metadata"].pop("finalizers", None)
            return self.remove(rt, new)
        if new == old:
            return old
        return self.commit(rt, new)

    def remove(self, rt: kinds.ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        metadata = obj["metadata"]
        removed = self.storage.remove(
            rt.store_key, metadata.get("namespace") or "", metadata["name"]
        )
        final = obj if removed is None else self.strategy(rt).present(removed)
        self.strategy(rt).after_delete(final, self)
        gc.owner_removed(self, final)
        return obj

    def patch(
        self,
        rt: kinds.ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        document: Any,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        strict: bool = False,
    ) -> Written:
        """`strict` is `fieldValidation=Strict`: unknown fields in the result are a 400."""
        if content_type == patch.APPLY_PATCH:
            return self._apply(
                rt,
                namespace,
                name,
                document,
                subresource=subresource,
                field_manager=field_manager,
                strict=strict,
            )
        # Read in place: every patch function copies its target before changing it.
        old = self.peek(rt, namespace, name)
        if content_type == patch.MERGE_PATCH:
            if not isinstance(document, dict):
                raise status.bad_request(
                    "json: cannot unmarshal into Go value of type map[string]interface {}"
                )
            patched = patch.merge_patch(old, document)
        elif content_type == patch.JSON_PATCH:
            patched = patch.json_patch(old, document)
        elif content_type == patch.STRATEGIC_MERGE_PATCH and not rt.is_custom:
            if not isinstance(document, dict):
                raise status.bad_request(
                    "json: cannot unmarshal into Go value of type map[string]interface {}"
                )
            patched = patch.strategic_merge(old, document)
        else:
            accepted = (
                "application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml"
            )
            if not rt.is_custom:
                accepted += ", application/strategic-merge-patch+json"
            raise status.unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types "
                f"include: {accepted}",
                details=False,
            )
        return self.update(rt, namespace, name, patched, subresource=subresource, strict=strict)

    def _apply(
        self,
        rt: kinds.ResourceType,
        namespace: str,
        name: str,
        document: Any,
        *,
        subresource: str | None,
        field_manager: str | None,
        strict: bool,
    ) -> Written:
        """Server-side apply without field ownership: create when absent, else strategic merge."""
        if not field_manager:
            cause = status.required("fieldManager", "is required for apply patch")
            raise status.ApiError(
                422,
                "Invalid",
                f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {cause.message}',
                details={
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [cause.as_dict()],
                },
            )
        if not isinstance(document, dict):
            raise status.bad_request(
                "error decoding YAML: the apply configuration must be an object"
            )
        existing = self.find(rt, namespace, name)
        if existing is None:
            if subresource:
                raise status.not_found(rt.plural, rt.group, name)
            return self.create(rt, namespace, document, strict=strict)
        applied = patch.strategic_merge(existing, document, new_first=False)
        applied["metadata"].pop("resourceVersion", None)
        return self.update(rt, namespace, name, applied, subresource=subresource, strict=strict)
