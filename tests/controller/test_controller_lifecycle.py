"""Failures, timeouts, deletion, preemption and invalid input, end to end."""

from __future__ import annotations

import re
from typing import Any

from gangq.queue.config import TierConfig
from gangq.queue.kube import resources
from tests.controller.conftest import Harness, training_job, wait_for


def _condition(
    harness: Harness, name: str, kind: str, namespace: str = "ml-train"
) -> dict[str, Any]:
    job = harness.job(name, namespace) or {}
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return dict(condition)
    return {}


async def test_invalid_jobs_get_a_condition_that_names_the_problem(harness: Harness) -> None:
    harness.start()
    await harness.kube.create(
        resources.TRAINING_JOBS, "unlabelled", training_job("orphan", namespace="unlabelled")
    )
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("weird", tier="nightly")
    )
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", training_job("huge", replicas=3))
    await wait_for(
        lambda: _condition(harness, "orphan", "Admissible", "unlabelled").get("status") == "False"
    )
    assert (
        "namespace unlabelled has no gangq.dev/tenant label"
        in _condition(harness, "orphan", "Admissible", "unlabelled")["message"]
    )
    await wait_for(lambda: _condition(harness, "weird", "Admissible").get("status") == "False")
    assert "unknown tier 'nightly'" in _condition(harness, "weird", "Admissible")["message"]
    assert _condition(harness, "weird", "Admissible")["reason"] == "InvalidSpec"
    assert (harness.job("weird") or {})["status"]["reason"].startswith("invalid: ")
    assert harness.phase("weird") == harness.phase("orphan", "unlabelled") == "Failed"
    await wait_for(
        lambda: (
            (harness.job("huge") or {})
            .get("status", {})
            .get("reason", "")
            .startswith("unschedulable: needs 3 nodes")
        )
    )
    assert harness.phase("huge") == "Queued"


async def test_failed_pod_restarts_the_whole_gang_until_max_restarts(harness: Harness) -> None:
    harness.start()
    job = training_job("flaky", run_seconds=0.2, exit_code=1, maxRestarts=1)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("flaky") == "Failed", within_s=30)
    found = harness.job("flaky") or {}
    assert found["status"]["restarts"] == 1
    await wait_for(lambda: not harness.objects(resources.RESOURCE_CLAIMS, "ml-train"))
    # The last attempt's pods stay, terminated, with the same names (rendezvous contract).
    listed = await harness.kube.list(
        resources.PODS, query={"labelSelector": "gangq.dev/job-name=flaky"}
    )
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == ["flaky-0", "flaky-1"]
    states = [p["status"]["containerStatuses"][0]["state"]["terminated"] for p in listed["items"]]
    assert [s["exitCode"] for s in states] == [1, 1]
    reason = found["status"]["reason"]
    assert re.fullmatch(
        r"replica [01] on gpu-[01] exited with code 1 \(Error\); 1 of 1 restarts used", reason
    ), reason
    failed = _condition(harness, "flaky", "Failed")
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "True",
        "ReplicaFailed",
        reason,
    )
    events = [
        e
        for e in harness.objects(resources.EVENTS, "ml-train")
        if e["involvedObject"]["name"] == "flaky"
    ]
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "ReplicaFailed")] * 2
    assert reason in [e["message"] for e in events]


async def test_startup_timeout_tears_the_gang_down_and_requeues_it(harness: Harness) -> None:
    harness.cluster.kubelets.ready_seconds = 3600
    harness.start()
    job = training_job("slow", startupTimeoutSeconds=1, maxRestarts=5)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(
        lambda: ((harness.job("slow") or {}).get("status") or {}).get("restarts", 0) >= 1
    )
    await wait_for(lambda: harness.phase("slow") in ("Queued", "Admitted"))


async def test_deleting_a_job_tears_it_down_and_releases_devices(harness: Harness) -> None:
    harness.start()
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("gone", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("gone") == "Running")
    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "gone")
    await wait_for(lambda: harness.job("gone") is None)
    assert not harness.objects(resources.PODS, "ml-train")
    assert not harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("next", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("next") == "Running")


async def test_prod_inference_preempts_training_whole_and_requeues_it(harness: Harness) -> None:
    tiers = tuple(
        t.model_copy(update={"min_runtime_before_preemption_s": 0.0})
        for t in harness.settings.tiers
    )
    assert all(isinstance(t, TierConfig) for t in tiers)
    harness.start(tiers=tiers)
    await harness.kube.create(
        resources.TRAINING_JOBS, "ml-train", training_job("train", run_seconds=None)
    )
    await wait_for(lambda: harness.phase("train") == "Running")
    serve = training_job(
        "serve", namespace="inference", tier="prod-inference", replicas=1, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", serve)
    await wait_for(lambda: harness.phase("serve", "inference") == "Running")
    await wait_for(lambda: harness.phase("train") == "Queued")
    assert (harness.job("train") or {})["status"]["preemptions"] == 1
    assert not harness.objects(resources.PODS, "ml-train")


async def test_prod_inference_pod_failure_restarts_in_place(harness: Harness) -> None:
    harness.start()
    serve = training_job(
        "serve", namespace="inference", tier="prod-inference", replicas=2, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", serve)
    await wait_for(lambda: harness.phase("serve", "inference") == "Running")
    before = {
        c["metadata"]["name"]: c["status"]["allocation"]
        for c in harness.objects(resources.RESOURCE_CLAIMS, "inference")
    }
    victim = next(
        p
        for p in harness.objects(resources.PODS, "inference")
        if p["metadata"]["name"] == "serve-1"
    )
    await harness.kube.patch(
        resources.PODS,
        "inference",
        "serve-1",
        {"status": {"phase": "Failed"}},
        subresource="status",
    )
    await wait_for(
        lambda: any(
            p["metadata"]["name"] == "serve-1"
            and p["metadata"]["uid"] != victim["metadata"]["uid"]
            and p["status"].get("phase") == "Running"
            for p in harness.objects(resources.PODS, "inference")
        )
    )
    after = {
        c["metadata"]["name"]: c["status"]["allocation"]
        for c in harness.objects(resources.RESOURCE_CLAIMS, "inference")
    }
    assert after == before
    assert harness.phase("serve", "inference") == "Running"


async def test_node_not_ready_fails_the_gang_on_it(harness: Harness) -> None:
    harness.start()
    job = training_job("train", replicas=1, run_seconds=None, maxRestarts=3)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("train") == "Running")
    node = next(p for p in harness.objects(resources.PODS, "ml-train"))["spec"]["nodeName"]
    harness.cluster.kubelets.fail_node(node)
    await wait_for(
        lambda: ((harness.job("train") or {}).get("status") or {}).get("restarts", 0) == 1
    )
    await wait_for(lambda: harness.phase("train") == "Running")
    moved = next(p for p in harness.objects(resources.PODS, "ml-train"))["spec"]["nodeName"]
    assert moved != node


async def test_a_device_tainted_no_execute_fails_the_gang_on_it(harness: Harness) -> None:
    harness.start()
    job = training_job("train", replicas=1, devices=4, run_seconds=None, maxRestarts=3)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("train") == "Running")
    placement = (harness.job("train") or {})["status"]["placement"][0]
    bad = placement["devices"][0]["device"]
    harness.cluster.kubelets.taint_device(placement["node"], bad)
    await wait_for(
        lambda: ((harness.job("train") or {}).get("status") or {}).get("restarts", 0) == 1
    )
    await wait_for(lambda: harness.phase("train") == "Running")
    again = (harness.job("train") or {})["status"]["placement"][0]
    assert (placement["node"], bad) not in {(again["node"], d["device"]) for d in again["devices"]}
