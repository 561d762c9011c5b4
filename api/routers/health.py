"""`/healthz` (the process answers) and `/readyz` (from state the process already holds).

`/readyz` costs no database round trip: it reads the latest timed check of the app's pool
(`readiness.py`), whether the cluster view has synced and whether this replica leads. Only the
database decides readiness (every replica serves reads from it); the rest is reported. With
the database unreachable (a failover) a replica that has something to serve stays ready and
says `degraded`: the last good reads (`stale.py`) and the cluster view. Taking it out of the
Service would leave people with errors only.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status

from gangq.api import readiness
from gangq.queue import metrics

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={503: {"description": "PostgreSQL is unreachable and nothing can be served"}},
)
async def readyz(request: Request, response: Response) -> dict[str, Any]:
    health: readiness.DatabaseHealth = request.app.state.database_health
    cluster = request.app.state.cluster
    registry: metrics.Metrics = request.app.state.metrics
    synced = cluster is not None and cluster.inventory() is not None
    state = "ok" if health.is_up else "degraded" if health.was_up or synced else "unavailable"
    body: dict[str, Any] = {
        "status": state,
        "database": "up" if health.is_up else "down",
        "cluster": "none" if cluster is None else "synced" if synced else "syncing",
        # Collected alone: the whole registry would cost a pass over every tenant's series.
        "leader": any(
            sample.value == 1 for family in registry.leader.collect() for sample in family.samples
        ),
    }
    if not health.is_up:
        body["detail"] = health.problem
    if state == "unavailable":
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return body
