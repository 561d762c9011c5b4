"""The cluster as the controller publishes it to an API served from another thread.

The watch caches live on the controller's event loop and change under it; the API runs on its
own loop in its own thread, so it never touches them. `follow` runs on the controller's loop
and, after each change, swaps in a new immutable snapshot (the inventory and which tenant each
namespace belongs to); the API reads the latest one. Swapping one attribute is atomic, so no
lock is needed. It must not build anything the controller does not already build.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gangq.queue.core import model
from gangq.queue.core.inventory import JOB_NAME_LABEL
from gangq.queue.kube import cache, podgroups, resources

FOLLOW_SECONDS = 0.5
"""How stale the API's view may be: the controller's loop checks its caches this often."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    inventory: model.Inventory | None = None
    tenants: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """namespace -> tenant (the `gangq.dev/tenant` label), as the controller assigns jobs."""
    pod_groups: Mapping[str, tuple[podgroups.Scheduled, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """`namespace/job` -> its gangs' PodGroups as kube-scheduler left them (none without)."""


class PublishedCluster:
    """A `capacity.ClusterView` for the API, plus the namespace -> tenant mapping."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self._snapshot = snapshot or Snapshot()

    def publish(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def inventory(self) -> model.Inventory | None:
        return self._snapshot.inventory

    def tenant_of(self, namespace: str) -> str | None:
        """None when no synced namespace of that name carries a tenant."""
        return self._snapshot.tenants.get(namespace)

    def pod_groups_of(self, key: str) -> tuple[podgroups.Scheduled, ...]:
        """The PodGroups of TrainingJob `namespace/name`, oldest first."""
        return self._snapshot.pod_groups.get(key, ())

    @property
    def is_synced(self) -> bool:
        return self._snapshot.inventory is not None


def snapshot_of(cluster: cache.ClusterCache) -> Snapshot:
    """Run on the controller's loop: the caches must not change while they are read."""
    inventory = cluster.inventory()
    if inventory is None:
        return Snapshot()
    tenants = {
        name: tenant
        for name in list(cluster.objects(resources.NAMESPACES))
        if (tenant := cluster.tenant_of(name)) is not None
    }
    groups: dict[str, list[podgroups.Scheduled]] = {}
    if cluster.pod_groups:
        for group in cluster.objects(resources.POD_GROUPS).values():
            meta = group.get("metadata") or {}
            job = (meta.get("labels") or {}).get(JOB_NAME_LABEL)
            if job:
                groups.setdefault(f"{meta.get('namespace')}/{job}", []).append(
                    podgroups.shown(group)
                )
    return Snapshot(
        inventory=inventory,
        tenants=MappingProxyType(tenants),
        pod_groups=MappingProxyType(
            {key: tuple(sorted(found, key=lambda g: g.created)) for key, found in groups.items()}
        ),
    )


async def follow(
    cluster: cache.ClusterCache, published: PublishedCluster, *, stop: asyncio.Event
) -> None:
    """Republish after every change of the caches until `stop`; cheap when nothing changed."""
    seen = -1
    while not stop.is_set():
        if cluster.version != seen and cluster.synced.is_set():
            seen = cluster.version
            published.publish(snapshot_of(cluster))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=FOLLOW_SECONDS)


TenantOf = Callable[[str], str | None]


def unknown(namespace: str) -> str | None:
    """The mapping of an API with no published cluster: no namespace is known."""
    return None
