"""Tenants and their quotas per device class (PRODUCT §3), with every change in the history.

Owns reading and replacing a tenant's quotas. Validation here gives clear messages for the
common mistakes; the table's check constraints stay the last word. It must not judge whether a
quota is wise (over-committing nominal is allowed), only whether it is well-formed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from gangq.queue.core import model
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import events
from gangq.queue.store.models import EventKind, QuotaRow, TenantRow

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TenantRecord:
    name: model.Tenant
    quotas: tuple[model.TenantQuota, ...]


def _quota(row: QuotaRow) -> model.TenantQuota:
    return model.TenantQuota(
        tenant=model.Tenant(row.tenant),
        device_class=row.device_class,
        nominal=row.nominal,
        borrowing_limit=row.borrowing_limit,
        weight=row.weight,
        allowed_tiers=tuple(row.allowed_tiers),
    )


def _quota_dict(quota: model.TenantQuota) -> dict[str, object]:
    return {
        "device_class": quota.device_class,
        "nominal": quota.nominal,
        "borrowing_limit": quota.borrowing_limit,
        "weight": quota.weight,
        "allowed_tiers": list(quota.allowed_tiers),
    }


def validate(name: str, quotas: Sequence[model.TenantQuota]) -> None:
    """Reject malformed quotas with a message that names the field and the value."""
    if not name.strip():
        raise InvalidInputError("tenant name must not be empty")
    seen: set[str] = set()
    for quota in quotas:
        where = f"tenant {name!r}, device class {quota.device_class!r}"
        if quota.tenant != name:
            raise InvalidInputError(f"{where}: quota belongs to tenant {quota.tenant!r}")
        if not quota.device_class:
            raise InvalidInputError(f"tenant {name!r}: device class must not be empty")
        if quota.device_class in seen:
            raise InvalidInputError(f"{where}: device class given twice")
        seen.add(quota.device_class)
        if not 0 <= quota.nominal <= _INT32_MAX:
            raise InvalidInputError(
                f"{where}: nominal must be 0..{_INT32_MAX}, got {quota.nominal}"
            )
        if not 0 <= quota.borrowing_limit <= _INT32_MAX:
            raise InvalidInputError(
                f"{where}: borrowingLimit must be 0..{_INT32_MAX}, got {quota.borrowing_limit}"
            )
        if not quota.weight > 0:
            raise InvalidInputError(f"{where}: weight must be > 0, got {quota.weight}")


_ALL_QUOTAS = select(QuotaRow).order_by(QuotaRow.tenant, QuotaRow.device_class)
"""Built once: every cycle reads the quotas (see `bulk`)."""


async def all_quotas(session: AsyncSession) -> tuple[model.TenantQuota, ...]:
    rows = await session.scalars(_ALL_QUOTAS)
    return tuple(_quota(row) for row in rows)


async def list_tenants(session: AsyncSession) -> tuple[TenantRecord, ...]:
    names = (await session.scalars(select(TenantRow.name).order_by(TenantRow.name))).all()
    quotas = await all_quotas(session)
    return tuple(
        TenantRecord(name=model.Tenant(name), quotas=tuple(q for q in quotas if q.tenant == name))
        for name in names
    )


async def get_tenant(session: AsyncSession, name: str) -> TenantRecord | None:
    exists = await session.scalar(select(TenantRow.name).where(TenantRow.name == name))
    if exists is None:
        return None
    rows = await session.scalars(
        select(QuotaRow).where(QuotaRow.tenant == name).order_by(QuotaRow.device_class)
    )
    return TenantRecord(name=model.Tenant(name), quotas=tuple(_quota(row) for row in rows))


async def upsert_tenant(
    session: AsyncSession, name: str, quotas: Sequence[model.TenantQuota], *, actor: str, now: float
) -> TenantRecord:
    """Create the tenant or replace its whole quota set; the event keeps before and after."""
    validate(name, quotas)
    before = await get_tenant(session, name)
    await session.execute(insert(TenantRow).values(name=name).on_conflict_do_nothing())
    await session.execute(delete(QuotaRow).where(QuotaRow.tenant == name))
    if quotas:
        await session.execute(
            insert(QuotaRow), [{"tenant": name, **_quota_dict(quota)} for quota in quotas]
        )
    after = TenantRecord(name=model.Tenant(name), quotas=tuple(quotas))
    change = events.Event(
        kind=EventKind.QUOTA_CHANGED,
        actor=actor,
        at=now,
        tenant=name,
        reason=f"quotas of tenant {name} set by {actor}",
        details={
            "before": [_quota_dict(q) for q in before.quotas] if before else None,
            "after": [_quota_dict(q) for q in quotas],
        },
    )
    await events.record(session, [(None, change)])
    return after
