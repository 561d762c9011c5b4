"""A controller started on a database that is behind the cluster: empty, or an older backup.

Gangs keep running in the cluster meanwhile. The new leader must adopt the gangs that run
whole, tear down and requeue the partial ones, release what the store holds without a claim,
queue the TrainingJobs that have no pods, and kill nothing that is healthy (issue: PostgreSQL
fails over and nothing is lost, item 5). The older backup is a real `pg_dump`, restored with
`pg_restore`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gangq.queue.bench import postgres_pair
from gangq.queue.kube import objects, resources
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.store import database, jobs
from tests import databases
from tests.controller.conftest import Harness, running_harness, training_job, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
async def other_url(server_url: str, template_database: str) -> AsyncIterator[str]:
    """A second migrated database on the same server: the one the new leader starts on."""
    async with databases.scratch(server_url, "gangq_recovery", template=template_database) as url:
        yield url


def _pods(harness: Harness, job: str) -> dict[str, str]:
    """Name -> uid of the job's pods that have not ended."""
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in harness.objects(resources.PODS, "ml-train")
        if p["metadata"]["labels"].get(objects.JOB_NAME_LABEL) == job
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    }


def _no_device_twice(harness: Harness) -> None:
    """Rule 1 as the cluster shows it: no device in two allocated claims."""
    held = Counter(
        device
        for claim in harness.objects(resources.RESOURCE_CLAIMS)
        for device in objects.allocated_devices(claim) or ()
    )
    assert [d for d, n in held.items() if n > 1] == []


async def _history(engine: AsyncEngine, key: str) -> list[tuple[str, str]]:
    sessions: async_sessionmaker[AsyncSession] = database.session_factory(engine)
    async with sessions() as session:
        detail = await jobs.get_job(session, key)
    assert detail is not None, f"{key} is not in the store"
    return [(str(e.kind), e.reason) for e in detail.history]


async def _switch(harness: Harness, url: str) -> AsyncEngine:
    """The next controller started talks to the database at `url`."""
    engine = database.create_engine(url)
    harness.engine = engine
    return engine


async def test_an_empty_database_adopts_running_gangs_and_requeues_the_rest(
    harness: Harness, other_url: str
) -> None:
    harness.start("a")
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("whole", devices=4, run_seconds=None)
    )
    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job("broken", replicas=1, devices=4, run_seconds=None),
    )
    await wait_for(lambda: harness.phase("whole") == harness.phase("broken") == "Running")
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("waiting", devices=8)
    )
    await wait_for(lambda: harness.phase("waiting") == "Queued")
    await harness.stop("a")
    kept = _pods(harness, "whole")
    assert len(kept) == 2
    # While no controller runs, one gang loses its pod: it is partial now.
    await harness.kube.delete(resources.PODS, "ml-train", "broken-0")
    await wait_for(lambda: not _pods(harness, "broken"))

    engine = await _switch(harness, other_url)
    try:
        harness.start("b")
        await wait_for(lambda: harness.recovery_actions("b") == {"adopted": 1.0, "torn_down": 1.0})
        await wait_for(lambda: harness.phase("broken") == "Running" and _pods(harness, "broken"))
        assert _pods(harness, "whole") == kept, "an adopted gang's pods were replaced"
        assert harness.phase("whole") == "Running"
        assert harness.phase("waiting") == "Queued"
        _no_device_twice(harness)
        whole = await _history(engine, "ml-train/whole")
        assert whole[0][0] == "enqueued"
        assert whole[1][0] == "recovered" and whole[1][1].startswith("adopted after database")
        broken = await _history(engine, "ml-train/broken")
        assert (
            "recovered",
            "torn down: partial gang found after database recovery: "
            "pods of replicas [], claims of [0]",
        ) in broken
        assert [kind for kind, _ in broken].count("admitted") == 1
        # The adopted gang holds its devices in the store: the 2 x 8 job waits for them and
        # starts once the adopted job and the one run again are deleted.
        await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "broken")
        await wait_for(lambda: not _pods(harness, "broken"))
        assert harness.phase("waiting") == "Queued"
        await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "whole")
        await wait_for(lambda: harness.phase("waiting") in ("Running", "Succeeded"), within_s=30)
        _no_device_twice(harness)
    finally:
        await harness.stop("b")
        await engine.dispose()


async def test_an_older_backup_finishes_ended_gangs_and_adopts_later_ones(
    harness: Harness, database_url: str, other_url: str, tmp_path: Path
) -> None:
    """The backup shows `first` running and knows nothing of `second`; since then `first`
    succeeded and `second` runs on its devices."""
    harness.start("a")
    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job("first", replicas=2, devices=8, run_seconds=4.0),
    )
    await wait_for(lambda: harness.phase("first") == "Running")
    backup = tmp_path / "gangq.dump"
    postgres_pair.dump(database_url, backup)
    await harness.kube.create(
        resources.TRAINING_JOBS,
        "ml-train",
        training_job("second", replicas=2, devices=8, run_seconds=None),
    )
    await wait_for(lambda: harness.phase("second") == "Running", within_s=30)
    await harness.stop("a")
    postgres_pair.restore(backup, other_url)

    engine = await _switch(harness, other_url)
    try:
        harness.start("b")
        await wait_for(lambda: harness.recovery_actions("b") == {"adopted": 1.0, "finished": 1.0})
        first: list[tuple[str, str]] = await _history(engine, "ml-train/first")
        assert first[-1] == (
            "succeeded",
            "finished before the database recovery: every pod succeeded",
        )
        second = await _history(engine, "ml-train/second")
        assert [kind for kind, _ in second] == ["enqueued", "recovered"]
        running = _pods(harness, "second")
        assert len(running) == 2
        _no_device_twice(harness)
        await wait_for(lambda: harness.phase("first") == "Succeeded")
        assert harness.phase("second") == "Running"
        assert _pods(harness, "second") == running
    finally:
        await harness.stop("b")
        await engine.dispose()


async def test_a_partial_gang_slow_to_go_is_neither_admitted_again_nor_built_on(
    engine: AsyncEngine, other_url: str
) -> None:
    """The soak's finding: the new leader tears down a gang the database lost, the API server
    refuses the claims' deletion for a while, and meanwhile the job is queued again. No gang
    may be placed on the devices those claims still hold (a serving job ordered first would
    take the first node), and the job's new attempt must not start until the old claims are
    gone (the names would meet)."""
    async with running_harness(engine, inventory=Inventory(nodes=3, gpus_per_node=8)) as harness:
        harness.start("a")
        # It saves checkpoints, so it may also take the node the serving job could scale into.
        lost_job = training_job("lost", devices=8, run_seconds=None, checkpointIntervalSeconds=600)
        await harness.kube.create(resources.TRAINING_JOBS, "ml-train", lost_job)
        await wait_for(lambda: harness.phase("lost") == "Running")
        await harness.stop("a")
        old = {
            c["metadata"]["name"]: objects.allocated_devices(c)
            for c in harness.objects(resources.RESOURCE_CLAIMS)
        }
        await harness.kube.delete(resources.PODS, "ml-train", "lost-1")
        await wait_for(lambda: len(_pods(harness, "lost")) == 1)
        serving = training_job(
            "serving", namespace="inference", tier="prod-inference", replicas=1, devices=8
        )
        await harness.kube.create(resources.TRAINING_JOBS, "inference", serving)
        harness.cluster.faults.fail_next(10, code=500, verb="delete", resource="resourceclaims")

        new_engine = await _switch(harness, other_url)
        try:
            harness.start("b")
            seen_twice: list[str] = []

            def settled() -> bool:
                held = Counter(
                    d
                    for c in harness.objects(resources.RESOURCE_CLAIMS)
                    for d in objects.allocated_devices(c) or ()
                )
                seen_twice.extend(d for d, n in held.items() if n > 1)
                return harness.phase("lost") == "Running" and len(_pods(harness, "lost")) == 2

            await wait_for(settled, within_s=60)
            assert seen_twice == []
            assert harness.phase("serving", "inference") in ("Running", "Succeeded")
            lost = await _history(new_engine, "ml-train/lost")
            assert [kind for kind, _ in lost].count("admitted") == 1
            assert any(reason.startswith("torn down: partial gang") for _, reason in lost)
            assert old, "the lost gang had claims"
            _no_device_twice(harness)
        finally:
            await harness.stop("b")
            await new_engine.dispose()
