"""`/v1/jobs`: the queue as each caller may see it, and one job with placement and history.

A viewer is authorized before anything is loaded: the namespace's tenant (as the controller
publishes it) is checked first, so another tenant's job costs the same as a missing one. Names
of other tenants' jobs in reasons and histories are redacted for viewers (`redaction.py`).
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, status

from gangq.api import auth, published, redaction, schemas
from gangq.api.deps import PrincipalDep, SessionDep
from gangq.api.routers import access
from gangq.queue.kube import scale
from gangq.queue.store import jobs, runs
from gangq.queue.store.models import PHASES

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=schemas.AUTHENTICATED_ERRORS)

NamespaceParam = Annotated[str, Path(min_length=1, max_length=253, pattern=schemas.NAME_PATTERN)]
# What `/v1/jobs` lists: a TrainingJob's own entry, or a scale-up gang `<job>+<first replica>`.
EntryNameParam = Annotated[
    str,
    Path(min_length=1, max_length=schemas.ENTRY_NAME_MAX, pattern=schemas.ENTRY_NAME_PATTERN),
]
# Filters are names: text that could never match one (a NUL byte, spaces) is a 422 here,
# not a query PostgreSQL refuses.
TenantFilter = Annotated[
    str | None, Query(min_length=1, max_length=253, pattern=schemas.NAME_PATTERN)
]
TierFilter = Annotated[
    str | None, Query(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]


def _tenant_of(request: Request) -> published.TenantOf:
    view = request.app.state.cluster
    return view.tenant_of if isinstance(view, published.PublishedCluster) else published.unknown


def redactor(
    request: Request, principal: auth.Principal, *, namespace: str = ""
) -> redaction.Redact:
    return redaction.for_viewer(principal, tenant_of=_tenant_of(request), own_namespace=namespace)


@router.get("", response_model=schemas.JobPageOut, responses=schemas.error_responses(400))
async def list_jobs(
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
    *,
    tenant: TenantFilter = None,
    tier: TierFilter = None,
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
        items=[
            schemas.JobOut.of(
                record,
                now=now,
                redact=redactor(request, principal, namespace=record.key.partition("/")[0]),
            )
            for record in page.items
        ],
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
    request: Request,
    principal: PrincipalDep,
    session: SessionDep,
    namespace: NamespaceParam,
    name: EntryNameParam,
) -> schemas.JobDetailOut:
    """One job: position, pending reason, ETA, placement (now, and of its last attempt),
    predicted runtime, the work an eviction would destroy now, its whole event history and
    its scale-up gangs. A scale-up gang listed by `/v1/jobs` reads the same way, alone."""
    # A job of another tenant is reported missing, so its existence does not leak; the
    # namespace's tenant is checked before anything is read, so neither does the time taken.
    missing = HTTPException(
        status.HTTP_404_NOT_FOUND, f"no job {namespace}/{name} that you may read"
    )
    tenant = _tenant_of(request)(namespace)
    if tenant is not None and not principal.can_read_tenant(tenant):
        raise missing
    detail = await jobs.get_job(session, f"{namespace}/{name}")
    if detail is None or not principal.can_read_tenant(detail.job.tenant):
        raise missing
    now = time.time()
    estimate = await runs.estimate(session, detail.job.key, placement=detail.placement, now=now)
    scale_ups = (
        ()
        if scale.first_replica(detail.job.key)
        else await jobs.get_entries(session, namespace, uid_prefix=scale.uid_prefix(detail.job.uid))
    )
    view = request.app.state.cluster
    job_name = scale.split_name(name)[0]
    return schemas.JobDetailOut.of(
        detail,
        now=now,
        redact=redactor(request, principal, namespace=namespace),
        estimate=estimate,
        scale_ups=scale_ups,
        pod_groups=(
            view.pod_groups_of(f"{namespace}/{job_name}")
            if isinstance(view, published.PublishedCluster)
            else ()
        ),
    )
