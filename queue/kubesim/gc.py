"""Garbage collection and namespace teardown, as kube-controller-manager does them.

Owns cascading deletion through ownerReferences (Background, Foreground, Orphan), the removal
of objects whose owner uid does not exist, and emptying a terminating namespace. Work runs on
the event loop right after the triggering request (`call_soon`), so responses show the
intermediate state (finalizers `orphan` / `foregroundDeletion`) the real server shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gangq.queue.kubesim import deletion, kinds, status

if TYPE_CHECKING:
    from gangq.queue.kubesim.registry import Registry

_NAMESPACE_RETRY_SECONDS = 0.2


def _soon(action: Callable[[], None], *, delay: float = 0.0) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        action()
        return
    if delay:
        loop.call_later(delay, action)
    else:
        loop.call_soon(action)


def _delete_entry(registry: Registry, entry: tuple[str, str, str], *, propagation: str) -> None:
    resource, namespace, name = entry
    rt = registry.types.get(resource)
    if rt is None:
        return
    try:
        options = deletion.DeleteOptions(propagation=propagation, grace_seconds=0)
        deletion.delete(registry, rt, namespace, name, options)
    except status.ApiError:
        return


def check_owners(registry: Registry, rt: kinds.ResourceType, obj: dict[str, Any]) -> None:
    """An object whose every owner uid is unknown is collected (corpus 4-20)."""
    references = obj["metadata"].get("ownerReferences") or []
    if not references or any(registry.storage.by_uid(str(r.get("uid"))) for r in references):
        return
    entry = (rt.key, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
    _soon(lambda: _delete_entry(registry, entry, propagation="Background"))


def owner_removed(registry: Registry, owner: dict[str, Any]) -> None:
    """Background propagation: dependents go once their owner has left storage."""
    uid = str(owner["metadata"].get("uid") or "")
    dependents = registry.storage.dependents(uid)
    if not dependents:
        return

    def collect() -> None:
        for entry in registry.storage.dependents(uid):
            _delete_entry(registry, entry, propagation="Background")

    _soon(collect)


def _orphan(registry: Registry, owner_uid: str) -> None:
    for resource, namespace, name in registry.storage.dependents(owner_uid):
        rt = registry.types.get(resource)
        current = registry.storage.get(resource, namespace, name)
        if rt is None or current is None:
            continue
        references = [
            r for r in current["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid
        ]
        if references:
            current["metadata"]["ownerReferences"] = references
        else:
            current["metadata"].pop("ownerReferences", None)
        registry.storage.put(resource, current)


def deletion_started(registry: Registry, rt: kinds.ResourceType, obj: dict[str, Any]) -> None:
    """Run the work behind the `orphan` and `foregroundDeletion` finalizers."""
    finalizers = obj["metadata"].get("finalizers") or []
    uid = str(obj["metadata"].get("uid") or "")
    if "orphan" in finalizers:

        def orphan() -> None:
            _orphan(registry, uid)
            deletion.finish(registry, rt, obj, "orphan")

        _soon(orphan)
    if "foregroundDeletion" in finalizers:

        def foreground() -> None:
            for entry in registry.storage.dependents(uid):
                _delete_entry(registry, entry, propagation="Foreground")
            if registry.storage.dependents(uid):
                _soon(foreground, delay=_NAMESPACE_RETRY_SECONDS)
                return
            deletion.finish(registry, rt, obj, "foregroundDeletion")

        _soon(foreground)


def terminate_namespace(registry: Registry, namespace: dict[str, Any]) -> dict[str, Any]:
    """Mark the namespace Terminating, then empty it and remove it (corpus 0-02/0-03)."""
    name = namespace["metadata"]["name"]
    if not namespace["metadata"].get("deletionTimestamp"):
        namespace["metadata"]["deletionTimestamp"] = registry.now()
        namespace.setdefault("status", {})["phase"] = "Terminating"
        namespace = registry.storage.put(kinds.NAMESPACES.key, namespace)

    def empty() -> None:
        remaining = 0
        for rt in list(registry.types.values()):
            if not rt.namespaced:
                continue
            for obj in list(registry.storage.items(rt.key, name)):
                _delete_entry(
                    registry, (rt.key, name, obj["metadata"]["name"]), propagation="Background"
                )
            remaining += sum(1 for _ in registry.storage.items(rt.key, name))
        if remaining:
            _soon(empty, delay=_NAMESPACE_RETRY_SECONDS)
        else:
            registry.storage.remove(kinds.NAMESPACES.key, "", name)

    _soon(empty)
    return namespace
