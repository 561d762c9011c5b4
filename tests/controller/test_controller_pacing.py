"""Steps under a stream of wake-ups: one per `min_step_interval_s` at most, each serving every
job that arrived since the last, while a wake-up after a quiet spell is served at once."""

from __future__ import annotations

import asyncio

from gangq.queue.kube import resources
from tests.controller.conftest import Harness, training_job, wait_for

INTERVAL_S = 1.0


async def test_a_stream_of_jobs_is_served_by_paced_steps_and_a_lone_job_at_once(
    harness: Harness,
) -> None:
    # No timer wake-ups in between: a quiet spell stays quiet.
    harness.start(min_step_interval_s=INTERVAL_S, cycle_interval_s=30.0)
    await wait_for(lambda: harness.cycles("a") >= 1)
    loop = asyncio.get_running_loop()

    before, started = harness.cycles("a"), loop.time()
    names = [f"stream-{i}" for i in range(12)]
    for name in names:
        await harness.kube.create(
            resources.TRAINING_JOBS,
            "ml-train",
            training_job(name, replicas=1, devices=1, run_seconds=60),
        )
        await asyncio.sleep(0.15)
    await wait_for(lambda: all(harness.phase(name) == "Running" for name in names))
    elapsed = loop.time() - started
    steps = harness.cycles("a") - before
    # Each job woke the loop at least twice (created, then its pod started); unpaced, that is
    # a step for nearly every wake-up.
    assert steps <= elapsed / INTERVAL_S + 2, (steps, elapsed)

    await asyncio.sleep(INTERVAL_S * 1.5)
    quiet = harness.cycles("a")
    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job("lone", replicas=1, devices=1, run_seconds=60),
    )
    # Paced like the stream, it would wait for the interval.
    await wait_for(lambda: harness.cycles("a") > quiet, within_s=INTERVAL_S * 0.8)
