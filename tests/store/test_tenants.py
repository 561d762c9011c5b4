"""Tenants and quotas: replace-all upserts with the actor in the history, clear errors."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import events, tenants

from .samples import T0, quota

Sessions = async_sessionmaker[AsyncSession]


async def test_upsert_replaces_quotas_and_records_who_did_it(session_factory: Sessions) -> None:
    first = (quota("ml", nominal=32), quota("ml", nominal=4, device_class="mig.nvidia.com"))
    second = (quota("ml", nominal=16, borrowing_limit=8),)
    async with session_factory() as session, session.begin():
        await tenants.upsert_tenant(session, "ml", first, actor="alice", now=T0)
    async with session_factory() as session, session.begin():
        await tenants.upsert_tenant(session, "ml", second, actor="bob", now=T0 + 1)
    async with session_factory() as session:
        record = await tenants.get_tenant(session, "ml")
        history = await events.recent(session, tenant="ml")
        assert await tenants.get_tenant(session, "nobody") is None
        assert await tenants.all_quotas(session) == second
    assert record == tenants.TenantRecord(name=model.Tenant("ml"), quotas=second)
    assert [(e.kind, e.actor) for e in history] == [
        ("quota_changed", "bob"),
        ("quota_changed", "alice"),
    ]
    assert history[0].details["before"][0]["device_class"] == "gpu.nvidia.com"
    assert history[0].details["after"] == [
        {
            "device_class": "gpu.nvidia.com",
            "nominal": 16,
            "borrowing_limit": 8,
            "weight": 1.0,
            "allowed_tiers": ["training", "small"],
        }
    ]


async def test_list_tenants_groups_quotas(session_factory: Sessions) -> None:
    async with session_factory() as session, session.begin():
        await tenants.upsert_tenant(session, "b", (quota("b"),), actor="admin", now=T0)
        await tenants.upsert_tenant(session, "a", (), actor="admin", now=T0)
    async with session_factory() as session:
        listed = await tenants.list_tenants(session)
    assert [(t.name, len(t.quotas)) for t in listed] == [("a", 0), ("b", 1)]


@pytest.mark.parametrize(
    ("name", "bad", "message"),
    [
        (
            "ml",
            dataclasses.replace(quota("ml"), nominal=-1),
            "nominal must be 0..2147483647, got -1",
        ),
        (
            "ml",
            dataclasses.replace(quota("ml"), borrowing_limit=-2),
            "borrowingLimit must be 0..2147483647, got -2",
        ),
        ("ml", dataclasses.replace(quota("ml"), weight=0.0), "weight must be > 0, got 0.0"),
        ("ml", quota("other"), "quota belongs to tenant 'other'"),
        (" ", quota(" "), "tenant name must not be empty"),
    ],
    ids=["nominal", "borrowing", "weight", "other-tenant", "empty-name"],
)
async def test_malformed_quotas_are_refused_and_nothing_changes(
    session_factory: Sessions, name: str, bad: model.TenantQuota, message: str
) -> None:
    async with session_factory() as session, session.begin():
        with pytest.raises(InvalidInputError, match=message):
            await tenants.upsert_tenant(session, name, (bad,), actor="x", now=T0)
    async with session_factory() as session:
        assert await tenants.list_tenants(session) == ()
        assert await events.recent(session) == ()


async def test_duplicate_device_class_is_refused(session_factory: Sessions) -> None:
    async with session_factory() as session, session.begin():
        with pytest.raises(InvalidInputError, match="device class given twice"):
            await tenants.upsert_tenant(
                session, "ml", (quota("ml"), quota("ml")), actor="x", now=T0
            )
