"""`/v1/queues`: pending, admitted and never-fit jobs and the oldest wait, per tier and tenant;
and the queued jobs in order, each with the jobs ahead of it (what the queue page lists)."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request

from gangq.api import schemas
from gangq.api.deps import PrincipalDep, SessionDep
from gangq.api.routers import jobs as jobs_router
from gangq.queue.store import jobs

router = APIRouter(prefix="/v1/queues", tags=["queues"], responses=schemas.AUTHENTICATED_ERRORS)

BLOCKERS_SHOWN = 3


@router.get("", response_model=list[schemas.QueueOut])
async def list_queues(principal: PrincipalDep, session: SessionDep) -> list[schemas.QueueOut]:
    """Viewers get the rows of their own tenants only."""
    summaries = await jobs.queue_summary(session, now=time.time())
    return [
        schemas.QueueOut.of(summary)
        for summary in summaries
        if principal.can_read_tenant(summary.tenant)
    ]


@router.get("/pending", response_model=schemas.PendingPageOut)
async def list_pending(
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
    *,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
) -> schemas.PendingPageOut:
    """Queued jobs in queue order (position 1 first) with reason, reserved start, ETA and the
    jobs of the same device class ranked before each; viewers see their tenants' jobs, and
    the jobs ahead of them from other tenants are counted but not named."""
    now = time.time()
    queued = await jobs.queued_in_order(session)
    ahead_by_class: dict[str, list[str]] = {}
    items: list[schemas.PendingOut] = []
    total = 0
    for record in queued:
        ahead = ahead_by_class.setdefault(record.device_class, [])
        if principal.can_read_tenant(record.tenant):
            total += 1
            if len(items) < limit:
                namespace = record.key.partition("/")[0]
                redact = jobs_router.redactor(request, principal, namespace=namespace)
                items.append(
                    schemas.PendingOut(
                        job=schemas.JobOut.of(record, now=now, redact=redact),
                        ahead=len(ahead),
                        blockers=[redact(key) for key in reversed(ahead[-BLOCKERS_SHOWN:])],
                    )
                )
        ahead.append(record.key)
    return schemas.PendingPageOut(items=items, total=total)
