"""FIFO gang admission baselines: strict (head-of-line blocking) and best effort (Kueue's
BestEffortFIFO: skip what does not fit, no reservations). Neither preempts.

Both admit whole gangs with the core's placement (`pool`, `placement`) and quota ledger
(`quota`), so the comparison with gangq isolates ordering, backfill and preemption. Order:
tier (as a priority class would), then submission time, then job key.
"""

from __future__ import annotations

from gangq.queue.core import explain, placement, quota, sharing
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.model import (
    DEFAULT_TIERS,
    Admission,
    CycleResult,
    JobKey,
    PendingJob,
    Snapshot,
    Tenant,
)
from gangq.queue.core.pool import Pool

_RANKS = {tier.name: tier.rank for tier in DEFAULT_TIERS}
NO_ROOM = explain.PendingReason(
    explain.ReasonCode.CAPACITY, "capacity: no placement", explain.WaitCause.CAPACITY
)
BEHIND = explain.PendingReason(
    explain.ReasonCode.BACKFILL, "backfill: behind the head of the line", explain.WaitCause.BACKFILL
)
"""Strict FIFO: the job ahead holds every device, as a reservation of the whole cluster."""
OVER_LIMIT = explain.PendingReason(
    explain.ReasonCode.QUOTA, "quota: over the tenant's limit", explain.WaitCause.LIMIT
)


def fifo_key(job: PendingJob) -> tuple[int, float, str]:
    """(1) tier, higher first; (2) submission time, earlier first; (3) job key."""
    return (-_RANKS.get(job.tier, 0), job.submitted_at, job.key)


class FifoPolicy:
    """Gang admission in FIFO order; `strict` stops at the first job that does not fit. It
    starts every job at its `replicas`, an elastic one's too."""

    whole_gangs = True
    serving_tiers: frozenset[str] = frozenset()

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self.name = "fifo-strict" if strict else "fifo-besteffort"
        self.matcher = DeviceMatcher()

    def decide(self, snapshot: Snapshot, *, now: float) -> CycleResult:
        """Quota-refused jobs wait without blocking other tenants (a queue per tenant, as in
        Kueue); in strict mode a job that finds no placement blocks every job behind it."""
        pool = Pool(inventory=snapshot.inventory, running=snapshot.running, matcher=self.matcher)
        book = quota.QuotaBook(
            quotas=snapshot.quotas, running=snapshot.running, weigh=pool.weigher()
        )
        admissions: list[Admission] = []
        pending: dict[JobKey, explain.PendingReason] = {}
        blocked_tenants: set[Tenant] = set()
        ordered = sorted(snapshot.pending, key=fifo_key)
        for index, queued in enumerate(ordered):
            if queued.tenant in blocked_tenants:
                pending[queued.key] = BEHIND
                continue
            job = pool.weighed(queued) if pool.partitioned else queued
            refusal = book.refusal(job)
            if refusal is not None:
                pending[job.key] = refusal
                if self.strict:
                    blocked_tenants.add(job.tenant)
                continue
            shape = placement.Shape.of(job)
            choice = placement.place(shape, pool)
            if isinstance(choice, placement.Shortfall):
                pending[job.key] = NO_ROOM
                if self.strict:
                    pending.update((behind.key, BEHIND) for behind in ordered[index + 1 :])
                    break
                continue
            replicas = placement.as_placement(choice, shape, pool)
            held = pool.held_equivalent(replicas) if pool.partitioned else job.equivalent_milli
            borrowed = book.borrowed(job.tenant, job.device_class, held)
            for replica in replicas:
                pool.take(replica.node, replica.devices, job.pod, shares=replica.shares)
            book.charge(job.tenant, job.device_class, held)
            admissions.append(
                Admission(
                    job=job.key, placement=replicas, borrowed=int(-(-borrowed // sharing.WHOLE))
                )
            )
        return CycleResult(admissions=tuple(admissions), pending=pending)

    def wake_at(self, snapshot: Snapshot, *, now: float) -> float | None:
        """Nothing changes without an event: no preemption, no protection windows."""
        return None
