"""The serving scale-up forecast through the simulator: the engine hands the core the
admissions of the tiers that always preempt, and a daily scale-up then finds a place that
costs little to clear (core module `serving`)."""

from __future__ import annotations

from typing import Any

import pytest

from gangq.queue.core.explain import WaitCause
from gangq.queue.core.model import Policy
from gangq.queue.sim import engine, policy, report, trace

HOUR = 3_600.0
DAY = 24 * HOUR


def _job(name: str, arrival: float, tier: str, **fields: Any) -> dict[str, Any]:
    tenant = name.split("/", maxsplit=1)[0]
    return {"name": name, "arrival": arrival, "tenant": tenant, "tier": tier, **fields}


def _scale_ups(*, days: int) -> list[dict[str, Any]]:
    """Prod's 1 x 8 scale-up at 11:00 for 2 h, on each of the first `days` days."""
    return [
        _job(
            f"prod/up-{day}",
            day * DAY + 11 * HOUR,
            "prod-inference",
            devicesPerReplica=8,
            runtime=2 * HOUR,
        )
        for day in range(days)
    ]


WEEK = trace.from_document(
    {
        "horizon": 3 * DAY,
        "cluster": {"nodes": 2, "racks": 1},
        "tenants": [
            {"name": "prod", "nominal": 8},
            {"name": "team", "nominal": 8, "borrowingLimit": 8},
        ],
        "jobs": [
            # Node 0 runs days of unsaved work: node 1 is the only place a scale-up clears
            # cheaply.
            _job("team/steady", 0, "training", devicesPerReplica=8, runtime=100 * HOUR),
            *_scale_ups(days=3),
            # On day 2 a job that would run past 11:00 without checkpoints, then one that
            # ends before it.
            _job(
                "team/long",
                2 * DAY + 10 * HOUR,
                "training",
                devicesPerReplica=8,
                runtime=10 * HOUR,
                maxRuntime=12 * HOUR,
            ),
            _job(
                "team/short",
                2 * DAY + 10 * HOUR + 60,
                "training",
                devicesPerReplica=8,
                runtime=45 * 60,
                maxRuntime=50 * 60,
            ),
        ],
    }
)


def _simulate(week: trace.Trace, settings: Policy) -> engine.Outcome:
    return engine.simulate(
        week, policy.create("gangq", device_class="gpu.nvidia.com", settings=settings)
    )


def _run(settings: Policy) -> tuple[dict[str, Any], engine.Outcome]:
    outcome = _simulate(WEEK, settings)
    return report.summarize(outcome), outcome


def test_a_forecast_scale_up_finds_its_place_cheap_to_clear() -> None:
    """Without the forecast, the long job takes node 1 at 10:00 and the scale-up destroys
    that hour. With it, the long job leaves node 1 to the short one, which ends by 10:46, and
    takes it only once its idle devices have cost what the scale-up would destroy, minutes
    before 11:00: it loses those minutes and its restart."""
    forecast, kept = _run(Policy())
    blind, taken = _run(Policy(serving_forecast_days=None))
    # An hour of 8 devices, the 30 s grace and the restart after it.
    assert blind["device_hours_lost_by_cause"] == {
        "prod-inference > training": pytest.approx(8 * (HOUR + 30 + 300) / HOUR)
    }
    assert kept.records["team/short"].finished_at == 2 * DAY + 10 * HOUR + 60 + 45 * 60
    assert taken.records["team/short"].finished_at > 2 * DAY + 11 * HOUR
    assert kept.records["team/long"].waited_by_cause[WaitCause.SERVING] > 0
    assert forecast["device_hours_lost"] < blind["device_hours_lost"] / 5


def _second_day() -> trace.Trace:
    """Prod serves 1 x 8 for good and scaled up on day 0 only; on day 1, an hour before its
    next scale-up, a job that would run 12 h without checkpoints arrives while one node
    stands free (one holds days of unsaved work, one the service)."""
    jobs = [
        _job("prod/serve", 0, "prod-inference", devicesPerReplica=8),
        _job("team/steady", 0, "training", devicesPerReplica=8, runtime=100 * HOUR),
        *_scale_ups(days=2),
        _job(
            "team/long",
            DAY + 10 * HOUR,
            "training",
            devicesPerReplica=8,
            runtime=10 * HOUR,
            maxRuntime=12 * HOUR,
        ),
    ]
    return trace.from_document(
        {
            "horizon": 2 * DAY,
            "cluster": {"nodes": 3, "racks": 1},
            "tenants": [
                {"name": "prod", "nominal": 16},
                {"name": "team", "nominal": 8, "borrowingLimit": 8},
            ],
            "jobs": jobs,
        }
    )


def test_before_a_scale_up_recurs_its_place_is_kept_as_well() -> None:
    """On day 1 no hour is forecast yet (one day seen), but prod serves and its nominal quota
    has room: the long job would pay for the free node with its whole 12 h bound, so it waits
    instead of being evicted at 11:00, and starts once the scale-up has come and gone
    (13:00). Blind, the scale-up destroys its first hour."""
    kept = _simulate(_second_day(), Policy())
    blind = _simulate(_second_day(), Policy(serving_forecast_days=None))
    assert blind.records["team/long"].evictions == 1
    assert kept.records["team/long"].evictions == 0
    assert kept.device_seconds_lost == 0.0
    assert kept.records["team/long"].waited_by_cause[WaitCause.SERVING] == pytest.approx(HOUR)
    assert kept.records["team/long"].first_started_at == DAY + 13 * HOUR
