"""The store reads of a leader step: the live records are read once after the cycle, and before
the statuses are shown only the records the step's own writes changed are read again."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.kube import reconciler, resources
from gangq.queue.store import jobs, leader
from tests.controller.conftest import running_harness, training_job, wait_for


@dataclass
class _Step:
    full: int = 0
    again: list[frozenset[str]] = field(default_factory=list)
    changed: set[str] | None = field(default_factory=set)
    """What the step's writes said they changed when its statuses were shown."""


async def test_a_step_reads_again_only_the_records_its_own_writes_changed(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps: list[_Step] = []
    read, read_again = jobs.LiveRecords.read, jobs.LiveRecords.read_again
    step, since = reconciler.Reconciler.step, reconciler.Reconciler._records_since

    async def counted_read(self: jobs.LiveRecords, *args: Any, **kwargs: Any) -> Any:
        steps[-1].full += 1
        return await read(self, *args, **kwargs)

    async def counted_again(self: jobs.LiveRecords, session: Any, *, uids: Any) -> Any:
        steps[-1].again.append(frozenset(uids))
        return await read_again(self, session, uids=uids)

    async def counted_since(self: reconciler.Reconciler, records: Any) -> Any:
        steps[-1].changed = self.writes.changed()
        return await since(self, records)

    async def counted_step(self: reconciler.Reconciler, *, term: leader.Term) -> None:
        steps.append(_Step())
        await step(self, term=term)

    monkeypatch.setattr(jobs.LiveRecords, "read", counted_read)
    monkeypatch.setattr(jobs.LiveRecords, "read_again", counted_again)
    monkeypatch.setattr(reconciler.Reconciler, "_records_since", counted_since)
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
        uid = str((harness.job("read") or {})["metadata"]["uid"])
    ran = [s for s in steps if s.full]
    assert all(s.full == 1 for s in ran), steps
    assert all(s.changed is not None for s in ran), "every write after the reads says what"
    assert all(s.again == ([frozenset(s.changed)] if s.changed else []) for s in ran), steps
    # The gang's start and its end were each committed in a step that read its record again,
    # so the status that step wrote showed what it had just committed.
    assert sum(1 for s in ran if s.again == [frozenset({uid})]) >= 2, steps
