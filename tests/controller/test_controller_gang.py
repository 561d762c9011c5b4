"""Admission to release and the end of a gang, against the emulator and PostgreSQL."""

from __future__ import annotations

from gangq.queue.kube import objects, resources
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
        assert claim["metadata"]["finalizers"] == [objects.CLAIM_FINALIZER]
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
    job = harness.job("train")
    assert job is not None
    assert job["status"]["releaseSkewMs"] >= 0
    assert len(job["status"]["placement"]) == 2
    await wait_for(lambda: harness.phase("train") == "Succeeded")
    events = {
        e["reason"]: e["message"]
        for e in harness.objects(resources.EVENTS, "ml-train")
        if e["involvedObject"].get("kind") == "TrainingJob"
    }
    assert {"Released", "Running", "Succeeded"} <= set(events)
    # Built in one pass: one event says the gang was reserved and released together.
    assert "Admitted" not in events
    assert events["Released"].startswith("2 replicas reserved and pods released together")
    await wait_for(lambda: not harness.objects(resources.RESOURCE_CLAIMS, "ml-train"))
    assert not harness.objects(resources.PODS, "ml-train")


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
