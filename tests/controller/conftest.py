"""A controller against the emulator over HTTP and a real PostgreSQL database per test.

The controller runs as gangq's ServiceAccount with exactly the RBAC of deploy/, so a request a
real cluster would refuse it is refused here too; the tests set up and check as admin.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue import controller
from gangq.queue import metrics as gangq_metrics
from gangq.queue.config import ControllerSettings, QuotaConfig, TenantConfig
from gangq.queue.demo import serviceaccount
from gangq.queue.kube import cache, resources
from gangq.queue.kube.client import Kube
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.emulator import Emulator

CRD = Path(__file__).resolve().parents[2] / "crds" / "trainingjob.yaml"
SMALL = Inventory(nodes=2, gpus_per_node=8, racks=2)
NAMESPACES = {"ml-train": "ml-train", "inference": "prod", "unlabelled": None}


def settings(**overrides: Any) -> ControllerSettings:
    quotas = {"prod": ("prod-inference",), "ml-train": ("training", "small")}
    values: dict[str, Any] = {
        "tenants": tuple(
            TenantConfig(
                name=name,
                quotas=(
                    QuotaConfig(
                        device_class="gpu.nvidia.com",
                        nominal=16,
                        borrowing_limit=16,
                        allowed_tiers=tiers,
                    ),
                ),
            )
            for name, tiers in quotas.items()
        ),
        "cycle_interval_s": 0.5,
        "coalesce_s": 0.01,
        "min_step_interval_s": 0.0,
        "leader_retry_s": 0.2,
        "restart_backoff_s": 0.0,
        "gauges_interval_s": 0.0,
    }
    return ControllerSettings(**{**values, **overrides})


def training_job(
    name: str,
    *,
    namespace: str = "ml-train",
    tier: str = "training",
    replicas: int = 2,
    devices: int = 8,
    run_seconds: float | None = 0.3,
    exit_code: int = 0,
    **spec: Any,
) -> dict[str, Any]:
    annotations = {}
    if run_seconds is not None:
        annotations["sim.gangq.dev/run-seconds"] = str(run_seconds)
        annotations["sim.gangq.dev/exit-code"] = str(exit_code)
    return {
        "apiVersion": "gangq.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "tier": tier,
            "replicas": replicas,
            "devicesPerReplica": devices,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/train:1",
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ]
                },
            },
            **spec,
        },
    }


@dataclass
class Harness:
    cluster: Emulator
    api: client.ApiClient
    """The admin's client, for setup and checks."""
    controller_api: client.ApiClient
    """The ServiceAccount's client, for the controllers the harness starts."""
    kube: Kube
    engine: AsyncEngine
    settings: ControllerSettings
    runs: dict[str, tuple[asyncio.Task[None], asyncio.Event, cache.ClusterCache]] = field(
        default_factory=dict
    )
    metrics: dict[str, gangq_metrics.Metrics] = field(default_factory=dict)
    """The registry each replica feeds, by name (kept after it stops)."""

    def start(self, name: str = "a", **overrides: Any) -> cache.ClusterCache:
        stop = asyncio.Event()
        chosen = self.settings.model_copy(update={"holder": name, **overrides})
        view = cache.ClusterCache(self.controller_api, settings=chosen)
        self.metrics[name] = gangq_metrics.create_metrics()
        task = asyncio.create_task(
            controller.run_controller(
                settings=chosen,
                api_client=self.controller_api,
                engine=self.engine,
                stop=stop,
                cluster=view,
                metrics=self.metrics[name],
            ),
            name=f"controller-{name}",
        )
        self.runs[name] = (task, stop, view)
        return view

    async def stop(self, name: str = "a") -> None:
        task, stop, _ = self.runs.pop(name)
        stop.set()
        await asyncio.wait_for(task, timeout=10)

    async def kill(self, name: str = "a") -> None:
        """Cancel the controller task wherever it is: a crash at an arbitrary await."""
        task, _, _ = self.runs.pop(name)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def objects(
        self, resource: resources.Resource, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        key = f"{resource.group}/{resource.plural}" if resource.group else f"/{resource.plural}"
        return list(
            self.cluster.registry.storage.items(key, namespace)
            if namespace
            else self.cluster.registry.storage.items(key)
        )

    def job(self, name: str, namespace: str = "ml-train") -> dict[str, Any] | None:
        for obj in self.objects(resources.TRAINING_JOBS):
            if obj["metadata"]["name"] == name and obj["metadata"]["namespace"] == namespace:
                return obj
        return None

    def phase(self, name: str, namespace: str = "ml-train") -> str | None:
        found = self.job(name, namespace)
        return None if found is None else (found.get("status") or {}).get("phase")

    def cycles(self, controller: str) -> float:
        """Scheduling cycles controller `controller` ran so far: one per step (the count of
        its `gangq_scheduling_cycle_seconds`)."""
        return next(
            sample.value
            for family in self.metrics[controller].scheduling_cycle_seconds.collect()
            for sample in family.samples
            if sample.name.endswith("_count")
        )

    def recovery_actions(self, controller: str) -> dict[str, float]:
        """What controller `controller`'s recovery passes did so far, by action (its
        `gangq_recovery_actions_total`)."""
        return {
            sample.labels["action"]: sample.value
            for family in self.metrics[controller].recovery_actions.collect()
            for sample in family.samples
            if sample.name.endswith("_total")
        }


async def wait_for(predicate: Callable[[], Any], *, within_s: float = 15.0) -> Any:
    """Poll in-process state until the predicate holds (bounded; no fixed sleeps in tests)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running_harness(
    engine: AsyncEngine,
    *,
    inventory: Inventory = SMALL,
    crds: tuple[Path, ...] = (CRD,),
    podgroups: bool = False,
) -> AsyncIterator[Harness]:
    """An emulator with the test namespaces, gangq's ServiceAccount and RBAC, and a client to
    it for each; controllers started through the harness are killed on the way out.
    `podgroups` serves PodGroups as a cluster with the GangScheduling gates on does."""
    async with contextlib.AsyncExitStack() as exits:
        emulator = await exits.enter_async_context(
            Emulator(inventory=inventory, crds=crds, podgroups=podgroups)
        )
        api_client = await exits.enter_async_context(client.ApiClient(emulator.configuration()))
        token = serviceaccount.controller_token(emulator)
        controller_api = await exits.enter_async_context(
            client.ApiClient(emulator.configuration(token))
        )
        kube = Kube(api_client)
        for name, tenant in NAMESPACES.items():
            labels = {"gangq.dev/tenant": tenant} if tenant else {}
            await kube.create(
                resources.NAMESPACES, "", {"metadata": {"name": name, "labels": labels}}
            )
        built = Harness(emulator, api_client, controller_api, kube, engine, settings())
        try:
            yield built
        finally:
            for name in list(built.runs):
                await built.kill(name)
            await kube.close()


@pytest.fixture
async def harness(engine: AsyncEngine) -> AsyncIterator[Harness]:
    async with running_harness(engine) as built:
        yield built
