"""Backfill reservations are stored per job: the ETA people see follows the core's decision."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, jobs, leader, tenants

from .samples import POLICY, T0, inventory, job, quota

Sessions = async_sessionmaker[AsyncSession]
RUNTIME_S = 3600.0
"""The samples' maxRuntimeSeconds: an admitted gang's devices are free again after it."""


async def _cycle(sessions: Sessions, term: leader.Term, *, now: float) -> model.CycleResult:
    return await admission.run(
        sessions, inventory(2), policy=POLICY, now=now, planner=Planner(), term=term
    )


async def _reserved(sessions: Sessions, *keys: str) -> dict[str, tuple[str, float | None]]:
    found: dict[str, tuple[str, float | None]] = {}
    async with sessions() as session:
        for key in keys:
            detail = await jobs.get_job(session, key)
            assert detail is not None, key
            found[key] = (detail.job.phase, detail.job.reserved_start_at)
    return found


async def _nodes(sessions: Sessions, key: str) -> tuple[str, ...]:
    async with sessions() as session:
        detail = await jobs.get_job(session, key)
    assert detail is not None, key
    return detail.job.reserved_nodes


async def test_the_reserved_start_follows_the_head_of_the_tier(
    database_url: str, session_factory: Sessions
) -> None:
    async with session_factory() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=64),), actor="admin", now=T0
        )
        await jobs.enqueue(
            session,
            [
                job(f"ml-train/{name}", devices_per_replica=8, submitted_at=T0 - age)
                for name, age in (("a", 30), ("b", 20), ("big", 10), ("next", 5))
            ],
            actor="test",
            now=T0,
        )
    leadership = leader.Leadership(database_url, holder="test")
    assert await leadership.try_acquire() and leadership.term is not None
    try:
        first = await _cycle(session_factory, leadership.term, now=T0 + 10)
        assert {a.job for a in first.admissions} == {"ml-train/a", "ml-train/b"}
        # Both nodes are full until the first admitted gang reaches its runtime bound.
        assert [(r.job, r.start_at) for r in first.reservations] == [
            ("ml-train/big", T0 + 10 + RUNTIME_S)
        ]
        assert await _reserved(session_factory, "ml-train/a", "ml-train/big", "ml-train/next") == {
            "ml-train/a": ("Admitted", None),
            "ml-train/big": ("Queued", T0 + 10 + RUNTIME_S),
            "ml-train/next": ("Queued", None),
        }
        # ... on the nodes the core reserved (the queue page's timeline names them).
        reserved_nodes = tuple(sorted(first.reservations[0].nodes))
        assert reserved_nodes and await _nodes(session_factory, "ml-train/big") == reserved_nodes
        assert await _nodes(session_factory, "ml-train/next") == ()

        # An older job arrives: the tier's reservation moves to it and big loses its ETA.
        async with session_factory() as session, session.begin():
            older = job("ml-train/older", devices_per_replica=8, submitted_at=T0 - 40)
            await jobs.enqueue(session, [older], actor="test", now=T0 + 15)
        second = await _cycle(session_factory, leadership.term, now=T0 + 20)
        assert [r.job for r in second.reservations] == ["ml-train/older"]
        assert await _reserved(session_factory, "ml-train/older", "ml-train/big") == {
            "ml-train/older": ("Queued", second.reservations[0].start_at),
            "ml-train/big": ("Queued", None),
        }
        assert await _nodes(session_factory, "ml-train/big") == ()

        # A gang ends early: the reserved job is admitted and no longer shows a reserved start.
        async with session_factory() as session, session.begin():
            await jobs.finish(
                session, "ml-train/a", succeeded=True, at=T0 + 25, actor="test", reason="done"
            )
        third = await _cycle(session_factory, leadership.term, now=T0 + 30)
        assert [a.job for a in third.admissions] == ["ml-train/older"]
    finally:
        await leadership.release()
    stored = await _reserved(session_factory, "ml-train/older", "ml-train/big")
    assert stored["ml-train/older"] == ("Admitted", None)
    assert stored["ml-train/big"][1] == (
        third.reservations[0].start_at if third.reservations else None
    )


async def test_a_suspended_job_drops_its_reserved_start(
    database_url: str, session_factory: Sessions
) -> None:
    async with session_factory() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=64),), actor="admin", now=T0
        )
        await jobs.enqueue(
            session,
            [
                job(f"ml-train/{name}", devices_per_replica=8, submitted_at=T0 - age)
                for name, age in (("a", 30), ("b", 20), ("big", 10))
            ],
            actor="test",
            now=T0,
        )
    leadership = leader.Leadership(database_url, holder="test")
    assert await leadership.try_acquire() and leadership.term is not None
    try:
        await _cycle(session_factory, leadership.term, now=T0 + 10)
    finally:
        await leadership.release()
    assert (await _reserved(session_factory, "ml-train/big"))["ml-train/big"][1] is not None
    async with session_factory() as session, session.begin():
        await jobs.suspend(session, "ml-train/big", at=T0 + 12, actor="test", reason="paused")
        await jobs.resume(session, "ml-train/big", at=T0 + 13, actor="test")
    assert await _reserved(session_factory, "ml-train/big") == {"ml-train/big": ("Queued", None)}
