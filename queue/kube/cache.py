"""List+watch caches of the cluster and the inventory the scheduling cycle reads from them.

Owns one cache per watched kind (list, then watch from its resourceVersion; relist on 410 Gone;
re-watch after a dropped stream), the `synced` event (set once every cache has listed: no cycle
runs before) and the `changed` event that wakes the controller. It never writes to the cluster;
`ClusterCache.inventory()` is the view the REST API shows too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio import client

from gangq.queue.config import ControllerSettings
from gangq.queue.core import device, inventory, model
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import discovery, lifecycle, resources, trainingjob
from gangq.queue.kube.client import Kube, KubeError
from gangq.queue.kube.objects import GANG_LABEL
from gangq.queue.kube.resources import Resource

WATCH_TIMEOUT_S = 300
RECONNECT_DELAYS_S = (0.1, 0.5, 1.0, 2.0)
WATCHED = (
    resources.TRAINING_JOBS,
    resources.PODS,
    resources.RESOURCE_CLAIMS,
    resources.RESOURCE_SLICES,
    resources.DEVICE_CLASSES,
    resources.NODES,
    resources.NAMESPACES,
)
INDEXED = (resources.PODS, resources.RESOURCE_CLAIMS, resources.POD_GROUPS)
"""The kinds whose objects gangq makes per gang beside other components' objects: the only
ones read per gang or as foreign objects, so the only ones indexed."""

logger = logging.getLogger(__name__)
T = TypeVar("T")
P = TypeVar("P")


def key_of(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


class Expired(Exception):
    """The watch's resourceVersion is too old (410): only a relist recovers."""


class WatchCache:
    """The objects of one kind by `namespace/name`, kept current by list+watch."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        on_change: Callable[[], None],
        open_if: Callable[[Mapping[str, Any]], bool] | None = None,
        by_uid: bool = False,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.objects: dict[str, dict[str, Any]] = {}
        self._open_if = open_if
        self.open: dict[str, dict[str, Any]] = {}
        """The objects `open_if` holds for, kept as events arrive (none without `open_if`)."""
        self._by_uid = by_uid
        self.uids: dict[str, str] = {}
        """uid -> key (empty unless `by_uid`)."""
        self.version = 0
        """Counts changes, so views built from `objects` know when to rebuild."""
        self._indexed = resource in INDEXED
        self.by_gang: dict[str, dict[str, dict[str, Any]]] = {}
        """The objects gangq made, per gang label, kept as events arrive: every step reads a
        gang's pods and claims, and grouping all of them each step costs a pass per step."""
        self.foreign: dict[str, dict[str, Any]] = {}
        """The objects gangq did not make: only those hold devices or node room outside its
        count, and they change far less often than gangq's own."""
        self.foreign_version = 0
        """Counts changes of `foreign`: what is built from it rebuilds only then."""
        self.synced = asyncio.Event()
        self.relists = 0
        self._on_change = on_change

    async def run(self) -> None:
        """List and watch for ever (cancel to stop); failures are logged and retried."""
        failures = 0
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._relist()
                version = await self._watch(version)
                failures = 0
            except Expired:
                logger.debug("watch of %s expired; relisting", self.resource.plural)
                version = None
            except (KubeError, aiohttp.ClientError, OSError, TimeoutError) as error:
                pause = RECONNECT_DELAYS_S[min(failures, len(RECONNECT_DELAYS_S) - 1)]
                failures += 1
                logger.warning(
                    "watch of %s failed (%s); again in %.1fs", self.resource.plural, error, pause
                )
                await asyncio.sleep(pause)

    async def _relist(self) -> str:
        listed = await self.kube.list(self.resource)
        self.objects, self.by_gang, self.foreign = {}, {}, {}
        self.open, self.uids = {}, {}
        for item in listed.get("items") or []:
            self._store(key_of(item), item)
        self.foreign_version += 1
        self.relists += 1
        self.synced.set()
        self.version += 1
        self._on_change()
        return str((listed.get("metadata") or {}).get("resourceVersion") or "")

    async def _watch(self, version: str) -> str:
        """Apply events until the stream ends; returns the last resourceVersion seen."""
        async for event in self.kube.watch(
            self.resource, resource_version=version, timeout_s=WATCH_TIMEOUT_S
        ):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Expired(obj.get("message"))
                raise KubeError(int(obj.get("code") or 0), str(obj.get("message")))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            key = key_of(obj)
            foreign = self._forget(key)
            if kind != "DELETED":
                foreign = self._store(key, obj) or foreign
            if foreign:
                self.foreign_version += 1
            self.version += 1
            self._on_change()
        return version

    def _store(self, key: str, obj: dict[str, Any]) -> bool:
        """Keep `obj` under `key` (none is kept there); True when it is a foreign object."""
        self.objects[key] = obj
        if self._by_uid:
            self.uids[str((obj.get("metadata") or {}).get("uid"))] = key
        if self._open_if is not None and self._open_if(obj):
            self.open[key] = obj
        if not self._indexed:
            return False
        if not inventory.is_gangq_object(obj):
            self.foreign[key] = obj
            return True
        gang = _gang_of(obj)
        if gang:
            self.by_gang.setdefault(gang, {})[key] = obj
        return False

    def _forget(self, key: str) -> bool:
        """Drop what is kept under `key`; True when that was a foreign object."""
        obj = self.objects.pop(key, None)
        if obj is not None:
            self.open.pop(key, None)
            if self._by_uid:
                self.uids.pop(str((obj.get("metadata") or {}).get("uid")), None)
        if obj is None or not self._indexed:
            return False
        if self.foreign.pop(key, None) is not None:
            return True
        gang = _gang_of(obj)
        if gang and gang in self.by_gang:
            members = self.by_gang[gang]
            members.pop(key, None)
            if not members:
                del self.by_gang[gang]
        return False


class ClusterCache:
    """Every watched kind, plus the inventory built from them (rebuilt only after changes)."""

    def __init__(self, api_client: client.ApiClient, *, settings: ControllerSettings) -> None:
        self.kube = Kube(api_client)
        self.settings = settings
        self.changed = asyncio.Event()
        self.synced = asyncio.Event()
        self.version = 0
        self.caches = {r.plural: WatchCache(self.kube, r, on_change=self._touch) for r in WATCHED}
        # What each step walks, kept apart from what ended (see `open_jobs`, `running_gangs`).
        jobs, pods = resources.TRAINING_JOBS, resources.PODS
        self.caches[jobs.plural] = WatchCache(
            self.kube, jobs, on_change=self._touch, open_if=trainingjob.is_open, by_uid=True
        )
        self.caches[pods.plural] = WatchCache(
            self.kube, pods, on_change=self._touch, open_if=_is_running_for_gangq
        )
        self._inventory: model.Inventory | None = None
        self._parts: dict[str, tuple[tuple[int, ...], Any]] = {}
        self.pod_groups = False
        """Gangs go with PodGroups (`use_pod_groups`), whose cache is then watched too."""

    async def use_pod_groups(self) -> bool:
        """Decide the `pod_groups` setting from the API server's discovery, before `run`; an
        `InvalidInputError` when it is `on` and the server serves no PodGroups."""
        self.pod_groups = await discovery.use_pod_groups(self.kube, self.settings.pod_groups)
        groups = resources.POD_GROUPS
        if self.pod_groups and groups.plural not in self.caches:
            self.caches[groups.plural] = WatchCache(self.kube, groups, on_change=self._touch)
        return self.pod_groups

    def _touch(self) -> None:
        self.version += 1
        self.changed.set()
        if not self.synced.is_set() and all(c.synced.is_set() for c in self.caches.values()):
            self.synced.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Keep every cache current until `stop` is set."""
        tasks = [
            asyncio.create_task(cache.run(), name=f"gangq-watch-{plural}")
            for plural, cache in self.caches.items()
        ]
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)

    def objects(self, resource: Resource) -> dict[str, dict[str, Any]]:
        """The live cache, not a copy: a loop that awaits while iterating it must copy it
        first, since the watches add and remove objects at every await."""
        return self.caches[resource.plural].objects

    def by_gang(self, resource: Resource) -> dict[str, dict[str, dict[str, Any]]]:
        """gangq's objects of `resource` per gang label, live as `objects` is."""
        return self.caches[resource.plural].by_gang

    def get(self, resource: Resource, key: str) -> dict[str, Any] | None:
        return self.caches[resource.plural].objects.get(key)

    def open_jobs(self) -> dict[str, dict[str, Any]]:
        """The TrainingJobs a step still has work for (`trainingjob.is_open`), live as
        `objects` is. Finished jobs kept for their history are left out: every step walks
        the TrainingJobs several times, and those walks must not grow with the history."""
        return self.caches[resources.TRAINING_JOBS.plural].open

    def running_gangs(self) -> frozenset[str]:
        """The gangs with a pod of gangq's that has not terminated. The pods of ended gangs
        stay for their logs, as many as the history holds; a step must not walk them. Found
        again only once a pod changed: a step asks it several times."""
        return self._part("running gangs", (self._version(resources.PODS),), self._running_gangs)

    def _running_gangs(self) -> frozenset[str]:
        running = self.caches[resources.PODS.plural].open.values()
        return frozenset(gang for pod in running if (gang := _gang_of(pod)))

    def job(self, uid: str) -> dict[str, Any] | None:
        """The TrainingJob of that uid, if the cache holds it."""
        cache = self.caches[resources.TRAINING_JOBS.plural]
        key = cache.uids.get(uid)
        return None if key is None else cache.objects.get(key)

    def tenant_of(self, namespace: str) -> str | None:
        found = self.get(resources.NAMESPACES, namespace) or {}
        labels = (found.get("metadata") or {}).get("labels") or {}
        value = labels.get("gangq.dev/tenant")
        return str(value) if value else None

    def inventory(self) -> model.Inventory | None:
        """What the cycle may allocate, as the caches see it now; None before every cache synced."""
        if not self.synced.is_set():
            return None
        built = model.Inventory(
            nodes=self._part(
                "usage",
                (self._version(resources.NODES), self._foreign_version(resources.PODS)),
                lambda: inventory.with_pod_usage(self._nodes(), self._foreign_pods()),
            ),
            devices=self._part(
                "devices", (self._version(resources.RESOURCE_SLICES),), self._devices
            ),
            device_classes=self._part(
                "classes",
                (self._version(resources.DEVICE_CLASSES),),
                lambda: {
                    dc.name: dc
                    for dc in _parsed(
                        self.objects(resources.DEVICE_CLASSES).values(),
                        inventory.device_class_from_dict,
                    )
                },
            ),
            held_by_others=self._part(
                "held",
                (self._foreign_version(resources.RESOURCE_CLAIMS),),
                lambda: inventory.held_by_others(
                    _readable(self._foreign(resources.RESOURCE_CLAIMS), inventory.claim_devices)
                ),
            ),
            counters=self._part(
                "counters",
                (self._version(resources.RESOURCE_SLICES),),
                lambda: inventory.counters_by_set(
                    _readable(self._current_slices(), device.counters_from_slice)
                ),
            ),
            shared_by_others=self._part(
                "shared",
                (self._foreign_version(resources.RESOURCE_CLAIMS),),
                lambda: inventory.shared_by_others(
                    _readable(
                        self._foreign(resources.RESOURCE_CLAIMS),
                        lambda claim: inventory.shared_by_others([claim]),
                    )
                ),
            ),
            topology_keys=self.settings.topology_keys,
        )
        # The same object while every part is: gangq's own pods and claims change at every
        # step, and memos keyed by the inventory (`core.derived`) must hold across steps.
        last = self._inventory
        if last is not None and all(
            getattr(last, field.name) is getattr(built, field.name)
            for field in dataclasses.fields(built)
        ):
            return last
        self._inventory = built
        return built

    def _version(self, resource: Resource) -> int:
        return self.caches[resource.plural].version

    def _foreign_version(self, resource: Resource) -> int:
        return self.caches[resource.plural].foreign_version

    def _foreign(self, resource: Resource) -> list[dict[str, Any]]:
        return list(self.caches[resource.plural].foreign.values())

    def _part(self, name: str, versions: tuple[int, ...], build: Callable[[], T]) -> T:
        """One piece of the inventory (or another view of the caches), rebuilt only when the
        versions of what it reads changed: gangq's own pods and claims change every step, the
        rest seldom."""
        found = self._parts.get(name)
        if found is None or found[0] != versions:
            found = self._parts[name] = (versions, build())
        value: T = found[1]
        return value

    def _nodes(self) -> dict[model.NodeName, model.Node]:
        return self._part(
            "nodes",
            (self._version(resources.NODES),),
            lambda: {
                node.name: node
                for node in _parsed(
                    self.objects(resources.NODES).values(), inventory.node_from_dict
                )
            },
        )

    def _foreign_pods(self) -> list[dict[str, Any]]:
        """Pods gangq did not make (only those take node room outside the cycle's count)."""
        return _readable(
            self._foreign(resources.PODS),
            lambda pod: inventory.pod_requirements(pod, owner=f"Pod {key_of(pod)}"),
        )

    def _current_slices(self) -> list[dict[str, Any]]:
        return inventory.current_slices(self.objects(resources.RESOURCE_SLICES).values())

    def _devices(self) -> dict[device.DeviceId, device.Device]:
        found: dict[device.DeviceId, device.Device] = {}
        for published in _parsed(self._current_slices(), device.devices_from_slice):
            found.update((d.id, d) for d in published)
        return found


def _is_running_for_gangq(pod: Mapping[str, Any]) -> bool:
    """Judged once per event: other components' pods, running or not, never reach a step."""
    return inventory.is_gangq_object(pod) and not lifecycle.is_terminated(pod)


def _gang_of(obj: Mapping[str, Any]) -> str | None:
    gang = ((obj.get("metadata") or {}).get("labels") or {}).get(GANG_LABEL)
    return str(gang) if gang else None


def _parsed(objects: Iterable[dict[str, Any]], parse: Callable[[dict[str, Any]], P]) -> list[P]:
    """What `parse` makes of each object; a malformed one is logged and left out, never fatal."""
    kept = []
    for obj in objects:
        try:
            kept.append(parse(obj))
        except (InvalidInputError, KeyError, TypeError, ValueError) as error:
            logger.warning("ignoring unreadable %s: %s", key_of(obj), error)
    return kept


def _readable(
    objects: Iterable[dict[str, Any]], check: Callable[[dict[str, Any]], object]
) -> list[dict[str, Any]]:
    """The objects `check` can read (see `_parsed`)."""
    kept = []
    for obj in objects:
        if _parsed([obj], check):
            kept.append(obj)
    return kept
