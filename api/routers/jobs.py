"""`/v1/jobs`: the queue as each caller may see it, and one job with placement and history."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from gangq.api import schemas
from gangq.api.deps import PrincipalDep, SessionDep
from gangq.api.routers import access
from gangq.queue.store import jobs, runs
from gangq.queue.store.models import PHASES

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=schemas.AUTHENTICATED_ERRORS)

NameParam = Annotated[str, Path(min_length=1, max_length=253, pattern=schemas.NAME_PATTERN)]


@router.get("", response_model=schemas.JobPageOut, responses=schemas.error_responses(400))
async def list_jobs(
    principal: PrincipalDep,
    session: SessionDep,
    *,
    tenant: Annotated[str | None, Query(min_length=1, max_length=253)] = None,
    tier: Annotated[str | None, Query(min_length=1, max_length=63)] = None,
    # The phases are listed for clients; the store checks them (400 naming the valid ones).
    phase: Annotated[
        str | None,
        Query(min_length=1, max_length=32, json_schema_extra={"enum": list(PHASES)}),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> schemas.JobPageOut:
    """Jobs newest first; viewers see only their tenants' jobs (all of them without ?tenant=)."""
    now = time.time()
    page = await jobs.list_jobs(
        session,
        tenant=access.tenant_filter(principal, tenant),
        tier=tier,
        phase=phase,
        limit=limit,
        offset=offset,
    )
    return schemas.JobPageOut(
        items=[schemas.JobOut.of(record, now=now) for record in page.items],
        total=page.total,
        limit=limit,
        offset=offset,
    )


@router.get(
    "/{namespace}/{name}",
    response_model=schemas.JobDetailOut,
    responses=schemas.error_responses(404),
)
async def get_job(
    principal: PrincipalDep, session: SessionDep, namespace: NameParam, name: NameParam
) -> schemas.JobDetailOut:
    """One job: position, pending reason, ETA, placement, predicted runtime, the work an
    eviction would destroy now, and its whole event history."""
    detail = await jobs.get_job(session, f"{namespace}/{name}")
    # A job of another tenant is reported missing, so its existence does not leak.
    if detail is None or not principal.can_read_tenant(detail.job.tenant):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no job {namespace}/{name} that you may read"
        )
    now = time.time()
    estimate = await runs.estimate(session, detail.job.key, placement=detail.placement, now=now)
    return schemas.JobDetailOut.of(detail, now=now, estimate=estimate)
