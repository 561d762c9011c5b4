"""Refusals and reasons: a write the API server refuses for the job's spec ends the job with
its words, one refused for gangq's own fault leaves it queued with the controller's problem,
failing writes pause per object, and a job's status says the reason REST says."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gangq.queue.config import QuotaConfig, TenantConfig
from gangq.queue.demo import serviceaccount
from gangq.queue.kube import resources, retry
from gangq.queue.kube.client import KubeError
from tests.controller import api_refusals, bad_input
from tests.controller.conftest import Harness, training_job, wait_for


async def test_a_pod_the_api_server_refuses_ends_the_job_with_its_words(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    """422 is not retried: the gang is torn down, its devices released, the job Failed."""
    harness.start()
    body = training_job("noimage", replicas=2, run_seconds=None)
    del body["spec"]["template"]["spec"]["containers"][0]["image"]
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: harness.phase("noimage") == "Failed", within_s=30)
    shown = bad_input.status_of(harness, "noimage", "ml-train")
    assert shown["reason"].startswith(
        "invalid: the API server refused creation of Pod ml-train/noimage-"
    )
    assert "spec.containers[0].image: Required value" in shown["reason"]
    admissible = bad_input.condition(harness, "noimage", "ml-train", "Admissible")
    assert (admissible["status"], admissible["reason"]) == ("False", "InvalidSpec")
    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, "ml-train", "noimage")
    assert out["phase"] == "Failed"
    assert out["reason"] == {"code": "invalid", "message": shown["reason"]}
    assert out["placement"] == []  # no active reservation is left
    counts = await bad_input.stored(harness.engine, "ml-train", "noimage")
    assert (counts["admitted"], counts["failed"]) == (1, 1), counts
    await wait_for(lambda: not harness.objects(resources.RESOURCE_CLAIMS, "ml-train"))
    assert not harness.objects(resources.PODS, "ml-train")

    # the fix: the job is queued again and runs
    fixed = {"spec": {"template": body["spec"]["template"]}}
    fixed["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.invalid/train:1"
    await harness.kube.patch(resources.TRAINING_JOBS, "ml-train", "noimage", fixed)
    await wait_for(lambda: harness.phase("noimage") == "Running", within_s=30)


async def _reason_in_rest(database_url: str, tmp_path: Path, name: str) -> str:
    async with bad_input.rest(database_url, tmp_path) as api:
        out = await bad_input.job_out(api, "ml-train", name)
    return str((out["reason"] or {}).get("message", ""))


async def test_a_new_reason_reaches_the_status_without_waiting_for_a_queue_refresh(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    """The status shows the stored reason (the one REST shows) soon after it changes, even
    when queue moves are refreshed only hourly."""
    quota = QuotaConfig(device_class="gpu.nvidia.com", nominal=8, borrowing_limit=8)
    harness.start(
        status_refresh_s=3600.0, tenants=(TenantConfig(name="ml-train", quotas=(quota,)),)
    )
    for name in ("first", "second"):
        job = training_job(name, replicas=1, run_seconds=None)
        await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
        await wait_for(lambda n=name: harness.phase(n) == "Running")
    waiting = training_job("waiting", replicas=2, run_seconds=None)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", waiting)
    said = (
        "quota: tenant ml-train uses 16/8 nominal, borrowing limit 8, job needs 16 gpu.nvidia.com"
    )
    await wait_for(
        lambda: bad_input.status_of(harness, "waiting", "ml-train").get("reason") == said
    )
    assert await _reason_in_rest(database_url, tmp_path, "waiting") == said

    await harness.kube.delete(resources.TRAINING_JOBS, "ml-train", "second")
    now = "quota: tenant ml-train uses 8/8 nominal, borrowing limit 8, job needs 16 gpu.nvidia.com"
    await wait_for(lambda: bad_input.status_of(harness, "waiting", "ml-train").get("reason") == now)
    assert await _reason_in_rest(database_url, tmp_path, "waiting") == now


def test_failing_calls_pause_their_object_doubling_up_to_a_cap() -> None:
    clock = [0.0]
    backoff = retry.ObjectBackoff(clock=lambda: clock[0])
    pauses = [backoff.failed("creation of Pod a/x-0") for _ in range(12)]
    assert pauses[:4] == [1.0, 2.0, 4.0, 8.0]
    assert pauses[-1] == retry.OBJECT_MAX_PAUSE_S
    assert backoff.remaining_s("creation of Pod a/x-0") == retry.OBJECT_MAX_PAUSE_S
    assert backoff.remaining_s("creation of Pod a/x-1") == 0.0  # per object
    clock[0] += retry.OBJECT_MAX_PAUSE_S
    assert backoff.remaining_s("creation of Pod a/x-0") == 0.0
    backoff.succeeded("creation of Pod a/x-0")
    assert backoff.failed("creation of Pod a/x-0") == 1.0


async def test_a_permanent_refusal_is_not_retried_and_is_collected() -> None:
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise KubeError(422, 'Pod "x-0" is invalid: spec.containers[0].image: Required value')

    backoff = retry.ObjectBackoff()
    with retry.collecting() as collected, pytest.raises(KubeError) as caught:
        await asyncio.gather(retry.retrying(refused, what="creation of Pod a/x-0", backoff=backoff))
    assert caught.value.status == 422
    assert calls == 1
    assert collected.messages == [
        'creation of Pod a/x-0: Pod "x-0" is invalid: spec.containers[0].image: Required value'
    ]
    # the object pauses: the next call is not even sent
    with pytest.raises(retry.BackingOff):
        await retry.retrying(refused, what="creation of Pod a/x-0", backoff=backoff)
    assert calls == 1


async def _queued_for_gangq(
    harness: Harness, database_url: str, tmp_path: Path, *, name: str, namespace: str, said: str
) -> None:
    """The job waits Queued with `said`, in its status and in REST, holding no devices; the
    API server refusing gangq never ends it nor counts as a restart."""
    await wait_for(
        lambda: bad_input.status_of(harness, name, namespace).get("reason") == said, within_s=30
    )
    shown = bad_input.status_of(harness, name, namespace)
    assert (shown["phase"], shown["restarts"]) == ("Queued", 0)
    admitted = bad_input.condition(harness, name, namespace, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "Controller")
    admissible = bad_input.condition(harness, name, namespace, "Admissible")
    assert (admissible["status"], admissible["reason"]) == ("True", "Valid")
    events = bad_input.kube_events(harness, name, namespace, "ApiServerRefused")
    assert events and {(e["type"], e["message"]) for e in events} == {("Warning", said)}
    async with bad_input.rest(database_url, tmp_path) as api:
        deadline = asyncio.get_running_loop().time() + 15
        while True:  # between two tries the job is briefly admitted again
            out = await bad_input.job_out(api, namespace, name)
            if out["phase"] == "Queued" or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
    assert out["phase"] == "Queued"
    assert out["reason"] == {"code": "controller", "message": said}
    assert out["placement"] == []  # its devices are released while it waits
    counts = await bad_input.stored(harness.engine, namespace, name)
    assert counts.get("failed", 0) == 0, counts


def _shipped_rbac_without(resource: str, verb: str) -> list[dict[str, Any]]:
    """deploy/'s RBAC less one verb on one resource: the emulator then refuses gangq what a
    real cluster with that RBAC refuses it, in the same words."""
    documents = serviceaccount.shipped_rbac()
    role = next(d for d in documents if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        if resource in rule["resources"] and verb in rule["verbs"]:
            rule["resources"] = [r for r in rule["resources"] if r != resource]
            role["rules"].append({**rule, "resources": [resource]})
            role["rules"][-1]["verbs"] = [v for v in rule["verbs"] if v != verb]
            break
    else:
        raise AssertionError(f"deploy/ grants no {verb} on {resource}")
    role["rules"] = [r for r in role["rules"] if r["resources"] and r["verbs"]]
    return documents


def _api_errors(harness: Harness, resource: str, code: str) -> float:
    found = harness.metrics["a"].registry.get_sample_value(
        "gangq_api_errors_total", {"resource": resource, "code": code}
    )
    return found or 0.0


async def test_an_allocation_refused_for_a_missing_permission_leaves_the_job_queued(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    """Case 11-01, refused by the emulator's RBAC as by a real server: without
    `resourceclaims/binding` every allocation gangq writes is a 422 about
    `status.allocation`, a field of gangq's: the job waits with the controller's problem, and
    runs once the permission is granted, without anyone touching it."""
    harness.cluster.apply(_shipped_rbac_without("resourceclaims/binding", "patch"))
    harness.start()
    body = training_job(
        "llm-prod", namespace="inference", tier="prod-inference", replicas=1, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", body)
    said = (
        "controller: the API server refused gangq's allocation of inference/llm-prod-0: "
        "missing permission patch resourceclaims/binding"
    )
    await _queued_for_gangq(
        harness, database_url, tmp_path, name="llm-prod", namespace="inference", said=said
    )
    assert _api_errors(harness, "resourceclaims", "422") >= 1

    harness.cluster.apply(serviceaccount.shipped_rbac())  # the permission is granted
    await wait_for(lambda: harness.phase("llm-prod", "inference") == "Running", within_s=30)
    claims = harness.objects(resources.RESOURCE_CLAIMS, "inference")
    assert [c["metadata"]["name"] for c in claims] == ["llm-prod-0"]  # none left behind
    assert bad_input.status_of(harness, "llm-prod", "inference")["restarts"] == 0


async def test_a_pod_create_forbidden_to_gangq_leaves_the_job_queued(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    harness.cluster.apply(_shipped_rbac_without("pods", "create"))
    harness.start()
    body = training_job("forbidden", replicas=2, run_seconds=None)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    said = (
        "controller: the API server refused gangq's creation of Pod ml-train/forbidden-1: "
        "missing permission create pods"
    )
    await _queued_for_gangq(
        harness, database_url, tmp_path, name="forbidden", namespace="ml-train", said=said
    )
    assert _api_errors(harness, "pods", "403") >= 1

    harness.cluster.apply(serviceaccount.shipped_rbac())
    await wait_for(lambda: harness.phase("forbidden") == "Running", within_s=30)
    claims = harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
    assert sorted(c["metadata"]["name"] for c in claims) == ["forbidden-0", "forbidden-1"]


async def test_writes_refused_to_gangq_are_tried_again_ever_more_rarely(harness: Harness) -> None:
    """No hot loop against the API server: each refusal doubles the pause before the next
    try (1 s, 2 s, 4 s... capped), so a refusal that lasts costs a handful of requests."""
    faults = harness.cluster.faults
    refusal = api_refusals.forbidden("create", "pods", "ml-train")
    faults.refuse_next(1_000_000, refusal, verb="create", resource="pods")
    harness.start()
    body = training_job("patient", replicas=1, run_seconds=None)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: faults.injected >= 1, within_s=30)
    await asyncio.sleep(8.0)
    assert 2 <= faults.injected <= 5, faults.injected
    assert harness.phase("patient") in ("Queued", "Admitted")


async def test_a_new_leader_keeps_a_job_refused_to_gangq_queued_and_leaks_nothing(
    harness: Harness, database_url: str, tmp_path: Path
) -> None:
    """The leader dies with the job's gang half-made; the next one meets the same refusal,
    tears the gang down the same way, and builds it whole once the writes are accepted."""
    faults = harness.cluster.faults
    faults.refuse_next(
        1_000_000,
        api_refusals.forbidden("create", "pods", "ml-train"),
        verb="create",
        resource="pods",
    )
    harness.start()
    body = training_job("handover", replicas=2, run_seconds=None)
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", body)
    await wait_for(lambda: faults.injected >= 1, within_s=30)
    await harness.kill()
    refused = faults.injected
    harness.start("b")
    await wait_for(lambda: faults.injected > refused, within_s=30)
    said = (
        "controller: the API server refused gangq's creation of Pod ml-train/handover-1: "
        "missing permission create pods"
    )
    await _queued_for_gangq(
        harness, database_url, tmp_path, name="handover", namespace="ml-train", said=said
    )

    faults.clear()
    await wait_for(lambda: harness.phase("handover") == "Running", within_s=30)
    pods = harness.objects(resources.PODS, "ml-train")
    claims = harness.objects(resources.RESOURCE_CLAIMS, "ml-train")
    gang = {p["metadata"]["labels"]["gangq.dev/gang"] for p in pods}
    assert len(gang) == 1 and len(pods) == 2
    assert {c["metadata"]["labels"]["gangq.dev/gang"] for c in claims} == gang
    assert sorted(c["metadata"]["name"] for c in claims) == ["handover-0", "handover-1"]
