"""The admission transaction: the real decision core, one commit or nothing, fenced, retried."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, database, jobs, leader, snapshot, tenants, usage
from gangq.queue.store.errors import NotLeaderError, StoreError

from .samples import (
    POLICY,
    PROFILE,
    T0,
    hold,
    inventory,
    job,
    placement,
    quota,
    until_blocked,
)

Sessions = async_sessionmaker[AsyncSession]

DOUBLE_RESERVED = text(
    "SELECT driver, pool, device FROM reservations WHERE released_at IS NULL "
    "GROUP BY driver, pool, device HAVING count(*) > 1"
)
COUNTERS_OVERCOMMITTED = text(
    """
    SELECT s.key, c.key FROM reservations r, jsonb_each(r.counters) s, jsonb_each(s.value) c
    WHERE r.released_at IS NULL
    GROUP BY s.key, c.key HAVING sum((c.value->>0)::numeric) > min((c.value->>1)::numeric)
    """
)
HELD_DEVICES = text("SELECT pool || '/' || device FROM reservations WHERE released_at IS NULL")
RESERVED_PER_JOB = text(
    "SELECT j.namespace || '/' || j.name, j.replicas * j.devices_per_replica, count(r.id) "
    "FROM jobs j LEFT JOIN reservations r ON r.job_id = j.id AND r.released_at IS NULL "
    "WHERE j.phase = 'Admitted' GROUP BY j.id"
)
# Fault injection: the first reservation insert kills its own connection. A sequence counts the
# attempts because it survives the rollback of the killed transaction.
KILL_TRIGGER = """
CREATE SEQUENCE fault_attempts;
CREATE FUNCTION kill_first_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('fault_attempts') = 1 THEN
        PERFORM pg_terminate_backend(pg_backend_pid());
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER kill_first_attempt BEFORE INSERT ON reservations
FOR EACH STATEMENT EXECUTE FUNCTION kill_first_attempt();
"""
FAIL_ALWAYS = """
CREATE FUNCTION fail_reservations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'disk full (injected)';
END $$;
CREATE TRIGGER fail_reservations BEFORE INSERT ON reservations
FOR EACH STATEMENT EXECUTE FUNCTION fail_reservations();
"""


async def _setup(sessions: Sessions, *pending: model.PendingJob, nominal: int = 64) -> None:
    async with sessions() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=nominal),), actor="admin", now=T0
        )
        await jobs.enqueue(session, list(pending), actor="test", now=T0)


async def _epoch(url: str) -> tuple[leader.Leadership, leader.Term]:
    leadership = leader.Leadership(url, holder="test")
    assert await leadership.try_acquire()
    assert leadership.term is not None
    return leadership, leadership.term


async def _cycle(
    sessions: Sessions, term: leader.Term, *, nodes: int = 2, now: float = T0 + 10
) -> model.CycleResult:
    return await admission.run(
        sessions, inventory(nodes), policy=POLICY, now=now, planner=Planner(), term=term
    )


async def test_a_cycle_writes_exactly_what_the_core_decided(
    database_url: str, session_factory: Sessions
) -> None:
    await _setup(
        session_factory,
        job("ml-train/big", replicas=2, devices_per_replica=8, submitted_at=T0 - 30),
        job("ml-train/one", submitted_at=T0 - 20),
        job("ml-train/late", replicas=2, devices_per_replica=4, submitted_at=T0 - 10),
    )
    leadership, term = await _epoch(database_url)
    try:
        result = await _cycle(session_factory, term)
    finally:
        await leadership.release()
    admitted = {a.job: a for a in result.admissions}
    assert set(admitted) == {"ml-train/big"}
    async with session_factory() as session:
        big = await jobs.get_job(session, "ml-train/big")
        waiting = await jobs.get_job(session, "ml-train/one")
        rows = (await session.execute(RESERVED_PER_JOB)).all()
    assert big is not None and waiting is not None
    assert big.job.phase == "Admitted"
    assert big.placement == admitted["ml-train/big"].placement
    assert [e.kind for e in big.history] == ["enqueued", "admitted"]
    assert waiting.job.phase == "Queued"
    assert waiting.job.reason == result.pending["ml-train/one"]
    assert waiting.job.position == result.positions["ml-train/one"]
    assert rows == [("ml-train/big", 16, 16)]


async def test_a_second_cycle_keeps_what_is_held(
    database_url: str, session_factory: Sessions
) -> None:
    await _setup(session_factory, *(job(f"ml-train/j{i}", devices_per_replica=3) for i in range(6)))
    leadership, term = await _epoch(database_url)
    try:
        first = await _cycle(session_factory, term)
        second = await _cycle(session_factory, term, now=T0 + 20)
    finally:
        await leadership.release()
    assert len(first.admissions) == 4  # 2 nodes x 8 devices fit 2 x (3 + 3) per node
    assert second.admissions == ()
    async with session_factory() as session:
        assert (await session.execute(DOUBLE_RESERVED)).all() == []
        queued = await jobs.list_jobs(session, phase="Queued")
    assert {r.key for r in queued.items} == {
        k
        for k in (f"ml-train/j{i}" for i in range(6))
        if k not in {a.job for a in first.admissions}
    }
    assert all(r.reason is not None and r.reason.code == "capacity" for r in queued.items)


async def test_a_stale_leader_commits_nothing(database_url: str, session_factory: Sessions) -> None:
    await _setup(session_factory, job("ml-train/one"))
    old, old_epoch = await _epoch(database_url)
    await old.release()
    new, _ = await _epoch(database_url)
    try:
        with pytest.raises(NotLeaderError, match="not committed"):
            await _cycle(session_factory, old_epoch)
    finally:
        await new.release()
    async with session_factory() as session:
        detail = await jobs.get_job(session, "ml-train/one")
    assert detail is not None
    assert (detail.job.phase, detail.job.reason, detail.placement) == ("Queued", None, ())


TESTS_DIR = Path(__file__).resolve().parents[1]
CONTROLLER = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import asyncpg
from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, database, leader
from store.samples import POLICY, T0, inventory, partitioned_inventory

async def main(url, term, partitioned):
    cluster = partitioned_inventory(2) if partitioned else inventory(3)
    gate = await asyncpg.connect(database.libpq_url(url))
    await gate.execute("SELECT pg_advisory_lock_shared(4242)")  # the test opens the gate
    engine = database.create_engine(url)
    sessions = database.session_factory(engine)
    admitted = []
    for index in range(4):
        result = await admission.run(
            sessions, cluster, policy=POLICY, now=T0 + 30 + index, planner=Planner(),
            term=term,
        )
        admitted += [a.job for a in result.admissions]
    await engine.dispose()
    await gate.close()
    print(json.dumps(admitted))

term = leader.Term(int(sys.argv[3]), sys.argv[4])
asyncio.run(main(sys.argv[2], term, sys.argv[5] == "partitioned"))
"""


def _gangs() -> list[model.PendingJob]:
    shapes = [(1, 1), (1, 3), (2, 2), (1, 8), (2, 4), (1, 5)]
    return [
        job(f"ml-train/j{i}", replicas=r, devices_per_replica=d, submitted_at=T0 + i)
        for i, (r, d) in enumerate(shapes * 4)
    ]


def _slices() -> list[model.PendingJob]:
    """Whole GPUs and 1g.10gb partitions of the same GPUs, interleaved."""
    shapes = [("1g.10gb", 1, 1), ("whole", 1, 1), ("1g.10gb", 2, 3), ("whole", 2, 1)]
    return [
        job(
            f"ml-train/s{i}",
            replicas=r,
            devices_per_replica=d,
            submitted_at=T0 + i,
            selectors=(PROFILE.format(profile),),
        )
        for i, (profile, r, d) in enumerate(shapes * 5)
    ]


@pytest.mark.parametrize("cluster", ["whole", "partitioned"])
async def test_two_controller_processes_never_double_reserve(
    database_url: str, session_factory: Sessions, cluster: str
) -> None:
    """Two OS processes that both believe they lead (same term) run cycles at the same time,
    on whole GPUs or on GPUs published whole and as partitions (rules 1 and 12)."""
    await _setup(session_factory, *(_slices() if cluster == "partitioned" else _gangs()))
    leadership, term = await _epoch(database_url)
    gate = await asyncpg.connect(database.libpq_url(database_url))
    await gate.execute("SELECT pg_advisory_lock(4242)")
    controllers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CONTROLLER,
            str(TESTS_DIR),
            database_url,
            str(term.epoch),
            term.token,
            cluster,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        await until_blocked(gate, "SELECT pg_advisory_lock_shared", count=2)
        await gate.execute("SELECT pg_advisory_unlock(4242)")
        outputs = [await controller.communicate() for controller in controllers]
    finally:
        await gate.close()
        await leadership.release()
    for controller, (_, err) in zip(controllers, outputs, strict=True):
        assert controller.returncode == 0, err.decode()[-3000:]
    per_process = [json.loads(out) for out, _ in outputs]
    admitted = [key for keys in per_process for key in keys]
    async with session_factory() as session:
        assert (await session.execute(DOUBLE_RESERVED)).all() == []
        rows = (await session.execute(RESERVED_PER_JOB)).all()
    assert admitted, "no process admitted anything"
    assert len(admitted) == len(set(admitted)), "a job was admitted by both controllers"
    assert sorted(key for key, _, _ in rows) == sorted(admitted)
    assert all(wanted == held for _, wanted, held in rows), "a gang was placed partially"
    if cluster == "whole":
        assert sum(held for _, _, held in rows) <= 24
        return
    async with session_factory() as session:
        assert (await session.execute(COUNTERS_OVERCOMMITTED)).all() == []
        held_devices = {d for (d,) in await session.execute(HELD_DEVICES)}
    for gpu in {d.rsplit("-mig-", 1)[0] for d in held_devices}:
        partitions = {d for d in held_devices if d.startswith(f"{gpu}-mig-")}
        assert not (gpu in held_devices and partitions), f"{gpu} held whole and partitioned"


async def test_a_connection_lost_mid_cycle_is_survived(
    database_url: str, session_factory: Sessions, caplog: pytest.LogCaptureFixture
) -> None:
    await _setup(session_factory, job("ml-train/one"), job("ml-train/two"))
    connection = await asyncpg.connect(database.libpq_url(database_url))
    try:
        await connection.execute(KILL_TRIGGER)
    finally:
        await connection.close()
    leadership, term = await _epoch(database_url)
    try:
        result = await _cycle(session_factory, term)
    finally:
        await leadership.release()
    assert {a.job for a in result.admissions} == {"ml-train/one", "ml-train/two"}
    async with session_factory() as session:
        attempts = await session.scalar(text("SELECT last_value FROM fault_attempts"))
        rows = (await session.execute(RESERVED_PER_JOB)).all()
        history = await jobs.get_job(session, "ml-train/one")
    assert attempts is not None and attempts >= 2, "no retry reached the reservation insert"
    assert "cycle attempt 1 lost its connection" in caplog.text
    assert sorted(rows) == [("ml-train/one", 1, 1), ("ml-train/two", 1, 1)]
    assert history is not None
    assert [e.kind for e in history.history] == ["enqueued", "admitted"]


async def test_a_failed_cycle_loses_nothing(database_url: str, session_factory: Sessions) -> None:
    await _setup(session_factory, job("ml-train/one"))
    connection = await asyncpg.connect(database.libpq_url(database_url))
    try:
        await connection.execute(FAIL_ALWAYS)
    finally:
        await connection.close()
    leadership, term = await _epoch(database_url)
    try:
        with pytest.raises(StoreError, match="disk full"):
            await _cycle(session_factory, term)
    finally:
        await leadership.release()
    async with session_factory() as session:
        detail = await jobs.get_job(session, "ml-train/one")
    assert detail is not None
    assert (detail.job.phase, detail.placement) == ("Queued", ())
    assert [e.kind for e in detail.history] == ["enqueued"]


async def test_an_unreadable_stored_job_gets_an_invalid_reason(
    database_url: str, session_factory: Sessions
) -> None:
    await _setup(session_factory, job("ml-train/ok"), job("ml-train/broken"))
    async with session_factory() as session, session.begin():
        await session.execute(
            text("UPDATE jobs SET spec = CAST(:spec AS jsonb) WHERE name = 'broken'"),
            {"spec": '{"topology": {"mode": "Sideways"}}'},
        )
    leadership, term = await _epoch(database_url)
    try:
        result = await _cycle(session_factory, term)
    finally:
        await leadership.release()
    assert [a.job for a in result.admissions] == ["ml-train/ok"]
    async with session_factory() as session:
        broken = await jobs.get_job(session, "ml-train/broken")
    assert broken is not None and broken.job.reason is not None
    assert broken.job.reason.code == "invalid"
    assert "cannot be read" in broken.job.reason.message


async def test_an_unreachable_server_is_retried_then_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unreachable = "postgresql+asyncpg://postgres@127.0.0.1:1/gangq"
    engine = database.create_engine(unreachable)
    try:
        with pytest.raises(StoreError, match="nothing committed"):
            await admission.run(
                database.session_factory(engine),
                inventory(1),
                policy=POLICY,
                now=T0,
                planner=Planner(),
                term=leader.Term(1, ""),
                retry_delays_s=(0.0, 0.0),
            )
    finally:
        await engine.dispose()
    assert caplog.text.count("lost its connection") == 2
    assert not await leader.Leadership(unreachable).try_acquire()


async def _serving_behind(
    session_factory: Sessions, small: list[model.PendingJob], *, nominal: int
) -> None:
    """Each small gang running on its own node (`node-0`, `node-1`, ...) for an hour, and a
    1 x 8 prod-inference job of tenant `serving` (with `nominal`) queued behind them."""
    await _setup(session_factory, *small)
    async with session_factory() as session, session.begin():
        for index, gang in enumerate(small):
            await hold(
                session,
                gang.key,
                placement(f"node-{index}", *range(8)),
                at=T0 - 3600,
                phase="Running",
            )
        await tenants.upsert_tenant(
            session,
            "serving",
            (quota("serving", nominal=nominal, allowed_tiers=()),),
            actor="admin",
            now=T0,
        )
        serving = job("serving/llm", tenant="serving", tier="prod-inference", devices_per_replica=8)
        await jobs.enqueue(session, [serving], actor="test", now=T0)


async def test_preemption_marks_whole_victim_gangs_once(
    database_url: str, session_factory: Sessions
) -> None:
    small = [job(f"ml-train/small-{i}", tier="small", devices_per_replica=8) for i in range(2)]
    await _serving_behind(session_factory, small, nominal=16)
    leadership, term = await _epoch(database_url)
    try:
        first = await _cycle(session_factory, term)
        second = await _cycle(session_factory, term, now=T0 + 20)
    finally:
        await leadership.release()
    assert first.preemptions, first.pending
    (preemption,) = first.preemptions
    (victim,) = preemption.victims
    assert preemption.job == "serving/llm"
    async with session_factory() as session:
        evicted = await jobs.get_job(session, victim.job)
        serving = await jobs.get_job(session, "serving/llm")
    assert evicted is not None and serving is not None
    assert evicted.job.is_evicting
    assert len(evicted.placement) == 1 and len(evicted.placement[0].devices) == 8
    preempted = [e for e in evicted.history if e.kind == "preempted"]
    assert [(e.reason, e.details["for"]) for e in preempted] == [(victim.reason, "serving/llm")]
    assert serving.job.phase == "Queued"
    assert all(v.job == victim.job for p in second.preemptions for v in p.victims)
    # its wait has paid for the eviction of the first cycle (the second found its victim
    # already evicting): the next one it weighs counts from there
    async with session_factory() as session:
        loaded = await snapshot.load(session, inventory(2), now=T0 + 30)
    (preemptor,) = [j for j in loaded.snapshot.pending if j.key == "serving/llm"]
    assert preemptor.preempted_at == T0 + 10
    assert preemptor.paying_since == T0 + 10


async def test_a_victim_brings_its_eviction_history_and_restart_into_its_next_views(
    database_url: str, session_factory: Sessions
) -> None:
    """The work an eviction destroys stays with the job across its requeue, the core sees it
    on the job's next run (rule 6: it counts against evicting it again), and the queued job
    counts its wait from the requeue; `spec.restartSeconds` reaches both views."""
    small = dataclasses.replace(
        job("ml-train/small", tier="small", devices_per_replica=8), restart_s=120.0
    )
    await _serving_behind(session_factory, [small], nominal=8)
    leadership, term = await _epoch(database_url)
    try:
        result = await _cycle(session_factory, term, nodes=1)
    finally:
        await leadership.release()
    ((victim,),) = [p.victims for p in result.preemptions]
    assert victim.job == small.key and victim.lost_device_s == 8 * 3610.0
    async with session_factory() as session, session.begin():
        await jobs.requeue(
            session, small.key, at=T0 + 60, actor="test", reason="evicted", preempted=True
        )
    async with session_factory() as session:
        queued = await snapshot.load(session, inventory(1), now=T0 + 70)
    (requeued,) = [j for j in queued.snapshot.pending if j.key == small.key]
    assert (requeued.queued_at, requeued.restart_s) == (T0 + 60, 120.0)
    async with session_factory() as session, session.begin():
        await hold(session, small.key, placement("node-0", *range(8)), at=T0 + 80)
    async with session_factory() as session:
        again = await snapshot.load(session, inventory(1), now=T0 + 90)
    (running,) = [g for g in again.snapshot.running if g.key == small.key]
    assert (running.lost_before_device_s, running.restart_s) == (8 * 3610.0, 120.0)


async def test_a_never_fit_job_is_counted_apart_from_the_pending_ones(
    database_url: str, session_factory: Sessions
) -> None:
    """It waits for nothing: no pending count, no part in the oldest wait, a count of its own."""
    await _setup(
        session_factory,
        job("ml-train/never", devices_per_replica=1000, submitted_at=T0 - 600),
        job("ml-train/big", replicas=2, devices_per_replica=8, submitted_at=T0 - 30),
        job("ml-train/next", submitted_at=T0 - 20),
    )
    leadership, term = await _epoch(database_url)
    try:
        result = await _cycle(session_factory, term)
    finally:
        await leadership.release()
    assert result.pending["ml-train/never"].code == "unschedulable"
    async with session_factory() as session:
        (summary,) = await jobs.queue_summary(session, now=T0 + 10)
        never = await jobs.get_job(session, "ml-train/never")
    assert (summary.pending, summary.admitted, summary.unschedulable) == (1, 1, 1)
    assert summary.oldest_wait_s == 30.0
    assert never is not None and never.job.phase == "Queued" and never.job.position is None


async def test_a_victim_asked_first_stores_the_request_and_counts_its_loss_at_eviction(
    database_url: str, session_factory: Sessions
) -> None:
    """The request and its deadline are committed with the decision (a new leader continues
    the wait), the core sees the gang leaving by the deadline and its grace (what an eviction
    asking first costs it), and the work lost is counted only at the eviction: on the job
    (against evicting it again) and in the ledger, once."""
    small = dataclasses.replace(
        job("ml-train/small", tier="small", devices_per_replica=8), checkpoint_grace_s=120.0
    )
    await _serving_behind(session_factory, [small], nominal=8)
    leadership, term = await _epoch(database_url)
    try:
        result = await _cycle(session_factory, term, nodes=1)
        await _cycle(session_factory, term, nodes=1, now=T0 + 20)
    finally:
        await leadership.release()
    assert [v.job for p in result.preemptions for v in p.victims] == [small.key]
    async with session_factory() as session:
        asked = await jobs.get_job(session, small.key)
        loaded = await snapshot.load(session, inventory(1), now=T0 + 30)
    assert asked is not None and asked.job.is_evicting
    assert (asked.job.checkpoint_requested_at, asked.job.evict_by) == (T0 + 10, T0 + 130)
    assert asked.job.evicted_for == "serving/llm"
    (leaving,) = loaded.snapshot.running
    assert (leaving.evicting_by, leaving.checkpoint_grace_s) == (T0 + 130, 120.0)
    assert leaving.lost_before_device_s == 0.0
    (preempted,) = [e for e in asked.history if e.kind == "preempted"]
    assert preempted.details == {"for": "serving/llm", "checkpoint_grace_s": 120.0}
    async with session_factory() as session, session.begin():
        await jobs.requeue(
            session,
            small.key,
            at=T0 + 60,
            actor="test",
            reason="evicted",
            preempted=True,
            lost_device_s=8 * 45.0,
        )
    async with session_factory() as session:
        requeued = await jobs.get_job(session, small.key)
        ledger = await usage.preemption_ledger(session, since=T0, until=T0 + 100)
    assert requeued is not None and not requeued.job.is_evicting
    assert (requeued.job.checkpoint_requested_at, requeued.job.evict_by) == (None, None)
    assert [(row.by_tenant, row.evictions, row.lost_device_hours) for row in ledger] == [
        ("serving", 1, 8 * 45.0 / 3600)
    ]
