"""Devices owed to tenants waiting within their nominal quota, which borrowing may not take.

PRODUCT §3 lets a tenant borrow devices "while they are idle". Devices a tenant under its
nominal quota is waiting for are not idle: if a borrower took them, that tenant would reclaim
them (rule 6), the borrower would queue again ahead of it (rule 4 orders by tier first) and take
the freed devices back, and the two would evict each other forever. So a borrowing admission
must leave free, in its device class, the devices owed to other tenants: per tenant, the
smaller of its pending within-nominal demand and its room below nominal.

Two checks, both needed: a count (free devices of the class minus the borrower's must cover
what others are owed, which also covers demand that only evictions can meet) and concrete holds
(the owed jobs that fit now get tentative placements borrowers must leave alone, since a count
cannot see that a borrower spread over the nodes leaves no node with room for a 4-device job).
A job that could never be placed still counts, bounded by its tenant's room below nominal.
The count yields, as a backfill reservation does, to a borrower predicted to end before the
free devices plus those released by running gangs' predicted ends could cover what is owed:
it takes nothing the owed jobs could use sooner (the cycle checks that; the holds stay).

The same holds for preemption: a borrowing preemptor may evict only borrowed use of other
tenants (`preemption.is_eligible`) and must leave what is owed once its victims are gone, so a
reclaim or an eviction never targets devices the preemptor could not then get; and a borrower
held back here gets no backfill reservation (it would hold the owed devices against the very
jobs they are owed to).

This is the stateless choice: it needs nothing from earlier cycles (no nominated capacity, as
kube-scheduler's nominatedNodeName, that would have to outlive the cycle and the preemptor),
and it is deterministic.

Owns the per-cycle ledger of that demand and the holds; the cycle decides what to do with them.
"""

from __future__ import annotations

from collections.abc import Iterable

from gangq.queue.core import placement
from gangq.queue.core.backfill import Room
from gangq.queue.core.device import DeviceId
from gangq.queue.core.model import JobKey, NodeName, PendingJob, RunningJob, Tenant
from gangq.queue.core.pool import Pool
from gangq.queue.core.quota import QuotaBook

Held = tuple[frozenset[DeviceId], dict[NodeName, Room]]
"""Devices and node room (cpu, memory, pods) borrowers must leave alone."""

PLACEMENT_BUDGET = 16
"""Owed jobs tried for a hold per tenant of a borrower, and jobs per owed tenant considered:
beyond it the count check alone protects them (a later cycle holds for them once earlier ones
run)."""


class OwedDemand:
    """Pending within-nominal demand per device class and tenant, settled as jobs get devices.
    What each tenant is owed is kept per class with its total, so the check on a borrowing
    admission costs two lookups."""

    def __init__(self, *, book: QuotaBook) -> None:
        self._book = book
        self._demand: dict[str, dict[Tenant, int]] = {}
        self._owed: dict[str, dict[Tenant, int]] = {}
        self._total: dict[str, int] = {}
        self._counted: dict[JobKey, int] = {}
        """Devices each job counts for in the demand: what settling it takes back (an
        elastic job may get fewer than it was expected with)."""
        self._jobs: dict[str, list[PendingJob]] = {}
        self._held_for_others: dict[tuple[str, Tenant], Held] = {}
        self._sorted: dict[str, tuple[list[placement.Shape], list[tuple[PendingJob, int]]]] = {}

    def expect(self, jobs: Iterable[PendingJob]) -> None:
        """Count the pending jobs their tenants may run and stay within nominal with (only such
        jobs may reclaim), once per cycle before any is decided."""
        counted = self._counted
        for job in jobs:
            by_class = self._demand.get(job.device_class)
            if by_class is None:
                by_class = self._demand[job.device_class] = {}
                self._jobs[job.device_class] = []
            by_class[job.tenant] = by_class.get(job.tenant, 0) + job.device_count
            counted[job.key] = job.device_count
            self._jobs[job.device_class].append(job)
        for device_class, by_tenant in self._demand.items():
            for tenant in by_tenant:
                self._refresh(tenant, device_class)

    def settle(self, job: PendingJob) -> None:
        """The job got its devices (admitted, or held while its victims leave) and its tenant's
        use grew: call after charging the quota ledger."""
        counted = self._counted.pop(job.key, None)
        if counted is not None:
            self._demand[job.device_class][job.tenant] -= counted
        if job.tenant in self._demand.get(job.device_class, {}):
            self._refresh(job.tenant, job.device_class)

    def to_others(
        self, tenant: Tenant, device_class: str, *, evicted: Iterable[RunningJob] = ()
    ) -> int:
        """Devices of the class that tenants other than `tenant` are owed right now, or once
        the `evicted` gangs are gone and queue again (those within nominal then are owed too:
        a borrower that evicts them could never get their devices)."""
        owed = self._owed.get(device_class, {})
        now = self._total.get(device_class, 0) - owed.get(tenant, 0)
        freed: dict[Tenant, int] = {}
        for gang in evicted:
            if gang.device_class == device_class and gang.tenant != tenant:
                freed[gang.tenant] = freed.get(gang.tenant, 0) + gang.device_count
        for other, count in freed.items():
            now += self._owed_to(other, device_class, freed=count) - owed.get(other, 0)
        return now

    def of(self, tenant: Tenant, device_class: str) -> int:
        """Devices of the class the tenant is owed right now (its waiting within-nominal
        demand, capped by its room below nominal)."""
        return self._owed.get(device_class, {}).get(tenant, 0)

    def _owed_to(self, tenant: Tenant, device_class: str, *, freed: int = 0) -> int:
        """The tenant's demand (plus `freed` devices of its gangs that would queue again),
        capped by its room below nominal once those gangs are gone."""
        waiting = self._demand.get(device_class, {}).get(tenant, 0) + freed
        used = self._book.in_use(tenant, device_class) - freed
        room = self._book.quota(tenant, device_class).nominal - used
        return max(0, min(waiting, room))

    def _refresh(self, tenant: Tenant, device_class: str) -> None:
        owed = self._owed.setdefault(device_class, {})
        before = owed.get(tenant, 0)
        owed[tenant] = self._owed_to(tenant, device_class)
        self._total[device_class] = self._total.get(device_class, 0) + owed[tenant] - before

    def held_for_others(self, tenant: Tenant, device_class: str, *, pool: Pool) -> Held:
        """What a borrower of `tenant` must leave alone for the owed jobs of other tenants.
        Placed once per class, tenant and cycle, on the pool as that tenant's first borrower
        finds it; holds of jobs admitted since stay harmless (their devices are taken)."""
        cache_key = (device_class, tenant)
        found = self._held_for_others.get(cache_key)
        if found is None:
            found = self._held_for_others[cache_key] = self._place(
                device_class, pool=pool, besides=tenant
            )
        return found

    def _place(self, device_class: str, *, pool: Pool, besides: Tenant) -> Held:
        """Tentative placements of the owed jobs of tenants other than `besides`, each tenant
        up to what it is owed; biggest replicas first, so they pack as tightly as they can."""
        owed = self._owed.get(device_class, {})
        left = sum(count for tenant, count in owed.items() if tenant != besides)
        taken: set[DeviceId] = set()
        room: dict[NodeName, Room] = {}
        counts: dict[Tenant, int] = {}
        failed: set[int] = set()
        shapes, jobs = self._by_size(device_class)
        budget = PLACEMENT_BUDGET
        for job, kind in jobs:
            if budget <= 0 or left <= 0 or len(failed) == len(shapes):
                break
            if (
                job.tenant == besides
                or kind in failed
                or job.key not in self._counted
                or counts.get(job.tenant, 0) + job.device_count > owed.get(job.tenant, 0)
            ):
                continue
            budget -= 1
            shape = shapes[kind]
            choice = placement.place(shape, pool, excluded=frozenset(taken), held_room=room)
            if not isinstance(choice, list):
                failed.add(kind)
                continue
            counts[job.tenant] = counts.get(job.tenant, 0) + job.device_count
            left -= job.device_count
            pod = (shape.pod.cpu_milli, shape.pod.memory_bytes, 1)
            for node, devices in choice:
                taken.update(device.id for device in devices)
                room[node] = _added(room.get(node, (0, 0, 0)), pod)
        return frozenset(taken), room

    def _by_size(
        self, device_class: str
    ) -> tuple[list[placement.Shape], list[tuple[PendingJob, int]]]:
        """The first `PLACEMENT_BUDGET` owed jobs of each tenant of the class, biggest replicas
        first, with the index of their shape among the distinct shapes (built once per cycle:
        no tenant gets more holds than that anyway)."""
        found = self._sorted.get(device_class)
        if found is None:
            per_tenant: dict[Tenant, int] = {}
            candidates = []
            for job in self._jobs.get(device_class, ()):
                if per_tenant.get(job.tenant, 0) < PLACEMENT_BUDGET:
                    per_tenant[job.tenant] = per_tenant.get(job.tenant, 0) + 1
                    candidates.append(job)
            candidates.sort(
                key=lambda job: (-job.devices_per_replica, -job.replicas, job.submitted_at, job.uid)
            )
            index: dict[placement.Shape, int] = {}
            kinds = [index.setdefault(placement.Shape.of(job), len(index)) for job in candidates]
            found = self._sorted[device_class] = (
                list(index),
                list(zip(candidates, kinds, strict=True)),
            )
        return found


def _added(room: Room, extra: Room) -> Room:
    return (room[0] + extra[0], room[1] + extra[1], room[2] + extra[2])
