"""PodGroups end to end (Kubernetes 1.35+ with the GangScheduling gates), against the emulator
serving them as a real cluster with those gates does, and PostgreSQL: every released gang of
two or more pods goes with a PodGroup of its own, kube-scheduler binds its pods together or
none of them, the group goes with the attempt, a crash at any write converges with no orphan
group, a group the scheduler cannot bind is torn down after the bind timeout, and `off`, or
`auto` where the API is not served, changes nothing."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.api import published
from gangq.queue.bench import releases
from gangq.queue.config import QuotaConfig, TenantConfig
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import lifecycle, objects, podgroups, resources
from gangq.queue.kube.client import MERGE_PATCH
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.cluster import Inventory
from gangq.queue.kubesim.storage import Event
from gangq.queue.store import database, jobs
from tests.controller import bad_input
from tests.controller.conftest import Harness, running_harness, training_job, wait_for
from tests.controller.test_controller_crash import _crash_at
from tests.controller.test_controller_grow import _delete, _running_at_two, _size, _watch_sizes
from tests.controller.test_controller_shrink import _run_elastic, _shrink

EIGHT_NODES = Inventory(nodes=8, gpus_per_node=8, racks=2)
FOUR_NODES = Inventory(nodes=4, gpus_per_node=8, racks=2)
GROUPS = "scheduling.k8s.io/podgroups"


@pytest.fixture
async def gangs(engine: AsyncEngine) -> AsyncIterator[Harness]:
    async with running_harness(engine, podgroups=True) as built:
        yield built


def _groups(harness: Harness) -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g for g in harness.objects(resources.POD_GROUPS, "ml-train")}


def _pods(harness: Harness, job: str) -> dict[int, dict[str, Any]]:
    return {
        int(p["metadata"]["labels"][objects.REPLICA_LABEL]): p
        for p in harness.objects(resources.PODS, "ml-train")
        if p["metadata"]["labels"].get(objects.JOB_NAME_LABEL) == job
    }


async def test_a_gang_is_bound_as_its_pod_group_which_goes_with_the_attempt(
    gangs: Harness, database_url: str, tmp_path: Path
) -> None:
    harness = gangs
    view = harness.start()
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("pair", replicas=2, run_seconds=1.0)
    )
    await wait_for(lambda: harness.phase("pair") == "Running")
    (name, group), *others = _groups(harness).items()
    assert not others
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert group["metadata"]["labels"][objects.JOB_NAME_LABEL] == "pair"
    assert group["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert podgroups.shown(group).status == "True"
    pods = _pods(harness, "pair")
    assert {objects.pod_group_of(p) for p in pods.values()} == {name}
    assert all(p["spec"].get("nodeName") for p in pods.values())
    # What the REST API shows of it, from the view the controller publishes.
    await wait_for(lambda: view.get(resources.POD_GROUPS, f"ml-train/{name}") is not None)
    cluster = published.PublishedCluster(published.snapshot_of(view))
    async with bad_input.rest(database_url, tmp_path, cluster=cluster) as api:
        shown = (await api.get("/v1/jobs/ml-train/pair")).json()["podGroups"]
    assert [(g["name"], g["minCount"], g["scheduled"]) for g in shown] == [(name, 2, "True")]
    await wait_for(lambda: harness.phase("pair") == "Succeeded")
    await wait_for(lambda: not _groups(harness))


async def test_two_hundred_releases_are_never_listed_partly_bound(engine: AsyncEngine) -> None:
    """A client LISTs pods without pause while 200 gangs of 2 to 4 pods are released: no
    consistent LIST shows a group with some pods bound and others not."""
    async with running_harness(engine, inventory=EIGHT_NODES, podgroups=True) as harness:
        quota = QuotaConfig(device_class="gpu.nvidia.com", nominal=64)
        harness.start(tenants=(TenantConfig(name="ml-train", quotas=(quota,)),))
        listed, partial = 0, 0
        done = asyncio.Event()

        async def lister() -> None:
            nonlocal listed, partial
            while not done.is_set():
                answer = await harness.kube.list(resources.PODS, query=releases.LIVE_PODS)
                partial += releases.partly_bound(answer.get("items") or [])
                listed += 1

        listing = asyncio.create_task(lister())
        chosen = random.Random(38)
        names = [f"g{i}" for i in range(200)]
        for name in names:
            body = training_job(
                name, replicas=chosen.randint(2, 4), devices=chosen.choice((1, 2)), run_seconds=0.1
            )
            await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
        await wait_for(lambda: all(harness.phase(n) == "Succeeded" for n in names), within_s=240.0)
        done.set()
        await listing
        assert listed > 200
        assert partial == 0
        await wait_for(lambda: not _groups(harness))


async def test_off_or_auto_without_the_api_makes_no_pod_group(
    harness: Harness, engine: AsyncEngine
) -> None:
    """`auto` against a cluster that does not serve PodGroups, then `off` against one that
    does: gangs are released as they always were (the first pod ungated once the others
    exist gated), and no pod names a group."""
    async with running_harness(engine, podgroups=True) as serving:
        for cluster, mode in ((harness, "auto"), (serving, "off")):
            name = f"plain-{mode}"
            view = cluster.start(pod_groups=mode)
            await cluster.kube.create(
                resources.TRAINING_JOBS, "ml-train", training_job(name, replicas=2)
            )
            await wait_for(lambda c=cluster, n=name: c.phase(n) == "Succeeded")  # type: ignore[misc]
            assert not view.pod_groups
            pods = _pods(cluster, name)
            assert len(pods) == 2
            assert all(objects.pod_group_of(p) is None for p in pods.values())
            # One leader at a time over the one database.
            await cluster.stop()
        assert not serving.objects(resources.POD_GROUPS)


async def test_on_without_the_api_refuses_to_start(harness: Harness) -> None:
    harness.start(pod_groups="on")
    task = harness.runs["a"][0]
    with pytest.raises(InvalidInputError, match="GangScheduling"):
        await asyncio.wait_for(task, timeout=10)
    harness.runs.pop("a")


async def test_a_crash_at_any_write_of_a_released_gang_leaves_no_pod_group(
    gangs: Harness,
) -> None:
    """Killed after each write in turn (the group's creation among them), the controller
    converges: the job succeeds, nothing is left half-bound, and its group is gone."""
    index = 1
    while await _crash_at(gangs, index, name=f"crash-{index}"):
        await wait_for(lambda: not _groups(gangs))
        index += 1
    assert index > 10, "the lifecycle was expected to take more writes"


async def test_a_group_kube_scheduler_cannot_bind_is_torn_down_after_the_bind_timeout(
    gangs: Harness,
) -> None:
    """Every node is tainted NoSchedule right after the gang's PodGroup is made (a node lost
    between placement and binding): kube-scheduler calls the group unschedulable and retries
    it without pause; after the bind timeout the attempt is torn down, the retries stop, and
    the job is queued again, saying why. Once the taints go it runs."""
    harness = gangs
    registry = harness.cluster.registry
    nodes = [n["metadata"]["name"] for n in harness.objects(resources.NODES)]
    tainted = asyncio.Event()
    taint = {"key": "maintenance", "effect": "NoSchedule"}

    def taint_all() -> None:
        for node in nodes:
            registry.patch(kinds.NODES, "", node, MERGE_PATCH, {"spec": {"taints": [taint]}})
        tainted.set()

    def on_group(event: Event) -> None:
        if event.resource == GROUPS and event.type == "ADDED" and not tainted.is_set():
            asyncio.get_running_loop().call_soon(taint_all)

    registry.storage.listeners.append(on_group)
    harness.start(pod_group_bind_timeout_s=1.0)
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("stuck", replicas=2, maxRestarts=2)
    )
    await tainted.wait()
    cycles = harness.cluster.scheduler.gang_cycles
    await wait_for(lambda: sum(cycles.values()) > 0)
    await wait_for(lambda: not _pods(harness, "stuck") or _all_gone(harness, "stuck"))
    await wait_for(lambda: not _groups(harness))
    settled = sum(cycles.values())
    await asyncio.sleep(0.3)
    assert sum(cycles.values()) == settled, "kube-scheduler kept retrying a gang with no pods"
    history = await _history(harness, "stuck")
    requeued = [e for e in history if e.kind == "requeued"]
    assert requeued and "not bound by kube-scheduler within 1 s" in requeued[0].reason
    events = bad_input.kube_events(harness, "stuck", "ml-train", "Unschedulable")
    assert events and "not bound by kube-scheduler" in events[0]["message"]
    for node in nodes:
        registry.patch(kinds.NODES, "", node, MERGE_PATCH, {"spec": {"taints": []}})
    await wait_for(lambda: harness.phase("stuck") == "Succeeded")


def _all_gone(harness: Harness, job: str) -> bool:
    return all(lifecycle.is_terminated(p) for p in _pods(harness, job).values())


async def _history(harness: Harness, job: str) -> list[Any]:
    async with database.session_factory(harness.engine)() as session:
        detail = await jobs.get_job(session, f"ml-train/{job}")
    return [] if detail is None else list(detail.history)


async def test_the_replicas_a_grow_adds_bind_as_a_group_of_their_own(engine: AsyncEngine) -> None:
    """An elastic gang started at 2 of 4 grows to 4 when the gang beside it ends: the added
    replicas come in a group of their own (minCount 2) and bind together; the group the gang
    started with runs on as it was."""
    async with running_harness(engine, inventory=FOUR_NODES, podgroups=True) as harness:
        harness.start()
        blocker = await _running_at_two(
            harness, "elastic", checkpointIntervalSeconds=1, restartSeconds=0
        )
        (started,) = {objects.pod_group_of(p) for p in _pods(harness, "elastic").values()}
        assert started is not None and started.endswith("-0-1")
        await _delete(harness, blocker)
        await wait_for(lambda: _size(harness, "elastic") == "4/4")
        pods = _pods(harness, "elastic")
        (added,) = {objects.pod_group_of(pods[r]) for r in (2, 3)}
        assert added is not None and added.endswith("-2-3")
        groups = _groups(harness)
        assert groups[added]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        assert all(podgroups.shown(groups[g]).status == "True" for g in (started, added))
        assert all(p["spec"].get("nodeName") for p in pods.values())
        await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "elastic")
        await wait_for(lambda: not _groups(harness))


async def test_a_shrunk_gang_keeps_its_group_and_grows_back_in_a_new_one(
    engine: AsyncEngine,
) -> None:
    """A 4-replica gang shrinks to 2: its group keeps minCount 4 (a PodGroup's policy is
    immutable) and stays scheduled while 2 of its pods run on. When it grows back, the two
    replicas join no group short of members: they come in a group of their own."""
    async with running_harness(engine, inventory=FOUR_NODES, podgroups=True) as harness:
        harness.start()
        await _run_elastic(harness, checkpointIntervalSeconds=1, restartSeconds=0)
        (started,) = {objects.pod_group_of(p) for p in _pods(harness, "elastic").values()}
        assert started is not None and started.endswith("-0-3")
        kept = {r: p["metadata"]["uid"] for r, p in _pods(harness, "elastic").items() if r < 2}
        sizes = _watch_sizes(harness, "elastic")
        await _shrink(engine)
        await wait_for(lambda: "2/4" in sizes)
        await wait_for(lambda: sizes[-1] == "4/4" and len(_pods(harness, "elastic")) == 4)
        group = _groups(harness)[started]
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        assert podgroups.shown(group).status == "True"
        pods = _pods(harness, "elastic")
        assert {r: pods[r]["metadata"]["uid"] for r in (0, 1)} == kept
        (regrown,) = {objects.pod_group_of(pods[r]) for r in (2, 3)}
        assert regrown is not None and regrown != started and regrown.endswith("-2-3")
        assert all(p["spec"].get("nodeName") for p in pods.values())
