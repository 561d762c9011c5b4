"""`/v1/queues`: pending, admitted and never-fit jobs and the oldest wait, per tier and tenant."""

from __future__ import annotations

import time

from fastapi import APIRouter

from gangq.api import schemas
from gangq.api.deps import PrincipalDep, SessionDep
from gangq.queue.store import jobs

router = APIRouter(prefix="/v1/queues", tags=["queues"], responses=schemas.AUTHENTICATED_ERRORS)


@router.get("", response_model=list[schemas.QueueOut])
async def list_queues(principal: PrincipalDep, session: SessionDep) -> list[schemas.QueueOut]:
    """Viewers get the rows of their own tenants only."""
    summaries = await jobs.queue_summary(session, now=time.time())
    return [
        schemas.QueueOut.of(summary)
        for summary in summaries
        if principal.can_read_tenant(summary.tenant)
    ]
