"""The API writes a successful job costs, counted by the emulator as kube-apiserver counts them:
gangq must not be the API server's bottleneck (at most 8 writes for a one-replica job and 4
more per extra replica, from creation to end, status and events included)."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from gangq.queue.bench import writes
from gangq.queue.kube import resources
from gangq.queue.kubesim.cluster import Inventory
from tests.controller.conftest import running_harness, training_job, wait_for


def budget(replicas: int) -> int:
    """8 for one replica and 4 per extra one: a gang's headless Service (its rendezvous) fits
    in because its first pod is created ungated, not gated and then lifted."""
    return 8 + 4 * (replicas - 1)


@pytest.mark.parametrize(
    ("replicas", "devices"), [(1, 1), (4, 8)], ids=["one-replica", "four-by-eight"]
)
async def test_a_successful_job_stays_within_its_write_budget(
    engine: AsyncEngine, replicas: int, devices: int
) -> None:
    inventory = Inventory(nodes=4, gpus_per_node=8, racks=2)
    async with running_harness(engine, inventory=inventory) as harness:
        emulator, kube = harness.cluster, harness.kube
        harness.start()
        before = await writes.read(emulator.configuration())
        job = training_job("counted", replicas=replicas, devices=devices, run_seconds=0.3)
        await kube.create(resources.TRAINING_JOBS, "ml-train", job)
        await wait_for(lambda: harness.phase("counted") == "Succeeded", within_s=30)
        await wait_for(lambda: not harness.objects(resources.RESOURCE_CLAIMS, "ml-train"))
        await harness.stop()
        after = await writes.read(emulator.configuration())
    spent = after - before - Counter({"POST trainingjobs": 1})
    assert sum(spent.values()) <= budget(replicas), dict(spent)
    pods = [p for p in harness.objects(resources.PODS, "ml-train")]
    assert len(pods) == replicas, "the finished pods are kept, not deleted"
