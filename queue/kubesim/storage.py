"""Object storage with one resourceVersion counter and a bounded event history.

Owns every stored object (as JSON-shaped dicts, copied on the way in and out), the global
resourceVersion, the history that watches replay from (older entries are compacted, which is
what makes a too-old resourceVersion expire) and the fan-out to live watchers. It must not
validate, default or decide anything about the objects it keeps.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gangq.queue.kubesim.clone import clone

T = TypeVar("T")
WATCH_WINDOW = 5_000
"""Events kept for watches to resume from by default: small enough that a client which falls
behind a busy cluster meets 410 Expired and exercises its relist path, as on a real server."""
ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Event:
    """One committed change; `previous` lets a selector watch tell leaving from entering."""

    resource_version: int
    type: str
    resource: str
    object: dict[str, Any]
    previous: dict[str, Any] | None


@dataclass(eq=False, slots=True)
class Subscription:
    """A live watcher's queue of events; `dropped` ends its stream (fault injection)."""

    resource: str
    queue: asyncio.Queue[Event | None] = field(default_factory=asyncio.Queue)

    def drop(self) -> None:
        self.queue.put_nowait(None)


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


@dataclass(slots=True)
class Storage:
    history_size: int = WATCH_WINDOW
    resource_version: int = 1
    compacted: int = 1
    """Events with a resourceVersion above this are still in the history."""
    _objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    _history: deque[Event] = field(default_factory=deque)
    _subscriptions: dict[str, set[Subscription]] = field(default_factory=dict)
    listeners: list[Callable[[Event], None]] = field(default_factory=list)
    """Called synchronously for every committed event (scheduler, kubelets)."""
    _order: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Sorted keys per resource, rebuilt lazily after a create or a delete."""
    _revisions: dict[str, int] = field(default_factory=dict)
    """Resource -> resourceVersion of its last change, so derived views know when to rebuild."""
    _derived: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    _uids: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    _dependents: dict[str, set[tuple[str, str, str]]] = field(default_factory=dict)
    """Owner uid -> (resource, namespace, name) of objects naming it in ownerReferences."""

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self._objects.get(resource, {}).get((namespace, name))
        return clone(found) if found is not None else None

    def peek(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object itself (read-only by convention) for hot read paths."""
        return self._objects.get(resource, {}).get((namespace, name))

    def items(self, resource: str, namespace: str | None = None) -> Iterator[dict[str, Any]]:
        """Stored objects in key order (namespace, name); read-only by convention."""
        bucket = self._objects.get(resource, {})
        order = self._order.get(resource)
        if order is None:
            order = self._order[resource] = sorted(bucket)
        for key in order:
            if (namespace is None or key[0] == namespace) and key in bucket:
                yield bucket[key]

    def derived(
        self, resource: str, name: str, build: Callable[[Iterator[dict[str, Any]]], T]
    ) -> T:
        """`build` over every object of `resource`, remembered under `name` until one of them
        changes: hot paths read views of kinds that seldom change (the scheduler's devices)."""
        revision = self._revisions.get(resource, 0)
        found = self._derived.get((resource, name))
        if found is None or found[0] != revision:
            found = self._derived[(resource, name)] = (revision, build(self.items(resource)))
        value: T = found[1]
        return value

    def put(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a create or an update under a new resourceVersion; returns a copy."""
        stored = clone(obj)
        bucket = self._objects.setdefault(resource, {})
        key = object_key(stored)
        previous = bucket.get(key)
        self.resource_version += 1
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.resource_version)
        bucket[key] = stored
        if previous is None:
            self._order.pop(resource, None)
        self._index(resource, previous, remove=True)
        self._index(resource, stored, remove=False)
        self._record(
            Event(
                self.resource_version, MODIFIED if previous else ADDED, resource, stored, previous
            )
        )
        return clone(stored)

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        bucket = self._objects.get(resource, {})
        previous = bucket.pop((namespace, name), None)
        if previous is None:
            return None
        self._order.pop(resource, None)
        self._index(resource, previous, remove=True)
        self.resource_version += 1
        final = clone(previous)
        final["metadata"]["resourceVersion"] = str(self.resource_version)
        self._record(Event(self.resource_version, DELETED, resource, final, previous))
        return clone(final)

    def _index(self, resource: str, obj: dict[str, Any] | None, *, remove: bool) -> None:
        if obj is None:
            return
        metadata = obj.get("metadata") or {}
        entry = (resource, *object_key(obj))
        uid = metadata.get("uid")
        if uid and remove:
            self._uids.pop(uid, None)
        elif uid:
            self._uids[uid] = entry
        for reference in metadata.get("ownerReferences") or []:
            owner = str(reference.get("uid") or "")
            if remove:
                dependents = self._dependents.get(owner)
                if dependents is not None:
                    dependents.discard(entry)
                    if not dependents:
                        del self._dependents[owner]
            else:
                self._dependents.setdefault(owner, set()).add(entry)

    def by_uid(self, uid: str) -> tuple[str, str, str] | None:
        return self._uids.get(uid)

    def dependents(self, uid: str) -> list[tuple[str, str, str]]:
        return sorted(self._dependents.get(uid, ()))

    def drop_resource(self, resource: str) -> None:
        """Forget every object of a resource type whose definition is gone (a deleted CRD)."""
        for namespace, name in list(self._objects.get(resource, {})):
            self.remove(resource, namespace, name)
        self._objects.pop(resource, None)
        self._order.pop(resource, None)

    def _record(self, event: Event) -> None:
        self._revisions[event.resource] = event.resource_version
        self._history.append(event)
        while len(self._history) > self.history_size:
            self.compacted = self._history.popleft().resource_version
        for subscription in self._subscriptions.get(event.resource, ()):
            subscription.queue.put_nowait(event)
        for listener in self.listeners:
            listener(event)

    def compact(self) -> None:
        """Forget the whole history, as an etcd compaction would."""
        self._history.clear()
        self.compacted = self.resource_version

    def since(self, resource: str, resource_version: int) -> list[Event]:
        """History events of one resource after a resourceVersion (caller checks expiry)."""
        return [
            event
            for event in self._history
            if event.resource == resource and event.resource_version > resource_version
        ]

    def subscribe(self, resource: str) -> Subscription:
        subscription = Subscription(resource)
        self._subscriptions.setdefault(resource, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.get(subscription.resource, set()).discard(subscription)

    def subscriptions(self) -> list[Subscription]:
        return [sub for subs in self._subscriptions.values() for sub in subs]
