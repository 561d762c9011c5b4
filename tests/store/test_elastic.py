"""Elastic jobs in PostgreSQL (rule 13): the minimum stored with the job and carried into the
core, the size its admission placed, and runs recorded at the size predictions are made at."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import backfill, model, prediction
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, database, jobs, leader, runs, snapshot, tenants

from .samples import POLICY, T0, inventory, job, queued_rows, quota

Sessions = async_sessionmaker[AsyncSession]
KEY = "ml-train/elastic"
SHAPE = prediction.RunShape("ml-train", "training", 4, 8, "elastic")


def _elastic(*, min_replicas: int = 2) -> model.PendingJob:
    """4 x 8 at most, without a runtime bound."""
    return dataclasses.replace(
        job(KEY, replicas=4, devices_per_replica=8), min_replicas=min_replicas, max_runtime_s=None
    )


async def _enqueue(sessions: Sessions, *pending: model.PendingJob) -> None:
    async with sessions() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=64),), actor="admin", now=T0
        )
        await jobs.enqueue(session, list(pending), actor="test", now=T0)


async def _cycle(database_url: str, sessions: Sessions, **options: object) -> model.CycleResult:
    leadership = leader.Leadership(database_url, holder="test")
    assert await leadership.try_acquire() and leadership.term is not None
    try:
        return await admission.run(
            sessions,
            inventory(2),
            policy=POLICY,
            now=T0 + 10,
            planner=Planner(),
            term=leadership.term,
            **options,  # type: ignore[arg-type]
        )
    finally:
        await leadership.release()


async def test_the_minimum_is_stored_with_the_job_and_reaches_the_core(
    session_factory: Sessions,
) -> None:
    original = _elastic()
    await _enqueue(session_factory, original)
    async with session_factory() as session:
        (row,) = await queued_rows(session, now=T0)
        detail = await jobs.get_job(session, KEY)
    assert snapshot.pending_job(row, specs=snapshot.SpecMemo()) == original
    assert detail is not None
    assert (detail.job.min_replicas, detail.job.replicas, detail.job.size) == (2, 4, None)


async def test_the_size_an_admission_placed_is_kept_until_the_job_is_queued_again(
    database_url: str, session_factory: Sessions
) -> None:
    """Two nodes hold 2 of the 4 replicas: the job starts at 2, counts 16 devices in use,
    and its size goes once it is queued again."""
    await _enqueue(session_factory, _elastic())
    result = await _cycle(database_url, session_factory)
    assert [len(a.placement) for a in result.admissions] == [2]
    async with session_factory() as session:
        detail = await jobs.get_job(session, KEY)
        (use,) = await jobs.tenant_use(session)
    assert detail is not None
    assert (detail.job.phase, detail.job.size, len(detail.placement)) == ("Admitted", 2, 2)
    assert use.in_use == 16
    async with session_factory() as session, session.begin():
        await jobs.requeue(session, KEY, at=T0 + 60, actor="controller", reason="node lost")
    async with session_factory() as session:
        requeued = await jobs.get_job(session, KEY)
    assert requeued is not None and requeued.job.size is None


async def test_a_running_smaller_gang_is_predicted_to_end_at_its_scaled_runtime(
    database_url: str, session_factory: Sessions
) -> None:
    """An hour at 4 replicas (by history) takes two at 2: the cycle's view of the running
    gang and the API's estimate both say so."""
    await _enqueue(session_factory, _elastic())
    predictor = prediction.RuntimePredictor(
        [prediction.FinishedRun(SHAPE, runtime_s=3600.0, ended_at=T0 - 1)]
    )
    await _cycle(database_url, session_factory, estimator=runs.Estimator(predictor))
    async with session_factory() as session:
        loaded = await snapshot.load(
            session, inventory(2), now=T0 + 20, estimator=runs.Estimator(predictor)
        )
        await runs.record(
            session,
            [
                runs.Run(
                    job_id=None,
                    job_key="ml-train/elastic-0",
                    shape=SHAPE,
                    device_class="gpu.nvidia.com",
                    succeeded=True,
                    started_at=T0 - 3601,
                    ended_at=T0 - 1,
                )
            ],
        )
        detail = await jobs.get_job(session, KEY)
        assert detail is not None
        estimate = await runs.estimate(session, KEY, placement=detail.placement, now=T0 + 20)
    (gang,) = loaded.snapshot.running
    assert backfill.expected_end(gang, now=T0 + 20) == T0 + 10 + 7200.0
    assert estimate is not None
    assert estimate.predicted_runtime_s == 7200.0


async def test_a_run_at_a_smaller_size_is_recorded_as_its_work_at_the_maximum(
    session_factory: Sessions,
) -> None:
    """Two hours at 2 of 4 replicas is the work of one hour at 4: the next prediction, made
    at the maximum, reads an hour."""
    ran = runs.Run(
        job_id=None,
        job_key=KEY,
        shape=SHAPE,
        device_class="gpu.nvidia.com",
        succeeded=True,
        started_at=T0,
        ended_at=T0 + 7200.0,
        size=2,
    )
    async with session_factory() as session, session.begin():
        await runs.record(session, [ran])
    async with session_factory() as session:
        (recorded,) = await runs.recent(session)
    assert recorded.runtime_s == 3600.0


async def test_a_minimum_above_the_maximum_is_refused_before_anything_is_written(
    session_factory: Sessions,
) -> None:
    with pytest.raises(InvalidInputError, match=r"elastic.minReplicas must be 1..replicas \(4\)"):
        await _enqueue(session_factory, job("ml-train/fine"), _elastic(min_replicas=5))
    async with session_factory() as session:
        assert (await jobs.list_jobs(session)).total == 0


@pytest.mark.parametrize("minimum", [0, 5], ids=["zero", "above-replicas"])
async def test_the_database_refuses_a_minimum_out_of_range(database_url: str, minimum: int) -> None:
    connection = await asyncpg.connect(database.libpq_url(database_url))
    try:
        with pytest.raises(asyncpg.CheckViolationError, match="ck_jobs_min_replicas_in_range"):
            await connection.execute(
                "INSERT INTO jobs (uid, namespace, name, tenant, tier, replicas, "
                "devices_per_replica, device_class, submitted_at, min_replicas) "
                "VALUES ('u', 'ns', 'n', 't', 'training', 4, 8, 'gpu', now(), $1)",
                minimum,
            )
    finally:
        await connection.close()
