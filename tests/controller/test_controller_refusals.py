"""Refusals and reasons: a write the API server refuses for good ends the job with its words,
failing writes pause per object, and a job's status says the reason REST says."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gangq.queue.config import QuotaConfig, TenantConfig
from gangq.queue.kube import resources, retry
from gangq.queue.kube.client import KubeError
from tests.controller import bad_input
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
        "invalid: the API server refused create Pod ml-train/noimage-"
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
    pauses = [backoff.failed("create Pod a/x-0") for _ in range(12)]
    assert pauses[:4] == [1.0, 2.0, 4.0, 8.0]
    assert pauses[-1] == retry.OBJECT_MAX_PAUSE_S
    assert backoff.remaining_s("create Pod a/x-0") == retry.OBJECT_MAX_PAUSE_S
    assert backoff.remaining_s("create Pod a/x-1") == 0.0  # per object
    clock[0] += retry.OBJECT_MAX_PAUSE_S
    assert backoff.remaining_s("create Pod a/x-0") == 0.0
    backoff.succeeded("create Pod a/x-0")
    assert backoff.failed("create Pod a/x-0") == 1.0


async def test_a_permanent_refusal_is_not_retried_and_is_collected() -> None:
    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise KubeError(422, 'Pod "x-0" is invalid: spec.containers[0].image: Required value')

    backoff = retry.ObjectBackoff()
    with retry.collecting() as collected, pytest.raises(KubeError) as caught:
        await asyncio.gather(retry.retrying(refused, what="create Pod a/x-0", backoff=backoff))
    assert caught.value.status == 422
    assert calls == 1
    assert collected.messages == [
        'create Pod a/x-0: Pod "x-0" is invalid: spec.containers[0].image: Required value'
    ]
    # the object pauses: the next call is not even sent
    with pytest.raises(retry.BackingOff):
        await retry.retrying(refused, what="create Pod a/x-0", backoff=backoff)
    assert calls == 1
