"""The store reads of a leader step: the live records are read once after the cycle, and again
before the statuses are shown only when a write of the step may have changed them."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.kube import reconciler, resources
from gangq.queue.store import jobs
from tests.controller.conftest import running_harness, training_job, wait_for


async def test_a_step_reads_the_live_records_again_only_after_its_own_commits(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps: list[tuple[bool, int]] = []
    """Per step: whether it committed a write after its reads began, and its live reads."""
    reads = 0
    read = jobs.LiveRecords.read
    step = reconciler.Reconciler.step

    async def counted_read(self: jobs.LiveRecords, *args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return await read(self, *args, **kwargs)

    async def counted_step(self: reconciler.Reconciler, *, epoch: int) -> None:
        nonlocal reads
        reads = 0
        commits = self.writes.commits
        await step(self, epoch=epoch)
        steps.append((self.writes.commits != commits, reads))

    monkeypatch.setattr(jobs.LiveRecords, "read", counted_read)
    monkeypatch.setattr(reconciler.Reconciler, "step", counted_step)
    async with running_harness(engine) as harness:
        harness.start()
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job("read", replicas=1, devices=1)
        )
        await wait_for(lambda: harness.phase("read") == "Succeeded", within_s=30)
        shown = len(steps)
        # Idle steps follow on the timer (cycle_interval_s).
        await wait_for(lambda: len(steps) >= shown + 3, within_s=10)
        await harness.stop()
    idle = [count for committed, count in steps if not committed]
    busy = [count for committed, count in steps if committed]
    assert len(idle) >= 3
    assert idle == [1] * len(idle), steps
    # The gang's start and end were committed in steps that read the records again, so the
    # status those steps wrote showed what they had just committed.
    assert 2 in busy, steps
    assert set(busy) <= {1, 2}, steps
