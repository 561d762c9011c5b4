"""The event loop with each policy on hand-built traces whose outcome can be worked out by hand."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gangq.queue.core.model import (
    Admission,
    CycleResult,
    NodeName,
    ReplicaPlacement,
    Snapshot,
)
from gangq.queue.sim import engine, policy, report, trace
from gangq.queue.sim.outcome import Outcome
from gangq.queue.sim.trace import Trace

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "sample.yaml"


def _job(name: str, arrival: float, tier: str, **fields: Any) -> dict[str, Any]:
    tenant = name.split("/", maxsplit=1)[0]
    return {"name": name, "arrival": arrival, "tenant": tenant, "tier": tier, **fields}


def _trace(nodes: int, jobs: list[dict[str, Any]], *, horizon: float = 2000) -> Trace:
    return trace.from_document(
        {"horizon": horizon, "cluster": {"nodes": nodes, "racks": 1}, "jobs": jobs}
    )


def _run(name: str, replayed: Trace) -> Outcome:
    return engine.simulate(replayed, policy.create(name, device_class="gpu.nvidia.com"))


def _starts(outcome: Outcome) -> dict[str, float | None]:
    return {key: record.first_started_at for key, record in outcome.records.items()}


BACKFILL = [
    _job("ops/a", 0, "training", devicesPerReplica=8, runtime=100, maxRuntime=100),
    _job("ml/b", 1, "training", replicas=2, devicesPerReplica=8, runtime=100, maxRuntime=100),
    _job("ci/c", 2, "small", runtime=10, maxRuntime=10),
    _job("ci/d", 3, "small", runtime=500, maxRuntime=500),
]


@pytest.mark.parametrize(
    ("name", "starts"),
    [
        ("fifo-strict", {"ops/a": 0, "ml/b": 100, "ci/c": 200, "ci/d": 200}),
        ("fifo-besteffort", {"ops/a": 0, "ml/b": 503, "ci/c": 2, "ci/d": 3}),
        ("gangq", {"ops/a": 0, "ml/b": 100, "ci/c": 2, "ci/d": 200}),
    ],
    ids=["strict-blocks-behind-the-gang", "besteffort-delays-the-gang", "gangq-backfills-safely"],
)
def test_gang_policies_differ_in_what_may_pass_a_blocked_gang(
    name: str, starts: dict[str, float]
) -> None:
    outcome = _run(name, _trace(2, BACKFILL))
    assert _starts(outcome) == starts
    record = outcome.records["ml/b"]
    assert record.waited_s == starts["ml/b"] - 1
    assert not record.was_partial


def test_strict_fifo_says_the_jobs_behind_a_blocked_head_wait_for_it() -> None:
    """ci/c fits from its arrival at 2 but waits behind ml/b until ml/b starts at 100 (as
    behind a reservation of the whole cluster), then for ml/b's devices until 200; ml/b itself
    waits for capacity."""
    outcome = _run("fifo-strict", _trace(2, BACKFILL))
    assert outcome.records["ci/c"].waited_by_cause == {"backfill": 98, "capacity": 100}
    assert set(outcome.records["ml/b"].waited_by_cause) == {"capacity"}


def test_gangq_promises_the_blocked_gang_a_start_and_keeps_it() -> None:
    outcome = _run("gangq", _trace(2, BACKFILL))
    assert outcome.records["ml/b"].promised_start == 100
    assert report.summarize(outcome)["max_reservation_slip_s"] == 0


DEADLOCK = [
    _job("ml/x1", 0, "small", devicesPerReplica=8, runtime=100),
    _job("ml/x2", 0, "small", devicesPerReplica=8, runtime=200),
    _job("ml/a", 1, "training", replicas=2, devicesPerReplica=8, runtime=50),
    _job("prod/b", 150, "prod-inference", replicas=2, devicesPerReplica=8, runtime=50),
]


def test_the_device_plugin_world_starts_gangs_partially_and_deadlocks() -> None:
    """x1 ends at 100: one pod of a starts. x2 ends at 200: the higher tier b takes that node.
    a and b each hold a node and wait for the other's: a deadlock, until a's startup timeout
    (600 s after its first pod) tears it down; b completes at 700, a starts when b ends."""
    outcome = _run("device-plugin", _trace(2, DEADLOCK))
    assert _starts(outcome) == {"ml/x1": 0, "ml/x2": 0, "ml/a": 750, "prod/b": 700}
    summary = report.summarize(outcome)
    assert summary["partial_starts"] == 2
    assert summary["deadlocks"] == 1
    assert summary["gang_start_failures"] == 1
    assert summary["partial_idle_device_hours"] == pytest.approx((8 * 600 + 8 * 500) / 3600)
    assert outcome.records["ml/a"].teardowns == 1


def test_gang_policies_never_start_a_gang_partially() -> None:
    for name in ("gangq", "fifo-strict", "fifo-besteffort"):
        summary = report.summarize(_run(name, _trace(2, DEADLOCK)))
        assert (name, summary["partial_starts"], summary["deadlocks"]) == (name, 0, 0)


def test_gangq_evicts_a_lower_tier_and_counts_the_work_lost() -> None:
    """prod/p needs the only node: the small job (past its 60 s protection) is evicted whole;
    after its 30 s grace period p starts and the small job queues again, never to fit."""
    jobs = [
        _job("ci/s", 0, "small", devicesPerReplica=8, runtime=1000),
        _job("prod/p", 100, "prod-inference", devicesPerReplica=8),
    ]
    outcome = _run("gangq", _trace(1, jobs, horizon=500))
    summary = report.summarize(outcome)
    assert summary["preemptions"] == 1
    assert summary["device_hours_lost"] == pytest.approx(8 * 130 / 3600)
    small = outcome.records["ci/s"]
    assert (small.evictions, small.first_started_at, small.finished_at) == (1, 0, None)
    assert small.waited_s == 500 - 130
    assert outcome.records["prod/p"].first_started_at == 130
    assert summary["wait_p95_s"] == {"prod-inference": 30, "small": 370}


def _reclaimed(*, restart_s: float) -> Outcome:
    """ci/s is owed the node (nominal 8) that research borrows. research saves a checkpoint
    every 30 s, so an eviction costs it at most 8 x 30 s of work and 8 x `restart_s`."""
    document = {
        "horizon": 2000,
        "cluster": {"nodes": 1, "racks": 1},
        "tenants": [
            {"name": "ci", "nominal": 8},
            {"name": "research", "nominal": 0, "borrowingLimit": 8},
        ],
        "jobs": [
            _job(
                "research/t",
                0,
                "training",
                devicesPerReplica=8,
                runtime=5000,
                checkpointInterval=30,
                restartSeconds=restart_s,
            ),
            _job("ci/s", 100, "small", runtime=60),
        ],
    }
    return _run("gangq", trace.from_document(document))


def test_gangq_reclaims_for_a_small_job_once_its_preemption_delay_is_over() -> None:
    """The small tier waits 300 s before it evicts anyone, so the simulator must wake at 400
    with nothing else happening: then ci/s has waited 300 device-s, and a quarter of that
    (`Policy.preemption_cost_factor`) is less than the 80 device-s the borrower's eviction
    costs (8 x 10 s since its checkpoint at 390). The cycle asks to run again at the next
    checkpoint, 420, when the eviction costs nothing: it is evicted and ci/s starts after
    the 30 s grace period."""
    outcome = _reclaimed(restart_s=0)
    assert outcome.records["research/t"].evictions == 1
    assert outcome.records["ci/s"].first_started_at == 450
    waited = outcome.records["ci/s"].waited_by_cause
    assert waited["evicting"] == 30
    assert sum(waited.values()) == outcome.records["ci/s"].waited_s == 350
    by_cause = report.summarize(outcome)["wait_by_cause_h"]["small"]
    assert by_cause == {cause: seconds / 3600 for cause, seconds in waited.items()}


def test_gangq_wakes_when_a_waiting_reclaim_starts_to_pay_and_counts_the_restart() -> None:
    """The eviction costs 8 x 25 s of restart and 8 x up to 30 s of work: ci/s, waiting
    since 100, has paid 800 device-s by 900, four times the 200 the eviction costs when
    research has just saved a checkpoint. With no event in between, the simulator wakes when
    the cycle says the reclaim may first pay; the restart research spends before the horizon
    counts as lost."""
    outcome = _reclaimed(restart_s=25)
    assert outcome.records["ci/s"].first_started_at == 930
    restarted = outcome.records["research/t"]
    assert (restarted.evictions, restarted.started_at) == (1, 990)
    assert report.summarize(outcome)["device_hours_lost"] == pytest.approx(8 * 25 / 3600)


def test_a_job_is_stopped_at_its_max_runtime() -> None:
    jobs = [_job("ci/s", 10, "small", runtime=900, maxRuntime=300)]
    outcome = _run("fifo-besteffort", _trace(1, jobs, horizon=1000))
    assert outcome.records["ci/s"].finished_at == 310


def test_runs_are_deterministic_and_progress_reaches_the_end() -> None:
    replayed = trace.load(SAMPLE)
    seen: list[float] = []
    first = engine.simulate(
        replayed, policy.create("gangq", device_class="gpu.nvidia.com"), on_progress=seen.append
    )
    second = _run("gangq", replayed)
    assert _starts(first) == _starts(second)
    assert first.timeline.times == second.timeline.times
    assert seen[-1] == 1.0 and seen == sorted(seen)


class _DoubleBooking:
    """Admits every pending job onto device gpu-0 of node gpu-0, whoever holds it."""

    name = "double-booking"
    whole_gangs = True
    serving_tiers: frozenset[str] = frozenset()

    def decide(self, snapshot: Snapshot, *, now: float) -> CycleResult:
        device = sorted(snapshot.inventory.devices)[0]
        replica = ReplicaPlacement(replica=0, node=NodeName("gpu-0"), devices=(device,))
        return CycleResult(
            admissions=tuple(Admission(job=j.key, placement=(replica,)) for j in snapshot.pending)
        )

    def wake_at(self, snapshot: Snapshot, *, now: float) -> float | None:
        return None


def test_the_simulator_refuses_a_device_given_twice() -> None:
    jobs = [_job("ci/a", 0, "small", runtime=10), _job("ci/b", 1, "small", runtime=10)]
    with pytest.raises(
        engine.SimulationError,
        match=re.escape("rule 1: gpu.nvidia.com/gpu-0/gpu-0 given to ci/b while ci/a holds it"),
    ):
        engine.simulate(_trace(1, jobs), _DoubleBooking())


@pytest.mark.parametrize("name", ["gangq", "fifo-strict", "fifo-besteffort", "device-plugin"])
def test_waits_on_the_tenants_own_limit_are_told_apart(name: str) -> None:
    """ci may hold one device: its second job waits 100 s for the first with a free node
    beside it, which only its own quota explains; no policy could have started it sooner."""
    document = {
        "horizon": 1000,
        "cluster": {"nodes": 1, "racks": 1},
        "tenants": [{"name": "ci", "nominal": 1}],
        "jobs": [
            _job("ci/a", 0, "small", runtime=100, maxRuntime=100),
            _job("ci/b", 0, "small", runtime=100, maxRuntime=100),
        ],
    }
    summary = report.summarize(_run(name, trace.from_document(document)))
    assert summary["wait_p95_s"]["small"] == 100
    assert summary["wait_p95_beyond_limit_s"]["small"] == 0
    assert summary["wait_by_cause_h"]["small"] == {"limit": pytest.approx(100 / 3600)}
