"""The Kubernetes edge on its own: retries, watch caches that survive drops and 410 Gone,
the TrainingJob converter and the settings file."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.client_proto import ResponseHandler
from kubernetes_asyncio import client

from gangq.queue import config
from gangq.queue.core import inventory
from gangq.queue.core.errors import InvalidInputError
from gangq.queue.kube import cache, objects, resources, retry, trainingjob
from gangq.queue.kube import client as client_module
from gangq.queue.kube.client import Kube, KubeError
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.emulator import Emulator
from gangq.queue.store import spec as stored_spec
from tests.controller.conftest import CRD, SMALL, settings, training_job, wait_for


@pytest.fixture
async def cluster() -> AsyncIterator[Emulator]:
    async with Emulator(inventory=SMALL, crds=(CRD,), history_size=8) as emulator:
        yield emulator


@pytest.fixture
async def kube(cluster: Emulator) -> AsyncIterator[Kube]:
    async with client.ApiClient(cluster.configuration()) as api_client:
        made = Kube(api_client)
        yield made
        await made.close()


@pytest.fixture
async def view(kube: Kube) -> AsyncIterator[cache.ClusterCache]:
    """A cluster view kept current until the test ends, its caches synced."""
    running = cache.ClusterCache(kube.api_client, settings=settings())
    stop = asyncio.Event()
    task = asyncio.create_task(running.run(stop))
    try:
        await asyncio.wait_for(running.synced.wait(), timeout=5)
        yield running
    finally:
        stop.set()
        await task


async def test_retry_rides_over_server_errors_and_gives_up_on_conflicts(
    cluster: Emulator, kube: Kube
) -> None:
    cluster.faults.fail_next(2, code=500, verb="create", resource="configmaps")
    body = {"metadata": {"name": "a"}, "data": {}}
    path = "/api/v1/namespaces/default/configmaps"
    created = await retry.retrying(lambda: kube.request("POST", path, body=body), what="create a")
    assert created["metadata"]["name"] == "a" and cluster.faults.injected == 2
    with pytest.raises(KubeError) as conflict:
        await retry.retrying(lambda: kube.request("POST", path, body=body), what="create a again")
    assert conflict.value.status == 409 and cluster.faults.injected == 2


@pytest.mark.parametrize(
    ("status", "retry_after", "attempt", "expected"),
    [
        (429, 1.0, 0, 1.0),
        (500, None, 0, 0.1),
        (500, None, 3, 0.8),
        (0, None, 10, 5.0),
        (503, 60.0, 0, 5.0),
    ],
    ids=["retry-after", "first-backoff", "doubling", "bounded", "retry-after-bounded"],
)
def test_retry_delays(
    status: int, retry_after: float | None, attempt: int, expected: float
) -> None:
    error = KubeError(status, "x", retry_after_s=retry_after)
    assert retry.is_retryable(error)
    assert retry.delay_s(error, attempt) == pytest.approx(expected)


def test_client_errors_are_not_retried() -> None:
    assert not retry.is_retryable(KubeError(409, "conflict"))
    assert not retry.is_retryable(KubeError(422, "invalid"))


async def test_watch_cache_relists_after_410_and_rewatches_after_a_drop(
    cluster: Emulator, kube: Kube
) -> None:
    changes = 0

    def touched() -> None:
        nonlocal changes
        changes += 1

    watched = cache.WatchCache(kube, resources.NAMESPACES, on_change=touched)
    task = asyncio.create_task(watched.run())
    try:
        await asyncio.wait_for(watched.synced.wait(), timeout=5)
        assert watched.relists == 1
        cluster.drop_watches()
        for index in range(20):
            cluster.registry.create(kinds.NAMESPACES, "", {"metadata": {"name": f"ns-{index}"}})
        await wait_for(lambda: "ns-19" in watched.objects and watched.relists == 2)
        cluster.drop_watches()
        await asyncio.sleep(0)
        await kube.create(resources.NAMESPACES, "", {"metadata": {"name": "after-drop"}})
        await wait_for(lambda: "after-drop" in watched.objects)
        assert watched.relists in (2, 3)
        assert not watched.foreign and not watched.by_gang, "only pods and claims are indexed"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _pod(name: str, **labels: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


def _regrouped(watched: cache.WatchCache) -> tuple[dict[str, set[str]], set[str]]:
    """What the kept index must equal: the cache's objects grouped from scratch."""
    gangs: dict[str, set[str]] = {}
    foreign = set()
    for key, obj in watched.objects.items():
        labels = obj["metadata"].get("labels") or {}
        if inventory.JOB_NAME_LABEL not in labels:
            foreign.add(key)
        elif objects.GANG_LABEL in labels:
            gangs.setdefault(labels[objects.GANG_LABEL], set()).add(key)
    return gangs, foreign


async def test_the_gang_and_foreign_indexes_follow_every_event_and_relist(
    cluster: Emulator, kube: Kube
) -> None:
    watched = cache.WatchCache(kube, resources.PODS, on_change=lambda: None)
    task = asyncio.create_task(watched.run())
    mine = {inventory.JOB_NAME_LABEL: "train"}

    def indexed() -> tuple[dict[str, set[str]], set[str]]:
        return {g: set(members) for g, members in watched.by_gang.items()}, set(watched.foreign)

    try:
        await asyncio.wait_for(watched.synced.wait(), timeout=5)
        await kube.create(
            resources.PODS, "default", _pod("a-0", **mine, **{objects.GANG_LABEL: "a"})
        )
        await kube.create(
            resources.PODS, "default", _pod("a-1", **mine, **{objects.GANG_LABEL: "a"})
        )
        await kube.create(resources.PODS, "default", _pod("other"))
        await wait_for(lambda: len(watched.objects) == 3)
        assert (
            indexed()
            == _regrouped(watched)
            == ({"a": {"default/a-0", "default/a-1"}}, {"default/other"})
        )
        foreign_seen = watched.foreign_version
        relabel = {"metadata": {"labels": {objects.GANG_LABEL: "b"}}}
        await kube.patch(resources.PODS, "default", "a-1", relabel)
        await kube.delete(resources.PODS, "default", "a-0", grace_s=0)
        await wait_for(lambda: "default/a-0" not in watched.objects)
        assert indexed() == _regrouped(watched) == ({"b": {"default/a-1"}}, {"default/other"})
        assert watched.foreign_version == foreign_seen, "gangq's own pods leave foreign views be"
        await kube.patch(resources.PODS, "default", "other", {"metadata": {"labels": mine}})
        await wait_for(lambda: not watched.foreign)
        assert watched.foreign_version > foreign_seen
        assert indexed() == _regrouped(watched) == ({"b": {"default/a-1"}}, set())
        cluster.drop_watches()
        for index in range(20):
            cluster.registry.create(kinds.PODS, "default", _pod(f"p-{index}"))
        await wait_for(lambda: watched.relists == 2 and "default/p-19" in watched.objects)
        assert indexed() == _regrouped(watched)
        assert len(watched.foreign) == 20 and set(watched.by_gang) == {"b"}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


INVALID = {"type": "Admissible", "status": "False", "reason": trainingjob.INVALID_SPEC}


@pytest.mark.parametrize(
    ("status", "extra", "is_open"),
    [
        ({}, {}, True),
        ({"phase": "Queued"}, {}, True),
        ({"phase": "Running"}, {}, True),
        ({"phase": "Succeeded"}, {}, False),
        ({"phase": "Failed"}, {}, False),
        ({"phase": "Failed", "conditions": [INVALID]}, {}, True),
        ({"phase": "Succeeded"}, {"spec": {"ttlSecondsAfterFinished": 60}}, True),
        ({"phase": "Succeeded"}, {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, True),
    ],
)
def test_a_job_is_open_until_its_end_is_shown_and_nothing_is_left_to_do(
    status: dict[str, object], extra: dict[str, dict[str, object]], is_open: bool
) -> None:
    job: dict[str, object] = {"metadata": {"uid": "u"}, "spec": {}, "status": status, **extra}
    assert trainingjob.is_open(job) is is_open


async def test_the_open_job_index_follows_every_event_and_relist(
    cluster: Emulator, kube: Kube
) -> None:
    """The step walks only open TrainingJobs: the index must equal a scan after every event."""
    jobs = resources.TRAINING_JOBS
    watched = cache.WatchCache(
        kube, jobs, on_change=lambda: None, open_if=trainingjob.is_open, by_uid=True
    )
    task = asyncio.create_task(watched.run())

    def scanned() -> tuple[set[str], dict[str, str]]:
        found = {k for k, job in watched.objects.items() if trainingjob.is_open(job)}
        uids = {str(job["metadata"]["uid"]): k for k, job in watched.objects.items()}
        return found, uids

    async def show(name: str, status: dict[str, object]) -> None:
        await kube.patch(jobs, "default", name, {"status": status}, subresource="status")

    try:
        await asyncio.wait_for(watched.synced.wait(), timeout=5)
        for name in ("done", "refused", "kept"):
            await kube.create(jobs, "default", training_job(name, namespace="default", replicas=1))
        await wait_for(lambda: len(watched.open) == 3)
        await show("done", {"phase": "Succeeded"})
        await show("refused", {"phase": "Failed", "conditions": [INVALID]})
        await show("kept", {"phase": "Failed"})
        await wait_for(lambda: set(watched.open) == {"default/refused"})
        assert (set(watched.open), watched.uids) == scanned()
        ttl = {"spec": {"ttlSecondsAfterFinished": 3600}}
        await kube.patch(jobs, "default", "done", ttl)
        await kube.delete(jobs, "default", "kept")
        await wait_for(lambda: "default/kept" not in watched.objects)
        assert set(watched.open) == {"default/refused", "default/done"}
        assert (set(watched.open), watched.uids) == scanned() and len(watched.uids) == 2
        # Past the emulator's history of 8 events while no watch is open: only a relist helps.
        cluster.drop_watches()
        kind = cluster.registry.resolve(jobs.group, jobs.version, jobs.plural)
        assert kind is not None
        for index in range(10):
            new = training_job(f"new-{index}", namespace="default", replicas=1)
            cluster.registry.create(kind, "default", new)
        await wait_for(lambda: watched.relists == 2 and "default/new-9" in watched.open)
        assert (set(watched.open), watched.uids) == scanned() and len(watched.open) == 12
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("piece", [1, 7, 64, 10_000])
async def test_stream_lines_are_whole_whatever_pieces_they_arrive_in(piece: int) -> None:
    loop = asyncio.get_running_loop()
    content = aiohttp.StreamReader(ResponseHandler(loop), 2**16, loop=loop)
    text = b'{"a":1}\n{"b":"' + b"2" * 300 + b'"}\n\n{"c":3}\n{"unterminated":4}'
    for start in range(0, len(text), piece):
        content.feed_data(text[start : start + piece])
    content.feed_eof()
    lines = [line async for line in client_module.stream_lines(content, what="test")]
    assert lines == text.split(b"\n")


async def test_a_watch_gives_large_events_and_bursts_whole_and_in_order(
    cluster: Emulator, kube: Kube
) -> None:
    """A large object arrives in many reads, a burst of small ones in few: the stream's lines
    are split from what arrived, whatever the pieces."""
    version = str((await kube.list(resources.NAMESPACES))["metadata"]["resourceVersion"])
    large = "x" * 200_000
    added: list[dict[str, object]] = []

    async def follow() -> None:
        async for event in kube.watch(resources.NAMESPACES, resource_version=version, timeout_s=30):
            if event["type"] == "ADDED":
                added.append(event["object"]["metadata"])
            if len(added) == 31:
                return

    task = asyncio.create_task(follow())
    await kube.create(
        resources.NAMESPACES, "", {"metadata": {"name": "large", "annotations": {"a": large}}}
    )
    for index in range(30):
        cluster.registry.create(kinds.NAMESPACES, "", {"metadata": {"name": f"burst-{index}"}})
    await asyncio.wait_for(task, timeout=10)
    assert added[0]["name"] == "large" and added[0]["annotations"] == {"a": large}
    assert [meta["name"] for meta in added[1:]] == [f"burst-{index}" for index in range(30)]


async def test_bodies_answers_and_watch_events_keep_text_and_numbers_as_sent(
    cluster: Emulator, kube: Kube
) -> None:
    """Bodies go out as UTF-8 JSON and answers and events are parsed back exactly: non-ASCII
    text and escapes in a body, an integer beyond 64 bits in an answer."""
    config_maps = resources.Resource("", "v1", "configmaps", "ConfigMap")
    version = str((await kube.list(config_maps))["metadata"]["resourceVersion"])
    text = "données ✓ 训练"
    body = {"metadata": {"name": "text"}, "data": {"message": text, "quote": '"\\\n'}}
    created = await kube.request("POST", config_maps.path("default"), body=body)
    assert created["data"] == body["data"]
    events = kube.watch(config_maps, resource_version=version, timeout_s=5)
    async with contextlib.aclosing(events):
        async for event in events:
            assert event["object"]["data"] == body["data"]
            break
    with pytest.raises(KubeError) as refused:
        await kube.create(config_maps, "default", {"metadata": {"name": "Bad Name"}, "data": {}})
    assert refused.value.status == 422 and "Bad Name" in refused.value.message
    assert client_module._decode(b'{"n": 123456789012345678901234567890}') == {
        "n": 123456789012345678901234567890
    }
    with pytest.raises(ValueError):
        client_module._decode(b'{"truncated":')


async def test_cluster_cache_gives_an_inventory_only_once_synced(cluster: Emulator) -> None:
    async with client.ApiClient(cluster.configuration()) as api_client:
        view = cache.ClusterCache(api_client, settings=settings())
        assert view.inventory() is None
        stop = asyncio.Event()
        task = asyncio.create_task(view.run(stop))
        await asyncio.wait_for(view.synced.wait(), timeout=5)
        found = view.inventory()
        stop.set()
        await task
    assert found is not None
    assert len(found.devices) == 16 and set(found.nodes) == {"gpu-0", "gpu-1"}
    assert found.topology_keys == ("gangq.dev/rack",)


async def test_running_gangs_leave_out_the_pods_kept_after_their_end(
    kube: Kube, view: cache.ClusterCache
) -> None:
    """The sweep walks the gangs with a pod still running, not every kept pod's gang."""
    mine = {inventory.JOB_NAME_LABEL: "train"}

    async def end(name: str, phase: str) -> None:
        ended = {"status": {"phase": phase}}
        await kube.patch(resources.PODS, "default", name, ended, subresource="status")

    for gang in ("a", "b", "c"):
        labels = {**mine, objects.GANG_LABEL: gang}
        await kube.create(resources.PODS, "default", _pod(f"{gang}-0", **labels))
    foreign = _pod("other", **{objects.GANG_LABEL: "d"})
    await kube.create(resources.PODS, "default", foreign)
    await wait_for(lambda: view.running_gangs() == {"a", "b", "c"})
    await end("b-0", "Succeeded")
    await end("c-0", "Failed")
    await wait_for(lambda: view.running_gangs() == {"a"})
    await kube.delete(resources.PODS, "default", "a-0", grace_s=0)
    await wait_for(lambda: not view.running_gangs())
    assert set(view.by_gang(resources.PODS)) == {"b", "c"}, "kept pods stay indexed"


async def test_the_inventory_rebuilds_only_the_parts_whose_kind_changed(
    cluster: Emulator, kube: Kube, view: cache.ClusterCache
) -> None:
    first = view.inventory()
    assert first is not None and first.nodes["gpu-0"].pod_count == 0
    pod = {
        "metadata": {"name": "other", "namespace": "default"},
        "spec": {
            "nodeName": "gpu-0",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "2"}}}],
        },
    }
    await kube.create(resources.PODS, "default", pod)
    await wait_for(lambda: (view.inventory() or first).nodes["gpu-0"].pod_count == 1)
    second = view.inventory()
    assert second is not None and second.nodes["gpu-0"].requested_cpu_milli == 2000
    assert second.devices is first.devices, "a pod does not re-read the slices"
    labels = {inventory.JOB_NAME_LABEL: "train", objects.GANG_LABEL: "g"}
    await kube.create(resources.PODS, "default", _pod("mine", **labels))
    await wait_for(lambda: "default/mine" in view.objects(resources.PODS))
    after_own = view.inventory()
    assert after_own is second, "gangq's pods: the same inventory, so its memos hold"
    job = training_job("unrelated")
    job["metadata"]["namespace"] = "default"
    await kube.create(resources.TRAINING_JOBS, "default", job)
    await wait_for(lambda: "default/unrelated" in view.objects(resources.TRAINING_JOBS))
    assert view.inventory() is second
    cluster.kubelets.taint_device("gpu-1", "gpu-1", effect="NoSchedule")
    await wait_for(lambda: (view.inventory() or first).devices is not first.devices)
    third = view.inventory()
    assert third is not None and third.nodes is second.nodes


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": 0}, "spec.replicas: Input should be greater than or equal to 1"),
        ({"devicesPerReplica": "many"}, "spec.devicesPerReplica: Input should be a valid integer"),
        ({"topology": {"key": "rack", "mode": "Sometimes"}}, "spec.topology.mode: Input should be"),
        (
            {"capacity": {"requests": {"memory": "-1Gi"}}},
            "spec.capacity.requests.memory: '-1Gi' must be more than zero",
        ),
        (
            {"capacity": {"requests": {"memory": "ten gigs"}}},
            "spec.capacity.requests.memory: quantity 'ten gigs': expected a number",
        ),
        (
            {"capacity": {"requests": {"GPU Memory": "1Gi"}}},
            "spec.capacity.requests.GPU Memory: a capacity name is a C identifier",
        ),
        ({"capacity": {"requests": {}}}, "spec.capacity.requests: Dictionary should have at least"),
        ({"restartSeconds": -1}, "spec.restartSeconds: Input should be greater than or equal to 0"),
        (
            {"preemption": {"checkpointGraceSeconds": 3601}},
            "spec.preemption.checkpointGraceSeconds: Input should be less than or equal to 3600",
        ),
    ],
    ids=[
        "zero-replicas",
        "text-count",
        "unknown-topology-mode",
        "negative-share",
        "unreadable-share",
        "bad-capacity-name",
        "empty-requests",
        "negative-restart",
        "long-checkpoint-grace",
    ],
)
def test_converter_names_the_field_that_is_wrong(spec: dict[str, object], message: str) -> None:
    job = training_job("bad")
    job["spec"].update(spec)
    job["metadata"]["uid"] = "u1"
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")):
        trainingjob.pending_job(job, tenant="ml-train")


def test_converter_builds_the_queue_entry() -> None:
    job = training_job("ok", replicas=4, topology={"key": "gangq.dev/rack", "mode": "Required"})
    job["metadata"].update(uid="u1", creationTimestamp="2026-01-01T00:00:00Z")
    pending = trainingjob.pending_job(job, tenant="ml-train")
    assert (pending.key, pending.replicas, pending.tenant) == ("ml-train/ok", 4, "ml-train")
    assert pending.topology.mode.value == "Required"
    assert pending.pod.cpu_milli == 1000
    assert pending.submitted_at == 1767225600.0
    assert pending.capacity_requests == ()
    assert (pending.restart_s, pending.checkpoint_interval_s) == (300.0, None)
    job["spec"].update(restartSeconds=900, checkpointIntervalSeconds=1800)
    restarting = trainingjob.pending_job(job, tenant="ml-train")
    assert (restarting.restart_s, restarting.checkpoint_interval_s) == (900.0, 1800.0)
    assert restarting.checkpoint_grace_s is None
    job["spec"]["preemption"] = {"checkpointGraceSeconds": 120}
    asked_first = trainingjob.pending_job(job, tenant="ml-train")
    assert asked_first.checkpoint_grace_s == 120.0
    assert stored_spec.parse(json.dumps(stored_spec.encode(asked_first))).checkpoint_grace_s == 120
    job["spec"]["capacity"] = {"requests": {"memory": "10Gi", "gpu.nvidia.com/cores": 2}}
    shared = trainingjob.pending_job(job, tenant="ml-train")
    assert shared.capacity_requests == (
        ("gpu.nvidia.com/cores", 2000),
        ("memory", 10 * 2**30 * 1000),
    )
    with pytest.raises(InvalidInputError, match=r"has no gangq\.dev/tenant label"):
        trainingjob.pending_job(job, tenant=None)


def test_pods_built_from_a_template_leave_the_cached_job_as_it_was() -> None:
    """`objects.pod` shares the cached TrainingJob's template instead of copying it: the
    pods must differ from each other and the job must not change under them."""
    job = training_job("shared", replicas=2)
    job["metadata"]["uid"] = "u1"
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NODE_RANK", "value": "9"}]
    job["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    before = copy.deepcopy(job)
    pods = [
        objects.pod(
            job,
            replica,
            spec=job["spec"],
            node=f"n{replica}",
            gated=True,
            gang="g",
            admission="1",
            size=2,
        )
        for replica in (0, 1)
    ]
    assert job == before
    envs = [{e["name"]: e["value"] for e in p["spec"]["containers"][0]["env"]} for p in pods]
    assert [env["NODE_RANK"] for env in envs] == ["0", "1"]
    assert [p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in pods] == ["n0", "n1"]
    assert all(p["spec"]["nodeSelector"]["pool"] == "a" for p in pods)
    pods[0]["spec"]["containers"][0]["resources"]["claims"].append({"name": "x"})
    assert pods[1]["spec"]["containers"][0]["resources"]["claims"] == [{"name": objects.CLAIM_REF}]
    assert job == before


def test_settings_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gangq.yaml"
    path.write_text(
        "managed_device_classes: [gpu.example.com]\n"
        "topology_keys: [topology.kubernetes.io/zone]\n"
        "tenants:\n"
        "  - name: ml-train\n"
        "    quotas:\n"
        "      - {deviceClass: gpu.example.com, nominal: 8, borrowingLimit: 8,\n"
        "         allowedTiers: [training]}\n"
    )
    monkeypatch.setenv("GANGQ_CYCLE_INTERVAL_S", "2.5")
    monkeypatch.setenv("DATABASE_URL", "postgresql://db/gangq")
    loaded = config.load(path)
    assert loaded.managed_device_classes == ("gpu.example.com",)
    assert loaded.cycle_interval_s == 2.5 and loaded.database_url == "postgresql://db/gangq"
    assert loaded.tenants[0].to_core()[0].borrowing_limit == 8
    assert loaded.policy().topology_keys == ("topology.kubernetes.io/zone",)
    defaults = {tier.name: tier.preemption_delay_s for tier in loaded.policy().tiers}
    assert defaults == {"prod-inference": 0.0, "training": 0.0, "small": 300.0}
    path.write_text("tiers: [{name: gold, rank: 1, preemptionDelaySeconds: 90}]\n")
    (gold,) = config.load(path).policy().tiers
    assert (gold.name, gold.preemption_delay_s) == ("gold", 90.0)
    path.write_text("tiers: [{name: gold}]\n")
    with pytest.raises(InvalidInputError, match="rank"):
        config.load(path)
    path.write_text("tiers: [{name: gold, rank: 1, reclaimWithinSeconds: 7200}]\n")
    with pytest.raises(
        InvalidInputError, match=r"reclaimWithinSeconds was removed: .*delete the key"
    ):
        config.load(path)
    monkeypatch.setenv("GANGQ_CYCLE_INTERVAL_S", "soon")
    with pytest.raises(InvalidInputError, match="from the environment"):
        config.load(path)


async def test_every_watch_cache_relists_when_the_window_has_moved_past_it(
    cluster: Emulator, kube: Kube
) -> None:
    """A window of 8 events: after 20 changes every cache resumes from a compacted version,
    gets the 410 ERROR event and relists, and the view is whole again (objects, inventory)."""
    view = cache.ClusterCache(kube.api_client, settings=settings())
    stop = asyncio.Event()
    task = asyncio.create_task(view.run(stop))
    try:
        await asyncio.wait_for(view.synced.wait(), timeout=5)
        before = {plural: watched.relists for plural, watched in view.caches.items()}
        for index in range(20):
            cluster.registry.create(kinds.NAMESPACES, "", {"metadata": {"name": f"ns-{index}"}})
        cluster.drop_watches()
        await wait_for(lambda: all(w.relists > before[plural] for plural, w in view.caches.items()))
        await wait_for(lambda: "ns-19" in view.caches["namespaces"].objects)
        assert cluster.registry.storage.compacted > 8
        inventory = view.inventory()
        assert inventory is not None and len(inventory.devices) == 16
        assert set(view.caches["nodes"].objects) == {"gpu-0", "gpu-1"}
    finally:
        stop.set()
        await task
