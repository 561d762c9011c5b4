"""`/v1/usage`: per tenant what it may use, uses, borrows and waits for; device-hours over the
last 24 hours and 7 days; and the preemption ledger (evictions suffered and caused).

What the tenants page shows. A viewer gets its own tenants only, and in the ledger the other
side of an eviction is unnamed when it is a tenant the viewer may not read.
"""

from __future__ import annotations

import time
from collections import defaultdict

from fastapi import APIRouter

from gangq.api import auth, schemas
from gangq.api.deps import PrincipalDep, SessionDep
from gangq.queue.store import jobs, tenants, usage

router = APIRouter(prefix="/v1/usage", tags=["usage"], responses=schemas.AUTHENTICATED_ERRORS)

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S


def _shown(principal: auth.Principal, tenant: str | None) -> str | None:
    return tenant if tenant is not None and principal.can_read_tenant(tenant) else None


@router.get("", response_model=schemas.UsageReportOut)
async def get_usage(principal: PrincipalDep, session: SessionDep) -> schemas.UsageReportOut:
    """Quotas against use, device-hours and evictions of the tenants the caller may read."""
    now = time.time()
    records = [r for r in await tenants.list_tenants(session) if principal.can_read_tenant(r.name)]
    use = {(u.tenant, u.device_class): u for u in await jobs.tenant_use(session)}
    hours: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for window in (DAY_S, WEEK_S):
        for row in await usage.report(session, since=now - window, until=now):
            hours[row.tenant][window] += row.device_hours
    out = []
    for record in records:
        classes = []
        for quota in record.quotas:
            found = use.get((record.name, quota.device_class))
            classes.append(
                schemas.TenantClassUseOut(
                    device_class_name=quota.device_class,
                    nominal=quota.nominal,
                    borrowing_limit=quota.borrowing_limit,
                    in_use=found.in_use if found else 0,
                    borrowed=found.borrowed if found else 0,
                    waiting_jobs=found.waiting_jobs if found else 0,
                    waiting_devices=found.waiting_devices if found else 0,
                )
            )
        out.append(
            schemas.TenantUsageOut(
                name=record.name,
                device_classes=classes,
                device_hours_last_day=round(hours[record.name][DAY_S], 3),
                device_hours_last_week=round(hours[record.name][WEEK_S], 3),
            )
        )
    ledger = [
        schemas.LedgerOut(
            victim_tenant=_shown(principal, row.victim_tenant),
            victim_tier=row.victim_tier,
            by_tenant=_shown(principal, row.by_tenant),
            by_tier=row.by_tier,
            evictions=row.evictions,
            shrinks=row.shrinks,
            lost_device_hours=round(row.lost_device_hours, 3),
        )
        for row in await usage.preemption_ledger(session, since=now - WEEK_S, until=now)
        if principal.can_read_tenant(row.victim_tenant)
        or (row.by_tenant is not None and principal.can_read_tenant(row.by_tenant))
    ]
    return schemas.UsageReportOut(tenants=out, ledger=ledger)
