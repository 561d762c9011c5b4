"""DELETE semantics: preconditions, grace periods, finalizers and the deletion lifecycle.

Owns what happens when a client deletes an object: uid/resourceVersion preconditions, the
graceful deletion of bound pods, `deletionTimestamp` with finalizers (including the system
ones `orphan`, `foregroundDeletion` and a CRD's instance cleanup), immediate removal and the
response body (the object, or a Success Status). Cascading work belongs to `gc.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import gc, kinds, status

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    propagation: str | None = None
    grace_seconds: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False


def _check_preconditions(
    rt: kinds.ResourceType, obj: dict[str, Any], options: DeleteOptions
) -> None:
    metadata, name = obj["metadata"], obj["metadata"]["name"]
    if options.uid and options.uid != metadata.get("uid"):
        raise status.ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {rt.kind} "{name}": the UID in the precondition '
            f"({options.uid}) does not match the UID in record ({metadata.get('uid')}). "
            "The object might have been deleted and then recreated",
            details={"name": name, "kind": rt.kind},
        )
    if options.resource_version and options.resource_version != metadata.get("resourceVersion"):
        raise status.conflict(rt.plural, rt.group, name)


def _finalizers(
    registry: Registry, rt: kinds.ResourceType, obj: dict[str, Any], options: DeleteOptions
) -> list[str]:
    finalizers = list(obj["metadata"].get("finalizers") or [])
    wanted = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}.get(options.propagation or "")
    if wanted and wanted not in finalizers:
        finalizers.append(wanted)
    if not obj["metadata"].get("deletionTimestamp"):
        extra = registry.strategy(rt).deletion_finalizers(obj)
        finalizers += [finalizer for finalizer in extra if finalizer not in finalizers]
    return finalizers


def delete(
    registry: Registry, rt: kinds.ResourceType, namespace: str, name: str, options: DeleteOptions
) -> dict[str, Any]:
    """DELETE of one object; returns the response body."""
    obj = registry.get(rt, namespace, name)
    _check_preconditions(rt, obj, options)
    if options.dry_run:
        return obj
    if rt.key == kinds.NAMESPACES.key:
        return gc.terminate_namespace(registry, obj)
    metadata = obj["metadata"]
    strategy = registry.strategy(rt)
    finalizers = _finalizers(registry, rt, obj, options)
    grace = grace_period(rt, obj, options)
    if metadata.get("deletionTimestamp"):
        return registry.remove(rt, obj) if grace == 0 and not finalizers else obj
    if finalizers or grace > 0:
        metadata["deletionTimestamp"] = registry.now(after_seconds=grace)
        metadata["deletionGracePeriodSeconds"] = grace
        if finalizers:
            metadata["finalizers"] = finalizers
        if strategy.tracks_generation:
            metadata["generation"] = int(metadata.get("generation") or 1) + 1
        stored = registry.commit(rt, obj)
        gc.deletion_started(registry, rt, stored)
        return stored
    if rt.key == kinds.PODS.key:
        # An unbound pod: one write with deletionTimestamp and grace 0, then gone (corpus 3-23).
        metadata["deletionTimestamp"] = registry.now()
        metadata["deletionGracePeriodSeconds"] = 0
        metadata["generation"] = int(metadata.get("generation") or 1) + 1
        obj = registry.commit(rt, obj)
    final = registry.remove(rt, obj)
    if strategy.returns_deleted_object:
        return final
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details |= {"kind": rt.plural, "uid": metadata.get("uid")}
    return status.success(None, details=details)


def grace_period(rt: kinds.ResourceType, obj: dict[str, Any], options: DeleteOptions) -> int:
    """Only bound pods get a grace period; everything else is deleted at once."""
    if rt.key != kinds.PODS.key or not (obj.get("spec") or {}).get("nodeName"):
        return 0
    if options.grace_seconds is not None:
        return max(options.grace_seconds, 0)
    if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return 0
    return int((obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))


def finish(registry: Registry, rt: kinds.ResourceType, obj: dict[str, Any], finalizer: str) -> None:
    """Drop one system finalizer once its work is done; the object goes if it was the last."""
    namespace, name = obj["metadata"].get("namespace") or "", obj["metadata"]["name"]
    current = registry.find(rt, namespace, name)
    if current is None or current["metadata"].get("uid") != obj["metadata"].get("uid"):
        return
    previous = registry.get(rt, namespace, name)
    current["metadata"]["finalizers"] = [
        f for f in current["metadata"].get("finalizers") or [] if f != finalizer
    ]
    registry.save(rt, current, previous)
