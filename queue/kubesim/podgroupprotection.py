"""kube-controller-manager's podgroup-protection controller (feature gate GenericWorkload).

Owns the finalizer `scheduling.k8s.io/podgroup-protection` of a deleted PodGroup: it is removed
once no active pod (one neither Succeeded nor Failed) names the group in
`spec.schedulingGroup`, so a PodGroup stays Terminating while its pods are pending or running
(corpus 12-48..12-53), goes right after the last of them (12-54) and at once when all are done
(12-103, 12-104). It must not touch the pods: they carry no ownerReference and outlive their
group (12-105).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from gangq.queue.kubesim import deletion, kinds, reacting, status
from gangq.queue.kubesim.registry import Registry
from gangq.queue.kubesim.storage import DELETED, Event
from gangq.queue.kubesim.validation.scheduling import PROTECTION


def _group_name(pod: dict[str, Any]) -> str:
    return str(((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") or "")


def _done(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


@dataclass(eq=False)
class PodGroupProtection:
    registry: Registry
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _dirty: set[tuple[str, str]] = field(default_factory=set)
    """PodGroups (namespace, name) to look at again: deleted ones, and those whose pods went."""

    def _on_event(self, event: Event) -> None:
        metadata = event.object["metadata"]
        namespace = str(metadata.get("namespace") or "")
        if event.resource == kinds.PODGROUPS.key:
            if event.type != DELETED and metadata.get("deletionTimestamp"):
                self._dirty.add((namespace, str(metadata["name"])))
                self._wake.set()
        elif event.resource == kinds.PODS.key and (event.type == DELETED or _done(event.object)):
            name = _group_name(event.object)
            if name:
                self._dirty.add((namespace, name))
                self._wake.set()

    async def run(self) -> None:
        for group in self.registry.storage.items(kinds.PODGROUPS.key):
            if group["metadata"].get("deletionTimestamp"):
                self._dirty.add((group["metadata"]["namespace"], group["metadata"]["name"]))
        await reacting.react(
            self.registry.storage, on_event=self._on_event, wake=self._wake, cycle=self.cycle
        )

    def cycle(self) -> None:
        dirty, self._dirty = self._dirty, set()
        storage = self.registry.storage
        for namespace, name in sorted(dirty):
            group = storage.peek(kinds.PODGROUPS.key, namespace, name)
            if (
                group is None
                or not group["metadata"].get("deletionTimestamp")
                or PROTECTION not in (group["metadata"].get("finalizers") or [])
            ):
                continue
            if any(
                _group_name(pod) == name and not _done(pod)
                for pod in storage.items(kinds.PODS.key, namespace)
            ):
                continue
            try:
                deletion.finish(self.registry, kinds.PODGROUPS, group, PROTECTION)
            except status.ApiError:
                self._dirty.add((namespace, name))
