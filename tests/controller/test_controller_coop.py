"""Cooperative preemption end to end: a victim that opted in is asked for a checkpoint first
(rule 6), evicted once it reports one or its grace ends, and a new leader continues the wait."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.config import TierConfig
from gangq.queue.kube import checkpoints, objects, resources, status
from gangq.queue.kube.client import KubeError
from gangq.queue.store import database
from gangq.queue.store.models import JobRow
from tests.controller.conftest import Harness, training_job, wait_for


def _start(harness: Harness, name: str = "a") -> None:
    tiers = tuple(
        t.model_copy(update={"min_runtime_before_preemption_s": 0.0})
        for t in harness.settings.tiers
    )
    assert all(isinstance(t, TierConfig) for t in tiers)
    harness.start(name, tiers=tiers)


async def _train(harness: Harness, *, grace_s: int) -> float:
    """A 2x8 training job that opted in, running; returns when it was seen Running."""
    job = training_job("train", run_seconds=None, preemption={"checkpointGraceSeconds": grace_s})
    await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    await wait_for(lambda: harness.phase("train") == "Running")
    return time.time()


async def _preempt(harness: Harness) -> None:
    serve = training_job(
        "serve", namespace="inference", tier="prod-inference", replicas=1, run_seconds=None
    )
    await harness.kube.create(resources.TRAINING_JOBS, "inference", serve)


def _requests(harness: Harness) -> set[str]:
    """The checkpoint request each pod of the victim shows (empty: none asked yet)."""
    pods = harness.objects(resources.PODS, "ml-train")
    return {
        (p["metadata"].get("annotations") or {}).get(objects.CHECKPOINT_REQUESTED, "") for p in pods
    } - {""}


def _asked_all(harness: Harness) -> str | None:
    pods = harness.objects(resources.PODS, "ml-train")
    found = _requests(harness)
    if (
        len(pods) == 2
        and len(found) == 1
        and all(
            objects.CHECKPOINT_REQUESTED in (p["metadata"].get("annotations") or {}) for p in pods
        )
    ):
        return found.pop()
    return None


def _events(harness: Harness, reason: str) -> list[dict[str, Any]]:
    return [e for e in harness.objects(resources.EVENTS, "ml-train") if e.get("reason") == reason]


def _condition(harness: Harness, kind: str) -> dict[str, Any]:
    job = harness.job("train") or {}
    found = [c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


async def _lost_device_s(engine: AsyncEngine) -> float:
    async with database.session_factory(engine)() as session:
        row = await session.scalar(select(JobRow).where(JobRow.name == "train"))
    assert row is not None
    return row.lost_device_s


def _unix(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


async def test_a_victim_that_answers_is_evicted_after_its_checkpoint(
    harness: Harness, engine: AsyncEngine
) -> None:
    _start(harness)
    await _train(harness, grace_s=120)
    # Work since the start that an eviction without the request would lose.
    started = _unix((harness.job("train") or {})["status"]["startedAt"])
    await wait_for(lambda: time.time() > started + 4, within_s=10)
    await _preempt(harness)
    stamp = await wait_for(lambda: _asked_all(harness))
    asked = _unix(stamp)
    assert abs(asked - time.time()) < 5
    # The victim keeps running and holding its devices while it is asked.
    await wait_for(lambda: _condition(harness, status.CHECKPOINT_REQUESTED).get("status"))
    condition = _condition(harness, status.CHECKPOINT_REQUESTED)
    assert condition["status"] == "True"
    assert f"checkpoint requested at {stamp} for inference/serve" in condition["message"]
    assert "evicting by " in condition["message"]
    assert (harness.job("train") or {})["status"]["reason"] == condition["message"]
    assert harness.phase("train") == "Running"
    assert harness.phase("serve", "inference") == "Queued"
    requested = _events(harness, status.CHECKPOINT_REQUESTED)
    assert len(requested) == 1 and requested[0]["type"] == "Normal"

    # The test plays the pod: it saves and reports a checkpoint at once.
    saved = float(int(time.time()))
    report = {
        "metadata": {"annotations": {checkpoints.CHECKPOINT_ANNOTATION: objects.rfc3339(saved)}}
    }
    await harness.kube.patch(resources.TRAINING_JOBS, "ml-train", "train", report)
    await wait_for(lambda: harness.phase("serve", "inference") == "Running", within_s=10)
    evicted = time.time()
    assert harness.phase("train") == "Queued"
    assert evicted < asked + 30, "evicted on the report, not at the end of the grace"
    lost = await _lost_device_s(engine)
    # 16 devices x the time since that checkpoint, not since the start (4 s and more before).
    assert 0 < lost <= 16 * (evicted - saved + 0.5)
    assert lost < 16 * (saved - started)


async def test_a_victim_that_does_not_answer_is_evicted_when_its_grace_ends(
    harness: Harness, engine: AsyncEngine
) -> None:
    _start(harness)
    await _train(harness, grace_s=3)
    started = _unix((harness.job("train") or {})["status"]["startedAt"])
    # One replica has finished its part: only the one still running is asked, and told once.
    done = {"status": {"phase": "Succeeded"}}
    await harness.kube.patch(resources.PODS, "ml-train", "train-1", done, subresource="status")
    await _preempt(harness)
    stamp = await wait_for(lambda: _requests(harness))
    asked = _unix(stamp.pop())
    await wait_for(lambda: _events(harness, status.CHECKPOINT_REQUESTED))
    assert harness.phase("train") == "Running"
    await wait_for(lambda: harness.phase("train") == "Queued", within_s=15)
    evicted = time.time()
    assert evicted >= asked + 3, "not evicted before the grace ended"
    await wait_for(lambda: harness.phase("serve", "inference") == "Running")
    lost = await _lost_device_s(engine)
    # No checkpoint: the whole run since the start is lost.
    assert lost >= 16 * (asked + 3 - started - 1)


async def test_a_new_leader_continues_the_wait_without_asking_again(harness: Harness) -> None:
    _start(harness, "a")
    await _train(harness, grace_s=6)
    await _preempt(harness)
    stamp = await wait_for(lambda: _asked_all(harness))
    deadline = _unix(stamp) + 6
    await wait_for(lambda: _events(harness, status.CHECKPOINT_REQUESTED))
    await harness.kill("a")
    _start(harness, "b")
    # The new leader holds the victim until the stored deadline, with the same request.
    while time.time() < deadline - 1:
        assert harness.phase("train") == "Running"
        assert _requests(harness) == {stamp}
        await asyncio.sleep(0.1)
    await wait_for(lambda: harness.phase("train") == "Queued", within_s=15)
    assert time.time() >= deadline
    assert len(_events(harness, status.CHECKPOINT_REQUESTED)) == 1
    await wait_for(lambda: harness.phase("serve", "inference") == "Running")


async def test_pods_read_their_annotations_through_a_downward_api_volume(
    harness: Harness,
) -> None:
    harness.start()
    await _train(harness, grace_s=60)
    pods = harness.objects(resources.PODS, "ml-train")
    assert len(pods) == 2
    for pod in pods:
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes[objects.PODINFO_VOLUME]["downwardAPI"]["items"] == [
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
        ]
        for container in pod["spec"]["containers"]:
            mounts = {m["name"]: m for m in container["volumeMounts"]}
            assert mounts[objects.PODINFO_VOLUME]["mountPath"] == "/etc/gangq/podinfo"
            assert mounts[objects.PODINFO_VOLUME]["readOnly"] is True


@pytest.mark.parametrize("value", [-1, 3601, "60"])
async def test_the_crd_refuses_a_bad_checkpoint_grace(harness: Harness, value: object) -> None:
    job = training_job("bad", preemption={"checkpointGraceSeconds": value})
    with pytest.raises(KubeError) as refused:
        await harness.kube.create(resources.TRAINING_JOBS, "ml-train", job)
    assert refused.value.status == 422
    assert "checkpointGraceSeconds" in refused.value.message
