"""Rules 5 and 6 as goodput: victims by least lost work, evictions only when they pay, bounded
reclaim patience, and reservations built on predicted runtimes that move when outlived."""

from __future__ import annotations

import dataclasses
import itertools

import builders
import core_oracle
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

NOW = 100_000.0
QUOTAS = (
    builders.quota("team-a", 64, borrowing_limit=64),
    builders.quota("team-b", 32, borrowing_limit=64),
)
RANKS = {"small": 100, "training": 200, "prod-inference": 300}


def _cycle(
    *pending: PendingJob,
    running: tuple[RunningJob, ...],
    quotas: tuple[TenantQuota, ...] = QUOTAS,
    nodes: int = 1,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(nodes), quotas=quotas, running=running, pending=pending
    )
    return cycle.run_cycle(snapshot=snapshot, policy=Policy(), now=NOW, matcher=DeviceMatcher())


def _victims(result: CycleResult) -> list[str]:
    return [victim.job for preemption in result.preemptions for victim in preemption.victims]


def _running(
    name: str,
    node: str,
    indexes: range,
    *,
    ran_s: float,
    predicted_left_s: float | None = None,
    tier: str = "small",
    borrowed: bool = False,
    checkpoint_ago_s: float | None = None,
) -> RunningJob:
    gang = builders.gang(
        name,
        [(node, indexes)],
        tier=tier,
        started_at=NOW - ran_s,
        max_runtime_s=ran_s + 100 * 3600.0,
        borrowed=len(indexes) if borrowed else 0,
    )
    return dataclasses.replace(
        gang,
        predicted_end_at=None if predicted_left_s is None else NOW + predicted_left_s,
        last_checkpoint_at=None if checkpoint_ago_s is None else NOW - checkpoint_ago_s,
    )


# --- lost-work victim choice against brute force ---------------------------------------------


def _set_cost(gangs: tuple[RunningJob, ...]) -> tuple[int, int, float]:
    """Rule 6 between victim sets: highest tier, then use within nominal, then lost work."""
    return (
        max((RANKS[g.tier] for g in gangs), default=0),
        sum(g.device_count - g.borrowed for g in gangs),
        round(sum(g.lost_work_device_s(NOW) for g in gangs), 3),
    )


@st.composite
def crowded_nodes(draw: st.DrawFn) -> tuple[PendingJob, Snapshot]:
    nodes = draw(st.integers(1, 3))
    gangs: list[RunningJob] = []
    for node_index in range(nodes):
        cut = sorted(draw(st.sets(st.integers(1, 7), max_size=4)))
        for start, end in itertools.pairwise([0, *cut, 8]):
            gangs.append(
                _running(
                    f"g{node_index}-{start}",
                    f"node-{node_index}",
                    range(start, end),
                    ran_s=float(draw(st.integers(700, 20_000))),
                    tier=draw(st.sampled_from(["small", "training"])),
                    borrowed=draw(st.booleans()),
                    checkpoint_ago_s=draw(st.sampled_from([None, 60.0, 1800.0])),
                )
            )
    job = builders.job(
        "x",
        tier="prod-inference",
        per_replica=draw(st.integers(1, 8)),
        constraints=draw(st.sampled_from([(), (builders.NUMA,)])),
        max_runtime_s=None,
    )
    snapshot = Snapshot(
        inventory=builders.cluster(nodes), quotas=QUOTAS, running=tuple(gangs), pending=(job,)
    )
    return job, snapshot


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded_nodes())
def test_one_replica_victims_cost_the_least_of_every_set_that_frees_a_place(
    case: tuple[PendingJob, Snapshot],
) -> None:
    """Brute force over every subset of the running gangs: the chosen victims free a place,
    and no set that frees one evicts a lower top tier, less use within nominal, or less lost
    work, in that order (rule 6)."""
    job, snapshot = case
    result = cycle.run_cycle(snapshot=snapshot, policy=Policy(), now=NOW, matcher=DeviceMatcher())

    def frees_enough(gone: tuple[RunningJob, ...]) -> bool:
        free = core_oracle.initially_free(snapshot, gone=gone)
        return core_oracle.is_feasible(
            job, snapshot, free, core_oracle.cpu_left(snapshot, gone=gone)
        )

    if result.admissions:
        assert frees_enough(())
        return
    fitting = [
        subset
        for size in range(1, len(snapshot.running) + 1)
        for subset in itertools.combinations(snapshot.running, size)
        if frees_enough(subset)
    ]
    assert bool(result.preemptions) == bool(fitting), "prod inference always wins when it can"
    if not fitting:
        return
    by_key = {g.key: g for g in snapshot.running}
    victims = tuple(by_key[v.job] for v in result.preemptions[0].victims)
    assert frees_enough(victims)
    assert _set_cost(victims) == min(_set_cost(subset) for subset in fitting)


def test_the_gang_that_checkpointed_recently_is_evicted_rather_than_the_younger_one() -> None:
    """Lost work counts from the last checkpoint, not from the start."""
    young = _running("young", "node-0", range(4), ran_s=3600.0)
    saved = _running("saved", "node-0", range(4, 8), ran_s=36_000.0, checkpoint_ago_s=600.0)
    job = builders.job("x", tier="prod-inference", per_replica=4, max_runtime_s=None)
    result = _cycle(job, running=(young, saved))
    assert _victims(result) == ["team-b/saved"]
    assert result.preemptions[0].victims[0].reason == (
        "preempted by team-a/x (tier prod-inference > small), losing 0.7 device-h since the "
        "last checkpoint"
    )


# --- preempt only when it pays ---------------------------------------------------------------


def test_a_training_job_evicts_when_the_wait_costs_more_than_the_lost_work() -> None:
    cheap = _running("cheap", "node-0", range(8), ran_s=900.0, predicted_left_s=4 * 3600.0)
    result = _cycle(builders.job("x", per_replica=8), running=(cheap,))
    assert _victims(result) == ["team-b/cheap"]
    assert result.pending[JobKey("team-a/x")].message == (
        "preemption: waiting for 1 gang to be evicted (team-b/cheap), loses 2.0 device-h"
    )


def test_a_training_job_waits_when_eviction_destroys_more_than_its_wait() -> None:
    """8 devices x 10 h of work against 8 devices x 5 min of wait: it does not pay."""
    costly = _running("costly", "node-0", range(8), ran_s=36_000.0, predicted_left_s=300.0)
    result = _cycle(builders.job("x", per_replica=8), running=(costly,))
    assert result.preemptions == ()
    assert result.pending[JobKey("team-a/x")].message == (
        "preemption: evicting team-b/costly loses 80.0 device-h, more than waiting costs "
        "(start in ~5m by prediction); reserved start in ~5m"
    )


def test_prod_inference_evicts_even_when_it_does_not_pay() -> None:
    costly = _running("costly", "node-0", range(8), ran_s=36_000.0, predicted_left_s=300.0)
    job = builders.job("serve", tier="prod-inference", per_replica=8, max_runtime_s=None)
    assert _victims(_cycle(job, running=(costly,))) == ["team-b/costly"]


# --- reclaim patience ------------------------------------------------------------------------

RECLAIM_QUOTAS = (builders.quota("team-a", 8), builders.quota("team-b", 0, borrowing_limit=8))


def _reclaim(waited_s: float) -> CycleResult:
    borrower = _running(
        "borrower",
        "node-0",
        range(8),
        ran_s=5000.0,
        predicted_left_s=420.0,
        tier="training",
        borrowed=True,
    )
    job = builders.job("x", tier="small", submitted_at=NOW - waited_s)
    return _cycle(job, running=(borrower,), quotas=RECLAIM_QUOTAS)


def test_a_reclaim_waits_for_borrowed_devices_predicted_free_within_its_patience() -> None:
    """The small tier waits up to 8 h (after its 300 s preemption delay)."""
    result = _reclaim(waited_s=400.0)
    assert result.preemptions == ()
    reason = result.pending[JobKey("team-a/x")]
    assert reason.code is ReasonCode.PREEMPTION
    assert reason.message.startswith(
        "preemption: reclaim waits: borrowed devices free in ~7m by prediction; evicting "
        "borrowers after ~7h53m"
    )


def test_a_reclaim_evicts_once_it_has_waited_its_patience() -> None:
    assert _victims(_reclaim(waited_s=28_800.0)) == ["team-b/borrower"]


def test_a_reclaim_evicts_borrowers_of_its_tier_at_once_when_that_pays() -> None:
    """Borrowers of the reclaimer's own tier: the reclaim takes the cheapest of them now,
    since that pays, rather than wait up to its patience for one to end (a borrowed training
    gang would be waited for, as above)."""
    borrowers = tuple(
        _running(
            f"b{i}",
            "node-0",
            range(i, i + 1),
            ran_s=120.0 + i,
            predicted_left_s=1800.0,
            borrowed=True,
        )
        for i in range(8)
    )
    job = builders.job("x", tier="small", submitted_at=NOW - 400.0)
    result = _cycle(job, running=borrowers, quotas=RECLAIM_QUOTAS)
    assert _victims(result) == ["team-b/b0"]


# --- predicted runtimes in reservations ------------------------------------------------------


def test_a_reservation_starts_at_the_predicted_end_not_at_the_runtime_bound() -> None:
    """Its bound is 100 h away; evicting it would lose 80 device-h for 8 device-h of wait."""
    holder = _running("holder", "node-0", range(8), ran_s=36_000.0, predicted_left_s=3600.0)
    result = _cycle(builders.job("x", per_replica=8), running=(holder,))
    (reservation,) = result.reservations
    assert reservation.start_at == NOW + 3600.0
    assert reservation.outlived == ()


def test_a_gang_that_outlives_its_prediction_moves_the_reservation_and_the_reason_says_so() -> None:
    """Predicted 1 h, running for 1 h 10 min: the next step is 1.5 x 1 h from its start."""
    holder = _running("holder", "node-0", range(8), ran_s=4200.0, predicted_left_s=-600.0)
    result = _cycle(builders.job("x", per_replica=8), running=(holder,))
    (reservation,) = result.reservations
    assert reservation.start_at == NOW - 4200.0 + 1.5 * 3600.0
    assert reservation.outlived == (JobKey("team-b/holder"),)
    assert result.pending[JobKey("team-a/x")].message.endswith(
        "reserved start in ~20m (later than planned: team-b/holder outlived its prediction)"
    )


def test_backfill_uses_the_predicted_runtime_of_the_job_that_would_jump_ahead() -> None:
    """Half a node frees in 1 h for the head gang; a 1-device job bounded at 2 h may use the
    other free devices only if it is predicted to end before that."""
    holder = _running("holder", "node-0", range(4), ran_s=36_000.0, predicted_left_s=3600.0)
    head = builders.job("head", per_replica=8)

    def later(predicted_s: float | None) -> PendingJob:
        small = builders.job(
            "small", tier="small", submitted_at=1.0, max_runtime_s=2 * 3600.0, tenant="team-b"
        )
        return dataclasses.replace(small, predicted_runtime_s=predicted_s)

    assert [a.job for a in _cycle(head, later(600.0), running=(holder,)).admissions] == [
        "team-b/small"
    ]
    blocked = _cycle(head, later(None), running=(holder,))
    assert blocked.admissions == ()
    assert blocked.pending[JobKey("team-b/small")].code is ReasonCode.BACKFILL
