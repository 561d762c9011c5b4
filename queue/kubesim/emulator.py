"""The embedded cluster: API server, scheduler, kubelets and controllers in one process.

Owns wiring (storage, registry with every built-in strategy, faults, HTTP server on a local
port), seeding the inventory, the background scheduler, kubelet, taint-eviction,
device-taint-eviction and (with `podgroups`) podgroup-protection tasks, and what clients need
to connect (a kubernetes-asyncio `Configuration`, a kubeconfig).
Use it as `async with Emulator() as cluster`. It must not add API behaviour of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kubesim import authorization, cluster, kinds, patch, status
from gangq.queue.kubesim.devicetaints import DeviceTaintEviction
from gangq.queue.kubesim.faults import Faults
from gangq.queue.kubesim.kubelet import Kubelets
from gangq.queue.kubesim.nodetaints import NodeTaintEviction
from gangq.queue.kubesim.podgroupprotection import PodGroupProtection
from gangq.queue.kubesim.registry import Registry
from gangq.queue.kubesim.scheduler import Scheduler
from gangq.queue.kubesim.server import ApiServer
from gangq.queue.kubesim.storage import WATCH_WINDOW, Storage
from gangq.queue.kubesim.strategy import Strategy
from gangq.queue.kubesim.tokenreview import TokenReviews
from gangq.queue.kubesim.validation import core, crd, dra, pods, rbac, scheduling

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _strategies(*, podgroups: bool) -> dict[str, Strategy]:
    return {
        kinds.NAMESPACES.key: core.NamespaceStrategy(),
        kinds.NODES.key: core.NodeStrategy(),
        kinds.PODS.key: pods.PodStrategy(scheduling_groups=podgroups),
        "/services": core.ServiceStrategy(),
        "/configmaps": core.ConfigMapStrategy(),
        kinds.EVENTS.key: core.EventStrategy(),
        kinds.LEASES.key: core.LeaseStrategy(),
        kinds.DEVICE_CLASSES.key: dra.DeviceClassStrategy(),
        kinds.RESOURCE_CLAIMS.key: dra.ResourceClaimStrategy(),
        "resource.k8s.io/resourceclaimtemplates": dra.ResourceClaimTemplateStrategy(),
        kinds.RESOURCE_SLICES.key: dra.ResourceSliceStrategy(),
        kinds.ROLES.key: rbac.RoleStrategy(namespaced=True),
        kinds.CLUSTER_ROLES.key: rbac.RoleStrategy(namespaced=False),
        kinds.ROLE_BINDINGS.key: rbac.BindingStrategy(namespaced=True),
        kinds.CLUSTER_ROLE_BINDINGS.key: rbac.BindingStrategy(namespaced=False),
        kinds.CRDS.key: crd.CustomResourceDefinitionStrategy(),
    }


def new_registry(*, history_size: int = WATCH_WINDOW, podgroups: bool = False) -> Registry:
    """A registry with every built-in type installed (with `podgroups`, also
    scheduling.k8s.io/v1alpha2), the system namespaces and the bootstrap RBAC roles created."""
    registry = Registry(Storage(history_size=history_size))
    strategies = _strategies(podgroups=podgroups)
    for rt in kinds.BUILTIN:
        registry.install(rt, strategies.get(rt.key, Strategy()))
    registry.install(kinds.EVENTS_V1, core.EventsV1Strategy())
    if podgroups:
        registry.install(kinds.WORKLOADS, scheduling.WorkloadStrategy())
        registry.install(kinds.PODGROUPS, scheduling.PodGroupStrategy())
    for name in SYSTEM_NAMESPACES:
        registry.create(kinds.NAMESPACES, "", {"metadata": {"name": name}})
    authorization.bootstrap(registry)
    return registry


def seed(registry: Registry, inventory: cluster.Inventory) -> None:
    for device_class in cluster.device_classes(inventory):
        registry.create(kinds.DEVICE_CLASSES, "", device_class)
    for index in range(inventory.nodes):
        registry.create(kinds.NODES, "", cluster.node(inventory, index))
        for resource_slice in cluster.resource_slices(inventory, index):
            registry.create(kinds.RESOURCE_SLICES, "", resource_slice)


def install_crd(registry: Registry, path: Path) -> None:
    """Create a CRD from a YAML file; a file that is not a valid CRD names its problem."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise InvalidInputError(f"CRD {path}: {error}") from error
    try:
        registry.create(kinds.CRDS, "", document)
    except status.ApiError as error:
        raise InvalidInputError(f"CRD {path}: {error.message}") from error


@dataclass(eq=False)
class Emulator:
    """An in-process cluster on 127.0.0.1 (port 0 picks a free one)."""

    inventory: cluster.Inventory | None = field(default_factory=cluster.Inventory)
    port: int = 0
    token: str | None = field(default_factory=lambda: secrets.token_hex(16))
    crds: tuple[Path, ...] = ()
    ready_seconds: float = 0.0
    """How long a bound pod stays Pending before its kubelet reports it Running and Ready."""
    scheduling: bool = True
    podgroups: bool = False
    """What the alpha feature gates GenericWorkload, GangScheduling and
    DRAWorkloadResourceClaims turn on (off by default, like the gates): Workloads and PodGroups
    (scheduling.k8s.io/v1alpha2) are served, pods keep `spec.schedulingGroup`, the scheduler
    runs the GangScheduling plugin and the podgroup-protection controller runs. Off, none of it
    is served and a pod's `spec.schedulingGroup` is dropped without a warning."""
    history_size: int = WATCH_WINDOW
    """Events a watch can resume from; an older resourceVersion gets one 410 ERROR event."""
    bookmark_interval: float = 60.0
    faults: Faults = field(default_factory=Faults)
    token_reviews: TokenReviews = field(default_factory=TokenReviews)
    """Tokens it issued (`token_reviews.issue(...)`), answered on POST .../tokenreviews."""
    registry: Registry = field(init=False)
    authorizer: authorization.Authorizer = field(init=False)
    """RBAC over the stored roles and bindings; `authorizer.requested` holds what each user
    asked for."""
    scheduler: Scheduler = field(init=False)
    """Its `reasons` say why pods are pending, its `gang_cycles` how many pod-group cycles each
    PodGroup took (with `podgroups`)."""
    kubelets: Kubelets = field(init=False)
    device_taints: DeviceTaintEviction = field(init=False)
    node_taints: NodeTaintEviction = field(init=False)
    _runner: web.AppRunner | None = field(default=None, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Emulator:
        self.registry = new_registry(history_size=self.history_size, podgroups=self.podgroups)
        if self.inventory is not None:
            seed(self.registry, self.inventory)
        for path in self.crds:
            install_crd(self.registry, path)
        self.kubelets = Kubelets(self.registry, ready_seconds=self.ready_seconds)
        self.authorizer = authorization.Authorizer(self.registry)
        server = ApiServer(
            self.registry,
            self.faults,
            self.authorizer,
            token=self.token,
            bookmark_interval=self.bookmark_interval,
            token_reviews=self.token_reviews,
            logs=self.kubelets.logs,
        )
        self._runner = web.AppRunner(server.application(), access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        server.address = f"127.0.0.1:{self.port}"
        self.scheduler = Scheduler(self.registry, podgroups=self.podgroups)
        if self.scheduling:
            self._tasks.append(asyncio.create_task(self.scheduler.run(), name="kubesim-scheduler"))
        self._tasks.append(asyncio.create_task(self.kubelets.run(), name="kubesim-kubelets"))
        self.device_taints = DeviceTaintEviction(self.registry)
        self._tasks.append(
            asyncio.create_task(self.device_taints.run(), name="kubesim-device-taint-eviction")
        )
        self.node_taints = NodeTaintEviction(self.registry)
        self._tasks.append(
            asyncio.create_task(self.node_taints.run(), name="kubesim-taint-eviction")
        )
        if self.podgroups:
            protection = PodGroupProtection(self.registry)
            self._tasks.append(
                asyncio.create_task(protection.run(), name="kubesim-podgroup-protection")
            )
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        while any(not task.done() for task in self._tasks):
            for task in self._tasks:
                task.cancel()
            await asyncio.wait(self._tasks, timeout=0.5)
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                task.result()
        self._tasks.clear()
        for subscription in self.registry.storage.subscriptions():
            subscription.drop()
        if self._runner is not None:
            await self._runner.cleanup()

    def configuration(self, token: str | None = None) -> Any:
        """A kubernetes_asyncio Configuration pointing at this emulator, with the admin token
        or `token` (e.g. from `service_account_token`)."""
        from kubernetes_asyncio.client import Configuration

        configuration = Configuration(host=self.base_url)
        bearer = token or self.token
        if bearer:
            configuration.api_key = {"BearerToken": bearer}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return configuration

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token that authenticates as the ServiceAccount (what the kubelet mounts into its
        pods); the ServiceAccount object itself is not needed, as RBAC does not read it."""
        user = authorization.service_account(namespace, name)
        return self.token_reviews.issue(user.name, groups=user.groups)

    def kubeconfig(self, token: str | None = None) -> dict[str, Any]:
        """A kubeconfig for this emulator, with the admin token or `token`."""
        bearer = token or self.token
        user: dict[str, Any] = {"token": bearer} if bearer else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubesim", "cluster": {"server": self.base_url}}],
            "users": [{"name": "kubesim", "user": user}],
            "contexts": [{"name": "kubesim", "context": {"cluster": "kubesim", "user": "kubesim"}}],
            "current-context": "kubesim",
        }

    def apply(self, documents: Iterable[dict[str, Any]]) -> None:
        """Server-side apply manifest documents as an admin (`kubectl apply --server-side`);
        a kind the emulator does not serve names itself."""
        served = {(rt.api_version, rt.kind): rt for rt in self.registry.types.values()}
        for document in documents:
            rt = served.get((str(document.get("apiVersion")), str(document.get("kind"))))
            if rt is None:
                raise InvalidInputError(
                    f"{document.get('kind')} {document.get('apiVersion')} is not served"
                )
            metadata = document.get("metadata") or {}
            namespace = str(metadata.get("namespace") or "default") if rt.namespaced else ""
            self.registry.patch(
                rt,
                namespace,
                str(metadata.get("name") or ""),
                patch.APPLY_PATCH,
                document,
                field_manager="kubectl",
            )

    @property
    def phantom_allocations(self) -> list[dra.PhantomAllocation]:
        """Allocations that named devices no ResourceSlice published (accepted, as upstream)."""
        strategy = self.registry.strategies.get(kinds.RESOURCE_CLAIMS.key)
        if not isinstance(strategy, dra.ResourceClaimStrategy):
            return []
        return list(strategy.phantom_allocations)

    def drop_watches(self) -> None:
        """End every open watch stream (fault injection: clients must re-watch or relist)."""
        for subscription in self.registry.storage.subscriptions():
            subscription.drop()
