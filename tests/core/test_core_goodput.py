"""Rules 5 and 6 as goodput: victims by least eviction cost (lost work, restart, work lost
before), evictions only when they pay, reclaims that wait until waiting has cost as much as
evicting, long borrowers without checkpoints kept off reclaimable devices, and reservations
built on predicted runtimes that move when outlived."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

import builders
import core_oracle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangq.queue.core import cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceId
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
BREAK_EVEN = Policy(preemption_cost_factor=1.0)
"""The arithmetic of these tests is the ski-rental rule at its break-even, an eviction that
pays once waiting has cost what it destroys; the default factor is tested on its own."""


def _cycle(
    *pending: PendingJob,
    running: tuple[RunningJob, ...],
    quotas: tuple[TenantQuota, ...] = QUOTAS,
    nodes: int = 1,
    free_since: Mapping[DeviceId, float] | None = None,
    policy: Policy = BREAK_EVEN,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(nodes),
        quotas=quotas,
        running=running,
        pending=pending,
        free_since=free_since or {},
    )
    return cycle.run_cycle(snapshot=snapshot, policy=policy, now=NOW, matcher=DeviceMatcher())


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
    checkpoint_interval_s: float | None = None,
    checkpoint_grace_s: float | None = None,
    lost_before_device_s: float = 0.0,
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
        checkpoint_interval_s=checkpoint_interval_s,
        checkpoint_grace_s=checkpoint_grace_s,
        lost_before_device_s=lost_before_device_s,
    )


# --- lost-work victim choice against brute force ---------------------------------------------


def _loss_first(gangs: tuple[RunningJob, ...]) -> tuple[float, int, int]:
    """How a tier that always preempts compares victim sets (rule 6 with the least lost work
    first): lost work and restarts (every gang restarts for `restart_s` on each of its
    devices), then the highest tier, then use within nominal."""
    return (
        round(sum(g.lost_work_device_s(NOW) + g.device_count * g.restart_s for g in gangs), 3),
        max((RANKS[g.tier] for g in gangs), default=0),
        sum(g.device_count - g.borrowed for g in gangs),
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
    """Brute force over every subset of the running gangs: the chosen victims of prod
    inference free a place, and no set that frees one costs less lost work and restarts, or
    as much with a lower top tier or less use within nominal, in that order."""
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
    assert _loss_first(victims) == min(_loss_first(subset) for subset in fitting)


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


def test_a_training_job_evicts_once_its_idle_place_has_cost_what_evicting_costs() -> None:
    """Ski rental by tier: 2 devices x (900 s run + 300 s restart) = 0.7 device-h against the
    6 free devices of its place idle for 2 h while it waited."""
    cheap = _running("cheap", "node-0", range(2), ran_s=900.0, predicted_left_s=4 * 3600.0)
    job = builders.job("x", per_replica=8, submitted_at=NOW - 2 * 3600.0)
    result = _cycle(job, running=(cheap,))
    assert _victims(result) == ["team-b/cheap"]
    assert result.pending[JobKey("team-a/x")].message == (
        "preemption: waiting for 1 gang to be evicted (team-b/cheap), costs 0.7 device-h"
    )


def test_a_training_job_waits_until_its_idle_place_has_cost_what_evicting_costs() -> None:
    """After 2 min the 6 idle devices cost 0.2 device-h; they idle 6 device-s a second while
    the victim's unsaved work grows by 2: evicting pays (2,400 - 720) / 4 = 420 s later, and
    the cycle asks to be run again then."""
    cheap = _running("cheap", "node-0", range(2), ran_s=900.0, predicted_left_s=4 * 3600.0)
    job = builders.job("x", per_replica=8, submitted_at=NOW - 120.0)
    result = _cycle(job, running=(cheap,))
    assert result.preemptions == ()
    assert result.decide_again_at == NOW + 420.0
    assert result.pending[JobKey("team-a/x")].message == (
        "preemption: evicting team-b/cheap costs 0.7 device-h, more than waiting: the 6 free "
        "devices of its place idled 0.2 device-h meanwhile; evicting pays in ~7m at the "
        "earliest (devices free in ~4h00m by prediction); reserved start in ~4h00m"
    )


def test_a_training_job_waits_when_its_victim_is_predicted_to_end_before_evicting_pays() -> None:
    """Its idle place paid for the eviction long ago (6 devices x 2 h), but the victim is
    predicted to end in 5 min, when the 6 idle devices will have cost 0.5 device-h, less than
    the 0.7 device-h evicting destroys."""
    cheap = _running("cheap", "node-0", range(2), ran_s=900.0, predicted_left_s=300.0)
    job = builders.job("x", per_replica=8, submitted_at=NOW - 2 * 3600.0)
    result = _cycle(job, running=(cheap,))
    assert result.preemptions == ()
    assert result.pending[JobKey("team-a/x")].message == (
        "preemption: evicting team-b/cheap costs 0.7 device-h, more than waiting: devices free "
        "in ~5m by prediction, while the 6 free devices of its place idle 0.5 device-h; "
        "reserved start in ~5m"
    )


def test_a_free_device_idles_only_since_it_came_free() -> None:
    """The job has waited 2 h, but the 6 free devices of its place came free 5 min ago: they
    idled 0.5 device-h, less than the 0.7 device-h evicting destroys. Counted from its
    queueing instead, they would have idled 12 device-h and it would evict."""
    cheap = _running("cheap", "node-0", range(2), ran_s=900.0, predicted_left_s=4 * 3600.0)
    job = builders.job("x", per_replica=8, submitted_at=NOW - 2 * 3600.0)
    freed = {builders.device_id("node-0", index): NOW - 300.0 for index in range(2, 8)}
    result = _cycle(job, running=(cheap,), free_since=freed)
    assert result.preemptions == ()
    assert result.pending[JobKey("team-a/x")].message.startswith(
        "preemption: evicting team-b/cheap costs 0.7 device-h, more than waiting: the 6 free "
        "devices of its place idled 0.5 device-h meanwhile; evicting pays in ~"
    )
    long_freed = {device: NOW - 3 * 3600.0 for device in freed}
    assert _victims(_cycle(job, running=(cheap,), free_since=long_freed)) == ["team-b/cheap"]


def test_a_training_job_never_evicts_where_its_place_is_all_taken() -> None:
    """Nothing idles while it waits for a node its victim fills (10 h of unsaved work on 8
    devices): waiting costs no device-time, so evicting never pays, however long it has
    waited and however long the victim is predicted to run on."""
    costly = _running("costly", "node-0", range(8), ran_s=36_000.0, predicted_left_s=50 * 3600.0)
    result = _cycle(builders.job("x", per_replica=8), running=(costly,))
    assert result.preemptions == ()
    assert result.pending[JobKey("team-a/x")].message == (
        "preemption: evicting team-b/costly costs 80.7 device-h, more than waiting: no free "
        "device of its place idles meanwhile; evicting never pays while their unsaved work "
        "grows as fast (devices free in ~50h00m by prediction); reserved start in ~50h00m"
    )


def test_prod_inference_evicts_the_least_work_before_a_lower_tier() -> None:
    """A serving scale-up skips the pays test, so it picks the node that loses the least work:
    a training gang started 20 min ago, not the borrowed small jobs that ran for 30 h."""
    fresh = _running("fresh", "node-0", range(8), ran_s=1200.0, tier="training")
    old = [
        _running(f"old-{i}", "node-1", range(i, i + 1), ran_s=30 * 3600.0, borrowed=True)
        for i in range(8)
    ]
    job = builders.job("x", tier="prod-inference", per_replica=8, max_runtime_s=None)
    result = _cycle(job, running=(fresh, *old), nodes=2)
    assert _victims(result) == ["team-b/fresh"]


def test_prod_inference_evicts_even_when_it_does_not_pay() -> None:
    costly = _running("costly", "node-0", range(8), ran_s=36_000.0, predicted_left_s=300.0)
    job = builders.job("serve", tier="prod-inference", per_replica=8, max_runtime_s=None)
    assert _victims(_cycle(job, running=(costly,))) == ["team-b/costly"]


# --- eviction cost: restarts and work lost before --------------------------------------------


def test_a_restart_costs_every_device_so_a_smaller_victim_set_is_preferred() -> None:
    """Prod needs 4 devices. Evicting the 8-device gang loses less work (8 x 100 s against
    4 x 250 s) but restarts twice the devices (5 min each): 3200 device-s against 2200. The
    set that evicts no more devices than the job needs is the cheaper one."""
    quotas = (builders.quota("team-a", 8), builders.quota("team-b", 0, borrowing_limit=16))
    whole = _running("whole", "node-0", range(8), ran_s=100.0, borrowed=True)
    half = _running("half", "node-1", range(4), ran_s=250.0, borrowed=True)
    kept = _running("kept", "node-1", range(4, 8), ran_s=36_000.0, borrowed=True)
    job = builders.job("serve", tier="prod-inference", per_replica=4, max_runtime_s=None)
    result = _cycle(job, running=(whole, half, kept), quotas=quotas, nodes=2)
    assert _victims(result) == ["team-b/half"]


def test_work_lost_to_earlier_evictions_counts_against_evicting_a_gang_again() -> None:
    """Both gangs lose little now; `again` already lost 40 device-h to earlier evictions, so
    evicting it once more is what thrashes: the other one goes."""
    again = _running("again", "node-0", range(4), ran_s=600.0, lost_before_device_s=144_000.0)
    other = _running("other", "node-0", range(4, 8), ran_s=1800.0)
    job = builders.job("serve", tier="prod-inference", per_replica=4, max_runtime_s=None)
    assert _victims(_cycle(job, running=(again, other))) == ["team-b/other"]


# --- reclaims: ski rental --------------------------------------------------------------------

RECLAIM_QUOTAS = (builders.quota("team-a", 8), builders.quota("team-b", 0, borrowing_limit=8))


def _saved_borrower(*, checkpoint_ago_s: float = 600.0) -> RunningJob:
    """8 borrowed devices, checkpointing every 10 min, predicted to end in 7 min: an eviction
    costs 8 x 10 min of work and 8 x 5 min of restart, 2.0 device-h, however long it ran."""
    return _running(
        "borrower",
        "node-0",
        range(8),
        ran_s=5000.0,
        predicted_left_s=420.0,
        tier="training",
        borrowed=True,
        checkpoint_ago_s=checkpoint_ago_s,
        checkpoint_interval_s=600.0,
    )


def _reclaim(
    *waited_s: float, borrower: RunningJob | None = None, policy: Policy = BREAK_EVEN
) -> CycleResult:
    jobs = [
        builders.job(f"x{i}", tier="small", submitted_at=NOW - waited)
        for i, waited in enumerate(waited_s)
    ]
    gang = borrower if borrower is not None else _saved_borrower()
    return _cycle(*jobs, running=(gang,), quotas=RECLAIM_QUOTAS, policy=policy)


def test_a_reclaim_waits_until_its_tenant_was_kept_as_long_as_evicting_costs() -> None:
    """The borrower is predicted to free its devices in 7 min, but a reclaim does not bet on
    predictions: one device owed for 400 s is 0.1 device-h of 2.0. Its checkpoint is due, and
    once saved the eviction costs only the restart (0.7 device-h): the earliest it can pay,
    when the cycle weighs again, is in 2000 s."""
    result = _reclaim(400.0)
    assert result.preemptions == ()
    reason = result.pending[JobKey("team-a/x0")]
    assert reason.code is ReasonCode.PREEMPTION
    assert reason.message.startswith(
        "preemption: reclaim waits: evicting borrowers costs 2.0 device-h, its wait kept "
        "tenant team-a 0.1 device-h from its nominal quota; evicting pays in ~33m at the earliest "
        "(borrowed devices free in ~7m by prediction)"
    )
    assert result.decide_again_at == NOW + 2000.0


def test_a_reclaim_evicts_once_the_wait_has_cost_what_evicting_costs() -> None:
    """Before the change a reclaim evicted past a fixed patience whether or not it paid, and
    within it whenever a predicted wait made it pay; now it is the wait already paid that
    decides: 1 device x 7200 s = 2.0 device-h, the eviction's cost."""
    assert _victims(_reclaim(7199.0)) == []
    assert _victims(_reclaim(7200.0)) == ["team-b/borrower"]


def test_by_default_an_eviction_waits_until_waiting_has_cost_four_times_what_it_destroys() -> None:
    """`Policy.preemption_cost_factor` 0.25: the 2.0 device-h eviction of the reclaim above
    pays after 4 x 7200 s, and a preemption by tier likewise once its idle place has cost four
    times the eviction (6 idle devices x 1600 s = 4 x 0.7 device-h)."""
    assert Policy().preemption_cost_factor == 0.25
    assert _victims(_reclaim(4 * 7200.0 - 1.0, policy=Policy())) == []
    assert _victims(_reclaim(4 * 7200.0, policy=Policy())) == ["team-b/borrower"]
    cheap = _running("cheap", "node-0", range(2), ran_s=900.0, predicted_left_s=4 * 3600.0)
    for waited, evicts in ((1599.0, False), (1600.0, True)):
        job = builders.job("x", per_replica=8, submitted_at=NOW - waited)
        result = _cycle(job, running=(cheap,), policy=Policy())
        assert bool(_victims(result)) is evicts


def test_a_preemptors_wait_pays_for_one_eviction_only() -> None:
    """The 2 h wait that paid for evicting the borrower does not pay again: the job that
    evicted a minute ago (its victim's node freed and was taken back meanwhile) weighs the
    next eviction against the minute since. The same for the idle time of a preemption by
    tier."""
    job = builders.job("x0", tier="small", submitted_at=NOW - 7200.0)
    again = dataclasses.replace(job, preempted_at=NOW - 60.0)
    assert _victims(_cycle(job, running=(_saved_borrower(),), quotas=RECLAIM_QUOTAS)) == [
        "team-b/borrower"
    ]
    assert _victims(_cycle(again, running=(_saved_borrower(),), quotas=RECLAIM_QUOTAS)) == []
    cheap = _running("cheap", "node-0", range(2), ran_s=900.0, predicted_left_s=4 * 3600.0)
    waited = builders.job("x", per_replica=8, submitted_at=NOW - 2 * 3600.0)
    assert _victims(_cycle(waited, running=(cheap,))) == ["team-b/cheap"]
    repeated = dataclasses.replace(waited, preempted_at=NOW - 60.0)
    assert _victims(_cycle(repeated, running=(cheap,))) == []


def test_a_reclaim_spends_only_its_own_jobs_wait() -> None:
    """Four 1-device jobs that each waited 1800 s: the tenant was kept 2.0 device-h from its
    nominal quota, as much as evicting costs, but each job's 0.5 device-h pays only for the
    eviction that admits it. Were the tenant's whole wait the budget, the reclaim admitting
    the first job would spend the others' waits, and each of their own reclaims later would
    spend them again. The longest waiting job (7200 s) pays alone."""
    assert _victims(_reclaim(1800.0, 1800.0, 1800.0, 1800.0)) == []
    assert _victims(_reclaim(7200.0, 1800.0, 1800.0)) == ["team-b/borrower"]


def test_a_reclaim_never_evicts_a_borrower_whose_unsaved_work_grows_as_fast_as_the_wait() -> None:
    """The trace that lost 573 device-h: a 1x8 job of a tenant within nominal evicted another
    tenant's 1x8 that had run 71.6 h without a checkpoint, after a 2 h wait. Waiting costs 8
    devices per second and so does the victim's unsaved work: evicting never pays while it
    runs."""
    victim = _running(
        "borrower", "node-0", range(8), ran_s=71.6 * 3600, tier="training", borrowed=True
    )
    job = builders.job("x", tier="training", per_replica=8, submitted_at=NOW - 2 * 3600)
    result = _cycle(job, running=(victim,), quotas=RECLAIM_QUOTAS)
    assert result.preemptions == ()
    assert "evicting never pays while their unsaved work grows as fast" in (
        result.pending[JobKey("team-a/x")].message
    )
    assert result.decide_again_at is None


def test_one_victim_that_goes_only_by_reclaim_does_not_make_the_others_a_reclaim() -> None:
    """A week shaped like PAI: a 1 x 8 job of a tenant within nominal had waited 40 h for a
    node where 7 small borrowers had run 5 h each and one had started 30 s before, too young
    to go by tier (small's minimum runtime is 60 s). Its 320 device-h of wait would pay for
    all 8 as a reclaim, but 7 of them may go by tier, where waiting costs the idle devices
    of the place: none idles, so no eviction pays. When all 8 are that young, each may go
    only by reclaim, and the same wait pays."""
    old = tuple(
        _running(f"old-{i}", "node-0", range(i, i + 1), ran_s=5 * 3600.0, borrowed=True)
        for i in range(7)
    )
    young = _running("young", "node-0", range(7, 8), ran_s=30.0, borrowed=True)
    job = builders.job("x", tier="training", per_replica=8, submitted_at=NOW - 40 * 3600)
    assert _victims(_cycle(job, running=(*old, young), quotas=RECLAIM_QUOTAS)) == []
    all_young = tuple(
        _running(f"young-{i}", "node-0", range(i, i + 1), ran_s=30.0, borrowed=True)
        for i in range(8)
    )
    assert len(_victims(_cycle(job, running=all_young, quotas=RECLAIM_QUOTAS))) == 8


@settings(max_examples=60, deadline=None)
@given(
    waited=st.lists(st.integers(0, 40_000), min_size=1, max_size=4),
    ran_s=st.integers(700, 100_000),
    checkpoint=st.sampled_from([None, 600.0, 3600.0]),
    restart_s=st.sampled_from([0.0, 300.0, 1200.0]),
    lost_before=st.sampled_from([0.0, 36_000.0]),
)
def test_a_reclaim_never_destroys_more_than_its_tenant_has_waited(
    waited: list[int],
    ran_s: int,
    checkpoint: float | None,
    restart_s: float,
    lost_before: float,
) -> None:
    """The ski-rental bound: an eviction happens exactly when what it costs is at most the
    device-time its job has kept its tenant from its nominal quota (the longest waiting job
    reclaims first), so waiting plus evicting never exceeds twice what either alone would
    have cost."""
    victim = dataclasses.replace(
        _running(
            "borrower",
            "node-0",
            range(8),
            ran_s=float(ran_s),
            tier="training",
            borrowed=True,
            checkpoint_ago_s=None if checkpoint is None else min(checkpoint, float(ran_s)),
            checkpoint_interval_s=checkpoint,
            lost_before_device_s=lost_before,
        ),
        restart_s=restart_s,
    )
    result = _reclaim(*map(float, waited), borrower=victim)
    kept = float(max(waited))
    assert bool(result.preemptions) == (victim.eviction_cost_device_s(NOW) <= kept)


# --- long borrowers without checkpoints (Policy.unsaved_borrow_s, here one day) --------------

HAZARD_QUOTAS = (
    builders.quota("team-a", 8),
    builders.quota("team-b", 0, borrowing_limit=16),
)


# --- victims asked for a checkpoint first ----------------------------------------------------


def _long_run_asked_first() -> RunningJob:
    """The 71.6 h borrower above, but it opted in to be asked first with a 120 s grace: it
    saves when asked, so evicting it loses 8 x 120 s of work and 8 x 5 min of restart,
    0.9 device-h, however long it ran."""
    return _running(
        "borrower",
        "node-0",
        range(8),
        ran_s=71.6 * 3600,
        tier="training",
        borrowed=True,
        checkpoint_grace_s=120.0,
    )


def test_a_reclaim_pays_for_a_long_run_asked_first_with_its_grace_not_its_run() -> None:
    """The run that no wait could pay for costs 0.9 device-h once it is asked first: a 2 h
    wait of 8 devices (16 device-h) pays for it."""
    job = builders.job("x", tier="training", per_replica=8, submitted_at=NOW - 2 * 3600)
    result = _cycle(job, running=(_long_run_asked_first(),), quotas=RECLAIM_QUOTAS)
    assert _victims(result) == ["team-b/borrower"]


def test_the_cost_of_a_victim_asked_first_stays_put_while_the_wait_grows() -> None:
    """After 5 min the wait has cost 8 x 300 s = 2400 device-s of the 3360 evicting costs.
    The victim's cost no longer grows with its run (it is capped at its grace), so the wait
    covers it 960 / 8 = 120 s later, and the cycle asks to be run again then."""
    job = builders.job("x", tier="training", per_replica=8, submitted_at=NOW - 300.0)
    result = _cycle(job, running=(_long_run_asked_first(),), quotas=RECLAIM_QUOTAS)
    assert result.preemptions == ()
    assert result.decide_again_at == NOW + 120.0


def _young_and_asked(*, tier: str) -> CycleResult:
    """Two nodes, each half taken: `young` (4 devices, 20 min run, nothing saved: 4 x (1200
    + 300) s = 1.7 device-h to evict) and `asked` (4 devices, 10 h run, 120 s grace: 0.5
    device-h counting on its checkpoint, 40.3 device-h without). A one-node job of
    `tier` that has waited 2 h beside 4 idle devices needs either node."""
    young = _running("young", "node-0", range(4), ran_s=1200.0)
    asked = _running("asked", "node-1", range(4), ran_s=36_000.0, checkpoint_grace_s=120.0)
    job = builders.job(
        "x", tier=tier, per_replica=8, submitted_at=NOW - 2 * 3600.0, max_runtime_s=None
    )
    return _cycle(job, running=(young, asked), nodes=2)


def test_a_training_job_evicts_the_victim_asked_first_that_saves_its_long_run() -> None:
    """Its reason names the work at stake, which the checkpoint it is asked for saves."""
    result = _young_and_asked(tier="training")
    assert _victims(result) == ["team-b/asked"]
    assert result.preemptions[0].victims[0].reason == (
        "preempted by team-a/x (tier training > small), losing 40.0 device-h since the last "
        "checkpoint"
    )


def test_prod_inference_does_not_count_on_a_checkpoint_it_would_wait_for() -> None:
    """A tier that always preempts would wait out the asked victim's save; weighed as if it
    went at once, that victim loses 10 h of work, so the young gang goes instead."""
    assert _victims(_young_and_asked(tier="prod-inference")) == ["team-b/young"]


def _borrow(job: PendingJob, *, unsaved_borrow_s: float | None = 86_400.0) -> CycleResult:
    """team-a holds nothing, so all 8 of its nominal devices could be reclaimed at any time;
    8 of 16 devices are free."""
    busy = _running("busy", "node-1", range(8), ran_s=600.0, tier="training")
    snapshot = Snapshot(
        inventory=builders.cluster(2), quotas=HAZARD_QUOTAS, running=(busy,), pending=(job,)
    )
    policy = Policy(unsaved_borrow_s=unsaved_borrow_s)
    return cycle.run_cycle(snapshot=snapshot, policy=policy, now=NOW, matcher=DeviceMatcher())


def test_a_borrower_without_checkpoints_leaves_others_nominal_free_for_an_unbounded_run() -> None:
    job = builders.job("long", tenant="team-b", tier="training", per_replica=8, max_runtime_s=None)
    result = _borrow(job)
    assert result.admissions == ()
    assert result.pending[JobKey("team-b/long")].message == (
        "quota: tenant team-b would borrow for an unbounded run without checkpoints, which "
        "leaves 8 of the 8 free gpu to tenants under nominal who may reclaim them; job needs 8"
    )


def test_a_borrower_without_checkpoints_leaves_the_share_its_run_is_of_a_day() -> None:
    """12 h is half of `Policy.unsaved_borrow_s`: it leaves 4 of team-a's 8 unused devices."""
    half_day = 12 * 3600.0
    small = builders.job("half", tenant="team-b", tier="training", per_replica=4)
    whole = builders.job("whole", tenant="team-b", tier="training", per_replica=8)
    small, whole = (dataclasses.replace(j, max_runtime_s=half_day) for j in (small, whole))
    assert [a.job for a in _borrow(small).admissions] == [small.key]
    result = _borrow(whole)
    assert result.admissions == ()
    assert "leaves 4 of the 8 free gpu" in result.pending[whole.key].message


def test_a_short_or_checkpointing_borrower_takes_those_devices() -> None:
    """An hour's run leaves int(8 x 1/24) = 0 devices; a job that checkpoints risks little
    in a reclaim: both borrow. So does any borrower where the rule is off (the default)."""
    short = builders.job("short", tenant="team-b", tier="training", per_replica=8)
    saving = dataclasses.replace(
        builders.job("saving", tenant="team-b", tier="training", per_replica=8, max_runtime_s=None),
        checkpoint_interval_s=1800.0,
    )
    for job in (short, saving):
        assert [a.job for a in _borrow(job).admissions] == [job.key]
    unbounded = builders.job(
        "long", tenant="team-b", tier="training", per_replica=8, max_runtime_s=None
    )
    assert [a.job for a in _borrow(unbounded, unsaved_borrow_s=None).admissions] == [unbounded.key]


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
    head = builders.job("head", per_replica=8, submitted_at=NOW)

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
