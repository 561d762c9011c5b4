"""Helpers of the bad-input tests: REST as a cluster admin, and what the store holds for a job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.api.app import create_app
from gangq.api.settings import ApiSettings
from gangq.queue.core import capacity, model
from gangq.queue.kube import resources
from gangq.queue.store import database
from gangq.queue.store.models import EventRow, JobRow, ReservationRow
from tests.controller.conftest import Harness

ADMIN = "admin-token-0123456789"


@asynccontextmanager
async def rest(
    database_url: str, tmp_path: Path, *, cluster: capacity.ClusterView | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """The REST API over the test's database (and `cluster`, as a controller publishes it),
    called with a cluster-admin token."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump({"tokens": {ADMIN: {"user": "admin", "roles": ["cluster-admin"]}}})
    )
    app = create_app(
        ApiSettings(database_url=database_url, token_file=tokens),
        cluster=cluster or capacity.FixedClusterView(model.Inventory()),
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://gangq",
            headers={"Authorization": f"Bearer {ADMIN}"},
        ) as client:
            yield client


async def job_out(client: httpx.AsyncClient, namespace: str, name: str) -> dict[str, Any]:
    """`GET /v1/jobs/{namespace}/{name}`: the job, with its placement beside it."""
    response = await client.get(f"/v1/jobs/{namespace}/{name}")
    assert response.status_code == 200, response.text
    body = response.json()
    return {**body["job"], "placement": body["placement"]}


async def stored(engine: AsyncEngine, namespace: str, name: str) -> dict[str, int]:
    """Reservations ever made for the job (active or not) and its events by kind."""
    async with database.session_factory(engine)() as session:
        ids = select(JobRow.id).where(JobRow.namespace == namespace, JobRow.name == name)
        reservations = await session.scalar(
            select(func.count()).select_from(ReservationRow).where(ReservationRow.job_id.in_(ids))
        )
        kinds = await session.execute(
            select(EventRow.kind, func.count())
            .where(EventRow.job_key == f"{namespace}/{name}")
            .group_by(EventRow.kind)
        )
        return {"reservations": int(reservations or 0), **{k: int(n) for k, n in kinds}}


def status_of(harness: Harness, name: str, namespace: str) -> dict[str, Any]:
    return dict((harness.job(name, namespace) or {}).get("status") or {})


def condition(harness: Harness, name: str, namespace: str, kind: str) -> dict[str, Any]:
    for found in status_of(harness, name, namespace).get("conditions") or []:
        if found["type"] == kind:
            return dict(found)
    return {}


def kube_events(harness: Harness, name: str, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [
        event
        for event in harness.objects(resources.EVENTS, namespace)
        if event["involvedObject"]["name"] == name and event["reason"] == reason
    ]


def gauge(
    harness: Harness, name: str, *, tier: str = "training", tenant: str | None = "ml-train"
) -> float | None:
    """A queue gauge of replica "a" (None when it has no such series)."""
    labels = {"tier": tier} if tenant is None else {"tier": tier, "tenant": tenant}
    return harness.metrics["a"].registry.get_sample_value(name, labels)
