"""`/v1/tenants`: quotas per device class; quota admins replace them, and the history keeps who."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status

from gangq.api import schemas
from gangq.api.deps import AdminDep, PrincipalDep, SessionDep
from gangq.api.routers import access
from gangq.queue.store import events, tenants
from gangq.queue.store.models import EventKind

router = APIRouter(prefix="/v1/tenants", tags=["tenants"], responses=schemas.AUTHENTICATED_ERRORS)

HISTORY_LIMIT = 20
TenantParam = Annotated[str, Path(min_length=1, max_length=63, pattern=schemas.NAME_PATTERN)]


@router.get("", response_model=list[schemas.TenantOut])
async def list_tenants(principal: PrincipalDep, session: SessionDep) -> list[schemas.TenantOut]:
    records = await tenants.list_tenants(session)
    return [schemas.TenantOut.of(r) for r in records if principal.can_read_tenant(r.name)]


@router.get(
    "/{tenant}",
    response_model=schemas.TenantDetailOut,
    responses=schemas.error_responses(404),
)
async def get_tenant(
    principal: PrincipalDep, session: SessionDep, tenant: TenantParam
) -> schemas.TenantDetailOut:
    """The tenant's quotas and who changed them last."""
    access.require_tenant(principal, tenant)
    record = await tenants.get_tenant(session, tenant)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no tenant {tenant!r}")
    changes = await events.recent(
        session, limit=HISTORY_LIMIT, tenant=tenant, kind=EventKind.QUOTA_CHANGED
    )
    return schemas.TenantDetailOut(
        **schemas.TenantOut.of(record).model_dump(),
        history=[schemas.EventOut.of(e) for e in changes],
    )


@router.put(
    "/{tenant}", response_model=schemas.TenantOut, responses=schemas.error_responses(400, 413)
)
async def put_tenant(
    principal: AdminDep, session: SessionDep, tenant: TenantParam, body: schemas.TenantIn
) -> schemas.TenantOut:
    """Create the tenant or replace all its quotas (quota-admin or cluster-admin).

    Lowering a quota below current use stops nothing at once: the excess becomes borrowed
    and can be reclaimed by tenants within their nominal quota (PRODUCT rule 3).
    """
    async with session.begin():
        record = await tenants.upsert_tenant(
            session, tenant, body.to_quotas(tenant), actor=principal.user, now=time.time()
        )
    return schemas.TenantOut.of(record)
