"""Finished runs in PostgreSQL and the predictions the snapshot carries (rules 5 and 6)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import backfill, model, prediction
from gangq.queue.core.planner import Planner
from gangq.queue.store import admission, checkpoints, jobs, leader, runs, snapshot, tenants

from .samples import POLICY, T0, inventory, job, quota

Sessions = async_sessionmaker[AsyncSession]
TRAIN = prediction.RunShape("ml-train", "training", 1, 8, "train")
WIDE = prediction.RunShape("ml-train", "training", 2, 8, "train")


def run(shape: prediction.RunShape, *, runtime_s: float, ended_at: float) -> runs.Run:
    return runs.Run(
        job_id=None,
        job_key=f"{shape.tenant}/{shape.family}",
        shape=shape,
        device_class="gpu.nvidia.com",
        succeeded=True,
        started_at=ended_at - runtime_s,
        ended_at=ended_at,
    )


async def _record(sessions: Sessions, *finished: runs.Run) -> None:
    async with sessions() as session, session.begin():
        await runs.record(session, finished)


async def test_the_leader_reads_the_last_runs_of_every_shape_oldest_first(
    session_factory: Sessions,
) -> None:
    await _record(
        session_factory,
        *(run(TRAIN, runtime_s=100.0 * (i + 1), ended_at=T0 + i) for i in range(6)),
        run(WIDE, runtime_s=50.0, ended_at=T0 + 2.5),
    )
    async with session_factory() as session:
        recent = await runs.recent(session, per_shape=4)
        one_shape = await runs.recent_of(session, TRAIN, limit=2)
    assert [(r.shape, r.runtime_s) for r in recent] == [
        (TRAIN, 300.0),
        (WIDE, 50.0),
        (TRAIN, 400.0),
        (TRAIN, 500.0),
        (TRAIN, 600.0),
    ]
    assert [r.runtime_s for r in one_shape] == [600.0, 500.0]
    predictor = runs.predictor_of(recent)
    assert predictor.predict(TRAIN, max_runtime_s=None) == 450.0
    assert predictor.predict(TRAIN, max_runtime_s=400.0) == 400.0


async def test_an_attempt_is_recorded_once(session_factory: Sessions) -> None:
    async with session_factory() as session, session.begin():
        [created] = await _enqueue(session, "ml-train/train-1")
    finished = runs.Run(
        job_id=created,
        job_key="ml-train/train-1",
        shape=TRAIN,
        device_class="gpu.nvidia.com",
        succeeded=False,
        started_at=T0,
        ended_at=T0 + 90,
    )
    await _record(session_factory, finished, finished)
    async with session_factory() as session:
        assert [r.runtime_s for r in await runs.recent(session)] == [90.0]


async def _enqueue(session: AsyncSession, *keys: str) -> list[int]:
    await tenants.upsert_tenant(
        session, "ml-train", (quota("ml-train", nominal=64),), actor="admin", now=T0
    )
    queue = [job(key, devices_per_replica=8, submitted_at=T0 + i) for i, key in enumerate(keys)]
    await jobs.enqueue(session, queue, actor="test", now=T0)
    async with session.begin_nested():
        loaded = await snapshot.load(session, inventory(2), now=T0)
    return [row.id for row in loaded.queued]


async def _load(
    sessions: Sessions, *, now: float, predictor: prediction.RuntimePredictor | None = None
) -> model.Snapshot:
    async with sessions() as session:
        estimator = None if predictor is None else runs.Estimator(predictor)
        loaded = await snapshot.load(session, inventory(2), now=now, estimator=estimator)
    return loaded.snapshot


async def test_the_snapshot_carries_predictions_and_checkpoints(
    database_url: str, session_factory: Sessions
) -> None:
    await _record(
        session_factory,
        run(TRAIN, runtime_s=600.0, ended_at=T0 - 100),
        run(TRAIN, runtime_s=1000.0, ended_at=T0 - 50),
    )
    async with session_factory() as session, session.begin():
        await _enqueue(session, "ml-train/train-7", "ml-train/eval", "ml-train/other")
        # eval has the label gangq.dev/family: train; other has no history at all.
        await checkpoints.describe(
            session, [checkpoints.Reported(uid="uid-ml-train/eval", family="train")]
        )
    async with session_factory() as session:
        predictor = runs.predictor_of(await runs.recent(session))

    queued = await _load(session_factory, now=T0, predictor=predictor)
    assert {j.key: j.predicted_runtime_s for j in queued.pending} == {
        "ml-train/train-7": 800.0,
        "ml-train/eval": 800.0,
        "ml-train/other": 3600.0,
    }
    unpredicted = await _load(session_factory, now=T0)
    assert {j.predicted_runtime_s for j in unpredicted.pending} == {None}

    leadership = leader.Leadership(database_url, holder="test")
    assert await leadership.try_acquire() and leadership.term is not None
    try:
        first, second = [
            await admission.run(
                session_factory,
                inventory(2),
                policy=POLICY,
                now=now,
                planner=Planner(),
                term=leadership.term,
                estimator=runs.Estimator(predictor),
            )
            for now in (T0, T0 + 5)
        ]
    finally:
        await leadership.release()
    assert {a.job for a in first.admissions} == {"ml-train/train-7", "ml-train/eval"}
    # The third job waits for the gangs' predicted ends, not for their one-hour bound.
    assert [(r.job, r.start_at) for r in second.reservations] == [("ml-train/other", T0 + 800)]
    async with session_factory() as session, session.begin():
        await jobs.start_all(session, [jobs.Start("ml-train/train-7")], at=T0 + 10, actor="test")
        await checkpoints.describe(
            session,
            [
                checkpoints.Reported(
                    uid="uid-ml-train/train-7",
                    checkpoint_interval_s=300,
                    last_checkpoint_at=T0 + 500,
                )
            ],
        )

    async def gang(now: float) -> model.RunningJob:
        loaded = await _load(session_factory, now=now, predictor=predictor)
        return {g.key: g for g in loaded.running}[model.JobKey("ml-train/train-7")]

    on_time = await gang(T0 + 100)
    assert on_time.predicted_end_at == T0 + 10 + 800
    assert (on_time.last_checkpoint_at, on_time.checkpoint_interval_s) == (T0 + 500, 300.0)
    assert on_time.lost_work_device_s(T0 + 700) == 8 * 200
    assert on_time.lost_work_device_s(T0 + 900) == 8 * 300  # at most one interval

    # Outlived: the snapshot keeps the first prediction, so the core can tell the gang outlived
    # it; the core's expected end grows in a step (800 -> 1200) and stays until that runs out,
    # and never past the bound: 1800, 2700, then 3600 (maxRuntimeSeconds).
    for now, end in ((805, 1200), (1100, 1200), (3000, 3600)):
        late = await gang(T0 + 10 + now)
        assert late.predicted_end_at == T0 + 10 + 800
        assert backfill.expected_end(late, now=T0 + 10 + now) == T0 + 10 + end

    # A report older than the stored checkpoint does not move it back.
    async with session_factory() as session, session.begin():
        await checkpoints.describe(
            session,
            [checkpoints.Reported(uid="uid-ml-train/train-7", last_checkpoint_at=T0 + 400)],
        )
    assert (await gang(T0 + 100)).last_checkpoint_at == T0 + 500


def test_predictions_are_kept_across_cycles_until_a_run_is_learned() -> None:
    estimator = runs.Estimator(
        runs.predictor_of([run(TRAIN, runtime_s=100.0, ended_at=T0).finished])
    )

    def predicted() -> float | None:
        return estimator.runtime_s(
            tenant="ml-train",
            tier="training",
            replicas=1,
            devices_per_replica=8,
            family=None,
            name="train-12",
            max_runtime_s=3600.0,
        )

    assert predicted() == 100.0
    estimator.learn(run(TRAIN, runtime_s=300.0, ended_at=T0 + 1).finished)
    assert predicted() == 200.0
