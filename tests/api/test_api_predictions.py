"""ETAs on predicted runtimes, and a job's prediction and lost work in its detail (rules 5, 6)."""

from __future__ import annotations

import time

import httpx
from api_scenario import CLUSTER_ADMIN, RUNTIME_S, VIEWER_A, bearer, decide, job, quota
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gangq.queue.core import prediction
from gangq.queue.store import checkpoints, jobs, runs, tenants

A_SMALL = prediction.RunShape("team-a", "training", 1, 2, "a-small")
B_ONE = prediction.RunShape("team-b", "training", 1, 2, "b-one")


async def test_etas_and_details_come_from_predicted_runtimes(
    api: httpx.AsyncClient, session_factory: async_sessionmaker[AsyncSession], database_url: str
) -> None:
    started = time.time() - 300
    async with session_factory() as session, session.begin():
        for shape, runtime_s in ((A_SMALL, 600.0), (A_SMALL, 800.0), (B_ONE, 900.0)):
            await runs.record(
                session,
                [
                    runs.Run(
                        job_id=None,
                        job_key=f"{shape.tenant}/{shape.family}",
                        shape=shape,
                        device_class="gpu.nvidia.com",
                        succeeded=True,
                        started_at=started - 5000 - runtime_s,
                        ended_at=started - 5000,
                    )
                ],
            )
        for key in ("team-a/a-small", "team-b/b-one"):
            await jobs.start_all(session, [jobs.Start(key)], at=started, actor="test")
        await checkpoints.describe(
            session,
            [checkpoints.Reported(uid="uid-team-a/a-small", last_checkpoint_at=started + 200)],
        )
        await tenants.upsert_tenant(
            session, "team-b", [quota("team-b", 16)], actor="test", now=started
        )
        wide = job("team-b/b-wide", "team-b", replicas=2, devices=4, at=started)
        await jobs.enqueue(session, [wide], actor="test", now=started)
        estimator = runs.Estimator(runs.predictor_of(await runs.recent(session)))
    result = await decide(session_factory, database_url, now=time.time(), estimator=estimator)
    # b-wide needs both nodes: it starts when the later predicted end (b-one's 900 s) comes.
    [reservation] = result.reservations
    assert reservation.job == "team-b/b-wide"
    assert abs(reservation.start_at - (started + 900)) < 1e-3

    before = time.time()
    listed = (await api.get("/v1/jobs?phase=Queued", headers=bearer(CLUSTER_ADMIN))).json()
    eta = {item["name"]: item["etaSeconds"] for item in listed["items"]}["b-wide"]
    assert started + 900 - before - 5 < eta <= started + 900 - before
    assert eta < RUNTIME_S - 300 - 5  # what the runtime bound alone would give

    detail = (await api.get("/v1/jobs/team-a/a-small", headers=bearer(VIEWER_A))).json()
    shown = detail["prediction"]
    assert shown["runtimeSeconds"] == 700.0
    assert shown["checkpointIntervalSeconds"] is None
    # 2 devices x the time since the checkpoint (started + 200), about 100 s.
    lost = shown["lostWorkDeviceSeconds"]
    assert 2 * (before - started - 200) <= lost <= 2 * (time.time() - started - 200)
    waiting = (await api.get("/v1/jobs/team-b/b-wide", headers=bearer(CLUSTER_ADMIN))).json()
    assert waiting["prediction"]["runtimeSeconds"] == RUNTIME_S  # no history: the bound
    assert waiting["prediction"]["lostWorkDeviceSeconds"] is None
