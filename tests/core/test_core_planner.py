"""The planner answers an unchanged input with its last cycle, until a decision may change by
time alone: each instant that bounds the reuse has a case where the cycle decides otherwise
just after it."""

from __future__ import annotations

import dataclasses

import builders
import pytest

from gangq.queue.core import cycle, planner
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.model import CycleResult, JobKey, Policy, RunningJob, Snapshot

NOW = 100_000.0
QUOTAS = (
    builders.quota("team-a", 64, borrowing_limit=64),
    builders.quota("team-b", 32, borrowing_limit=64),
)
BREAK_EVEN = Policy(preemption_cost_factor=1.0)


def _running(
    name: str, indexes: range, *, ran_s: float, predicted_left_s: float, tier: str = "small"
) -> RunningJob:
    gang = builders.gang(
        name,
        [("node-0", indexes)],
        tier=tier,
        started_at=NOW - ran_s,
        max_runtime_s=ran_s + 100 * 3600.0,
    )
    return dataclasses.replace(gang, predicted_end_at=NOW + predicted_left_s)


def _snapshot(
    *running: RunningJob, submitted_ago_s: float = 394.0, tier: str = "training"
) -> Snapshot:
    job = builders.job("x", per_replica=8, submitted_at=NOW - submitted_ago_s, tier=tier)
    return Snapshot(inventory=builders.cluster(1), quotas=QUOTAS, running=running, pending=(job,))


def _again(snapshot: Snapshot) -> Snapshot:
    """An equal snapshot made anew, as the store makes one at every step."""
    return dataclasses.replace(
        snapshot, running=tuple(list(snapshot.running)), pending=tuple(list(snapshot.pending))
    )


def _fresh(snapshot: Snapshot, now: float, policy: Policy = BREAK_EVEN) -> CycleResult:
    return cycle.run_cycle(snapshot=snapshot, policy=policy, now=now, matcher=DeviceMatcher())


def _victims(result: CycleResult) -> list[str]:
    return [victim.job for preemption in result.preemptions for victim in preemption.victims]


WAITING = _snapshot(_running("cheap", range(2), ran_s=900.0, predicted_left_s=4 * 3600.0))
"""Ski rental as in `test_core_goodput`: evicting team-b/cheap destroys 2 x (900 s run + 300 s
restart) = 2,400 device-s, growing by 2 a second; the 6 idle devices of its place have cost
6 x 394 s and cost 6 more a second: evicting pays (2,400 - 2,364) / 4 = 9 s from NOW."""


def test_an_unchanged_input_gets_the_last_answer_and_it_is_what_a_cycle_would_say() -> None:
    plans = planner.Planner()
    first = plans.run(snapshot=WAITING, policy=BREAK_EVEN, now=NOW)
    later = plans.run(snapshot=_again(WAITING), policy=BREAK_EVEN, now=NOW + 5.0)
    assert plans.reused == 1
    assert later is first
    fresh = _fresh(WAITING, NOW + 5.0)
    assert (later.admissions, later.preemptions, later.order, later.positions) == (
        fresh.admissions,
        fresh.preemptions,
        fresh.order,
        fresh.positions,
    )
    assert {k: r.code for k, r in later.pending.items()} == {
        k: r.code for k, r in fresh.pending.items()
    }


def test_a_changed_queue_gangs_or_policy_is_decided_again() -> None:
    plans = planner.Planner()
    plans.run(snapshot=WAITING, policy=BREAK_EVEN, now=NOW)
    other = builders.job("y", per_replica=1, submitted_at=NOW)
    plans.run(
        snapshot=dataclasses.replace(WAITING, pending=(*WAITING.pending, other)),
        policy=BREAK_EVEN,
        now=NOW + 1.0,
    )
    plans.run(snapshot=dataclasses.replace(WAITING, running=()), policy=BREAK_EVEN, now=NOW + 2.0)
    plans.run(snapshot=WAITING, policy=Policy(), now=NOW + 3.0)
    assert plans.reused == 0


def test_an_earlier_instant_is_decided_again() -> None:
    plans = planner.Planner()
    plans.run(snapshot=WAITING, policy=BREAK_EVEN, now=NOW)
    plans.run(snapshot=WAITING, policy=BREAK_EVEN, now=NOW - 1.0)
    assert plans.reused == 0


def test_past_the_instant_the_cycle_named_the_eviction_that_now_pays_is_made() -> None:
    plans = planner.Planner()
    assert plans.run(snapshot=WAITING, policy=BREAK_EVEN, now=NOW).decide_again_at == NOW + 9
    assert plans.run(snapshot=WAITING, policy=BREAK_EVEN, now=NOW + 8.0).preemptions == ()
    assert _victims(plans.run(snapshot=WAITING, policy=BREAK_EVEN, now=NOW + 9.0)) == [
        "team-b/cheap"
    ]
    assert plans.reused == 1


def test_past_the_end_of_a_victims_protection_it_is_evicted() -> None:
    """A small gang 52 s into its run is protected for 60 s (the small tier's minimum
    runtime); evicting it would pay at once (2 x 352 device-s against 6 x 394 idled)."""
    young = _running("young", range(2), ran_s=52.0, predicted_left_s=3600.0)
    snapshot = _snapshot(young)
    assert planner.protection_ends(snapshot, tiers=_tiers(), now=NOW) == NOW + 8.0
    plans = planner.Planner()
    assert plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW).preemptions == ()
    assert plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW + 7.0).preemptions == ()
    assert _victims(plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW + 9.0)) == [
        "team-b/young"
    ]
    assert plans.reused == 1


def test_past_a_gangs_predicted_end_the_reservation_behind_it_moves() -> None:
    """A training gang (not to be evicted by a training job) predicted to end in 8 s holds
    the node; the waiting job's reserved start moves once the gang outlives that."""
    busy = _running("busy", range(8), ran_s=3600.0, predicted_left_s=8.0, tier="training")
    snapshot = _snapshot(busy)
    assert planner.plans_move_at(snapshot, tiers=_tiers(), now=NOW) == NOW + 8.0
    plans = planner.Planner()
    first = plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW)
    assert first.reservations[0].start_at == NOW + 8.0
    assert plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW + 7.0) is first
    moved = plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW + 9.0)
    assert moved.reservations[0].start_at > NOW + 9.0
    assert moved.reservations == _fresh(snapshot, NOW + 9.0).reservations


@pytest.mark.parametrize(
    ("later_s", "reused"), [(planner.REUSE_LIMIT_S - 1.0, 1), (planner.REUSE_LIMIT_S, 0)]
)
def test_an_answer_is_reused_for_ten_seconds_at_most(later_s: float, reused: int) -> None:
    """Its reasons count down to a reserved start: after ten seconds they are written again."""
    busy = _running("busy", range(8), ran_s=60.0, predicted_left_s=6 * 3600.0, tier="training")
    snapshot = _snapshot(busy)
    plans = planner.Planner()
    first = plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW)
    assert first.pending[JobKey("team-a/x")].message.endswith("reserved start in ~6h00m")
    plans.run(snapshot=snapshot, policy=BREAK_EVEN, now=NOW + later_s)
    assert plans.reused == reused


def _tiers() -> dict[str, object]:
    return {tier.name: tier for tier in BREAK_EVEN.tiers}
