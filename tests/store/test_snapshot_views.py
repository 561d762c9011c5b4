"""The core views a cycle keeps from one cycle to the next (`snapshot.Views`): a long queue
costs a view per changed job, never a wrong one."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import model, prediction
from gangq.queue.store import jobs, runs, snapshot, tenants
from gangq.queue.store.models import JobRow

from .samples import T0, inventory, job, quota

Sessions = async_sessionmaker[AsyncSession]
TRAIN = prediction.RunShape("ml-train", "training", 1, 8, "train")


async def _pending(
    sessions: Sessions, views: snapshot.Views | None, estimator: runs.Estimator
) -> dict[str, model.PendingJob]:
    async with sessions() as session:
        loaded = await snapshot.load(
            session, inventory(2), now=T0, estimator=estimator, views=views
        )
    return {job.key: job for job in loaded.snapshot.pending}


async def _change(sessions: Sessions, name: str | None = None, **values: object) -> None:
    statement = update(JobRow).values(**values)
    if name is not None:
        statement = statement.where(JobRow.name == name)
    async with sessions() as session, session.begin():
        await session.execute(statement)


async def test_a_cycle_rebuilds_only_the_views_whose_job_or_prediction_changed(
    session_factory: Sessions,
) -> None:
    async with session_factory() as session, session.begin():
        await tenants.upsert_tenant(
            session, "ml-train", (quota("ml-train", nominal=64),), actor="admin", now=T0
        )
        queue = [
            job(f"ml-train/train-{i}", devices_per_replica=8, submitted_at=T0 + i) for i in (1, 2)
        ]
        await jobs.enqueue(session, queue, actor="test", now=T0)
    estimator = runs.Estimator(runs.predictor_of([]))
    views = snapshot.Views()
    first = await _pending(session_factory, views, estimator)

    # What the cycle stores for a waiting job changes with every move of the queue.
    await _change(
        session_factory, queue_position=JobRow.id + 7, pending_code="capacity", pending_message="x"
    )
    moved = await _pending(session_factory, views, estimator)
    assert all(moved[key] is first[key] for key in first)

    await _change(session_factory, "train-2", priority=5)
    raised = await _pending(session_factory, views, estimator)
    assert raised["ml-train/train-1"] is first["ml-train/train-1"]
    assert raised["ml-train/train-2"].priority == 5

    ended = runs.Run(
        job_id=None,
        job_key="ml-train/train-0",
        shape=TRAIN,
        device_class="gpu.nvidia.com",
        succeeded=True,
        started_at=T0 - 500,
        ended_at=T0,
    )
    estimator.learn(ended.finished)
    learned = await _pending(session_factory, views, estimator)
    assert {key: j.predicted_runtime_s for key, j in learned.items()} == {
        "ml-train/train-1": 500.0,
        "ml-train/train-2": 500.0,
    }

    afresh = await _pending(session_factory, None, estimator)
    assert afresh == learned
    assert all(afresh[key] is not learned[key] for key in learned)
