"""The queue's rows: enqueue, lifecycle, and the views the API shows."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.store import events, jobs, reservations, snapshot
from gangq.queue.store.errors import ConflictError
from gangq.queue.store.models import EventKind

from .samples import T0, hold, job, placement, queued_rows

Sessions = async_sessionmaker[AsyncSession]


async def _enqueue(sessions: Sessions, *pending: model.PendingJob) -> int:
    async with sessions() as session, session.begin():
        return await jobs.enqueue(session, list(pending), actor="test", now=T0)


async def _admit(sessions: Sessions, key: str, node: str, *devices: int) -> None:
    async with sessions() as session, session.begin():
        await hold(session, key, placement(node, *devices), at=T0 + 10)


async def test_enqueue_round_trips_the_whole_spec(session_factory: Sessions) -> None:
    original = job(
        "ml-train/llm",
        replicas=4,
        devices_per_replica=8,
        selectors=("true",),
        constraints=("gpu.nvidia.com/numa",),
    )
    assert await _enqueue(session_factory, original) == 1
    async with session_factory() as session:
        (row,) = await queued_rows(session, now=T0)
        assert snapshot.pending_job(row, specs=snapshot.SpecMemo()) == original


async def test_enqueue_is_idempotent_per_uid(session_factory: Sessions) -> None:
    assert await _enqueue(session_factory, job("a/one"), job("a/two")) == 2
    assert await _enqueue(session_factory, job("a/one"), job("a/three")) == 1
    async with session_factory() as session:
        page = await jobs.list_jobs(session)
        history = await events.for_job(session, "a/one")
    assert page.total == 3
    assert [event.kind for event in history] == ["enqueued"]


async def test_a_second_live_job_with_the_same_key_is_a_conflict(session_factory: Sessions) -> None:
    await _enqueue(session_factory, job("a/one"))
    with pytest.raises(ConflictError, match="same namespace/name"):
        await _enqueue(session_factory, job("a/one", uid="another-uid"))
    async with session_factory() as session:
        assert (await jobs.list_jobs(session)).total == 1


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (job("no-slash"), "is not namespace/name"),
        (job("a/b", replicas=0), "replicas must be >= 1, got 0"),
        (job("a/b", devices_per_replica=-1), "devicesPerReplica must be >= 1, got -1"),
        (job("a/b", tenant=""), "tenant must not be empty"),
        (job("a/b", device_class=""), "deviceClassName must not be empty"),
        (job("a/b", priority=2**31), "priority 2147483648 is outside the 32-bit range"),
    ],
    ids=["key", "replicas", "devices", "tenant", "device-class", "priority"],
)
async def test_bad_jobs_get_a_clear_error_and_nothing_is_written(
    session_factory: Sessions, bad: model.PendingJob, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        await _enqueue(session_factory, job("a/fine"), bad)
    async with session_factory() as session:
        assert (await jobs.list_jobs(session)).total == 0


async def test_requeue_releases_whole_gang_and_keeps_submission_time(
    session_factory: Sessions,
) -> None:
    await _enqueue(session_factory, job("a/one", submitted_at=T0 - 500))
    await _admit(session_factory, "a/one", "node-1", 0, 1)
    async with session_factory() as session, session.begin():
        await jobs.requeue(
            session, "a/one", at=T0 + 60, actor="controller", reason="preempted", preempted=True
        )
    async with session_factory() as session:
        detail = await jobs.get_job(session, "a/one")
        assert await reservations.reserved_devices(session) == frozenset()
    assert detail is not None
    assert detail.job.phase == "Queued"
    assert detail.job.submitted_at == T0 - 500
    assert detail.job.preemptions == 1
    assert detail.placement == ()
    assert [e.kind for e in detail.history] == ["enqueued", "released", "requeued"]
    assert detail.history[1].details["devices_released"] == 2


async def test_lifecycle_to_success_frees_the_key(session_factory: Sessions) -> None:
    await _enqueue(session_factory, job("a/one"))
    await _admit(session_factory, "a/one", "node-1", 3)
    async with session_factory() as session, session.begin():
        detail = await jobs.get_job(session, "a/one")
        assert detail is not None
        assert detail.placement == (placement("node-1", 3),)
        await jobs.start_all(session, [jobs.Start("a/one", 12)], at=T0 + 20, actor="controller")
        started = await jobs.get_job(session, "a/one")
        assert started is not None
        assert started.history[-1].details == {"release_skew_ms": 12}
        await jobs.finish(
            session, "a/one", succeeded=True, at=T0 + 80, actor="controller", reason="done"
        )
    assert await _enqueue(session_factory, job("a/one", uid="second-run")) == 1
    async with session_factory() as session:
        page = await jobs.list_jobs(session, phase="Succeeded")
        live = await jobs.get_job(session, "a/one")
    assert [(r.key, r.started_at, r.finished_at) for r in page.items] == [
        ("a/one", T0 + 20, T0 + 80)
    ]
    assert live is not None
    assert (live.job.uid, live.job.phase) == ("second-run", "Queued")


async def test_shrink_gives_back_the_highest_replicas_only(session_factory: Sessions) -> None:
    await _enqueue(session_factory, job("a/elastic", replicas=3, devices_per_replica=2))
    async with session_factory() as session, session.begin():
        await hold(
            session,
            "a/elastic",
            *(placement(f"node-{r}", 0, 1, replica=r) for r in range(3)),
            at=T0 + 10,
        )
        with pytest.raises(InvalidInputError, match="is Admitted with 3 replicas"):
            await jobs.shrink(session, "a/elastic", replicas=1, at=T0 + 15, actor="controller")
        await jobs.start_all(session, [jobs.Start("a/elastic")], at=T0 + 20, actor="controller")
        with pytest.raises(InvalidInputError, match="cannot shrink to 3"):
            await jobs.shrink(session, "a/elastic", replicas=3, at=T0 + 25, actor="controller")
        freed = await jobs.shrink(session, "a/elastic", replicas=1, at=T0 + 30, actor="controller")
    async with session_factory() as session:
        detail = await jobs.get_job(session, "a/elastic")
    assert freed == 4
    assert detail is not None
    assert (detail.job.phase, detail.job.replicas) == ("Running", 1)
    assert detail.placement == (placement("node-0", 0, 1),)
    assert (detail.history[-1].kind, detail.history[-1].reason) == (
        EventKind.RELEASED,
        "scaled down to 1 replicas",
    )


async def test_start_all_refuses_a_queued_job(session_factory: Sessions) -> None:
    await _enqueue(session_factory, job("a/one"))
    async with session_factory() as session, session.begin():
        with pytest.raises(InvalidInputError, match="only an Admitted job can start"):
            await jobs.start_all(session, [jobs.Start("a/one")], at=T0, actor="controller")
        with pytest.raises(InvalidInputError, match="no live job a/missing"):
            await jobs.finish(
                session, "a/missing", succeeded=False, at=T0, actor="controller", reason="x"
            )


async def test_start_all_starts_every_admitted_gang_or_none(session_factory: Sessions) -> None:
    """A step's starts go in one statement; one that is not Admitted refuses the whole batch
    (the caller then retries each alone), so no gang is half recorded as running."""
    await _enqueue(session_factory, job("a/one"), job("a/two"), job("a/queued"))
    await _admit(session_factory, "a/one", "node-1", 0)
    await _admit(session_factory, "a/two", "node-1", 1)
    batch = [jobs.Start("a/one", 5), jobs.Start("a/queued"), jobs.Start("a/two")]
    with pytest.raises(InvalidInputError, match="a/queued is Queued, only an Admitted job"):
        async with session_factory() as session, session.begin():
            await jobs.start_all(session, batch, at=T0 + 20, actor="controller")
    async with session_factory() as session:
        assert {r.key: r.phase for r in (await jobs.list_jobs(session)).items} == {
            "a/one": "Admitted",
            "a/two": "Admitted",
            "a/queued": "Queued",
        }
    async with session_factory() as session, session.begin():
        await jobs.start_all(session, [batch[0], batch[2]], at=T0 + 20, actor="controller")
    async with session_factory() as session:
        one, two = await jobs.get_job(session, "a/one"), await jobs.get_job(session, "a/two")
    assert one is not None and two is not None
    assert (one.job.phase, one.job.started_at, two.job.phase) == ("Running", T0 + 20, "Running")
    assert [(e.kind, e.reason, e.details) for e in (one.history[-1], two.history[-1])] == [
        (EventKind.STARTED, "all pods running", {"release_skew_ms": 5}),
        (EventKind.STARTED, "all pods running", {}),
    ]


async def test_list_filters_and_pages(session_factory: Sessions) -> None:
    await _enqueue(
        session_factory,
        *(job(f"a/j{i}", tenant="t1" if i % 2 else "t2", submitted_at=T0 + i) for i in range(7)),
    )
    async with session_factory() as session:
        first = await jobs.list_jobs(session, tenant="t1", limit=2)
        second = await jobs.list_jobs(session, tenant="t1", limit=2, offset=2)
        none = await jobs.list_jobs(session, tier="small")
        with pytest.raises(InvalidInputError, match="phase 'Sleeping' is not one of"):
            await jobs.list_jobs(session, phase="Sleeping")
    assert first.total == second.total == 3
    assert [r.key for r in first.items + second.items] == ["a/j5", "a/j3", "a/j1"]
    assert none.total == 0


async def test_list_of_several_tenants(session_factory: Sessions) -> None:
    await _enqueue(
        session_factory,
        *(job(f"a/j{i}", tenant=f"t{i % 3}", submitted_at=T0 + i) for i in range(6)),
    )
    async with session_factory() as session:
        both = await jobs.list_jobs(session, tenant=("t0", "t2"), limit=3)
        rest = await jobs.list_jobs(session, tenant=frozenset({"t0", "t2"}), offset=3)
        one = await jobs.list_jobs(session, tenant="t1")
        nobody = await jobs.list_jobs(session, tenant=())
    assert both.total == rest.total == 4
    assert [r.key for r in both.items + rest.items] == ["a/j5", "a/j3", "a/j2", "a/j0"]
    assert [r.key for r in one.items] == ["a/j4", "a/j1"]
    assert (nobody.total, nobody.items) == (0, ())


async def test_queue_summary_per_tier_and_tenant(session_factory: Sessions) -> None:
    await _enqueue(
        session_factory,
        job("a/old", submitted_at=T0 - 300),
        job("a/new", submitted_at=T0 - 100),
        job("b/small", tenant="t2", tier="small", submitted_at=T0 - 50),
    )
    await _admit(session_factory, "a/new", "node-1", 0)
    async with session_factory() as session:
        summary = await jobs.queue_summary(session, now=T0)
    assert [(s.tier, s.tenant, s.pending, s.admitted, s.oldest_wait_s) for s in summary] == [
        ("small", "t2", 1, 0, 50.0),
        ("training", "ml-train", 1, 1, 300.0),
    ]


async def test_suspend_releases_and_resume_requeues(session_factory: Sessions) -> None:
    await _enqueue(session_factory, job("a/one", submitted_at=T0 - 5))
    await _admit(session_factory, "a/one", "node-1", 0, 1, 2, 3)
    async with session_factory() as session, session.begin():
        await jobs.suspend(session, "a/one", at=T0 + 30, actor="alice", reason="paused by owner")
    async with session_factory() as session, session.begin():
        suspended = await jobs.get_job(session, "a/one")
        assert await reservations.reserved_devices(session) == frozenset()
        await jobs.resume(session, "a/one", at=T0 + 60, actor="alice")
        with pytest.raises(InvalidInputError, match="only a Suspended job can resume"):
            await jobs.resume(session, "a/one", at=T0 + 61, actor="alice")
    async with session_factory() as session:
        resumed = await jobs.get_job(session, "a/one")
    assert suspended is not None and resumed is not None
    assert (suspended.job.phase, suspended.placement) == ("Suspended", ())
    assert (resumed.job.phase, resumed.job.submitted_at) == ("Queued", T0 - 5)
    assert [(e.kind, e.actor) for e in resumed.history][-2:] == [
        ("suspended", "alice"),
        ("resumed", "alice"),
    ]


async def test_a_backed_off_job_waits_out_its_backoff(session_factory: Sessions) -> None:
    await _enqueue(session_factory, job("a/one"))
    await _admit(session_factory, "a/one", "node-1", 0)
    async with session_factory() as session, session.begin():
        await jobs.requeue(
            session, "a/one", at=T0 + 100, actor="controller", reason="not ready", backoff_s=60
        )
    async with session_factory() as session:
        during = await queued_rows(session, now=T0 + 159)
        after = await queued_rows(session, now=T0 + 160)
    assert during == []
    assert [snapshot.key_of(row) for row in after] == ["a/one"]


async def test_the_controller_view_holds_live_jobs_and_only_the_chosen_finished_ones(
    session_factory: Sessions,
) -> None:
    await _enqueue(session_factory, job("a/done"), job("a/shown"), job("a/waiting"))
    async with session_factory() as session, session.begin():
        for key in ("a/done", "a/shown"):
            await jobs.finish(
                session, key, succeeded=True, at=T0 + 5, actor="controller", reason="done"
            )
    async with session_factory() as session:
        view = await jobs.LiveRecords().read(session, uids={"uid-a/done", "uid-elsewhere"})
    assert {uid: record.phase for uid, record in view.items()} == {
        "uid-a/done": "Succeeded",
        "uid-a/waiting": "Queued",
    }


async def test_the_controller_view_rebuilds_a_record_only_when_its_row_changed(
    session_factory: Sessions,
) -> None:
    await _enqueue(session_factory, job("a/kept"), job("a/moved"))
    live = jobs.LiveRecords()
    async with session_factory() as session:
        first = await live.read(session, uids=())
    async with session_factory() as session, session.begin():
        await jobs.finish(
            session, "a/moved", succeeded=False, at=T0 + 5, actor="controller", reason="gone"
        )
    async with session_factory() as session:
        second = await live.read(session, uids={"uid-a/moved"})
    assert second["uid-a/kept"] is first["uid-a/kept"]
    assert second["uid-a/moved"].phase == "Failed"
    assert first["uid-a/moved"].phase == "Queued"
