"""Report figures: percentiles, the offline bound and utilization from a known timeline."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.sim import engine, policy, report, trace


def _trace(jobs: list[dict[str, Any]], *, horizon: float) -> trace.Trace:
    return trace.from_document(
        {"horizon": horizon, "cluster": {"nodes": 1, "racks": 1}, "jobs": jobs}
    )


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [([], 0.5, None), ([3.0], 0.95, 3.0), ([1, 2, 3, 4], 0.5, 2), ([*range(1, 101)], 0.95, 95)],
    ids=["empty", "single", "median-of-four", "p95-of-hundred"],
)
def test_percentile_is_nearest_rank(
    values: list[float], fraction: float, expected: float | None
) -> None:
    assert report.percentile(values, fraction) == expected


def test_the_fluid_bound_pours_work_into_the_cluster_as_it_arrives() -> None:
    """16 device-s arrive at 0 and 8 at 10 on 8 devices over 20 s: 2 s to drain the first
    batch, 1 s for the second: 24 of 160 device-s."""
    jobs = [
        {
            "name": "a/x",
            "arrival": 0,
            "tenant": "a",
            "tier": "small",
            "devicesPerReplica": 8,
            "runtime": 2,
        },
        {
            "name": "a/y",
            "arrival": 10,
            "tenant": "a",
            "tier": "small",
            "devicesPerReplica": 8,
            "runtime": 1,
        },
    ]
    assert report.fluid_bound(_trace(jobs, horizon=20)) == pytest.approx(24 / 160)


def test_utilization_and_busy_utilization_follow_the_timeline() -> None:
    """One node: a 4-GPU job runs 0-50, an 8-GPU job waits for it (demand 12 >= 8, 4 held)
    and runs 50-100; the horizon is 200."""
    jobs = [
        {
            "name": "a/x",
            "arrival": 0,
            "tenant": "a",
            "tier": "small",
            "devicesPerReplica": 4,
            "runtime": 50,
        },
        {
            "name": "a/y",
            "arrival": 0,
            "tenant": "a",
            "tier": "small",
            "devicesPerReplica": 8,
            "runtime": 50,
        },
    ]
    replayed = _trace(jobs, horizon=200)
    summary = report.summarize(
        engine.simulate(replayed, policy.create("fifo-strict", device_class="gpu.nvidia.com"))
    )
    assert summary["utilization"] == pytest.approx((4 * 50 + 8 * 50) / (8 * 200))
    assert summary["busy_hours"] == pytest.approx(100 / 3600)
    assert summary["utilization_busy"] == pytest.approx((4 * 50 + 8 * 50) / (8 * 100))
    assert summary["utilization_useful"] == summary["utilization"]
    assert summary["wait_p95_s"] == {"small": 50}
    assert summary["wait_by_gang_size_s"]["1x8"] == {"count": 1, "p50": 50, "p95": 50, "max": 50}
    assert summary["wait_by_tenant_s"] == {
        "a": {"small": {"count": 2, "p50": 0, "p95": 50, "max": 50}}
    }
    assert summary["max_gang_wait_s"] is None, "no job has more than one replica"
    assert summary["utilization"] <= summary["utilization_bound"] + 1e-9


def test_the_table_has_a_column_per_policy_and_a_row_per_figure() -> None:
    jobs = [{"name": "a/x", "arrival": 0, "tenant": "a", "tier": "small", "runtime": 60}]
    replayed = _trace(jobs, horizon=100)
    summaries = {
        name: report.summarize(
            engine.simulate(replayed, policy.create(name, device_class="gpu.nvidia.com"))
        )
        for name in ("gangq", "device-plugin")
    }
    lines = report.table(summaries).splitlines()
    assert lines[0].split() == ["gangq", "device-plugin"]
    assert any(
        line.startswith("utilization ") and line.split()[-2:] == ["7.5%", "7.5%"] for line in lines
    )
    assert any(line.startswith("wait p50 / p95 / max small") for line in lines)
    assert any(line.split()[:4] == ["wait", "p95", "a", "small"] for line in lines)
