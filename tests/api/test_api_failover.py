"""The API while PostgreSQL fails over: reads keep their last good answer, marked stale, and
`/readyz` says `degraded` instead of taking the replica out of its Service.

A real primary and standby (`postgres_pair`); the app's `DATABASE_URL` names both hosts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from api_scenario import CLUSTER_ADMIN, VIEWER_A, bearer
from fastapi import FastAPI

from gangq.api.app import create_app
from gangq.api.settings import ApiSettings
from gangq.queue.bench.postgres_pair import PostgresPair
from gangq.queue.core import model
from gangq.queue.store import database, jobs, schema, tenants

pytestmark = pytest.mark.slow


@pytest.fixture
async def pair_app(token_file: Path) -> AsyncIterator[tuple[PostgresPair, FastAPI]]:
    with PostgresPair(synchronous=True) as pair:
        engine = database.create_engine(pair.url)
        try:
            await schema.upgrade(engine)
            async with database.session_factory(engine)() as session, session.begin():
                quota = model.TenantQuota(model.Tenant("team-a"), "gpu.nvidia.com", nominal=8)
                await tenants.upsert_tenant(session, "team-a", (quota,), actor="test", now=0.0)
                pending = model.PendingJob(
                    key=model.JobKey("team-a/train"),
                    uid="uid-train",
                    tenant=model.Tenant("team-a"),
                    tier="training",
                    replicas=1,
                    devices_per_replica=1,
                    device_class="gpu.nvidia.com",
                )
                await jobs.enqueue(session, [pending], actor="test", now=0.0)
        finally:
            await engine.dispose()
        app = create_app(ApiSettings(database_url=pair.url, token_file=token_file))
        async with app.router.lifespan_context(app):
            yield pair, app


async def test_reads_are_served_stale_and_readiness_degrades_while_the_primary_is_down(
    pair_app: tuple[PostgresPair, FastAPI],
) -> None:
    pair, app = pair_app
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    health = app.state.database_health
    async with httpx.AsyncClient(transport=transport, base_url="http://gangq") as api:
        fresh = await api.get("/v1/jobs", headers=bearer(CLUSTER_ADMIN))
        assert fresh.status_code == 200 and fresh.json()["total"] == 1
        assert "Warning" not in fresh.headers

        await asyncio.to_thread(pair.kill_primary)
        await health.check(app.state.engine, app.state.metrics)

        ready = await api.get("/readyz")
        assert (ready.status_code, ready.json()["status"], ready.json()["database"]) == (
            200,
            "degraded",
            "down",
        )
        stale = await api.get("/v1/jobs", headers=bearer(CLUSTER_ADMIN))
        assert stale.status_code == 200
        assert stale.json() == fresh.json()
        assert stale.headers["X-Gangq-Database"] == "unavailable"
        assert stale.headers["Warning"].startswith("110 ")
        assert int(stale.headers["Age"]) >= 0
        # Never asked before, another caller, a write: nothing stale to give.
        assert (await api.get("/v1/queues", headers=bearer(CLUSTER_ADMIN))).status_code == 503
        assert (await api.get("/v1/jobs", headers=bearer(VIEWER_A))).status_code == 503
        body = {"quotas": [{"deviceClassName": "gpu.nvidia.com", "nominal": 4}]}
        written = await api.put("/v1/tenants/team-a", headers=bearer(CLUSTER_ADMIN), json=body)
        assert written.status_code == 503

        await asyncio.to_thread(pair.promote)
        await health.check(app.state.engine, app.state.metrics)
        assert (await api.get("/readyz")).json()["status"] == "ok"
        again = await api.get("/v1/jobs", headers=bearer(CLUSTER_ADMIN))
        assert again.status_code == 200 and "Warning" not in again.headers
