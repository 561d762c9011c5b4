"""Elastic gangs that run (PRODUCT rule 13): a gang below its maximum grows onto devices no
queued job can use when the grow pays, and a preemptor shrinks an elastic victim, highest
replicas first, instead of evicting it whole."""

from __future__ import annotations

import dataclasses

import builders
import pytest

from gangq.queue.core import cycle, elastic
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import (
    CycleResult,
    JobKey,
    PendingJob,
    Policy,
    RunningJob,
    Snapshot,
    TenantQuota,
    TopologyMode,
)

NOW = 100_000.0
HOUR = 3600.0
QUOTAS = (builders.quota("team-a", 64), builders.quota("team-b", 64))
KEY = JobKey("team-a/elastic")
POLICY = Policy()


def _job(**overrides: object) -> PendingJob:
    """The elastic job at its maximum, 4 x 8, at least 2 x 8; 4 h at 4 replicas, no bound."""
    values: dict[str, object] = {
        "replicas": 4,
        "min_replicas": 2,
        "per_replica": 8,
        "predicted_runtime_s": 4 * HOUR,
        "max_runtime_s": None,
    }
    return builders.job("elastic", **{**values, **overrides})  # type: ignore[arg-type]


def _gang(
    nodes: int = 2,
    *,
    ran_s: float = HOUR,
    rest_s: float = 6 * HOUR,
    checkpoint_interval_s: float | None = 600.0,
    borrowed: int = 0,
    min_replicas: int = 2,
    tier: str = "training",
    per_replica: int = 8,
) -> RunningJob:
    """The elastic job running on node-0.. at `nodes` replicas, predicted to end in `rest_s`."""
    gang = builders.gang(
        "elastic",
        [(f"node-{i}", range(per_replica)) for i in range(nodes)],
        tenant="team-a",
        tier=tier,
        started_at=NOW - ran_s,
        max_runtime_s=None,
        borrowed=borrowed,
    )
    return dataclasses.replace(
        gang,
        min_replicas=min_replicas,
        predicted_end_at=NOW + rest_s,
        checkpoint_interval_s=checkpoint_interval_s,
        restart_s=300.0,
    )


def _busy(node: str, *, ends_in_s: float, tenant: str = "team-b") -> RunningJob:
    return builders.gang(
        f"busy-{node}",
        [(node, range(8))],
        tenant=tenant,
        started_at=NOW - 10.0,
        max_runtime_s=ends_in_s + 10.0,
    )


def _cycle(
    *pending: PendingJob,
    running: tuple[RunningJob, ...],
    growable: tuple[PendingJob, ...] = (),
    nodes: int = 4,
    racks: int = 1,
    quotas: tuple[TenantQuota, ...] = QUOTAS,
    policy: Policy = POLICY,
    free_since: dict[DeviceId, float] | None = None,
) -> CycleResult:
    snapshot = Snapshot(
        inventory=builders.cluster(nodes, racks=racks),
        quotas=quotas,
        running=running,
        pending=pending,
        growable=growable,
        free_since=free_since or {},
    )
    return cycle.run_cycle(snapshot=snapshot, policy=policy, now=NOW, matcher=DeviceMatcher())


def _grown_to(result: CycleResult) -> int | None:
    found = [g for g in result.grows if g.job == KEY]
    return found[0].size if found else None


# --- grow ---------------------------------------------------------------------------------


def test_a_gang_below_its_maximum_grows_whole_replicas_onto_free_nodes() -> None:
    result = _cycle(running=(_gang(),), growable=(_job(),))
    (grow,) = result.grows
    assert [r.replica for r in grow.placement] == [2, 3]
    assert sorted(r.node for r in grow.placement) == ["node-2", "node-3"]
    assert all(len(r.devices) == 8 for r in grow.placement)
    assert grow.borrowed == 0


def test_only_growable_gangs_grow() -> None:
    """The snapshot lists the gangs that may grow; others keep their size."""
    assert _cycle(running=(_gang(),)).grows == ()


def test_queued_jobs_take_free_devices_before_a_gang_grows() -> None:
    """A 1 x 8 job of the queue takes a free node; the gang grows onto the one left."""
    queued = builders.job("queued", tenant="team-b", per_replica=8, predicted_runtime_s=HOUR)
    result = _cycle(queued, running=(_gang(),), growable=(_job(),))
    assert [a.job for a in result.admissions] == [queued.key]
    assert _grown_to(result) == 3


def test_the_quota_limits_a_grow_and_grown_devices_above_nominal_are_borrowed() -> None:
    capped = (builders.quota("team-a", 24), builders.quota("team-b", 64))
    assert _grown_to(_cycle(running=(_gang(),), growable=(_job(),), quotas=capped)) == 3
    lending = (builders.quota("team-a", 16, borrowing_limit=16), builders.quota("team-b", 64))
    (grow,) = _cycle(running=(_gang(),), growable=(_job(),), quotas=lending).grows
    assert (grow.size, grow.borrowed) == (4, 16)


def test_a_grow_leaves_alone_a_reservation_that_starts_before_the_grown_gang_ends() -> None:
    """A 3 x 8 job waits for node-2 (free in 10 min) and holds node-3 and node-4 meanwhile."""
    waiting = builders.job(
        "big", tenant="team-b", replicas=3, per_replica=8, predicted_runtime_s=HOUR
    )
    running = (_gang(), _busy("node-2", ends_in_s=600.0))
    result = _cycle(waiting, running=running, growable=(_job(),), nodes=5)
    assert result.reservations[0].job == waiting.key
    assert result.grows == ()


def test_growth_never_takes_what_a_tenant_within_nominal_is_owed() -> None:
    """team-b, within nominal, waits for 2 whole nodes while only one is free: team-a, whose
    grow would borrow and run past the 2 h until team-b's devices could be free, leaves it
    (backfill is off, so no reservation holds the node)."""
    quotas = (builders.quota("team-a", 16, borrowing_limit=48), builders.quota("team-b", 16))
    owed = builders.job("owed", tenant="team-b", replicas=2, per_replica=8, max_runtime_s=HOUR)
    running = (_gang(), _busy("node-2", ends_in_s=2 * HOUR, tenant="team-a"))
    no_backfill = Policy(backfill=False)
    result = _cycle(owed, running=running, growable=(_job(),), quotas=quotas, policy=no_backfill)
    assert result.reservations == ()
    assert result.grows == ()
    within = (builders.quota("team-a", 64), builders.quota("team-b", 16))
    result = _cycle(owed, running=running, growable=(_job(),), quotas=within, policy=no_backfill)
    assert _grown_to(result) == 3


@pytest.mark.parametrize(
    ("interval_s", "grows"),
    [
        pytest.param(600.0, True, id="checkpoints-every-10m"),
        pytest.param(None, False, id="no-checkpoint-10h-of-work-to-redo"),
    ],
)
def test_a_grow_pays_only_when_the_re_formed_gang_ends_sooner(
    interval_s: float | None, grows: bool
) -> None:
    """An hour left at 2 replicas, 10 h run: grown to 4 the gang redoes the work since its
    checkpoint (10 min, or all 10 h without one) at twice the devices, plus a 5-min restart."""
    gang = _gang(ran_s=10 * HOUR, rest_s=HOUR, checkpoint_interval_s=interval_s)
    result = _cycle(running=(gang,), growable=(_job(),))
    assert (_grown_to(result) == 4) is grows
    if grows:
        assert elastic.grown_rest_s(gang, 2, rest_s=HOUR, now=NOW) == pytest.approx(
            (HOUR + 600.0) * 2 / 4 + 300.0
        )


@pytest.mark.parametrize(
    ("tier", "interval_s", "grows"),
    [
        pytest.param("training", 600.0, True, id="checkpoints"),
        pytest.param("training", None, False, id="would-lose-its-whole-run"),
        pytest.param("prod-inference", None, True, id="serving"),
    ],
)
def test_a_gang_whose_end_is_unknown_grows_only_when_re_forming_costs_little(
    tier: str, interval_s: float | None, grows: bool
) -> None:
    gang = dataclasses.replace(
        _gang(checkpoint_interval_s=interval_s, tier=tier), predicted_end_at=None
    )
    job = _job(tier=tier)
    assert (_grown_to(_cycle(running=(gang,), growable=(job,))) == 4) is grows


@pytest.mark.parametrize(
    ("ran_s", "grows"),
    [
        pytest.param(1199.0, False, id="idled-less-than-re-forming-destroys"),
        pytest.param(1200.0, True, id="idled-as-long"),
    ],
)
def test_a_grow_waits_until_the_devices_it_adds_have_idled_what_re_forming_destroys(
    ran_s: float, grows: bool
) -> None:
    """Ski rental: re-forming the 2 x 8 gang destroys its 10 min since the checkpoint on 16
    devices and a 5-min restart on the 32 of the grown gang (19,200 device-s); the 16 free
    devices have idled since the gang started. Until they have idled that long the cycle
    asks to run again when they will have."""
    gang = _gang(ran_s=ran_s)
    assert elastic.grow_cost_device_s(gang, 16, now=NOW, long_running=False) == 19_200.0
    result = _cycle(running=(gang,), growable=(_job(),))
    assert (_grown_to(result) == 4) is grows
    if not grows:
        assert result.decide_again_at == pytest.approx(NOW + 1.0)


def test_the_idle_time_a_grow_weighs_counts_from_each_devices_release() -> None:
    """The gang started an hour ago, but node-2 and node-3 came free 10 minutes ago: 16
    devices x 600 s have idled, less than the 19,200 device-s re-forming destroys."""
    freed = {
        builders.device_id(node, index): NOW - 600.0
        for node in ("node-2", "node-3")
        for index in range(8)
    }
    assert _cycle(running=(_gang(),), growable=(_job(),), free_since=freed).grows == ()


def test_a_shrinking_gang_does_not_grow() -> None:
    kept, leaving = elastic.split(_gang(nodes=3), 2)
    for running in ((kept, leaving), (leaving, kept)):
        assert _cycle(running=running, growable=(_job(),)).grows == ()


def test_added_replicas_go_on_nodes_that_hold_none_of_the_gangs_replicas() -> None:
    """Best fit alone would put the 2 added 4-device replicas beside the running ones on
    node-0 and node-1, the fullest nodes."""
    job = _job(per_replica=4)
    gang = _gang(per_replica=4)
    (grow,) = _cycle(running=(gang,), growable=(job,)).grows
    assert sorted(r.node for r in grow.placement) == ["node-2", "node-3"]
    assert _cycle(running=(gang,), growable=(job,), nodes=2).grows == ()


def test_a_required_topology_grows_only_in_the_domain_its_replicas_run_in() -> None:
    """rack-0 holds node-0..2 and rack-1 node-3..5: the gang on node-0 and node-1 grows by
    the one replica rack-0 has room for, though rack-1 could hold both."""
    job = _job(topology=TopologyMode.REQUIRED)
    (grow,) = _cycle(running=(_gang(),), growable=(job,), nodes=6, racks=2).grows
    assert grow.size == 3
    assert [r.node for r in grow.placement] == ["node-2"]
    assert _cycle(running=(_gang(),), growable=(job,), nodes=4, racks=2).grows == ()


# --- shrink -------------------------------------------------------------------------------


def _prod(nodes: int) -> PendingJob:
    return builders.job(
        "serve", tenant="team-b", tier="prod-inference", replicas=nodes, per_replica=8
    )


@pytest.mark.parametrize(("needed", "keep"), [(1, 3), (2, 2)])
def test_a_preemptor_shrinks_an_elastic_victim_by_the_highest_replicas_it_needs(
    needed: int, keep: int
) -> None:
    gang = _gang(nodes=4)
    result = _cycle(_prod(needed), running=(gang,))
    (preemption,) = result.preemptions
    (victim,) = preemption.victims
    assert (victim.job, victim.keep) == (KEY, keep)
    assert victim.lost_device_s == gang.lost_work_device_s(NOW)
    assert victim.reason.startswith(f"shrinking from 4 to {keep} replicas: preempted by")


def test_below_its_minimum_an_elastic_victim_is_evicted_whole() -> None:
    (preemption,) = _cycle(_prod(3), running=(_gang(nodes=4),)).preemptions
    assert [(v.job, v.keep) for v in preemption.victims] == [(KEY, None)]


def test_replica_0_never_goes_in_a_shrink() -> None:
    """Minimum 1: a preemptor that needs all four nodes evicts the gang whole."""
    (preemption,) = _cycle(_prod(4), running=(_gang(nodes=4, min_replicas=1),)).preemptions
    assert [v.keep for v in preemption.victims] == [None]


def test_a_job_that_is_not_elastic_is_evicted_whole() -> None:
    gang = dataclasses.replace(_gang(nodes=4), min_replicas=None)
    (preemption,) = _cycle(_prod(1), running=(gang,)).preemptions
    assert [v.keep for v in preemption.victims] == [None]


def test_a_shrinking_gangs_leaving_replicas_are_coming_free_and_the_rest_keeps_running() -> None:
    """The next cycle waits for the leaving replica (no new victim), and a second preemptor
    may still shrink what stays."""
    kept, leaving = elastic.split(_gang(nodes=4), 3)
    result = _cycle(_prod(1), running=(kept, leaving))
    (preemption,) = result.preemptions
    assert preemption.victims == ()
    assert [v.keep for v in _cycle(_prod(2), running=(kept, leaving)).preemptions[0].victims] == [2]


def test_a_shrink_gives_back_borrowed_devices_first() -> None:
    kept, leaving = elastic.split(_gang(nodes=4, borrowed=12), 2)
    assert (leaving.borrowed, kept.borrowed) == (12, 0)
    assert (kept.size, leaving.device_count, leaving.is_evicting) == (2, 16, True)
    kept, leaving = elastic.split(_gang(nodes=4, borrowed=20), 3)
    assert (leaving.borrowed, kept.borrowed) == (8, 12)
