"""Runtime history, predictions and checkpoint reports through a real controller (rules 5, 6)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.config import TierConfig
from gangq.queue.core import backfill, model, prediction
from gangq.queue.kube import checkpoints, objects, resources
from gangq.queue.kube.client import KubeError
from gangq.queue.store import database, runs, snapshot
from gangq.queue.store.models import RunRow
from tests.controller.conftest import Harness, training_job, wait_for

CHECKPOINT = checkpoints.CHECKPOINT_ANNOTATION


async def _runs(engine: AsyncEngine) -> list[RunRow]:
    async with database.session_factory(engine)() as session:
        return list((await session.scalars(select(RunRow).order_by(RunRow.id))).all())


async def _running(engine: AsyncEngine, key: str) -> model.RunningJob | None:
    """The gang as the leader's snapshot has it (the same function, rows and history)."""
    async with database.session_factory(engine)() as session:
        estimator = runs.Estimator(runs.predictor_of(await runs.recent(session)))
        loaded = await snapshot.load(
            session, model.Inventory(), now=time.time(), estimator=estimator
        )
    return {g.key: g for g in loaded.snapshot.running}.get(model.JobKey(key))


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _with_family(job: dict[str, Any], family: str) -> dict[str, Any]:
    job["metadata"]["labels"] = {prediction.FAMILY_LABEL: family}
    return job


async def test_runs_are_recorded_when_gangs_end_by_themselves_never_when_evicted(
    harness: Harness, engine: AsyncEngine
) -> None:
    tiers = tuple(
        t.model_copy(update={"min_runtime_before_preemption_s": 0.0})
        for t in harness.settings.tiers
    )
    assert all(isinstance(t, TierConfig) for t in tiers)
    harness.start(tiers=tiers)
    train = _with_family(training_job("train", run_seconds=None), "llm")
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", train)
    await wait_for(lambda: harness.phase("train") == "Running")
    serve = training_job(
        "serve", namespace="inference", tier="prod-inference", replicas=1, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", serve)
    await wait_for(lambda: harness.phase("train") == "Queued")  # evicted whole
    for namespace, name in (("ml-train", "train"), ("inference", "serve")):
        await harness.kube.delete(resources.TRAINING_JOBS, namespace, name)
    await wait_for(
        lambda: harness.job("train") is None and harness.job("serve", "inference") is None
    )

    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("eval-3", replicas=1, run_seconds=0.5)
    )
    await wait_for(lambda: harness.phase("eval-3") == "Succeeded", within_s=30)
    flaky = training_job("flaky", replicas=1, run_seconds=0.2, exit_code=1, maxRestarts=0)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", flaky)
    await wait_for(lambda: harness.phase("flaky") == "Failed", within_s=30)

    recorded = await _runs(engine)
    assert [
        (r.job_key, r.tenant, r.tier, r.replicas, r.devices_per_replica, r.family, r.succeeded)
        for r in recorded
    ] == [
        ("ml-train/eval-3", "ml-train", "training", 1, 8, "eval", True),
        ("ml-train/flaky", "ml-train", "training", 1, 8, "flaky", False),
    ]
    for row in recorded:
        assert row.device_class == "gpu.nvidia.com"
        assert row.runtime_s == pytest.approx(
            (row.ended_at - row.started_at).total_seconds(), abs=1e-3
        )
        assert 0 < row.runtime_s < 30


async def test_a_new_leader_plans_on_the_runs_in_the_store_and_grows_outlived_predictions(
    harness: Harness, engine: AsyncEngine
) -> None:
    shape = prediction.RunShape("ml-train", "training", 2, 8, "long")
    async with database.session_factory(engine)() as session, session.begin():
        for runtime_s in (5.0, 7.0):
            ended = time.time() - 3600
            await runs.record(
                session,
                [
                    runs.Run(
                        job_id=None,
                        job_key="ml-train/long-0",
                        shape=shape,
                        device_class="gpu.nvidia.com",
                        succeeded=True,
                        started_at=ended - runtime_s,
                        ended_at=ended,
                    )
                ],
            )
    harness.start(status_refresh_s=0.0)
    long = training_job("long-1", run_seconds=None, maxRuntimeSeconds=36000)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", long)
    await wait_for(lambda: harness.phase("long-1") == "Running")
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("next", run_seconds=None)
    )

    def estimate() -> float | None:
        stamp = ((harness.job("next") or {}).get("status") or {}).get("estimatedStartTime")
        return None if stamp is None else _unix(stamp)

    started = await wait_for(lambda: _started(harness))
    first = await wait_for(estimate)
    # The mean of the two recorded runs (6 s), not maxRuntimeSeconds (10 h).
    assert abs(first - (started + 6)) <= 2
    # Once long-1 outlives it, the prediction grows in one step (to 6 + 60 s) and the
    # reservation and the estimate follow.
    grown = await wait_for(
        lambda: (value := estimate()) is not None and value > first + 30 and value
    )
    assert abs(grown - (started + 66)) <= 2
    gang = await _running(engine, "ml-train/long-1")
    assert gang is not None and gang.predicted_end_at is not None
    assert abs(gang.predicted_end_at - (started + 6)) <= 1
    expected = backfill.expected_end(gang, now=time.time())
    assert expected is not None and abs(expected - (started + 66)) <= 1


def _started(harness: Harness) -> float | None:
    stamp = ((harness.job("long-1") or {}).get("status") or {}).get("startedAt")
    return None if stamp is None else _unix(stamp)


async def _annotate(harness: Harness, name: str, value: str | None) -> None:
    body = {"metadata": {"annotations": {CHECKPOINT: value}}}
    await harness.kube.patch(resources.TRAINING_JOBS, "ml-train", name, body)


def _warnings(harness: Harness, reason: str) -> list[str]:
    return [
        e["message"]
        for e in harness.objects(resources.EVENTS, "ml-train")
        if e.get("reason") == reason and e.get("type") == "Warning"
    ]


async def test_checkpoint_reports_reach_the_snapshot_and_survive_a_restart(
    harness: Harness, engine: AsyncEngine
) -> None:
    harness.start()
    job = training_job("ckpt", replicas=1, run_seconds=None, checkpointIntervalSeconds=600)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("ckpt") == "Running")
    running = await _running(engine, "ml-train/ckpt")
    assert running is not None
    # A checkpoint saved a while into the run (the annotation has whole seconds).
    await wait_for(lambda: time.time() > running.started_at + 2)
    saved = float(int(time.time()))
    await _annotate(harness, "ckpt", objects.rfc3339(saved))

    async def reported() -> float | None:
        gang = await _running(engine, "ml-train/ckpt")
        return None if gang is None else gang.last_checkpoint_at

    await _wait_async(reported, saved)
    gang = await _running(engine, "ml-train/ckpt")
    assert gang is not None and gang.checkpoint_interval_s == 600.0
    assert gang.lost_work_device_s(saved + 40) == 8 * 40
    assert gang.lost_work_device_s(saved + 4000) == 8 * 600  # at most one interval

    # Bad values are ignored with a Warning event, and the last good report stays.
    await _annotate(harness, "ckpt", "yesterday")
    await wait_for(lambda: _warnings(harness, "CheckpointIgnored"))
    assert "is not an RFC3339 time" in _warnings(harness, "CheckpointIgnored")[0]
    await _annotate(harness, "ckpt", "2099-01-01T00:00:00Z")
    await wait_for(lambda: len(_warnings(harness, "CheckpointIgnored")) == 2)
    assert any("is in the future" in m for m in _warnings(harness, "CheckpointIgnored"))
    assert harness.phase("ckpt") == "Running"
    assert await reported() == saved

    # A restarted controller keeps it, even when the annotation is gone meanwhile.
    await harness.stop()
    await _annotate(harness, "ckpt", None)
    harness.start("b")
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("after", replicas=1, run_seconds=None)
    )
    await wait_for(lambda: harness.phase("after") == "Running")
    assert await reported() == saved


async def _wait_async(read: Any, expected: object, *, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while (found := await read()) != expected:
        assert time.monotonic() < deadline, f"still {found!r}, expected {expected!r}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("value", [0, 2147483648, "600", 1.5])
async def test_the_crd_refuses_a_bad_checkpoint_interval(harness: Harness, value: object) -> None:
    job = training_job("bad", checkpointIntervalSeconds=value)
    with pytest.raises(KubeError) as refused:
        await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    assert refused.value.status == 422
    assert "checkpointIntervalSeconds" in refused.value.message


@pytest.mark.parametrize("value", [-1, 2147483648, "300"])
async def test_the_crd_refuses_a_bad_restart_time(harness: Harness, value: object) -> None:
    job = training_job("bad", restartSeconds=value)
    with pytest.raises(KubeError) as refused:
        await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    assert refused.value.status == 422
    assert "restartSeconds" in refused.value.message
