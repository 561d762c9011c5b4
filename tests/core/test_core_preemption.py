"""Preemption tiers (PRODUCT rule 6): who may evict whom, which victims, minimal sets."""

from __future__ import annotations

import dataclasses
import itertools
import math

import builders
import core_oracle
import pytest
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
    Preemption,
    RunningJob,
    Snapshot,
    TenantQuota,
    Victim,
)

NOW = 10_000.0
ALWAYS_PAYS = Policy(preemption_cost_factor=math.inf)
"""These tests are about who may be a victim and which set is chosen; whether an eviction
pays and how long a reclaim waits (rule 6) have their own tests in test_core_goodput.py."""
QUOTAS = (
    builders.quota("team-a", 16, borrowing_limit=16),
    builders.quota("team-b", 16, borrowing_limit=16),
)


def _cycle(
    job: PendingJob,
    *running: RunningJob,
    quotas: tuple[TenantQuota, ...] = QUOTAS,
    nodes: int = 1,
    per_node: int = 8,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(nodes, per_node=per_node),
        quotas=quotas,
        running=running,
        pending=(job,),
    )
    return cycle.run_cycle(snapshot=snapshot, policy=ALWAYS_PAYS, now=NOW, matcher=DeviceMatcher())


def _victims(result: CycleResult) -> list[str]:
    return [victim.job for preemption in result.preemptions for victim in preemption.victims]


def test_higher_tier_evicts_a_whole_lower_gang_with_a_reason() -> None:
    small = builders.gang("small", [("node-0", range(8))], tier="small")
    result = _cycle(builders.job("train", per_replica=4), small)
    assert result.preemptions == (
        Preemption(
            job=JobKey("team-a/train"),
            victims=(
                Victim(
                    JobKey("team-b/small"),
                    "preempted by team-a/train (tier training > small), losing 22.2 device-h "
                    "since the last checkpoint",
                    lost_device_s=pytest.approx(22.2 * 3600, rel=0.005),
                ),
            ),
        ),
    )
    assert result.admissions == ()
    assert result.pending[JobKey("team-a/train")].message == (
        "preemption: waiting for 1 gang to be evicted (team-b/small), costs 22.9 device-h"
    )


@pytest.mark.parametrize(
    ("preemptor_tier", "victim_tier", "code"),
    [
        ("small", "training", ReasonCode.CAPACITY),
        ("training", "training", ReasonCode.CAPACITY),
        # a long-running gang it may not evict holds the only node: it can never fit
        ("training", "prod-inference", ReasonCode.UNSCHEDULABLE),
    ],
)
def test_never_preempts_an_equal_or_higher_tier(
    preemptor_tier: str, victim_tier: str, code: ReasonCode
) -> None:
    gang = builders.gang("held", [("node-0", range(8))], tier=victim_tier)
    result = _cycle(builders.job("x", tier=preemptor_tier), gang)
    assert result.preemptions == ()
    assert result.pending[JobKey("team-a/x")].code is code


def test_reclaims_nominal_quota_from_a_borrower_of_any_tier() -> None:
    quotas = (builders.quota("team-a", 8), builders.quota("team-b", 0, borrowing_limit=8))
    borrower = builders.gang("serve", [("node-0", range(8))], tier="prod-inference", borrowed=8)
    result = _cycle(builders.job("x", tier="small"), borrower, quotas=quotas)
    assert _victims(result) == ["team-b/serve"]
    assert result.preemptions[0].victims[0].reason == (
        "reclaim: tenant team-b back under nominal for team-a/x, losing 22.2 device-h since "
        "the last checkpoint"
    )


def test_no_reclaim_when_the_preemptor_would_itself_borrow() -> None:
    quotas = (
        builders.quota("team-a", 0, borrowing_limit=8),
        builders.quota("team-b", 0, borrowing_limit=8),
    )
    borrower = builders.gang("serve", [("node-0", range(8))], tier="training", borrowed=8)
    result = _cycle(builders.job("x", tier="small"), borrower, quotas=quotas)
    assert result.preemptions == ()


@pytest.mark.parametrize(("nominal", "evicted"), [(0, True), (2, False)])
def test_a_borrower_evicts_only_gangs_wholly_borrowed_by_others(
    nominal: int, evicted: bool
) -> None:
    """A gang partly within its tenant's nominal queues again owed that part: a borrower that
    evicted it for a whole node would find the owed devices held on both nodes, could not
    start, and the victims would come back, evicted again the next cycle (found by the
    thrash property of test_core_reclaim)."""
    quotas = (
        builders.quota("team-a", 0, borrowing_limit=4),
        builders.quota("team-b", nominal, borrowing_limit=4),
    )
    wide = builders.gang(
        "wide", [("node-0", [0, 1]), ("node-1", [0, 1])], tier="training", borrowed=4 - nominal
    )
    thin = builders.gang("thin", [("node-0", [2]), ("node-1", [2])], tier="training", borrowed=2)
    prod = builders.job("serve", tier="prod-inference", per_replica=4)
    result = _cycle(prod, wide, thin, quotas=quotas, nodes=2, per_node=4)
    assert sorted(_victims(result)) == (["team-b/thin", "team-b/wide"] if evicted else [])


@pytest.mark.parametrize(("ran_for", "evicted"), [(30.0, False), (61.0, True)])
def test_minimum_runtime_protects_fresh_gangs(ran_for: float, evicted: bool) -> None:
    """The small tier's minRuntimeBeforePreemptionSeconds is 60 by default."""
    gang = builders.gang("fresh", [("node-0", range(8))], tier="small", started_at=NOW - ran_for)
    result = _cycle(builders.job("train"), gang)
    assert bool(result.preemptions) is evicted


def test_a_tier_that_always_preempts_takes_a_fresh_gang_over_one_that_ran_for_hours() -> None:
    """A prod scale-up needs a node: node-0 has four free devices beside a small job that
    started 10 s ago (inside its 60 s protection), node-1 a training gang that ran 5 h. The
    protection would leave prod only the training gang's 40 device-h; prod takes the fresh
    job, which loses 10 device-s."""
    quotas = (
        builders.quota("team-a", 8),
        builders.quota("team-b", 16, borrowing_limit=16),
    )
    fresh = builders.gang("fresh", [("node-0", range(4))], tier="small", started_at=NOW - 10)
    trained = builders.gang(
        "trained", [("node-1", range(8))], tier="training", started_at=NOW - 5 * 3600
    )
    scale_up = builders.job("serve", tier="prod-inference", per_replica=8)
    result = _cycle(scale_up, fresh, trained, quotas=quotas, nodes=2)
    assert _victims(result) == ["team-b/fresh"]


def test_reclaim_ignores_minimum_runtime() -> None:
    quotas = (builders.quota("team-a", 8), builders.quota("team-b", 0, borrowing_limit=8))
    gang = builders.gang(
        "fresh", [("node-0", range(8))], tier="small", started_at=NOW - 1, borrowed=8
    )
    result = _cycle(builders.job("x", tier="small"), gang, quotas=quotas)
    assert _victims(result) == ["team-b/fresh"]


@pytest.mark.parametrize(("waited", "evicted"), [(299.0, False), (300.0, True)])
def test_a_small_job_reclaims_only_after_its_tiers_preemption_delay(
    waited: float, evicted: bool
) -> None:
    """The small tier's preemptionDelaySeconds is 300 by default: short jobs turning over
    usually free a device sooner than evicting a training gang would pay off."""
    quotas = (builders.quota("team-a", 8), builders.quota("team-b", 0, borrowing_limit=8))
    borrower = builders.gang(
        "train", [("node-0", range(8))], tier="training", borrowed=8, max_runtime_s=None
    )
    result = _cycle(
        builders.job("x", tier="small", submitted_at=NOW - waited), borrower, quotas=quotas
    )
    assert _victims(result) == (["team-b/train"] if evicted else [])
    if not evicted:
        assert result.pending[JobKey("team-a/x")].code is ReasonCode.CAPACITY


def test_a_job_still_in_its_delay_does_not_stop_an_older_one_from_preempting() -> None:
    """Jobs alike share one verdict per cycle; whether each may preempt yet is part of it.
    (Without backfill, the younger job's refusal is such a shared verdict.)"""
    quotas = (builders.quota("team-a", 8), builders.quota("team-b", 0, borrowing_limit=8))
    borrower = dataclasses.replace(
        builders.gang(
            "train", [("node-0", range(8))], tier="training", borrowed=8, max_runtime_s=None
        ),
        checkpoint_interval_s=60.0,
    )
    # the eviction costs 8 x (60 s of work + 300 s of restart); the old job waited more than
    # four times that (Policy.preemption_cost_factor)
    young = builders.job("young", tier="small", priority=5, submitted_at=NOW - 10)
    old = builders.job("old", tier="small", submitted_at=NOW - 12_000)
    snapshot = Snapshot(
        inventory=builders.cluster(1), quotas=quotas, running=(borrower,), pending=(young, old)
    )
    policy = Policy(backfill=False)
    result = cycle.run_cycle(snapshot=snapshot, policy=policy, now=NOW, matcher=DeviceMatcher())
    assert [p.job for p in result.preemptions] == [JobKey("team-a/old")]
    assert result.order[0] == JobKey("team-a/young")


def test_gangs_being_evicted_count_as_coming_free() -> None:
    leaving = builders.gang("leaving", [("node-0", range(4))], evicting=True)
    other = builders.gang("other", [("node-0", range(4, 8))], tier="small")
    result = _cycle(builders.job("train", per_replica=4), leaving, other)
    assert _victims(result) == []
    assert result.pending[JobKey("team-a/train")].message == (
        "preemption: waiting for 1 gang to be evicted (team-b/leaving)"
    )


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        pytest.param({"tier": "small"}, {"tier": "training"}, "first", id="1-lower-tier"),
        pytest.param({"borrowed": 0}, {"borrowed": 4}, "second", id="2-borrowed-use"),
        pytest.param({"priority": 5}, {"priority": 1}, "second", id="3-lower-priority"),
        pytest.param(
            {"started_at": 100.0}, {"started_at": 5000.0}, "second", id="4-most-recently-started"
        ),
    ],
)
def test_victim_preference_follows_rule_6(
    first: dict[str, object], second: dict[str, object], expected: str
) -> None:
    base: dict[str, object] = {"tier": "small", "priority": 0, "started_at": 1000.0, "borrowed": 0}
    gangs = [
        builders.gang(name, [("node-0", indexes)], **{**base, **overrides})  # type: ignore[arg-type]
        for name, indexes, overrides in (
            ("first", range(4), first),
            ("second", range(4, 8), second),
        )
    ]
    result = _cycle(builders.job("x", tier="prod-inference", per_replica=4), *gangs)
    assert _victims(result) == [f"team-b/{expected}"]


def test_multi_node_gang_is_evicted_whole_and_only_when_needed() -> None:
    wide = builders.gang("wide", [("node-0", range(4)), ("node-1", range(4))], tier="small")
    narrow = builders.gang("narrow", [("node-0", range(4, 8))], tier="small", started_at=5000.0)
    peer = builders.gang("peer", [("node-1", range(4, 8))], tier="training")
    result = _cycle(builders.job("x", per_replica=8), wide, narrow, peer, nodes=2)
    assert sorted(_victims(result)) == ["team-b/narrow", "team-b/wide"]
    one_node = _cycle(builders.job("x", per_replica=4), wide, narrow, peer, nodes=2)
    assert _victims(one_node) == ["team-b/narrow"]


def test_a_gang_clears_whole_nodes_when_that_is_cheaper_than_many_half_nodes() -> None:
    """A 2x8 job: node-0 and node-1 each hold two 4-device gangs, node-2 one 8-device gang.
    Taken in victim order (cheapest gang first) the four halves free two nodes for 41600
    device-s of lost work and restarts; clearing node-2 and node-0 costs 38800."""
    quotas = (builders.quota("team-a", 16), builders.quota("team-b", 0, borrowing_limit=32))

    def ran(name: str, node: str, indexes: range, seconds: float) -> RunningJob:
        gang = builders.gang(name, [(node, indexes)], borrowed=len(indexes))
        return dataclasses.replace(gang, started_at=NOW - seconds)

    gangs = (
        ran("a", "node-0", range(4), 2000.0),
        ran("b", "node-0", range(4, 8), 2500.0),
        ran("c", "node-1", range(4), 2100.0),
        ran("d", "node-1", range(4, 8), 2600.0),
        ran("e", "node-2", range(8), 2000.0),
    )
    job = builders.job("serve", tier="prod-inference", replicas=2, per_replica=8)
    result = _cycle(job, *gangs, quotas=quotas, nodes=3)
    assert sorted(_victims(result)) == ["team-b/a", "team-b/b", "team-b/e"]


@st.composite
def crowded(draw: st.DrawFn) -> tuple[PendingJob, Snapshot]:
    nodes = draw(st.integers(1, 3))
    gangs: list[RunningJob] = []
    for node_index in range(nodes):
        cut = sorted(draw(st.sets(st.integers(1, 7), max_size=3)))
        bounds = [0, *cut, 8]
        for start, end in itertools.pairwise(bounds):
            gangs.append(
                builders.gang(
                    f"g{node_index}-{start}",
                    [(f"node-{node_index}", range(start, end))],
                    tier=draw(st.sampled_from(["small", "training"])),
                    priority=draw(st.integers(0, 1)),
                    started_at=float(draw(st.integers(0, 9000))),
                    borrowed=draw(st.sampled_from([0, end - start])),
                )
            )
    may_reclaim = draw(st.booleans())
    job = builders.job(
        "x",
        tier=draw(st.sampled_from(["small", "training", "prod-inference"])),
        replicas=draw(st.integers(1, nodes)),
        per_replica=draw(st.integers(1, 8)),
        constraints=draw(st.sampled_from([(), (builders.NUMA,)])),
    )
    snapshot = Snapshot(
        inventory=builders.cluster(nodes),
        quotas=(
            builders.quota("team-a", 64 if may_reclaim else 0, borrowing_limit=64),
            builders.quota("team-b", 0, borrowing_limit=64),
        ),
        running=tuple(gangs),
        pending=(job,),
    )
    return job, snapshot


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded())
def test_victim_set_is_minimal_and_exists_exactly_when_brute_force_finds_one(
    case: tuple[PendingJob, Snapshot],
) -> None:
    job, snapshot = case
    result = cycle.run_cycle(
        snapshot=snapshot, policy=ALWAYS_PAYS, now=NOW, matcher=DeviceMatcher()
    )
    ranks = {"small": 100, "training": 200, "prod-inference": 300}
    minimum = {"small": 60.0, "training": 600.0}
    may_reclaim = snapshot.quotas[0].nominal >= job.device_count

    def by_tier(gang: RunningJob) -> bool:
        return ranks[gang.tier] < ranks[job.tier] and NOW - gang.started_at >= minimum[gang.tier]

    def is_eligible(gang: RunningJob) -> bool:
        if may_reclaim:
            return by_tier(gang) or gang.borrowed > 0
        # a borrowing preemptor evicts only borrowed use of other tenants (PRODUCT §3)
        return by_tier(gang) and gang.borrowed > 0

    eligible = [g for g in snapshot.running if is_eligible(g)]

    def frees_enough(gone: tuple[RunningJob, ...]) -> bool:
        free = core_oracle.initially_free(snapshot, gone=gone)
        return core_oracle.is_feasible(
            job, snapshot, free, core_oracle.cpu_left(snapshot, gone=gone)
        )

    if result.admissions:
        assert frees_enough(())
        return
    by_key = {g.key: g for g in snapshot.running}
    if result.preemptions:
        victims = tuple(by_key[v.job] for v in result.preemptions[0].victims)
        assert all(is_eligible(v) for v in victims), "rule 6: lower tiers or reclaim only"
        if not may_reclaim:
            assert all(ranks[v.tier] < ranks[job.tier] for v in victims)
        assert frees_enough(victims)
        for size in range(len(victims)):
            for subset in itertools.combinations(victims, size):
                assert not frees_enough(subset), f"{subset} would do: not minimal"
    else:
        assert not frees_enough(tuple(eligible))


def test_waits_for_evicting_gangs_even_when_no_one_else_could_be_a_victim() -> None:
    leaving = builders.gang("leaving", [("node-0", range(8))], tier="prod-inference", evicting=True)
    result = _cycle(builders.job("x", tier="small"), leaving)
    assert result.preemptions == (Preemption(job=JobKey("team-a/x"), victims=()),)
    assert result.pending[JobKey("team-a/x")].message == (
        "preemption: waiting for 1 gang to be evicted (team-b/leaving)"
    )


def test_search_budget_defers_later_preemptors_to_the_next_cycle() -> None:
    gangs = [builders.gang(f"s{i}", [(f"node-{i}", range(8))], tier="small") for i in range(2)]
    jobs = (builders.job("a", per_replica=8), builders.job("b", per_replica=8, submitted_at=1))
    snapshot = Snapshot(
        inventory=builders.cluster(2), quotas=QUOTAS, running=tuple(gangs), pending=jobs
    )
    policy = Policy(preemption_search_steps=2, preemption_cost_factor=math.inf)
    result = cycle.run_cycle(snapshot=snapshot, policy=policy, now=NOW, matcher=DeviceMatcher())
    assert [p.job for p in result.preemptions] == [JobKey("team-a/a")]
    assert result.pending[JobKey("team-a/b")].code is ReasonCode.CAPACITY
    roomy = cycle.run_cycle(snapshot=snapshot, policy=ALWAYS_PAYS, now=NOW, matcher=DeviceMatcher())
    assert [p.job for p in roomy.preemptions] == [JobKey("team-a/a"), JobKey("team-a/b")]


def test_a_gang_asked_for_a_checkpoint_is_leaving_until_its_grace_ends() -> None:
    """A victim asked for a checkpoint first keeps its devices until it is evicted: it is not
    chosen again, nobody is placed on its devices, and a reservation behind it starts no
    earlier than its grace ends (it may be evicted only then)."""
    asked = dataclasses.replace(
        builders.gang("asked", [("node-0", range(8))], tier="training", evicting=True),
        evicting_by=NOW + 120,
    )
    other = builders.gang("other", [("node-1", range(8))], tier="training", started_at=NOW - 3540)
    prod = builders.job("serve", tier="prod-inference", per_replica=8)
    result = _cycle(prod, asked, other, nodes=2)
    assert result.preemptions == (Preemption(job=JobKey("team-a/serve"), victims=()),)
    assert result.admissions == ()

    big = builders.job("big", replicas=2, per_replica=8)
    tiny = builders.job("tiny", tier="small", max_runtime_s=100.0)
    snapshot = Snapshot(
        inventory=builders.cluster(2), quotas=QUOTAS, running=(asked, other), pending=(big, tiny)
    )
    result = cycle.run_cycle(
        snapshot=snapshot, policy=ALWAYS_PAYS, now=NOW, matcher=DeviceMatcher()
    )
    assert result.admissions == ()
    assert [(r.job, r.start_at) for r in result.reservations] == [(JobKey("team-a/big"), NOW + 120)]
