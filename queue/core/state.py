"""The state one scheduling cycle accumulates, and its lazily built indexes of running gangs.

Owns nothing but bookkeeping: the pool, the quota ledger, decisions taken so far, memos of
failed searches, and victim lists sorted once per cycle. It decides nothing itself.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

from gangq.queue.core import backfill, explain, ordering, placement, preemption, serving
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import (
    Admission,
    Grow,
    JobKey,
    NodeName,
    PendingJob,
    Policy,
    Preemption,
    RunningJob,
    Snapshot,
    Tenant,
    Tier,
)
from gangq.queue.core.owed import OwedDemand
from gangq.queue.core.pool import Pool, SelectorKey
from gangq.queue.core.quota import QuotaBook

Outcome = placement.Choice | placement.Shortfall
Mask = tuple[int, ...]
"""Indexes into the cycle's backfill holds that a job must respect."""
Room = backfill.Room


@dataclass(slots=True)
class CycleState:
    """Everything one cycle accumulates; lives only for the duration of `run_cycle`."""

    snapshot: Snapshot
    policy: Policy
    now: float
    pool: Pool
    book: QuotaBook
    tiers: dict[str, Tier]
    budget: preemption.SearchBudget
    owed: OwedDemand
    admissions: list[Admission] = field(default_factory=list)
    admitted_releases: list[tuple[float, RunningJob]] = field(default_factory=list)
    """Gangs admitted this cycle that end, in `backfill.release_order`, kept sorted as they
    come: every reservation reads them, and sorting them afresh each time cost more."""
    preemptions: list[Preemption] = field(default_factory=list)
    grows: list[Grow] = field(default_factory=list)
    pending: dict[JobKey, explain.PendingReason] = field(default_factory=dict)
    order: list[JobKey] = field(default_factory=list)
    holds: list[backfill.Hold] = field(default_factory=list)
    reserved_tiers: set[str] = field(default_factory=set)
    claimed: set[JobKey] = field(default_factory=set)
    """Gangs whose devices a preemptor of this cycle counts on (victims or evicting)."""
    touched_nodes: set[NodeName] = field(default_factory=set)
    """Nodes where this cycle admitted a job or holds devices for a preemptor."""
    placements: dict[
        tuple[placement.Shape, Mask, Tenant | None, placement.NodeSubset | None],
        placement.Shortfall,
    ] = field(default_factory=dict)
    fenced: dict[tuple[Mask, Tenant, str], tuple[frozenset[DeviceId], dict[NodeName, Room]]] = (
        field(default_factory=dict)
    )
    """Backfill holds plus what a borrower must leave to other tenants' owed jobs."""
    owed_verdicts: dict[
        tuple[placement.Shape, Mask, str, Tenant, int, int, bool], explain.PendingReason
    ] = field(default_factory=dict)
    """Borrowers refused for what others are owed, by shape, holds, tier, tenant, owed, free
    and whether the job may preempt yet."""
    ends_before_owed: dict[tuple[str, int, int, float], bool] = field(default_factory=dict)
    """Whether a borrower ending then leaves the owed devices before they could all be free,
    by device class, owed, free and the borrower's end."""
    masks: dict[tuple[int, float], Mask] = field(default_factory=dict)
    """Holds in force by (number of holds so far, job end): jobs share a few runtimes."""
    merged_holds: dict[Mask, tuple[frozenset[DeviceId], dict[NodeName, Room]]] = field(
        default_factory=dict
    )
    verdicts: dict[tuple[placement.Shape, Mask, str, str, bool], explain.PendingReason] = field(
        default_factory=dict
    )
    _running_releases: backfill.Releases | None = None
    unpreemptable: set[tuple[placement.Shape, int, str]] = field(default_factory=set)
    unpaid: dict[tuple[placement.Shape, int, str], explain.PendingReason] = field(
        default_factory=dict
    )
    """Victim searches whose eviction did not pay (rule 6), by the `unpreemptable` key."""
    expected_starts: dict[tuple[placement.Shape, frozenset[DeviceId]], float | None] = field(
        default_factory=dict
    )
    """When a shape fits without evictions, by shape and excluded devices (the pays test and
    the start size of elastic jobs)."""
    unreservable: set[placement.Shape] = field(default_factory=set)
    decide_again_at: float | None = None
    """`CycleResult.decide_again_at`."""
    serving_places: serving.Places | None = None
    """Places kept cheap to clear for forecast serving scale-ups (module `serving`)."""
    _victims_by_class: dict[str, list[RunningJob]] | None = None
    _evicting: dict[str, list[RunningJob]] | None = None
    _victims_by_domain: dict[tuple[str, str], dict[str, list[RunningJob]]] = field(
        default_factory=dict
    )
    _victims_by_node: dict[str, dict[NodeName, list[RunningJob]]] = field(default_factory=dict)
    _losses_by_node: dict[str, dict[NodeName, float]] = field(default_factory=dict)
    node_orders: dict[
        tuple[SelectorKey, int, bool], list[tuple[list[RunningJob], frozenset[NodeName]]]
    ] = field(default_factory=dict)
    domain_orders: dict[
        tuple[SelectorKey, int, int, str], list[tuple[list[RunningJob], frozenset[NodeName]]]
    ] = field(default_factory=dict)
    _domain_members: dict[str, dict[str, frozenset[NodeName]]] = field(default_factory=dict)
    _possible: dict[placement.Shape, bool] = field(default_factory=dict)

    @classmethod
    def build(
        cls, snapshot: Snapshot, *, policy: Policy, now: float, matcher: DeviceMatcher
    ) -> CycleState:
        pool = Pool(
            inventory=snapshot.inventory,
            running=snapshot.running,
            matcher=matcher,
            domain_key=policy.topology_keys[0] if policy.topology_keys else None,
        )
        book = QuotaBook(
            quotas=snapshot.quotas,
            running=snapshot.running,
            weigh=pool.weigher(),
        )
        tiers = {tier.name: tier for tier in policy.tiers}
        budget = preemption.SearchBudget(steps=policy.preemption_search_steps)
        places = serving.places(
            snapshot.serving_starts,
            days=policy.serving_forecast_days,
            pool=pool,
            running=snapshot.running,
            book=book,
            tiers=tiers,
            now=now,
        )
        return cls(
            snapshot=snapshot,
            policy=policy,
            now=now,
            pool=pool,
            book=book,
            tiers=tiers,
            budget=budget,
            owed=OwedDemand(book=book),
            serving_places=places,
        )

    def note_decision_at(self, at: float) -> None:
        if self.decide_again_at is None or at < self.decide_again_at:
            self.decide_again_at = at

    def idled(self, job: PendingJob, choice: placement.Choice) -> tuple[int, float]:
        """The free devices of the job's place, and the device-seconds they have idled while
        it waited: each since the later of its release (`Snapshot.free_since`) and the job's
        queueing or last eviction (`PendingJob.paying_since`)."""
        queued, free_since = job.paying_since, self.snapshot.free_since
        idle, idled = 0, 0.0
        for _, devices in choice:
            for device in devices:
                if device.id in self.pool.free:
                    idle += 1
                    idled += max(self.now - max(free_since.get(device.id, queued), queued), 0.0)
        return idle, idled

    def may_preempt(self, job: PendingJob) -> bool:
        """Preemption is on and the job has waited its tier's preemption delay."""
        delay = self.tiers[job.tier].preemption_delay_s if job.tier in self.tiers else 0.0
        return self.policy.preemption and self.now - job.submitted_at >= delay

    def end_if_admitted(self, job: PendingJob) -> float:
        """When the job would end if admitted now: by its predicted runtime (rule 5), else by
        its bound; never for long-running tiers and jobs with neither."""
        tier = self.tiers[job.tier]
        runtime = (
            job.predicted_runtime_s if job.predicted_runtime_s is not None else job.max_runtime_s
        )
        if runtime is None or tier.long_running:
            return math.inf
        if job.max_runtime_s is not None:
            runtime = min(runtime, job.max_runtime_s)
        return self.now + runtime

    def is_possible(self, shape: placement.Shape) -> bool:
        """`placement.is_possible`, remembered: capability does not change within a cycle."""
        known = self._possible.get(shape)
        if known is None:
            known = self._possible[shape] = placement.is_possible(shape, self.pool)
        return known

    def victims_in_order(self, device_class: str) -> list[RunningJob]:
        """Gangs of the class that are not evicting yet, in victim order (sorted once)."""
        if self._victims_by_class is None:
            ranks = {name: tier.rank for name, tier in self.tiers.items()}
            self._victims_by_class = {}
            for gang in sorted(
                self.snapshot.running,
                key=lambda job: ordering.victim_order_key(job, ranks=ranks, now=self.now),
            ):
                if not gang.is_evicting:
                    self._victims_by_class.setdefault(gang.device_class, []).append(gang)
        return self._victims_by_class.get(device_class, [])

    def victims_by_domain(self, device_class: str, key: str) -> dict[str, list[RunningJob]]:
        """`victims_in_order` split by the topology domains (label `key`) the gangs touch."""
        cache_key = (device_class, key)
        found = self._victims_by_domain.get(cache_key)
        if found is None:
            nodes = self.snapshot.inventory.nodes
            found = {}
            for gang in self.victims_in_order(device_class):
                domains = {nodes[r.node].labels.get(key) for r in gang.placement if r.node in nodes}
                for domain in sorted(d for d in domains if d is not None):
                    found.setdefault(domain, []).append(gang)
            self._victims_by_domain[cache_key] = found
        return found

    def victims_by_node(self, device_class: str) -> dict[NodeName, list[RunningJob]]:
        """`victims_in_order` split by the nodes the gangs hold devices on."""
        found = self._victims_by_node.get(device_class)
        if found is None:
            found = {}
            for gang in self.victims_in_order(device_class):
                for node in sorted({r.node for r in gang.placement}):
                    found.setdefault(node, []).append(gang)
            self._victims_by_node[device_class] = found
        return found

    def losses_by_node(self, device_class: str) -> dict[NodeName, float]:
        """The eviction cost of the gangs of `victims_by_node`, summed per node, as a tier
        that always preempts counts it (`preemption.Rights.by_loss`): its only reader."""
        found = self._losses_by_node.get(device_class)
        if found is None:
            found = self._losses_by_node[device_class] = {
                node: sum(gang.eviction_cost_device_s(self.now, asked=False) for gang in gangs)
                for node, gangs in self.victims_by_node(device_class).items()
            }
        return found

    def domain_members(self, key: str) -> dict[str, frozenset[NodeName]]:
        """The nodes of every domain of topology label `key`."""
        found = self._domain_members.get(key)
        if found is None:
            members: dict[str, set[NodeName]] = {}
            for name, node in self.snapshot.inventory.nodes.items():
                domain = node.labels.get(key)
                if domain is not None:
                    members.setdefault(domain, set()).add(name)
            found = {domain: frozenset(nodes) for domain, nodes in members.items()}
            self._domain_members[key] = found
        return found

    def evicting(self, device_class: str) -> list[RunningJob]:
        """Gangs of the class already being evicted: capacity that is coming free (rule 6)."""
        if self._evicting is None:
            self._evicting = {}
            for gang in self.snapshot.running:
                if gang.is_evicting:
                    self._evicting.setdefault(gang.device_class, []).append(gang)
        return self._evicting.get(device_class, [])

    def expected_start(
        self,
        shape: placement.Shape,
        *,
        excluded: frozenset[DeviceId],
        held_room: dict[NodeName, Room],
    ) -> float | None:
        """When the shape fits if nobody is evicted: running gangs leave at their predicted
        ends (the search a backfill reservation makes), None if it never fits."""
        cache_key = (shape, excluded)
        if cache_key in self.expected_starts:
            return self.expected_starts[cache_key]
        found = backfill.earliest_start(
            shape,
            pool=self.pool,
            releases=self.releases(),
            now=self.now,
            excluded=excluded,
            held_room=held_room,
        )
        start = None if found is None else found.at
        self.expected_starts[cache_key] = start
        return start

    def running_releases(self) -> backfill.Releases:
        """Snapshot gangs by the time they free their devices (built once, sorted lazily)."""
        if self._running_releases is None:
            self._running_releases = backfill.Releases(
                self.snapshot.running, tiers=self.tiers, now=self.now
            )
        return self._running_releases

    def releases(self) -> Iterator[tuple[float, RunningJob]]:
        """Every gang that will free devices, earliest first: snapshot gangs and this cycle's
        admissions, less the gangs a preemptor of this cycle already counts on."""
        return (
            (end, gang)
            for end, gang in heapq.merge(
                self.running_releases(), self.admitted_releases, key=backfill.release_order
            )
            if gang.key not in self.claimed
        )
