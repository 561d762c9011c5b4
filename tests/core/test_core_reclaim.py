"""Reclaiming nominal quota across cycles: the reclaimer, not the next borrower, gets the devices.

Rule 6 lets a tenant under its nominal quota evict a borrower of any tier; rule 4 orders by tier
first. Unless borrowing leaves alone the devices such a tenant waits for (PRODUCT §3: borrowing
uses idle devices), the freed devices go back to a higher-tier borrower and the reclaimer evicts
again, forever. These tests run several consecutive cycles and apply their decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import builders
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.explain import ReasonCode
from gangq.queue.core.model import (
    CycleResult,
    JobKey,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    TenantQuota,
)

QUOTAS = (
    builders.quota("prod", 16),
    builders.quota("ml-train", 12, borrowing_limit=16),
    builders.quota("ci", 4, borrowing_limit=8),
)
STEP_S = 30.0
"""Seconds between cycles: one eviction grace period, so a victim is gone by the next cycle."""


@dataclass
class History:
    """A cluster run cycle after cycle: admissions hold devices, victims evict by the next
    cycle and queue again with their original submission time."""

    quotas: tuple[TenantQuota, ...]
    nodes: int = 4
    per_node: int = 8
    now: float = 100_000.0
    jobs: dict[JobKey, PendingJob] = field(default_factory=dict)
    running: dict[JobKey, RunningJob] = field(default_factory=dict)
    pending: dict[JobKey, PendingJob] = field(default_factory=dict)
    ends: dict[JobKey, float] = field(default_factory=dict)
    matcher: DeviceMatcher = field(default_factory=DeviceMatcher)

    def submit(self, job: PendingJob) -> None:
        self.jobs[job.key] = job
        self.pending[job.key] = job

    def cycle(self) -> CycleResult:
        for key, gang in list(self.running.items()):
            if gang.is_evicting or self.ends.get(key, float("inf")) <= self.now:
                del self.running[key]
                if gang.is_evicting:
                    self.pending[key] = self.jobs[key]
        snapshot = Snapshot(
            inventory=builders.cluster(self.nodes, per_node=self.per_node, racks=2),
            quotas=self.quotas,
            running=tuple(self.running.values()),
            pending=tuple(sorted(self.pending.values(), key=lambda j: (j.submitted_at, j.uid))),
        )
        result = cycle.run_cycle(
            snapshot=snapshot, policy=Policy(), now=self.now, matcher=self.matcher
        )
        for admission in result.admissions:
            job = self.pending.pop(admission.job)
            self.running[job.key] = RunningJob(
                key=job.key,
                uid=job.uid,
                tenant=job.tenant,
                tier=job.tier,
                priority=job.priority,
                device_class=job.device_class,
                placement=admission.placement,
                started_at=self.now,
                max_runtime_s=job.max_runtime_s,
                borrowed=admission.borrowed,
                submitted_at=job.submitted_at,
            )
            if job.max_runtime_s is not None:
                self.ends[job.key] = self.now + job.max_runtime_s
        for preemption in result.preemptions:
            for victim in preemption.victims:
                self.running[victim.job] = replace(self.running[victim.job], is_evicting=True)
        self.now += STEP_S
        return result


def _serving(history: History) -> None:
    """Prod holds node-0 and node-3 within its nominal; ml-train borrows node-1 and node-2."""
    for name, node in (("serve-0", "node-0"), ("serve-1", "node-3")):
        gang = builders.gang(name, [(node, range(8))], tenant="prod", tier="prod-inference")
        history.running[gang.key] = gang
        history.jobs[gang.key] = builders.job(name, tenant="prod", tier="prod-inference")
    # it checkpoints every 10 min: a reclaim costs it 16 x (1 min + 5 min of restart), less
    # than the small job's wait (rule 6)
    train = replace(
        builders.gang(
            "train-a",
            [("node-1", range(8)), ("node-2", range(8))],
            tenant="ml-train",
            tier="training",
            started_at=0.0,
            borrowed=4,
        ),
        checkpoint_interval_s=600.0,
        last_checkpoint_at=history.now - 60,
    )
    history.running[train.key] = train
    history.jobs[train.key] = builders.job(
        "train-a", tenant="ml-train", tier="training", replicas=2, per_replica=8
    )


def test_the_reclaimer_gets_the_devices_not_the_next_borrower() -> None:
    history = History(quotas=QUOTAS)
    _serving(history)
    history.submit(
        builders.job("train-b", tenant="ml-train", tier="training", replicas=2, per_replica=8)
    )
    small = builders.job("test-3", tenant="ci", tier="small", submitted_at=50_000.0)
    history.submit(small)

    reclaim = history.cycle()
    assert [(p.job, [v.job for v in p.victims]) for p in reclaim.preemptions] == [
        (small.key, ["ml-train/train-a"])
    ]
    assert reclaim.pending[small.key].code is ReasonCode.PREEMPTION

    after_eviction = history.cycle()
    assert [a.job for a in after_eviction.admissions] == [small.key]
    assert after_eviction.preemptions == ()
    for borrower in ("ml-train/train-a", "ml-train/train-b"):
        reason = after_eviction.pending[JobKey(borrower)]
        assert reason.code is ReasonCode.QUOTA
        assert "owed to tenants waiting within nominal" in reason.message

    settled = history.cycle()
    assert settled.preemptions == ()
    assert [a.job for a in settled.admissions] == []
    assert small.key in history.running


def test_a_borrower_does_not_wait_on_evicting_gangs_it_could_not_get() -> None:
    """While the victim's grace period runs, a higher-tier borrower must not claim it: the
    reclaimer keeps it and nobody else is evicted."""
    quotas = (
        builders.quota("prod", 16),
        builders.quota("ml-train", 12, borrowing_limit=32),
        builders.quota("ci", 4, borrowing_limit=8),
    )
    history = History(quotas=quotas)
    _serving(history)
    history.running[JobKey("ml-train/train-a")] = replace(
        history.running[JobKey("ml-train/train-a")], is_evicting=True
    )
    history.submit(
        builders.job("train-b", tenant="ml-train", tier="training", replicas=2, per_replica=8)
    )
    small = builders.job("test-3", tenant="ci", tier="small")
    history.submit(small)
    snapshot = Snapshot(
        inventory=builders.cluster(4, racks=2),
        quotas=quotas,
        running=tuple(history.running.values()),
        pending=tuple(history.pending.values()),
    )
    result = cycle.run_cycle(
        snapshot=snapshot, policy=Policy(), now=history.now, matcher=DeviceMatcher()
    )
    assert [(p.job, p.victims) for p in result.preemptions] == [(small.key, ())]
    assert result.pending[JobKey("ml-train/train-b")].code is ReasonCode.QUOTA


def test_borrowing_still_uses_idle_devices() -> None:
    """Nobody within nominal waits: the borrower takes the free devices as before."""
    history = History(quotas=QUOTAS)
    history.submit(
        builders.job("train-b", tenant="ml-train", tier="training", replicas=2, per_replica=8)
    )
    history.submit(
        builders.job("train-c", tenant="ml-train", tier="training", replicas=1, per_replica=8)
    )
    result = history.cycle()
    assert sorted(a.job for a in result.admissions) == ["ml-train/train-b", "ml-train/train-c"]
    assert sum(a.borrowed for a in result.admissions) == 12


def _one_cycle(
    *pending: PendingJob, running: tuple[RunningJob, ...], quotas: tuple[TenantQuota, ...]
) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(2, per_node=4),
        quotas=quotas,
        running=running,
        pending=pending,
    )
    return cycle.run_cycle(snapshot=snapshot, policy=Policy(), now=1e5, matcher=DeviceMatcher())


def test_a_borrower_leaves_the_node_an_owed_job_needs() -> None:
    """Counting is not enough: 4 of 6 free devices would stay free, but spread so that the
    owed 4-device job fits nowhere. The borrower keeps off the owed job's placement."""
    quotas = (builders.quota("t0", 8), builders.quota("t2", 0, borrowing_limit=4))
    held = builders.gang("held", [("node-0", range(2))], tenant="t0", tier="small")
    owed = builders.job("big", tenant="t0", tier="training", per_replica=4)
    spread = builders.job("spread", tenant="t2", tier="prod-inference", replicas=2)
    result = _one_cycle(owed, spread, running=(held,), quotas=quotas)
    assert [a.job for a in result.admissions] == [owed.key]
    assert result.pending[spread.key].code is ReasonCode.QUOTA


def test_a_borrowing_preemptor_evicts_only_borrowed_use_of_others() -> None:
    """A higher tier that would borrow may not evict another tenant's use within nominal (it
    would be owed its devices back at once), but it may evict borrowed use."""
    quotas = (builders.quota("t0", 0, borrowing_limit=8), builders.quota("t1", 4))
    within = builders.gang("within", [("node-0", range(4))], tenant="t1", tier="small")
    preemptor = builders.job("urgent", tenant="t0", tier="prod-inference", per_replica=4)
    filler = builders.gang("filler", [("node-1", range(4))], tenant="t0", tier="prod-inference")
    blocked = _one_cycle(preemptor, running=(within, filler), quotas=quotas)
    assert blocked.preemptions == ()
    borrowing = (quotas[0], builders.quota("t1", 0, borrowing_limit=4))
    borrowed = replace(within, borrowed=4)
    allowed = _one_cycle(preemptor, running=(borrowed, filler), quotas=borrowing)
    assert [[v.job for v in p.victims] for p in allowed.preemptions] == [[within.key]]


TENANTS = ("t0", "t1", "t2")
TIERS = ("prod-inference", "training", "small")


@st.composite
def histories(draw: st.DrawFn) -> History:
    quotas = tuple(
        builders.quota(
            tenant,
            draw(st.sampled_from([0, 2, 4, 8])),
            borrowing_limit=draw(st.sampled_from([0, 4, 8, 16])),
        )
        for tenant in TENANTS
    )
    history = History(quotas=quotas, nodes=draw(st.integers(2, 3)), per_node=4)
    for index in range(draw(st.integers(2, 7))):
        tenant = draw(st.sampled_from(TENANTS))
        job = builders.job(
            f"j{index}",
            tenant=tenant,
            tier=draw(st.sampled_from(TIERS)),
            priority=draw(st.integers(0, 1)),
            replicas=draw(st.integers(1, 2)),
            per_replica=draw(st.sampled_from([1, 2, 4])),
            submitted_at=float(index),
            max_runtime_s=draw(st.sampled_from([None, 90.0, 3600.0])),
        )
        history.submit(job)
    return history


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_no_job_is_preempted_twice_for_the_same_preemptor_in_vain(history: History) -> None:
    """No thrash over 14 cycles of a fixed queue (jobs end, victims queue again): between two
    evictions of one gang for one preemptor, that preemptor was admitted."""
    quotas = [(q.tenant, q.nominal, q.borrowing_limit) for q in history.quotas]
    log = [f"{history.nodes} nodes of {history.per_node}, quotas {quotas}"]
    log += [f"{j.key} {j.tier} {j.replicas}x{j.devices_per_replica}" for j in history.jobs.values()]
    last_claim: dict[tuple[JobKey, JobKey], int] = {}
    admitted_at: dict[JobKey, list[int]] = {}
    for step in range(14):
        result = history.cycle()
        log.append(_described(step, result))
        for admission in result.admissions:
            admitted_at.setdefault(admission.job, []).append(step)
        for preemption in result.preemptions:
            for victim in preemption.victims:
                pair = (victim.job, preemption.job)
                before = last_claim.get(pair)
                if before is not None:
                    between = [s for s in admitted_at.get(preemption.job, []) if s > before]
                    assert between, (
                        "\n".join(log)
                        + f"\n{victim.job} evicted again for {preemption.job} at {step}"
                    )
                last_claim[pair] = step


def _described(step: int, result: CycleResult) -> str:
    admitted = [(a.job, a.borrowed, [r.node for r in a.placement]) for a in result.admissions]
    evicted = [(p.job, [v.job for v in p.victims]) for p in result.preemptions]
    pending = {key: reason.message for key, reason in result.pending.items()}
    return f"cycle {step}: admitted {admitted}, evictions {evicted}, pending {pending}"


def test_a_borrower_ending_before_the_owed_devices_free_may_use_them() -> None:
    """Like backfill before a reservation: 3 devices are free, the owed 4-device job can start
    only when borrowed gangs end in ~50 min, so a borrower predicted to end within 10 min takes
    nothing from it; one that would still run then waits for the owed job."""
    quotas = (builders.quota("t0", 8), builders.quota("t2", 0, borrowing_limit=8))
    now = 1e5
    gangs = (
        builders.gang("a", [("node-0", range(3))], tenant="t2", tier="training", borrowed=3),
        builders.gang("b", [("node-1", range(2))], tenant="t2", tier="training", borrowed=2),
    )
    running = tuple(replace(gang, started_at=now - 600) for gang in gangs)
    owed = builders.job("big", tenant="t0", tier="small", per_replica=4, submitted_at=now)
    short = builders.job("short", tenant="t2", tier="small", max_runtime_s=600, submitted_at=now)
    # it checkpoints: only what is owed holds it back, not the hazard of a reclaim
    long = replace(
        builders.job("long", tenant="t2", tier="small", max_runtime_s=7200, submitted_at=now),
        checkpoint_interval_s=600.0,
    )
    result = _one_cycle(owed, short, long, running=running, quotas=quotas)
    assert [a.job for a in result.admissions] == [short.key]
    assert result.pending[owed.key].code is not ReasonCode.QUOTA
    reason = result.pending[long.key]
    assert reason.code is ReasonCode.QUOTA
    assert "owed to tenants waiting within nominal" in reason.message
