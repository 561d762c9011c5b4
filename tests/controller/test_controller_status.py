"""What the controller writes to TrainingJob status, and how often."""

from __future__ import annotations

import asyncio

from gangq.queue.kube import resources
from gangq.queue.store import database, jobs
from tests.controller.conftest import Harness, training_job, wait_for


def _status(harness: Harness, name: str) -> dict[str, object]:
    return dict((harness.job(name) or {}).get("status") or {})


async def _stored_position(harness: Harness, key: str) -> int | None:
    async with database.session_factory(harness.engine)() as session:
        detail = await jobs.get_job(session, key)
    return None if detail is None else detail.job.position


async def _queue_behind_a_blocker(harness: Harness, names: list[str]) -> None:
    """A running gang takes the whole cluster; `names` queue behind it in this order."""
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("blocker", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("blocker") == "Running")
    for name in names:
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job(name, run_seconds=None)
        )
        await wait_for(lambda n=name: _status(harness, n).get("queuePosition") is not None)
        await asyncio.sleep(1.1)  # creation timestamps have whole seconds: no tie in the order


async def test_a_queue_move_is_shown_at_a_bounded_rate_and_a_phase_change_at_once(
    harness: Harness,
) -> None:
    harness.start(status_refresh_s=3600.0)
    await _queue_behind_a_blocker(harness, ["head", "waiting"])
    assert _status(harness, "waiting")["queuePosition"] == 2

    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "head")
    deadline = asyncio.get_running_loop().time() + 15
    while await _stored_position(harness, "ml-train/waiting") != 1:
        assert asyncio.get_running_loop().time() < deadline, "the queue never moved"
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # two cycle intervals: steps ran after the move
    assert _status(harness, "waiting")["queuePosition"] == 2

    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "blocker")
    await wait_for(lambda: harness.phase("waiting") in ("Admitted", "Running"))
    assert _status(harness, "waiting").get("queuePosition") is None


async def test_a_bounded_number_of_queue_moves_per_step_still_reaches_every_job(
    harness: Harness,
) -> None:
    """One move shown per step, the stalest first: every waiting job is shown its new place."""
    harness.start(status_refresh_s=0.0, status_moves_per_step=1)
    names = ["head", "second", "third", "fourth"]
    await _queue_behind_a_blocker(harness, names)
    assert [_status(harness, n)["queuePosition"] for n in names] == [1, 2, 3, 4]
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "head")
    await wait_for(
        lambda: [_status(harness, n).get("queuePosition") for n in names[1:]] == [1, 2, 3]
    )
