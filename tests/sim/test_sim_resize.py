"""Elastic gangs resized while they run (rule 13): the simulator applies a grow at once and a
shrink after its grace, each re-forming the gang from its last checkpoint at its new size.

The policy here is the gangq core with its decisions on one elastic gang replaced (its eviction
made a shrink, a grow added at a chosen instant), so each test pins what the engine does with
one decision, whatever the core would choose."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from gangq.queue.core.model import (
    CycleResult,
    Grow,
    JobKey,
    NodeName,
    Preemption,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
    Victim,
)
from gangq.queue.sim import engine, policy, report, trace
from gangq.queue.sim.outcome import Outcome

DEVICE_CLASS = "gpu.nvidia.com"
ELASTIC = JobKey("ml/elastic")


def _job(name: str, arrival: float, **fields: Any) -> dict[str, Any]:
    tenant = name.split("/", maxsplit=1)[0]
    return {
        "name": name,
        "arrival": arrival,
        "tenant": tenant,
        "tier": "training",
        "devicesPerReplica": 8,
        **fields,
    }


def _elastic(arrival: float = 1, **fields: Any) -> dict[str, Any]:
    """4 replicas of 8 devices, down to 2; 1,200 s of work at 4, saved every 100 s."""
    return _job(
        "ml/elastic",
        arrival,
        replicas=4,
        minReplicas=2,
        runtime=1200,
        checkpointInterval=100,
        restartSeconds=50,
        **fields,
    )


class Resizing:
    """The gangq policy, with every eviction of the elastic gang while it runs above its
    minimum made a shrink to `keep` (None: evicted whole), a grow onto the nodes nothing
    holds at `grow_at` only, and the whole gang evicted for the last job queued at
    `evict_at`."""

    name = "gangq"
    whole_gangs = True
    serving_tiers: frozenset[str] = frozenset()

    def __init__(
        self,
        *,
        keep: int | None = None,
        grow_at: float | None = None,
        grow: Callable[[Snapshot], Grow] | None = None,
        evict_at: float | None = None,
    ) -> None:
        self.core = policy.GangqPolicy(device_class=DEVICE_CLASS)
        self.keep = keep
        self.grow_at = grow_at
        self.grow = grow or _onto_free_nodes
        self.evict_at = evict_at
        self.seen: list[tuple[float, Snapshot]] = []

    def decide(self, snapshot: Snapshot, *, now: float) -> CycleResult:
        self.seen.append((now, snapshot))
        result = self.core.decide(snapshot, now=now)
        parts = [job for job in snapshot.running if job.key == ELASTIC]
        at_least = any(job.size <= (job.min_replicas or job.size) for job in parts)
        keep = None if at_least else self.keep
        preemptions = tuple(
            dataclasses.replace(
                preemption,
                victims=tuple(
                    dataclasses.replace(victim, keep=keep) if victim.job == ELASTIC else victim
                    for victim in preemption.victims
                ),
            )
            for preemption in result.preemptions
        )
        if now == self.evict_at:
            evicting = Preemption(job=snapshot.pending[-1].key, victims=(Victim(ELASTIC, ""),))
            preemptions = (*preemptions, evicting)
        grows = (self.grow(snapshot),) if now == self.grow_at else ()
        return dataclasses.replace(result, preemptions=preemptions, grows=grows)

    def wake_at(self, snapshot: Snapshot, *, now: float) -> float | None:
        return self.core.wake_at(snapshot, now=now)


def _onto_free_nodes(snapshot: Snapshot) -> Grow:
    """The elastic gang grown to its maximum, a replica on each node nothing holds."""
    (gang,) = (job for job in snapshot.running if job.key == ELASTIC)
    (wanted,) = (job for job in snapshot.growable if job.key == ELASTIC)
    held = {device for job in snapshot.running for p in job.placement for device in p.devices}
    free: dict[NodeName, list[Any]] = {}
    for device_id, device in snapshot.inventory.devices.items():
        if device.node is not None:
            free.setdefault(device.node, []).append(device_id)
    nodes = [node for node, devices in sorted(free.items()) if held.isdisjoint(devices)]
    placement = tuple(
        ReplicaPlacement(replica=replica, node=node, devices=tuple(sorted(free[node])))
        for replica, node in zip(range(gang.size, wanted.replicas), nodes, strict=False)
    )
    return Grow(job=ELASTIC, placement=placement)


def _run(jobs: list[dict[str, Any]], resizing: Resizing, **document: Any) -> Outcome:
    replayed = trace.from_document(
        {"horizon": 5000, "cluster": {"nodes": 4, "racks": 1}, "jobs": jobs, **document}
    )
    return engine.simulate(replayed, resizing)


HOLDER = _job("ops/holder", 0, replicas=2, runtime=1000)
"""Half the cluster until 1000: the elastic gang starts at 2 of its 4 replicas beside it."""


def test_a_gang_grown_when_devices_free_up_re_forms_at_its_maximum_and_ends_sooner() -> None:
    """At 2 replicas from 1, the gang's 1,200 s of work at 4 would take 2,400 s (end 2,401).
    Grown at 1,000: its checkpoints hold 900 s at 2 (450 s of work at 4), the 99 s since are
    lost on its 16 devices, it restarts 50 s on 32, and the 750 s of work left take 750 s."""
    grown = _run([HOLDER, _elastic()], Resizing(grow_at=1000))
    record = grown.records[ELASTIC]
    assert (record.grows, grown.grows, record.size) == (1, 1, None)
    assert record.finished_at == 1000 + 50 + 750
    assert record.progress_s == 450
    assert record.lost_device_s == 16 * 99
    assert grown.lost_by_cause == {"grow": 16 * 99 + 32 * 50}
    assert grown.device_seconds_lost == 16 * 99 + 32 * 50
    unchanged = _run([HOLDER, _elastic()], Resizing())
    assert unchanged.records[ELASTIC].finished_at == 1 + 2400
    assert (unchanged.grows, unchanged.device_seconds_lost) == (0, 0)


def test_a_growable_gang_is_shown_to_the_core_at_its_maximum_until_it_grows() -> None:
    """A 1-GPU job arriving at 1,100 makes a cycle after the grow: the gang re-formed at 1,000
    from what it had saved and has saved nothing since."""
    resizing = Resizing(grow_at=1000)
    tiny = _job("ops/tiny", 1100, tier="small", devicesPerReplica=1, runtime=10)
    _run([HOLDER, _elastic(), tiny], resizing)
    shown = {now: snapshot.growable for now, snapshot in resizing.seen}
    (at_maximum,) = shown[1000]
    assert (at_maximum.key, at_maximum.replicas, at_maximum.min_replicas) == (ELASTIC, 4, 2)
    assert shown[1100] == ()
    (grown,) = _parts(dict(resizing.seen)[1100])
    assert grown.last_checkpoint_at == 1000, "an eviction would lose only the run since"


def test_a_grow_does_not_move_the_bound_of_the_run() -> None:
    """`maxRuntime` 1,500 from the start at 1: the grown gang's work would end at 1,800, it is
    stopped at 1,501."""
    outcome = _run([HOLDER, _elastic(maxRuntime=1500)], Resizing(grow_at=1000))
    assert outcome.records[ELASTIC].finished_at == 1 + 1500


PROD = _job("prod/serve", 451, tier="prod-inference", replicas=2, runtime=270)
"""Needs half the cluster the elastic gang holds whole: the core evicts it (or shrinks it)."""
SHRINK_CAUSE = "prod-inference > training (shrink)"


def test_a_shrunk_gang_keeps_running_at_the_size_it_keeps() -> None:
    """At all 4 replicas from 1, shrunk to 2 for a prod gang at 451 and shrunk at 481 (30 s
    grace): its checkpoints hold 400 s, the 80 s since are lost on all 32 devices, it restarts
    50 s on 16 and runs the 800 s of work left at 2, in 1,600 s. It never waits again."""
    resizing = Resizing(keep=2)
    outcome = _run([_elastic(), PROD], resizing)
    record = outcome.records[ELASTIC]
    assert (record.shrinks, outcome.shrinks, record.evictions, outcome.evictions) == (1, 1, 0, 0)
    assert all(
        ELASTIC not in {job.key for job in snapshot.pending}
        for now, snapshot in resizing.seen
        if now > 1
    )
    assert record.finished_at == 481 + 50 + 1600
    assert record.progress_s == 400
    assert outcome.lost_by_cause == {SHRINK_CAUSE: 32 * 80 + 16 * 50}
    assert outcome.records[JobKey("prod/serve")].first_started_at == 481


def test_a_shrink_asks_for_a_checkpoint_first_when_the_job_opted_in() -> None:
    """With a 120 s checkpoint grace, the gang saves its 450 s at the request (451) and
    answers 60 s later; its pods are gone at 541: 90 s lost on 32 devices."""
    outcome = _run([_elastic(checkpointGraceSeconds=120), PROD], Resizing(keep=2))
    record = outcome.records[ELASTIC]
    assert record.progress_s == 450
    assert record.lost_device_s == 32 * 90
    assert record.finished_at == 541 + 50 + (1200 - 450) * 2


def test_a_shrinking_gang_is_not_chosen_again_until_its_shrink_is_done() -> None:
    """A second prod gang at 460 is given the whole gang while it shrinks: as the store does,
    the engine leaves the gang to its shrink, done at 481. The core then evicts the 2 replicas
    it kept for that prod gang; gone at 511, still in their restart (16 x 30 s, lost to the
    shrink), they wait for the first prod gang's end at 751 and run the 800 s of work left
    at 2 after a 50 s restart (16 x 50 s, lost to the eviction). Only that eviction marks
    the prod gang as having preempted (`PendingJob.preempted_at`): its choice at 460 moved
    nothing."""
    second = _job("prod/serve-2", 460, tier="prod-inference", replicas=2, runtime=270)
    resizing = Resizing(keep=2, evict_at=460)
    outcome = _run([_elastic(), PROD, second], resizing)
    marked = {
        now: job.preempted_at
        for now, snapshot in resizing.seen
        for job in snapshot.pending
        if job.key == second["name"]
    }
    assert marked == {460: None, 481: None, 511: 481}
    record = outcome.records[ELASTIC]
    assert (record.shrinks, record.evictions) == (1, 1)
    assert record.finished_at == 751 + 50 + 800 * 2
    assert outcome.lost_by_cause == {
        SHRINK_CAUSE: 32 * 80 + 16 * 30,
        "prod-inference > training": 16 * 50,
    }


def _parts(snapshot: Snapshot) -> list[RunningJob]:
    return [job for job in snapshot.running if job.key == ELASTIC]


def test_a_shrinking_gang_is_shown_as_the_part_that_stays_and_the_part_that_leaves() -> None:
    """The elastic tenant borrows 16 of its 32 devices; a 1-GPU job arriving at 460 makes a
    cycle while the shrink waits out its grace. The leaving replicas take the borrowed
    devices, and once they are gone the gang borrows nothing."""
    tiny = _job("ops/tiny", 460, tier="small", devicesPerReplica=1, runtime=10)
    tenants = [
        {"name": "ml", "nominal": 16, "borrowingLimit": 16},
        {"name": "prod", "nominal": 16},
        {"name": "ops", "nominal": 0, "borrowingLimit": 8},
    ]
    resizing = Resizing(keep=2)
    _run([_elastic(), PROD, tiny], resizing, tenants=tenants)
    seen = dict(resizing.seen)
    stays, leaves = sorted(_parts(seen[460]), key=lambda part: part.is_evicting)
    assert [p.replica for p in stays.placement] == [0, 1]
    assert [p.replica for p in leaves.placement] == [2, 3]
    assert (stays.borrowed, leaves.borrowed, leaves.is_evicting) == (0, 16, True)
    assert stays.min_replicas == 2
    (shrunk,) = _parts(seen[481])
    assert (shrunk.size, shrunk.borrowed, shrunk.is_evicting) == (2, 0, False)


def test_the_report_counts_grows_and_shrinks_and_their_lost_work() -> None:
    grown = report.summarize(_run([HOLDER, _elastic()], Resizing(grow_at=1000)))
    shrunk = report.summarize(_run([_elastic(), PROD], Resizing(keep=2)))
    assert (grown["grows"], grown["shrinks"], shrunk["grows"], shrunk["shrinks"]) == (1, 0, 0, 1)
    assert grown["device_hours_lost_by_cause"] == {"grow": (16 * 99 + 32 * 50) / 3600}
    assert shrunk["device_hours_lost_by_cause"] == {SHRINK_CAUSE: (32 * 80 + 16 * 50) / 3600}
    text = report.table({"gangq": shrunk})
    assert "elastic gangs grown / shrunk" in text
    assert f"device-hours lost: {SHRINK_CAUSE}" in text


@pytest.mark.parametrize(
    ("resizing", "message"),
    [
        pytest.param(Resizing(keep=1), "ml/elastic: cannot shrink to 1 from 4", id="below-min"),
        pytest.param(Resizing(keep=4), "ml/elastic: cannot shrink to 4 from 4", id="no-smaller"),
    ],
)
def test_a_shrink_the_gang_cannot_make_is_refused(resizing: Resizing, message: str) -> None:
    with pytest.raises(engine.SimulationError, match=message):
        _run([_elastic(), PROD], resizing)


def _skipping_a_replica(snapshot: Snapshot) -> Grow:
    """Replica 3 on a free node, while the gang runs replicas 0 and 1."""
    first = _onto_free_nodes(snapshot).placement[0]
    return Grow(job=ELASTIC, placement=(dataclasses.replace(first, replica=3),))


def test_a_grow_that_does_not_number_on_from_the_gang_s_size_is_refused() -> None:
    resizing = Resizing(grow_at=1000, grow=_skipping_a_replica)
    with pytest.raises(engine.SimulationError, match=r"ml/elastic: grown by replicas \[3\] from 2"):
        _run([HOLDER, _elastic()], resizing)


def test_a_shrinking_gang_below_its_maximum_is_not_growable() -> None:
    """Beside a prod gang on one node the gang starts at 3; a prod replica at 451 shrinks it
    to 2, and a 1-GPU job at 460 makes a cycle while it waits out its grace."""
    holder = _job("prod/holder", 0, tier="prod-inference", runtime=5000)
    prod = _job("prod/serve", 451, tier="prod-inference", runtime=270)
    tiny = _job("ops/tiny", 460, tier="small", devicesPerReplica=1, runtime=10)
    resizing = Resizing(keep=2)
    _run([holder, _elastic(), prod, tiny], resizing)
    seen = dict(resizing.seen)
    assert [part.size for part in _parts(seen[460])] == [2, 3]
    assert seen[460].growable == ()
    assert [job.key for job in seen[481].growable] == [ELASTIC]


def _gangq() -> policy.SimPolicy:
    return policy.create("gangq", device_class=DEVICE_CLASS)


def test_the_core_grows_the_gang_when_the_holder_ends() -> None:
    """The week of the first test under the gangq policy alone: the two nodes the holder
    frees at 1,000 idle until they have cost what re-forming destroys (ski rental): 16 x 99 s
    since the gang's checkpoint and a 50-s restart on 32 devices, 3,184 device-s, which 16
    idle devices reach at 1,199. It has run 1,198 s at 2 then (a first start has no
    restart), of which its checkpoints hold 1,100, 550 s of its work at 4: it loses the 98 s
    since, restarts 50 s and runs the 650 s left at 4."""
    outcome = _run([HOLDER, _elastic()], _gangq())
    record = outcome.records[ELASTIC]
    assert (record.grows, record.finished_at) == (1, 1199 + 50 + 650)
    assert outcome.lost_by_cause == {"grow": 16 * 98 + 32 * 50}


def test_the_core_shrinks_the_gang_for_a_prod_gang() -> None:
    """The week of the shrink test under the gangq policy alone: the core shrinks the gang to
    the 2 replicas the prod gang leaves it, which runs on without waiting. When the prod gang
    ends at 751 the 16 devices it frees idle while the gang's unsaved work grows as fast as
    their idle time: the core grows the gang back to 4 at its checkpoint at 931, when
    re-forming destroys only the 50-s restart on 32 devices. Its 400 s of work at 2 since
    its restart after the shrink are 200 s at 4 (600 s in all): it restarts 50 s and runs its
    last 600 s at 4."""
    outcome = _run([_elastic(), PROD], _gangq())
    record = outcome.records[ELASTIC]
    assert (record.shrinks, record.evictions, record.grows) == (1, 0, 1)
    assert outcome.records[JobKey("prod/serve")].first_started_at == 481
    assert record.finished_at == 931 + 50 + 600
    assert outcome.lost_by_cause == {SHRINK_CAUSE: 32 * 80 + 16 * 50, "grow": 32 * 50}
