"""Slice jobs beside gangs in the simulator (rule 12): partitions fill a broken GPU and a busy
node first, whole nodes stay free for gangs, and no counter is ever over-committed."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.core.errors import InvalidInputError
from gangq.queue.sim import engine, policy, report, trace


def _document(jobs: list[dict[str, Any]], **cluster: Any) -> dict[str, Any]:
    return {
        "horizon": 3000,
        "cluster": {"nodes": 2, "racks": 1, "partitionedNodes": 2, **cluster},
        "tenants": [{"name": "research", "nominal": 1}, {"name": "ml", "nominal": 16}],
        "jobs": jobs,
    }


def _slice(index: int, arrival: float) -> dict[str, Any]:
    return {
        "name": f"research/s{index}",
        "arrival": arrival,
        "tenant": "research",
        "tier": "small",
        "slice": "1g.10gb",
        "runtime": 1000,
    }


def test_seven_slices_share_one_gpu_and_leave_a_node_whole_for_a_gang() -> None:
    jobs = [_slice(i, float(i)) for i in range(8)] + [
        {
            "name": "ml/gang",
            "arrival": 10,
            "tenant": "ml",
            "tier": "training",
            "devicesPerReplica": 8,
            "runtime": 500,
        }
    ]
    replayed = trace.from_document(_document(jobs))
    outcome = engine.simulate(replayed, policy.create("gangq", device_class="gpu.nvidia.com"))
    summary = report.summarize(outcome)
    assert summary["slice_jobs"] == 8
    assert summary["counter_overcommits"] == 0
    started = {key: r.first_started_at for key, r in outcome.records.items()}
    # a one-GPU quota holds exactly seven 1g slices; the eighth waits for one to end
    assert [started[f"research/s{i}"] for i in range(7)] == [float(i) for i in range(7)]
    assert started["research/s7"] == 1000.0
    assert started["ml/gang"] == 10.0, "the slices broke one GPU of one node only"
    assert summary["largest_gang_min"] == 0
    assert summary["largest_gang_mean"] is not None and summary["largest_gang_mean"] > 0


def test_a_slice_job_needs_partitioned_nodes() -> None:
    with pytest.raises(InvalidInputError, match=r"needs cluster\.partitionedNodes"):
        trace.from_document(_document([_slice(0, 0.0)], partitionedNodes=0))
