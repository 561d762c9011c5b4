"""Properties of the store under random operation sequences, against a real PostgreSQL.

Whatever the order of enqueues, cycles, starts, requeues and finishes: no device is in two
active reservations (rule 1), a gang holding devices holds all of them on distinct nodes
(rule 2), a job that holds nothing has no active reservation, and a requeue keeps the original
submission time. Each example runs in a fresh database cloned from the session template.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, database, jobs, leader, tenants
from tests import databases

from .samples import POLICY, T0, inventory, job, quota

HELD = text(
    "SELECT j.namespace || '/' || j.name, j.phase, j.replicas, j.devices_per_replica, "
    "j.submitted_at, count(r.id), count(DISTINCT r.replica), count(DISTINCT r.node) "
    "FROM jobs j LEFT JOIN reservations r ON r.job_id = j.id AND r.released_at IS NULL "
    "GROUP BY j.id"
)
DOUBLE_RESERVED = text(
    "SELECT count(*) FROM (SELECT 1 FROM reservations WHERE released_at IS NULL "
    "GROUP BY driver, pool, device HAVING count(*) > 1) AS doubles"
)

Operation = tuple[str, int]
"""(kind, argument): a shape index for enqueue, a job pick for start/requeue/finish."""
SHAPES = ((1, 1), (1, 4), (2, 4), (1, 8), (3, 8), (2, 2))
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["enqueue", "cycle", "start", "requeue", "finish"]), st.integers(0, 20)
    ),
    min_size=4,
    max_size=14,
)

Sessions = async_sessionmaker[AsyncSession]


async def _holding(sessions: Sessions, phase: str) -> list[str]:
    async with sessions() as session:
        page = await jobs.list_jobs(session, phase=phase, limit=1000)
    return sorted(record.key for record in page.items)


async def _apply(sessions: Sessions, operation: Operation, *, step: int, term: leader.Term) -> None:
    kind, argument = operation
    now = T0 + 10 * step
    async with sessions() as session, session.begin():
        if kind == "enqueue":
            replicas, devices = SHAPES[argument % len(SHAPES)]
            new = job(
                f"ml-train/j{step}",
                replicas=replicas,
                devices_per_replica=devices,
                submitted_at=now,
            )
            await jobs.enqueue(session, [new], actor="test", now=now)
            return
    if kind == "cycle":
        await admission.run(
            sessions, inventory(3), policy=POLICY, now=now, planner=Planner(), term=term
        )
        return
    phase = "Admitted" if kind == "start" else "Running"
    candidates = await _holding(sessions, phase) or await _holding(sessions, "Admitted")
    if not candidates:
        return
    key = candidates[argument % len(candidates)]
    async with sessions() as session, session.begin():
        if kind == "start":
            await jobs.start_all(session, [jobs.Start(key)], at=now, actor="test")
        elif kind == "requeue":
            await jobs.requeue(session, key, at=now, actor="test", reason="x", preempted=True)
        else:
            await jobs.finish(session, key, succeeded=True, at=now, actor="test", reason="done")


async def _check(sessions: Sessions, submitted: dict[str, float]) -> None:
    async with sessions() as session:
        assert await session.scalar(DOUBLE_RESERVED) == 0
        rows = (await session.execute(HELD)).all()
    for key, phase, replicas, per_replica, submitted_at, held, replica_count, nodes in rows:
        if phase in ("Admitted", "Running"):
            assert held == replicas * per_replica, f"{key} holds {held} devices"
            assert replica_count == nodes == replicas, f"{key} replicas share a node"
        else:
            assert held == 0, f"{key} is {phase} yet holds {held} devices"
        assert submitted_at.timestamp() == submitted[key], f"{key} lost its submission time"


async def _run(server_url: str, template: str, operations: list[Operation]) -> None:
    async with databases.scratch(server_url, "gangq_test", template=template) as url:
        await _replay(url, operations)


async def _replay(url: str, operations: list[Operation]) -> None:
    engine = database.create_engine(url)
    leadership = leader.Leadership(url)
    try:
        sessions = database.session_factory(engine)
        async with sessions() as session, session.begin():
            await tenants.upsert_tenant(
                session, "ml-train", (quota("ml-train", nominal=24),), actor="test", now=T0
            )
        assert await leadership.try_acquire() and leadership.term is not None
        submitted: dict[str, float] = {}
        for step, operation in enumerate(operations):
            if operation[0] == "enqueue":
                submitted[f"ml-train/j{step}"] = T0 + 10 * step
            await _apply(sessions, operation, step=step, term=leadership.term)
            await _check(sessions, submitted)
    finally:
        await leadership.release()
        await engine.dispose()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=OPERATIONS)
@example(
    operations=[
        ("enqueue", 2),
        ("enqueue", 3),
        ("enqueue", 4),
        ("cycle", 0),
        ("start", 0),
        ("requeue", 0),
        ("cycle", 0),
        ("finish", 1),
        ("cycle", 0),
    ]
)
def test_random_histories_keep_the_reservation_invariants(
    server_url: str, template_database: str, operations: list[Operation]
) -> None:
    asyncio.run(_run(server_url, template_database, operations))
