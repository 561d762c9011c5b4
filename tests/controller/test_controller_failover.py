"""The controller on a replicated PostgreSQL whose primary dies: a real standby is promoted.

Two servers stream from one another (`postgres_pair`), and the controller's `DATABASE_URL`
names both hosts with `target_session_attrs=read-write`, as a CloudNativePG `-rw` Service or a
Patroni cluster would be named. Synchronous replication loses nothing: every gang admitted
before the kill is admitted after it, and admissions resume within 10 s of the promotion.
Asynchronous replication loses the last commits: the promoted database has never heard of a
gang that runs, and the new leader adopts it before it admits anything.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.bench.postgres_pair import PostgresPair
from gangq.queue.kube import objects, resources
from gangq.queue.store import database, jobs, schema
from tests.controller.conftest import Harness, running_harness, training_job, wait_for

pytestmark = pytest.mark.slow

JOBS = 12


@pytest.fixture
async def pair_engine(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[PostgresPair, AsyncEngine]]:
    with PostgresPair(synchronous=request.param) as pair:
        engine = database.create_engine(pair.url)
        try:
            await schema.upgrade(engine)
            yield pair, engine
        finally:
            await engine.dispose()


class Watch:
    """What the cluster showed while the test ran: a device in two allocated claims at once
    (rule 1), a gang with some pods released and others still gated past the release step."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.double: set[str] = set()
        self.admitted_at: dict[str, float] = {}
        """Job -> when the watch first saw its claims allocated."""

    def look(self) -> None:
        claims = self.harness.objects(resources.RESOURCE_CLAIMS)
        held = Counter(d for c in claims for d in objects.allocated_devices(c) or ())
        self.double |= {d for d, n in held.items() if n > 1}
        for claim in claims:
            job = claim["metadata"]["labels"].get(objects.JOB_NAME_LABEL)
            if job and objects.allocated_devices(claim):
                self.admitted_at.setdefault(job, time.monotonic())

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.look()
            await asyncio.sleep(0.02)


def _pod_uids(harness: Harness, job: str) -> set[str]:
    return {
        p["metadata"]["uid"]
        for p in harness.objects(resources.PODS, "ml-train")
        if p["metadata"]["labels"].get(objects.JOB_NAME_LABEL) == job
    }


@pytest.mark.parametrize("pair_engine", [True], indirect=True, ids=["synchronous"])
async def test_a_killed_primary_loses_no_admission_and_admissions_resume(
    pair_engine: tuple[PostgresPair, AsyncEngine],
) -> None:
    pair, engine = pair_engine
    async with running_harness(engine) as harness:
        watch, stop = Watch(harness), asyncio.Event()
        watching = asyncio.create_task(watch.run(stop))
        harness.start("a")
        for index in range(JOBS):
            await harness.kube.create(
                resources.TRAINING_JOBS,
                "ml-train",
                training_job(f"burst-{index}", replicas=2, devices=2, run_seconds=3.0),
            )
        await wait_for(lambda: len(watch.admitted_at) >= 3)
        before = {job: _pod_uids(harness, job) for job in watch.admitted_at}
        await asyncio.to_thread(pair.kill_primary)
        await asyncio.sleep(1.0)  # the controller meets a dead primary and a read-only standby
        seen_before = set(watch.admitted_at)
        await asyncio.to_thread(pair.promote)
        promoted = time.monotonic()
        await wait_for(lambda: set(watch.admitted_at) - seen_before, within_s=10.0)
        resumed_s = min(watch.admitted_at[j] for j in set(watch.admitted_at) - seen_before)
        assert resumed_s - promoted <= 10.0
        names = [f"burst-{i}" for i in range(JOBS)]
        await wait_for(lambda: all(harness.phase(n) == "Succeeded" for n in names), within_s=120.0)
        stop.set()
        await watching
        assert watch.double == set()
        assert harness.objects(resources.RESOURCE_CLAIMS) == [], "claims leaked"
        for job, uids in before.items():
            assert uids <= _pod_uids(harness, job), f"{job}'s pods were made again"
        recovered = harness.metrics["a"].recovery_actions.collect()[0].samples
        assert [s for s in recovered if s.name.endswith("_total")] == []
        # No gang started in part and was torn down: each was admitted once and never requeued.
        sessions = database.session_factory(engine)
        async with sessions() as session:
            for name in names:
                detail = await jobs.get_job(session, f"ml-train/{name}")
                assert detail is not None
                kinds = [str(e.kind) for e in detail.history]
                assert (kinds.count("admitted"), kinds.count("requeued")) == (1, 0), kinds


@pytest.mark.parametrize("pair_engine", [False], indirect=True, ids=["asynchronous"])
async def test_a_stale_standby_promoted_adopts_the_gangs_it_never_heard_of(
    pair_engine: tuple[PostgresPair, AsyncEngine],
) -> None:
    pair, engine = pair_engine
    async with running_harness(engine) as harness:
        harness.start("a")
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job("known", devices=4, run_seconds=None)
        )
        await wait_for(lambda: harness.phase("known") == "Running")
        await asyncio.to_thread(pair.pause_replication)
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job("lost", devices=4, run_seconds=None)
        )
        await wait_for(lambda: harness.phase("lost") == "Running")
        await harness.kube.create(
            resources.TRAINING_JOBS, "ml-train", training_job("waiting", devices=8)
        )
        await wait_for(lambda: harness.phase("waiting") == "Queued")
        pods = {job: _pod_uids(harness, job) for job in ("known", "lost")}
        await asyncio.to_thread(pair.kill_primary)
        await asyncio.to_thread(pair.promote)

        await wait_for(lambda: harness.recovery_actions("a") == {"adopted": 1.0}, within_s=20.0)
        assert {job: _pod_uids(harness, job) for job in ("known", "lost")} == pods
        assert harness.phase("known") == harness.phase("lost") == "Running"
        assert harness.phase("waiting") == "Queued"
        await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "known")
        await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "lost")
        await wait_for(lambda: harness.phase("waiting") == "Succeeded", within_s=30.0)
        assert harness.objects(resources.RESOURCE_CLAIMS) == []
