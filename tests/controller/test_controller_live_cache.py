"""The watch caches change under the leader while it awaits a write: a TrainingJob that arrives
meanwhile must not end the controller (a pass over the jobs reads a copy, not the live cache)."""

from __future__ import annotations

import asyncio
import time

from sqlalchemy import func, select

from gangq.queue.kube import checkpoints, resources
from gangq.queue.store import database
from gangq.queue.store.models import JobRow
from tests.controller.conftest import Harness, training_job, wait_for

EVENT_WRITE_S = 1.5
"""How long each Event write takes: the window in which the next job arrives."""


async def _stored(harness: Harness, name: str, **where: str) -> bool:
    async with database.session_factory(harness.engine)() as session:
        query = select(func.count()).select_from(JobRow).where(JobRow.name == name)
        for column, value in where.items():
            query = query.where(getattr(JobRow, column) == value)
        return bool(await session.scalar(query))


async def _arrives_during_the_event(harness: Harness, *, written: str, **where: str) -> None:
    """Once `written` is in the store its Event is being sent: a new job arrives then, and is
    queued and run by the same, still running, controller."""
    deadline = time.monotonic() + 10
    while not await _stored(harness, written, **where):
        assert time.monotonic() < deadline, f"{written} never reached the store"
        await asyncio.sleep(0.02)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", training_job("next", replicas=1))
    task, _, _ = harness.runs["a"]
    await wait_for(lambda: task.done() or harness.phase("next") == "Succeeded", within_s=30)
    assert not task.done(), task.exception()


async def test_a_job_arriving_while_a_refusal_is_told(harness: Harness) -> None:
    harness.cluster.faults.delay(EVENT_WRITE_S, verb="create", resource="events")
    harness.start()
    typo = training_job("typo", replicas=1, selectors=["device.driver =="])
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", typo)
    await _arrives_during_the_event(harness, written="typo", phase="Failed")


async def test_a_job_arriving_while_a_bad_checkpoint_is_told(harness: Harness) -> None:
    harness.cluster.faults.delay(EVENT_WRITE_S, verb="create", resource="events")
    harness.start()
    reported = training_job("ckpt", replicas=1, run_seconds=None)
    reported["metadata"]["annotations"] = {checkpoints.CHECKPOINT_ANNOTATION: "yesterday"}
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", reported)
    await _arrives_during_the_event(harness, written="ckpt")
