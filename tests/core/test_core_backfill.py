"""EASY backfill (PRODUCT rule 5): the first blocked job of a tier holds a reservation; later
jobs start only where they cannot delay it."""

from __future__ import annotations

import random

import builders
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.explain import ReasonCode
from gangq.queue.core.model import (
    BackfillReservation,
    CycleResult,
    JobKey,
    NodeName,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
)

NOW = 1_000.0
QUOTAS = (builders.quota("team-a", 64), builders.quota("team-b", 64))
POLICY = Policy(preemption=False)


def _cycle(*jobs: PendingJob, running: tuple[RunningJob, ...], nodes: int = 2) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(nodes), quotas=QUOTAS, running=running, pending=jobs
    )
    return cycle.run_cycle(snapshot=snapshot, policy=POLICY, now=NOW, matcher=DeviceMatcher())


RUNNING = (
    builders.gang("a", [("node-0", range(8))], started_at=NOW - 3000, max_runtime_s=3600),
    builders.gang("b", [("node-1", range(4))], started_at=NOW - 2400, max_runtime_s=3600),
)
"""node-0 frees at NOW+600, node-1's four busy devices at NOW+1200."""
BIG = builders.job("big", replicas=2, per_replica=8, submitted_at=1)


def test_first_blocked_job_gets_its_earliest_start_on_concrete_nodes() -> None:
    result = _cycle(BIG, running=RUNNING)
    assert result.reservations == (
        BackfillReservation(
            job=JobKey("team-a/big"),
            tier="training",
            start_at=NOW + 1200,
            nodes=(NodeName("node-0"), NodeName("node-1")),
        ),
    )
    assert result.pending[JobKey("team-a/big")].message == (
        "capacity: needs 2 nodes with 8 free gpu, 0 have them; reserved start in ~20m"
    )


def test_short_jobs_backfill_and_long_ones_wait_behind_the_reservation() -> None:
    short = builders.job("short", tenant="team-b", tier="small", max_runtime_s=1200, submitted_at=2)
    long = builders.job("long", tenant="team-b", tier="small", max_runtime_s=1201, submitted_at=3)
    result = _cycle(BIG, short, long, running=RUNNING)
    assert [a.job for a in result.admissions] == [JobKey("team-b/short")]
    assert result.pending[JobKey("team-b/long")].message == (
        "backfill: waiting behind team-a/big, reserved start in ~20m"
    )
    assert result.pending[JobKey("team-b/long")].code is ReasonCode.BACKFILL


def test_long_jobs_may_use_devices_the_reservation_does_not_need() -> None:
    long = builders.job("long", tenant="team-b", tier="small", max_runtime_s=None, submitted_at=2)
    result = _cycle(BIG, long, running=RUNNING, nodes=3)
    assert result.reservations[0].start_at == NOW + 600
    assert result.reservations[0].nodes == (NodeName("node-0"), NodeName("node-2"))
    assert [r.node for r in result.admissions[0].placement] == [NodeName("node-1")]


def test_no_reservation_behind_gangs_that_never_end() -> None:
    forever = (
        builders.gang("serve", [("node-0", range(8)), ("node-1", range(8))], max_runtime_s=None),
    )
    result = _cycle(BIG, running=forever)
    assert result.reservations == ()
    assert result.pending[JobKey("team-a/big")].message == (
        "capacity: needs 2 nodes with 8 free gpu, 0 have them"
    )


CYCLE_S = 60.0


def _simulate(seed: int) -> tuple[list[float], float | None]:
    """A 4x8 gang among a stream of 1-GPU jobs on a virtual clock; returns the gang's reserved
    starts, cycle by cycle, and when it was admitted."""
    rng = random.Random(seed)
    now = 0.0
    running: dict[JobKey, tuple[RunningJob, float]] = {}
    for index in range(rng.randint(20, 32)):
        node, device = divmod(index, 8)
        limit = float(rng.randint(300, 3000))
        gang = builders.gang(
            f"old-{index}",
            [(f"node-{node}", [device])],
            started_at=-rng.uniform(0, 200),
            max_runtime_s=limit,
        )
        running[gang.key] = (gang, gang.started_at + limit * rng.uniform(0.3, 1.0))
    arrivals = sorted(rng.uniform(0, 3000) for _ in range(rng.randint(10, 40)))
    stream = [
        builders.job(
            f"small-{i}",
            tenant="team-b",
            tier="small",
            submitted_at=at,
            max_runtime_s=float(rng.randint(60, 1800)),
        )
        for i, at in enumerate(arrivals)
    ]
    big = builders.job("big", replicas=4, per_replica=8, max_runtime_s=600.0)
    pending = {big.key: big}
    starts: list[float] = []
    while now < 6000:
        running = {k: v for k, v in running.items() if v[1] > now}
        pending |= {job.key: job for job in stream if job.submitted_at <= now}
        stream = [job for job in stream if job.submitted_at > now]
        snapshot = Snapshot(
            inventory=builders.cluster(4),
            quotas=QUOTAS,
            running=tuple(g for g, _ in running.values()),
            pending=tuple(pending.values()),
        )
        result = cycle.run_cycle(snapshot=snapshot, policy=POLICY, now=now, matcher=DeviceMatcher())
        for admission in result.admissions:
            job = pending.pop(admission.job)
            gang = RunningJob(
                key=job.key,
                uid=job.uid,
                tenant=job.tenant,
                tier=job.tier,
                priority=job.priority,
                device_class=job.device_class,
                placement=admission.placement,
                started_at=now,
                max_runtime_s=job.max_runtime_s,
            )
            assert job.max_runtime_s is not None
            running[job.key] = (gang, now + job.max_runtime_s * rng.uniform(0.2, 1.0))
            if job.key == big.key:
                return starts, now
        starts += [r.start_at for r in result.reservations if r.job == big.key]
        now += CYCLE_S
    return starts, None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32))
def test_backfill_never_delays_the_reserved_start(seed: int) -> None:
    starts, admitted_at = _simulate(seed)
    assert admitted_at is not None, "the gang must start: every 1-GPU job ends"
    if starts:
        assert starts == sorted(starts, reverse=True), "a reserved start moved later"
        assert admitted_at <= starts[0] + CYCLE_S, "started after its first reservation"
