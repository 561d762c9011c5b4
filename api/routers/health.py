"""`/healthz` (the process answers), `/readyz` (it can reach PostgreSQL) and `/metrics`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from gangq.queue import metrics
from gangq.queue.store import database

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "PostgreSQL is unreachable"}})
async def readyz(request: Request, response: Response) -> dict[str, str]:
    registry: metrics.Metrics = request.app.state.metrics
    is_up = await database.is_reachable(request.app.state.database_url)
    metrics.set_database_up(registry, is_up=is_up)
    if not is_up:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return {"status": "unavailable", "detail": "PostgreSQL does not answer"}
    return {"status": "ok"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def scrape(request: Request) -> Response:
    return Response(metrics.exposition(request.app.state.metrics), media_type=metrics.CONTENT_TYPE)
