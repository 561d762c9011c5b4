"""Shrinking an elastic gang end to end (rule 13): a preemption's victim with `keep` is asked
for a checkpoint like an evicting gang, then gives back its replicas from `keep` on, pods
before claims before devices, and runs on with the same pods, which see their new size.

The decision is written with the store function a cycle writes preemptions with, so these
tests do not depend on when the core chooses a shrink."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.core import model
from gangq.queue.kube import checkpoints, objects, resources, status
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.storage import DELETED, Event
from gangq.queue.store import admission, database, jobs, reservations, snapshot
from gangq.queue.store.models import JobRow
from tests.controller import bad_input
from tests.controller.conftest import Harness, running_harness, training_job, wait_for
from tests.controller.crashes import KillAfterWrite
from tests.controller.test_controller_grow import NOT_GROWN_BY_THE_CYCLE

FOUR_NODES = Inventory(nodes=4, gpus_per_node=8, racks=2)
PREEMPTOR = "inference/serve"
SIZE_LINE = f"{objects.PODINFO_VOLUME}/annotations: {objects.SIZE}=2"


@pytest.fixture
async def wide(engine: AsyncEngine) -> AsyncIterator[Harness]:
    async with running_harness(engine, inventory=FOUR_NODES) as built:
        yield built


def _pods(harness: Harness, job: str = "elastic") -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p
        for p in harness.objects(resources.PODS, "ml-train")
        if p["metadata"]["labels"].get("gangq.dev/job-name") == job
    }


def _claims(harness: Harness, job: str = "elastic") -> dict[str, dict[str, Any]]:
    return {
        c["metadata"]["name"]: c
        for c in harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
        if c["metadata"]["name"].startswith(f"{job}-")
    }


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


async def _run_elastic(harness: Harness, name: str = "elastic", **spec: Any) -> float:
    """A 4 x 8 job, elastic down to 2, running on all four nodes; returns its start."""
    body = training_job(name, replicas=4, run_seconds=None, elastic={"minReplicas": 2}, **spec)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: harness.phase(name) == "Running" and len(_pods(harness, name)) == 4)
    stamp = bad_input.status_of(harness, name, "ml-train")["startedAt"]
    return datetime.fromisoformat(stamp).timestamp()


async def _shrink(engine: AsyncEngine, name: str = "elastic", *, keep: int = 2) -> float:
    """A cycle's decision to shrink the job to `keep` replicas for a prod-inference job,
    written as a cycle writes its preemptions; returns when."""
    victim = model.Victim(model.JobKey(f"ml-train/{name}"), f"for {PREEMPTOR}", keep=keep)
    now = time.time()
    async with database.session_factory(engine)() as session, session.begin():
        loaded = await snapshot.load(session, model.Inventory(), now=now)
        await admission.write_preemptions(
            session,
            [model.Preemption(model.JobKey(PREEMPTOR), (victim,))],
            holding=loaded.holding,
            queued=loaded.pending,
            now=now,
            actor="test",
        )
    return now


def _shrunk(harness: Harness, name: str = "elastic") -> bool:
    """Pods and claims of replicas 0 and 1 only, the pods told their size, the status too."""
    pods, claims = _pods(harness, name), _claims(harness, name)
    wanted = {f"{name}-0", f"{name}-1"}
    return (
        set(pods) == wanted
        and set(claims) == wanted
        and all(_annotations(p).get(objects.SIZE) == "2" for p in pods.values())
        and bad_input.status_of(harness, name, "ml-train").get("size") == "2/4"
    )


async def _row(engine: AsyncEngine, name: str = "elastic") -> JobRow:
    async with database.session_factory(engine)() as session:
        row = await session.scalar(select(JobRow).where(JobRow.name == name))
    assert row is not None
    return row


def _events(harness: Harness, reason: str) -> list[dict[str, Any]]:
    return [e for e in harness.objects(resources.EVENTS, "ml-train") if e.get("reason") == reason]


def _asked(harness: Harness) -> str | None:
    """The checkpoint request every pod shows, once all four show the same one."""
    stamps = {_annotations(p).get(objects.CHECKPOINT_REQUESTED) for p in _pods(harness).values()}
    if len(_pods(harness)) == 4 and len(stamps) == 1 and None not in stamps:
        return stamps.pop()
    return None


async def _log(harness: Harness, pod: str) -> str:
    return str(await client.CoreV1Api(harness.api).read_namespaced_pod_log(pod, "ml-train"))


async def _runs_on(harness: Harness, engine: AsyncEngine, kept: dict[str, str]) -> JobRow:
    """The shrunk gang runs on with the same pods (uid by name), which see the new size and
    no checkpoint request; the job was neither requeued nor restarted."""
    pods = _pods(harness)
    assert {name: p["metadata"]["uid"] for name, p in pods.items()} == kept
    for name, pod in pods.items():
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        assert objects.CHECKPOINT_REQUESTED not in _annotations(pod)
        assert SIZE_LINE in (await _log(harness, name)).splitlines()
    assert harness.phase("elastic") == "Running"
    row = await _row(engine)
    assert (row.phase, row.size, row.evicting, row.shrink_to) == ("Running", 2, False, None)
    assert (row.preemptions, row.restarts, row.attempts) == (0, 0, 1)
    async with database.session_factory(engine)() as session:
        held = (await reservations.active_by_job(session, [row.id]))[row.id]
        detail = await jobs.get_job(session, "ml-train/elastic")
    assert sorted(p.replica for p in held) == [0, 1]
    assert detail is not None
    kinds = [e.kind for e in detail.history]
    assert kinds == ["enqueued", "admitted", "started", "preempted", "released"], kinds
    return row


async def test_a_gang_that_answers_shrinks_after_its_checkpoint(
    wide: Harness, engine: AsyncEngine
) -> None:
    harness = wide
    harness.start()
    started = await _run_elastic(
        harness, preemption={"checkpointGraceSeconds": 120}, **NOT_GROWN_BY_THE_CYCLE
    )
    kept = {n: p["metadata"]["uid"] for n, p in _pods(harness).items() if n < "elastic-2"}
    await wait_for(lambda: time.time() > started + 3, within_s=10)
    await _shrink(engine)
    stamp = await wait_for(lambda: _asked(harness))
    asked = datetime.fromisoformat(stamp).timestamp()
    condition = await wait_for(
        lambda: bad_input.condition(harness, "elastic", "ml-train", status.CHECKPOINT_REQUESTED)
    )
    assert condition["reason"] == "Shrinking"
    assert (
        f"checkpoint requested at {stamp} for {PREEMPTOR}, shrinking to 2 replicas by"
        in (condition["message"])
    )
    (requested,) = _events(harness, status.CHECKPOINT_REQUESTED)
    assert "shrinking to 2 replicas by" in requested["message"]
    # While asked, it runs whole and holds its devices.
    assert len(_pods(harness)) == 4 and len(_claims(harness)) == 4
    assert bad_input.status_of(harness, "elastic", "ml-train")["size"] == "4/4"

    # The test plays the pod: it saves and reports a checkpoint at once.
    saved = float(int(time.time()))
    report = {
        "metadata": {"annotations": {checkpoints.CHECKPOINT_ANNOTATION: objects.rfc3339(saved)}}
    }
    await harness.kube.patch(resources.TRAINING_JOBS, "ml-train", "elastic", report)
    await wait_for(lambda: _shrunk(harness), within_s=15)
    done = time.time()
    assert done < asked + 60, "shrunk on the report, not at the end of the grace"
    row = await _runs_on(harness, engine, kept)
    # The whole gang re-forms from that checkpoint: 32 devices x the time since it.
    assert 0 <= row.lost_device_s <= 32 * (done - saved + 1)
    assert row.lost_device_s < 32 * (saved - started)
    (shrunk,) = _events(harness, "Shrunk")
    assert shrunk["type"] == "Normal"
    assert shrunk["message"].startswith(
        "shrunk from 4 to 2 replicas after the checkpoint it was asked for, "
        "16 devices released, lost "
    )
    assert not bad_input.condition(harness, "elastic", "ml-train", status.CHECKPOINT_REQUESTED)


async def test_a_gang_that_does_not_answer_shrinks_when_its_grace_ends(
    wide: Harness, engine: AsyncEngine
) -> None:
    harness = wide
    harness.start()
    started = await _run_elastic(
        harness, preemption={"checkpointGraceSeconds": 3}, **NOT_GROWN_BY_THE_CYCLE
    )
    kept = {n: p["metadata"]["uid"] for n, p in _pods(harness).items() if n < "elastic-2"}
    await _shrink(engine)
    asked = datetime.fromisoformat(await wait_for(lambda: _asked(harness))).timestamp()
    await wait_for(lambda: len(_pods(harness)) < 4, within_s=15)
    assert time.time() >= asked + 3, "shrunk before the grace ended"
    await wait_for(lambda: _shrunk(harness), within_s=15)
    row = await _runs_on(harness, engine, kept)
    # No checkpoint: the whole gang's run since its start is lost.
    assert row.lost_device_s >= 32 * (asked + 3 - started - 1)
    (shrunk,) = _events(harness, "Shrunk")
    assert shrunk["message"].startswith(
        "shrunk from 4 to 2 replicas: no checkpoint within 3s of the request"
    )


def _deletions(harness: Harness) -> dict[tuple[str, str], float]:
    """When each pod and claim of the job left the API server, by (kind, name), as it happens."""
    gone: dict[tuple[str, str], float] = {}

    def on_event(event: Event) -> None:
        name = str(event.object["metadata"]["name"])
        if event.type == DELETED and name.startswith("elastic-"):
            gone[(event.resource, name)] = time.time()

    harness.cluster.registry.storage.listeners.append(on_event)
    return gone


async def test_a_gang_without_grace_shrinks_at_once(wide: Harness, engine: AsyncEngine) -> None:
    """And in order (rule 13): the leaving pods are gone before their claims are deleted, and
    the claims before the store gives their devices back."""
    harness = wide
    harness.start()
    started = await _run_elastic(harness, **NOT_GROWN_BY_THE_CYCLE)
    kept = {n: p["metadata"]["uid"] for n, p in _pods(harness).items() if n < "elastic-2"}
    gone = _deletions(harness)
    decided = await _shrink(engine)
    await wait_for(lambda: _shrunk(harness), within_s=10)
    done = time.time()
    pods_gone = max(gone[(kinds.PODS.key, f"elastic-{r}")] for r in (2, 3))
    claims = [gone[(kinds.RESOURCE_CLAIMS.key, f"elastic-{r}")] for r in (2, 3)]
    async with engine.connect() as connection:
        released = (
            await connection.execute(
                text("SELECT min(released_at) FROM reservations WHERE released_at IS NOT NULL")
            )
        ).scalar()
    assert pods_gone <= min(claims)
    assert max(claims) <= released.timestamp()
    assert not any(objects.CHECKPOINT_REQUESTED in _annotations(p) for p in _pods(harness).values())
    row = await _runs_on(harness, engine, kept)
    assert 32 * (decided - started - 1) <= row.lost_device_s <= 32 * (done - started + 1)
    (shrunk,) = _events(harness, "Shrunk")
    assert shrunk["message"].startswith("shrunk from 4 to 2 replicas, 16 devices released")
    counted = harness.metrics["a"].registry.get_sample_value(
        "gangq_elastic_resizes_total", {"tier": "training", "outcome": "shrunk"}
    )
    assert counted == 1.0


async def _claims_match_the_store(harness: Harness, engine: AsyncEngine, name: str) -> None:
    """The store's active reservation of each replica is what its claim holds allocated."""
    row = await _row(engine, name)
    async with database.session_factory(engine)() as session:
        held = (await reservations.active_by_job(session, [row.id]))[row.id]
    claims = _claims(harness, name)
    assert {p.replica: tuple(sorted(p.devices)) for p in held} == {
        int(n.rsplit("-", 1)[1]): objects.allocated_devices(c) for n, c in claims.items()
    }


async def _shrink_with_crash_at(
    harness: Harness, engine: AsyncEngine, index: int, *, grace_s: int | None
) -> bool:
    """A running elastic gang shrinks (asked for a checkpoint it never gives, with a grace)
    with the controller killed right after the `index`-th cluster write of the shrink; a new
    leader finishes it. False when it had fewer writes."""
    name = f"elastic-{index}"
    harness.start("setup")
    spec = {} if grace_s is None else {"preemption": {"checkpointGraceSeconds": grace_s}}
    await _run_elastic(harness, name, **spec, **NOT_GROWN_BY_THE_CYCLE)
    await harness.stop("setup")
    killer = KillAfterWrite(harness, index, "shrinker")
    fired, doubles = killer.fired, killer.doubles
    listeners = harness.cluster.registry.storage.listeners
    listeners.append(killer)
    try:
        await _shrink(engine, name)
        harness.start("shrinker")
        await wait_for(lambda: fired.is_set() or _shrunk(harness, name))
        if fired.is_set():
            await harness.kill("shrinker")
            harness.start("shrinker")
        await wait_for(lambda: _shrunk(harness, name))
        # The cluster shows the new size once the store has committed the shrink.
        row = await _row(engine, name)
        assert (row.phase, row.size, row.evicting, row.shrink_to) == ("Running", 2, False, None)
        await _claims_match_the_store(harness, engine, name)
        assert all(
            not p["metadata"].get("deletionTimestamp") for p in _pods(harness, name).values()
        )
        assert not doubles, f"devices allocated twice after a crash at write {index}: {doubles}"
    finally:
        listeners.remove(killer)
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", name)
    await wait_for(lambda: not harness.objects(resources.TRAINING_JOBS))
    await wait_for(lambda: not _claims(harness, name) and not _pods(harness, name))
    # The next run starts whole only once the store has released this one's devices.
    for _ in range(200):
        if not await _active_reservations(engine):
            break
        await asyncio.sleep(0.05)
    assert not await _active_reservations(engine), "the deleted job's devices stay reserved"
    await harness.stop("shrinker")
    return fired.is_set()


async def _active_reservations(engine: AsyncEngine) -> int:
    async with engine.connect() as connection:
        query = text("SELECT count(*) FROM reservations WHERE released_at IS NULL")
        return int((await connection.execute(query)).scalar() or 0)


@pytest.mark.parametrize(("grace_s", "writes"), [(None, 10), (2, 15)], ids=["at-once", "asked"])
async def test_a_crash_at_any_write_of_a_shrink_converges(
    wide: Harness, engine: AsyncEngine, grace_s: int | None, writes: int
) -> None:
    index = 1
    while await _shrink_with_crash_at(wide, engine, index, grace_s=grace_s):
        index += 1
    assert index > writes, f"a shrink should take more than {writes} writes"


def _env(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


async def test_a_gang_not_started_yet_sheds_its_leaving_replicas_and_starts_at_the_new_size(
    wide: Harness, engine: AsyncEngine
) -> None:
    """Its pods cannot be created yet (the API server fails them): the claims of the leaving
    replicas go, nothing is lost, and once pods can be made the gang starts at 2, its pods
    built for that size."""
    harness = wide
    harness.cluster.faults.fail_next(100_000, code=500, verb="create", resource="pods")
    harness.start()
    body = training_job(
        "elastic",
        replicas=4,
        run_seconds=None,
        elastic={"minReplicas": 2},
        **NOT_GROWN_BY_THE_CYCLE,
    )
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)

    def allocated() -> bool:
        claims = _claims(harness)
        return len(claims) == 4 and all(objects.allocated_devices(c) for c in claims.values())

    await wait_for(allocated)
    assert not _pods(harness)
    await _shrink(engine)
    await wait_for(lambda: set(_claims(harness)) == {"elastic-0", "elastic-1"})
    harness.cluster.faults.clear()
    await wait_for(lambda: harness.phase("elastic") == "Running", within_s=30)
    pods = _pods(harness)
    assert set(pods) == {"elastic-0", "elastic-1"}
    for pod in pods.values():
        assert (_env(pod)["GANGQ_REPLICAS"], _env(pod)["WORLD_SIZE"]) == ("2", "2")
        assert _annotations(pod)[objects.SIZE] == "2"
    assert bad_input.status_of(harness, "elastic", "ml-train")["size"] == "2/4"
    row = await _row(engine)
    assert (row.size, row.shrink_to, row.lost_device_s, row.preemptions) == (2, None, 0.0, 0)
    async with database.session_factory(engine)() as session:
        detail = await jobs.get_job(session, "ml-train/elastic")
    assert detail is not None
    (shrunk,) = [e for e in detail.history if e.kind == "released"]
    assert shrunk.reason == "shrunk from 4 to 2 replicas before it started, lost 0 device-h"


async def test_the_cycle_shrinks_an_elastic_gang_for_a_prod_inference_job(
    wide: Harness, engine: AsyncEngine
) -> None:
    """The core's own decision, carried out: one node is needed, so replica 3 goes and the
    gang runs on at 3 while the preemptor starts on the freed node."""
    harness = wide
    tiers = tuple(
        t.model_copy(update={"min_runtime_before_preemption_s": 0.0})
        for t in harness.settings.tiers
    )
    harness.start(tiers=tiers)
    await _run_elastic(harness)
    kept = {n: p["metadata"]["uid"] for n, p in _pods(harness).items() if n != "elastic-3"}
    serve = training_job(
        "serve", namespace="inference", tier="prod-inference", replicas=1, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", serve)
    await wait_for(lambda: harness.phase("serve", "inference") == "Running", within_s=20)
    await wait_for(
        lambda: (
            bad_input.status_of(harness, "elastic", "ml-train").get("size") == "3/4"
            and all(_annotations(p).get(objects.SIZE) == "3" for p in _pods(harness).values())
        )
    )
    assert {n: p["metadata"]["uid"] for n, p in _pods(harness).items()} == kept
    assert set(_claims(harness)) == set(kept)
    assert harness.phase("elastic") == "Running"
    row = await _row(engine)
    assert (row.size, row.shrink_to, row.evicting, row.preemptions) == (3, None, False, 0)
    async with database.session_factory(engine)() as session:
        detail = await jobs.get_job(session, "ml-train/elastic")
    assert detail is not None
    (asked,) = [e for e in detail.history if e.kind == "preempted"]
    (shrunk,) = [e for e in detail.history if e.kind == "released"]
    assert asked.reason.startswith(f"shrinking from 4 to 3 replicas: preempted by {PREEMPTOR}")
    assert asked.details["to"] == 3
    assert shrunk.reason.startswith("shrunk from 4 to 3 replicas, lost ")
    assert shrunk.details["for"] == PREEMPTOR
