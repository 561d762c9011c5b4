"""Admission to release and the end of a gang, against the emulator and PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gangq.queue.kube import objects, resources
from gangq.queue.kube.actuator import Actuator
from gangq.queue.kubesim import kinds
from gangq.queue.kubesim.storage import Event
from tests.controller.conftest import Harness, training_job, wait_for


async def test_training_gang_is_released_whole_and_succeeds(harness: Harness) -> None:
    harness.start()
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("train", run_seconds=0.5)
    )
    await wait_for(lambda: harness.phase("train") == "Running")
    pods = harness.objects(resources.PODS, "ml-train")
    claims = harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
    assert sorted(p["metadata"]["name"] for p in pods) == ["train-0", "train-1"]
    assert all(not p["spec"].get("schedulingGates") for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {"gpu-0", "gpu-1"}
    for claim in claims:
        allocation = claim["status"]["allocation"]
        assert allocation["allocationTimestamp"]
        assert len(allocation["devices"]["results"]) == 8
        assert claim["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
        assert not claim["metadata"].get("finalizers")
        request = claim["spec"]["devices"]["requests"][0]["exactly"]
        pin = request["selectors"][-1]["cel"]["expression"]
        assert pin.startswith('device.attributes["gpu.nvidia.com"].uuid in ["GPU-')
        assert pin.count("GPU-") == 8
        nodes = {r["pool"] for r in allocation["devices"]["results"]}
        assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
            *nodes
        ]
    env = {e["name"]: e["value"] for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "train-0.train" and env["WORLD_SIZE"] == "2"
    assert harness.objects(resources.SERVICES, "ml-train"), "two replicas rendezvous"
    job = harness.job("train")
    assert job is not None
    assert job["status"]["releaseSkewMs"] >= 0
    placement = job["status"]["placement"]
    assert len(placement) == 2
    await wait_for(lambda: harness.phase("train") == "Succeeded")
    await wait_for(lambda: not harness.objects(resources.RESOURCE_CLAIMS, "ml-train"))
    ended = await harness.kube.get(resources.TRAINING_JOBS, "ml-train", "train")
    assert ended["status"]["placement"] == placement, "where it ran stays readable"
    assert ended["status"]["reason"] == "all 2 replicas succeeded"
    succeeded = [c for c in ended["status"]["conditions"] if c["type"] == "Succeeded"]
    assert succeeded and succeeded[0]["status"] == "True"
    # A success is told by the status alone; events are for what needs a look.
    assert not [
        e
        for e in harness.objects(resources.EVENTS, "ml-train")
        if e["involvedObject"].get("kind") == "TrainingJob"
    ]
    # The pods stay for `kubectl logs`, terminated, holding no claim (rule 11).
    listed = await harness.kube.list(
        resources.PODS, query={"labelSelector": "gangq.dev/job-name=train"}
    )
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == ["train-0", "train-1"]
    for pod in listed["items"]:
        assert pod["status"]["phase"] == "Succeeded"
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == 0


async def test_a_one_replica_job_gets_no_service(harness: Harness) -> None:
    harness.start()
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("solo", replicas=1, run_seconds=0.2)
    )
    await wait_for(lambda: harness.phase("solo") == "Succeeded")
    assert not harness.objects(resources.SERVICES, "ml-train")
    pod = await harness.kube.get(resources.PODS, "ml-train", "solo-0")
    assert pod["status"]["phase"] == "Succeeded"
    assert objects.GATE not in str(pod["spec"].get("schedulingGates"))


async def test_a_claim_deleted_under_a_running_gang_is_an_incident_that_is_repaired(
    harness: Harness,
) -> None:
    harness.start()
    job = training_job("train", run_seconds=None, maxRestarts=2)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("train") == "Running")
    await harness.kube.delete(resources.RESOURCE_CLAIMS, "ml-train", "train-0")
    await wait_for(lambda: ((harness.job("train") or {}).get("status") or {}).get("restarts") == 1)
    await wait_for(lambda: harness.phase("train") == "Running")
    claims = harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
    assert sorted(c["metadata"]["name"] for c in claims) == ["train-0", "train-1"]
    assert all(not c["metadata"].get("deletionTimestamp") for c in claims)


async def test_a_refused_allocation_is_written_again_before_the_pod_exists(
    harness: Harness,
) -> None:
    """A 409 on the claim's status write means nothing was written: gangq itself allocates
    the claim on the next step, before the pod, so no scheduler allocation (with its
    delete-protection finalizer) holds the claim after the job ended."""
    harness.cluster.faults.fail_next(1, code=409, verb="patch", resource="resourceclaims")
    harness.start()
    body = training_job("one", replicas=1, devices=1, run_seconds=0.3, exit_code=1)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: harness.phase("one") == "Failed", within_s=30)
    assert harness.cluster.faults.injected == 1
    assert not harness.objects(resources.RESOURCE_CLAIMS, "ml-train")


@pytest.mark.parametrize("refused", ["train-1", "train-0"], ids=["gated-sibling", "rank-0"])
async def test_a_conflict_on_a_pod_create_holds_the_whole_release_back(
    harness: Harness, refused: str
) -> None:
    """Only AlreadyExists means an earlier attempt created the pod: after any other 409 the
    pod does not exist, and no sibling may be released until it does (rule 2). Rank 0 is
    created ungated after its gated siblings, so its refusal is the one that must not leave
    them released."""
    partial: list[list[str]] = []
    creates: list[str] = []

    def on_pod(event: Event) -> None:
        if event.resource != kinds.PODS.key:
            return
        pods = harness.objects(resources.PODS, "ml-train")
        if len(pods) < 2 and any(not p["spec"].get("schedulingGates") for p in pods):
            partial.append(sorted(p["metadata"]["name"] for p in pods))
        if event.type == "ADDED":
            creates.append(event.object["metadata"]["name"])
            if creates == ["train-1"] and refused == "train-0":
                harness.cluster.faults.fail_next(1, code=409, verb="create", resource="pods")

    harness.cluster.registry.storage.listeners.append(on_pod)
    if refused == "train-1":
        harness.cluster.faults.fail_next(1, code=409, verb="create", resource="pods")
    harness.start()
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("train", run_seconds=0.3)
    )
    await wait_for(lambda: harness.phase("train") == "Succeeded", within_s=30)
    assert harness.cluster.faults.injected == 1
    assert creates[:2] == ["train-1", "train-0"], "rank 0 is created after its siblings"
    assert not partial, f"released without every pod: {partial}"


async def test_a_claim_missing_only_from_a_lagging_watch_does_not_end_the_gang(
    harness: Harness,
) -> None:
    """Each kind has its own watch: when the claims watch lags behind the pods watch, a
    released gang's claim is missing from the cache though it exists. gangq reads the claim
    from the API server before calling it gone; ending the gang on the cache's word would
    release its devices while the claim still holds them (a double allocation next)."""
    view = harness.start()
    job = training_job("train", run_seconds=None, maxRestarts=2)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("train") == "Running")
    claims = view.caches[resources.RESOURCE_CLAIMS.plural]
    claims.objects.pop("ml-train/train-0")
    claims.version += 1
    before = _cycles(harness)
    # A job that cannot fit beside the gang: every step it causes drives the running gang
    # with its claim missing from the cache.
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("other", replicas=1, devices=1)
    )
    await wait_for(lambda: _cycles(harness) >= before + 3)
    status = (harness.job("train") or {}).get("status") or {}
    assert (harness.phase("train"), status.get("restarts", 0)) == ("Running", 0)
    assert "ml-train/train-0" not in claims.objects
    kept = harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
    assert sorted(c["metadata"]["name"] for c in kept) == ["train-0", "train-1"]


def _cycles(harness: Harness, name: str = "a") -> float:
    """Scheduling cycles the replica has run: each step runs one, then drives every gang."""
    histogram = harness.metrics[name].scheduling_cycle_seconds
    return next(
        sample.value
        for metric in histogram.collect()
        for sample in metric.samples
        if sample.name.endswith("_count")
    )


def _late_claim(replica: int, *, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"late-{replica}",
        "labels": {objects.GANG_LABEL: "uid-late", objects.REPLICA_LABEL: str(replica)},
    }
    if finalizers:
        meta["finalizers"] = finalizers
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    return {"metadata": meta, "spec": {"devices": {"requests": [request]}}}


async def test_a_teardown_is_done_only_when_the_api_server_lists_no_claim_of_the_gang(
    harness: Harness,
) -> None:
    """The claims cache may miss claims its watch has not delivered yet: a teardown handed
    none still deletes the gang's claims at the API server, and is done because the server's
    answer shows each of them gone, not because the cache shows none."""
    actuator = Actuator(harness.kube, settings=harness.settings, clock=time.time)
    for replica in (0, 1):
        await harness.kube.create(resources.RESOURCE_CLAIMS, "ml-train", _late_claim(replica))
    teardown = {"namespace": "ml-train", "gang": "uid-late", "pods": [], "claims": []}
    assert await actuator.teardown(**teardown) is True
    assert harness.objects(resources.RESOURCE_CLAIMS, "ml-train") == []


async def test_a_claim_kept_by_a_finalizer_holds_the_teardown_until_it_is_gone(
    harness: Harness,
) -> None:
    """A claim the API server only marks for deletion (a finalizer keeps it) still holds its
    devices: the teardown is not done while it exists, and gangq's own old finalizer is
    dropped so that it goes."""
    actuator = Actuator(harness.kube, settings=harness.settings, clock=time.time)
    kept = _late_claim(0, finalizers=[objects.CLAIM_FINALIZER])
    await harness.kube.create(resources.RESOURCE_CLAIMS, "ml-train", kept)
    teardown = {"namespace": "ml-train", "gang": "uid-late", "pods": [], "claims": []}
    assert await actuator.teardown(**teardown) is False
    assert harness.objects(resources.RESOURCE_CLAIMS, "ml-train") == []
    assert await actuator.teardown(**teardown) is True
