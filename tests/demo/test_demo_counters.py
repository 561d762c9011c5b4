"""Slice jobs and counter over-commits, judged from the emulator's split-GPU slices and claims."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.demo import ledger as ledger_module
from gangq.queue.demo import report, story
from gangq.queue.kubesim import cluster
from tests.demo.objects import LONG_RUNNING, STORY, pod, training_job

INVENTORY = cluster.Inventory(nodes=3, racks=1, partitioned_nodes=1, shared_nodes=1)
"""gpu-0 whole GPUs, gpu-1 partitioned, gpu-2 shared."""
DRIVER = cluster.DRIVER
SLICES_STORY = STORY.model_copy(update={"slices": "research/*"})


def new_ledger() -> ledger_module.Ledger:
    observed = ledger_module.Ledger({DRIVER: "uuid"})
    for index in range(INVENTORY.nodes):
        for resource_slice in cluster.resource_slices(INVENTORY, index):
            observed.on_event(ledger_module.SLICES, "ADDED", resource_slice, at=0.0)
    return observed


def result(pool: str, device: str, *, share: str = "", **consumed: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": "devices", "driver": DRIVER, "pool": pool, "device": device}
    if share:
        entry["shareID"] = share
        entry["consumedCapacity"] = consumed
    return entry


def allocate(
    observed: ledger_module.Ledger, name: str, *results: dict[str, Any], at: float = 1.0
) -> None:
    body: dict[str, Any] = {"metadata": {"name": name, "namespace": "research"}, "status": {}}
    if results:
        body["status"]["allocation"] = {"devices": {"results": list(results)}}
    observed.on_event(ledger_module.CLAIMS, "MODIFIED", body, at=at)


def run_job(observed: ledger_module.Ledger, name: str, *results: dict[str, Any]) -> None:
    """A one-replica research job whose pod runs with a claim allocated `results`."""
    job = training_job(name, namespace="research", tier="small", replicas=1, phase="Running")
    observed.on_event(ledger_module.TRAINING_JOBS, "ADDED", job, at=1.0)
    allocate(observed, f"{name}-0", *results)
    running = pod(
        name, 0, gated=False, phase="Running", namespace="research", claims=(f"{name}-0",)
    )
    observed.on_event(ledger_module.PODS, "MODIFIED", running, at=1.5)


def slices_check(observed: ledger_module.Ledger) -> story.Check:
    checks = story.expectations(observed, SLICES_STORY, long_running=LONG_RUNNING)
    return next(
        check for check in checks if check.name == "research/* ran on GPU partitions or shares"
    )


def test_every_node_publishes_eight_gpus_a_partitioned_gpu_counting_once() -> None:
    assert new_ledger().counters.gpus_by_node() == {"gpu-0": 8, "gpu-1": 8, "gpu-2": 8}


def test_jobs_on_a_partition_or_a_share_are_slice_jobs_and_a_whole_gpu_is_not() -> None:
    observed = new_ledger()
    run_job(observed, "notebook", result("gpu-1", "gpu-3-1g-10gb-0"))
    run_job(observed, "eval", result("gpu-2", "gpu-0", share="6f1c", memory="20Gi"))
    run_job(observed, "whole", result("gpu-1", "gpu-4"))
    body = report.as_json(report.Outcome(observed, (), 2.0, timed_out=False))
    on_slices = {row["name"]: row["on_slices"] for row in body["jobs"]}
    assert on_slices == {"notebook": True, "eval": True, "whole": False}
    assert body["slice_jobs"] == 2
    assert body["counter_overcommits"] == 0
    assert not slices_check(observed).ok
    assert slices_check(observed).detail == "2 of 3 held a partition or a share while running"


def test_a_story_without_slice_jobs_fails_the_slices_check() -> None:
    observed = new_ledger()
    run_job(observed, "whole", result("gpu-0", "gpu-1"))
    assert report.slice_jobs(observed) == 0
    assert not slices_check(observed).ok


def over_commit_check(observed: ledger_module.Ledger) -> story.Check:
    return next(c for c in story.invariants(observed) if c.name.startswith("no counter"))


def test_a_whole_gpu_and_its_partition_allocated_at_once_is_an_over_commit() -> None:
    observed = new_ledger()
    allocate(observed, "a", result("gpu-1", "gpu-2-3g-40gb-0"))
    allocate(observed, "b", result("gpu-1", "gpu-2-4g-40gb-0"))
    assert over_commit_check(observed).ok
    allocate(observed, "c", result("gpu-1", "gpu-2"), at=2.0)
    assert len(observed.counters.overcommits) == 1
    found = over_commit_check(observed)
    assert not found.ok
    assert "counter set gpu.nvidia.com/gpu-1/gpu-2-counters over-committed" in found.detail
    assert "compute-slices 14 of 7" in found.detail
    assert [at for at, _ in observed.violations] == [2.0]
    allocate(observed, "c", at=3.0)
    assert len(observed.counters.overcommits) == 1, "an over-commit once seen stays counted"


@pytest.mark.parametrize(("shares", "overcommits"), [(2, 0), (3, 1)])
def test_shares_above_a_devices_capacity_are_an_over_commit_not_a_double_allocation(
    shares: int, overcommits: int
) -> None:
    observed = new_ledger()
    for number in range(shares):
        allocate(
            observed, f"s{number}", result("gpu-2", "gpu-5", share=f"id{number}", memory="40Gi")
        )
    body = report.as_json(report.Outcome(observed, (), 1.0, timed_out=False))
    assert body["counter_overcommits"] == overcommits
    assert body["double_allocations"] == 0
    if overcommits:
        assert "memory 120Gi of 80Gi" in observed.violations[0][1]
