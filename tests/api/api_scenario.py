"""The scenario the API tests share: a small cluster, two tenants, a queue a real cycle decided.

The cluster: 3 nodes x 4 GPUs in 2 racks (node-3 cordoned). Tenants team-a and team-b have 4
nominal GPUs each and may borrow 4; the cycle admits a-small (1x2) and b-one (1x2) and leaves
a-big (2x4) pending with a reason. Tokens come from a real token file.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import inventory as inventory_builder
from gangq.queue.core import model
from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, jobs, leader, runs, tenants

T0 = 1_790_000_000.0
GPU = "gpu.nvidia.com"
TOKENS: dict[str, dict[str, Any]] = {
    "viewer-a-token-0123456789": {"user": "ana", "tenants": ["team-a"], "roles": ["viewer"]},
    "viewer-b-token-0123456789": {"user": "ben", "tenants": ["team-b"], "roles": ["viewer"]},
    "viewer-ab-token-012345678": {
        "user": "ada",
        "tenants": ["team-a", "team-b"],
        "roles": ["viewer"],
    },
    "quota-admin-token-0123456": {"user": "quinn", "roles": ["quota-admin"]},
    "cluster-admin-token-01234": {"user": "cleo", "roles": ["cluster-admin"]},
}
VIEWER_A, VIEWER_B, VIEWER_AB, QUOTA_ADMIN, CLUSTER_ADMIN = TOKENS


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def node(
    name: str, rack: str, *, unschedulable: bool = False, taints: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"gangq.dev/rack": rack}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def resource_slice(node_name: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node_name}-gpus"},
        "spec": {
            "driver": GPU,
            "pool": {"name": node_name},
            "nodeName": node_name,
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"numa": {"int": i // 2}}} for i in range(count)
            ],
        },
    }


def cluster_inventory() -> model.Inventory:
    maintenance = {"key": "gpu-maintenance", "value": "true", "effect": "NoSchedule"}
    nodes = [
        node("node-1", "r1"),
        node("node-2", "r2"),
        node("node-3", "r2", unschedulable=True),
        node("node-4", "r1", taints=[maintenance]),  # no job of the scenario tolerates it
    ]
    return inventory_builder.build_inventory(
        slices=[resource_slice(n["metadata"]["name"], 4) for n in nodes],
        nodes=nodes,
        device_classes=[
            {
                "metadata": {"name": GPU},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]},
            }
        ],
        topology_keys=("gangq.dev/rack",),
    )


def job(key: str, tenant: str, *, replicas: int, devices: int, at: float) -> model.PendingJob:
    return model.PendingJob(
        key=model.JobKey(key),
        uid=f"uid-{key}",
        tenant=model.Tenant(tenant),
        tier="training",
        replicas=replicas,
        devices_per_replica=devices,
        device_class=GPU,
        submitted_at=at,
        max_runtime_s=3600.0,
    )


def quota(tenant: str, nominal: int, *, borrowing_limit: int = 0) -> model.TenantQuota:
    return model.TenantQuota(
        tenant=model.Tenant(tenant),
        device_class=GPU,
        nominal=nominal,
        borrowing_limit=borrowing_limit,
    )


async def seed(sessions: async_sessionmaker[AsyncSession], database_url: str) -> None:
    async with sessions() as session, session.begin():
        for tenant in ("team-a", "team-b"):
            # a-big (8) may borrow 4: it waits for quota rather than never fitting
            limits = [quota(tenant, 4, borrowing_limit=4)]
            await tenants.upsert_tenant(session, tenant, limits, actor="seed", now=T0)
        await jobs.enqueue(
            session,
            [
                job("team-a/a-small", "team-a", replicas=1, devices=2, at=T0),
                job("team-b/b-one", "team-b", replicas=1, devices=2, at=T0 + 1),
                job("team-a/a-big", "team-a", replicas=2, devices=4, at=T0 + 2),
            ],
            actor="seed",
            now=T0,
        )
    await decide(sessions, database_url, now=T0 + 10)


async def decide(
    sessions: async_sessionmaker[AsyncSession],
    database_url: str,
    *,
    now: float,
    estimator: runs.Estimator | None = None,
) -> model.CycleResult:
    """One real admission cycle over the scenario's cluster, as the leading controller."""
    leadership = leader.Leadership(database_url, holder="api-tests")
    assert await leadership.try_acquire()
    try:
        assert leadership.term is not None
        return await admission.run(
            sessions,
            cluster_inventory(),
            policy=model.Policy(managed_device_classes=(GPU,)),
            now=now,
            planner=Planner(),
            term=leadership.term,
            estimator=estimator,
        )
    finally:
        await leadership.release()


RUNTIME_S = 3600.0
"""maxRuntimeSeconds of the scenario's jobs: a running gang frees its devices after it."""


async def hold_a_reservation(
    sessions: async_sessionmaker[AsyncSession], database_url: str, *, started: float
) -> model.BackfillReservation:
    """Start both admitted gangs and queue `team-b/b-wide` (2 x 4), which must wait for both."""
    async with sessions() as session, session.begin():
        for key in ("team-a/a-small", "team-b/b-one"):
            await jobs.start_all(session, [jobs.Start(key)], at=started, actor="test")
        await tenants.upsert_tenant(
            session, "team-b", [quota("team-b", 16)], actor="test", now=started
        )
        wide = job("team-b/b-wide", "team-b", replicas=2, devices=4, at=started)
        await jobs.enqueue(session, [wide], actor="test", now=started)
    result = await decide(sessions, database_url, now=started + 1)
    [reservation] = result.reservations
    return reservation
