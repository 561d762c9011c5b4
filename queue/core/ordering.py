"""Queue order (PRODUCT rule 4) and victim order (rule 6), as sort keys.

Owns the comparison chains only; the criteria in each docstring are listed in code order. It
does not decide admissions; the order is lazy because an admission changes its tenant's share.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Protocol

from gangq.queue.core.model import PendingJob, RunningJob, Tenant


class Shares(Protocol):
    """What ordering reads from the quota ledger."""

    def is_within_nominal(
        self, tenant: Tenant, device_class: str, count: int | Fraction
    ) -> bool: ...

    def weighted_share(self, tenant: Tenant) -> float: ...


def tenant_order_key(job: PendingJob) -> tuple[int, float, str]:
    """Inside one tenant and tier: (1) priority, higher first; (2) submission time; (3) uid."""
    return (-job.priority, job.submitted_at, job.uid)


def head_key(job: PendingJob, *, shares: Shares) -> tuple[bool, float, int, float, str]:
    """Rule 4 between tenant heads of one tier, in this order:
    (1) tenants that stay within nominal with this job before borrowers;
    (2) weighted dominant share, lowest first; (3) priority, higher first;
    (4) submission time, earlier first; (5) uid, so equal jobs still have one order."""
    return (
        not shares.is_within_nominal(job.tenant, job.device_class, job.equivalent_milli),
        shares.weighted_share(job.tenant),
        -job.priority,
        job.submitted_at,
        job.uid,
    )


def in_queue_order(
    jobs: Iterable[PendingJob], *, ranks: Mapping[str, int], shares: Shares
) -> Iterator[PendingJob]:
    """Yield jobs by rule 4: tier (higher rank first), then `head_key` among tenant heads.

    Each tenant's jobs keep `tenant_order_key` order; after a job is yielded (and the caller
    has admitted it or not) that tenant's next head is keyed afresh, since its share may move.
    """
    by_tier: dict[str, dict[Tenant, list[PendingJob]]] = {}
    for job in jobs:
        by_tier.setdefault(job.tier, {}).setdefault(job.tenant, []).append(job)
    for tier in sorted(by_tier, key=lambda name: (-ranks[name], name)):
        queues = by_tier[tier]
        for queue in queues.values():
            queue.sort(key=tenant_order_key, reverse=True)
        heap = [(head_key(queue[-1], shares=shares), tenant) for tenant, queue in queues.items()]
        heapq.heapify(heap)
        while heap:
            _, tenant = heap[0]
            queue = queues[tenant]
            yield queue.pop()
            if queue:
                heapq.heapreplace(heap, (head_key(queue[-1], shares=shares), tenant))
            else:
                heapq.heappop(heap)


def victim_order_key(
    job: RunningJob, *, ranks: Mapping[str, int], now: float
) -> tuple[int, bool, float, int, float, str]:
    """Rule 6, the gang to evict first, in this order: (1) lower tier; (2) borrowed use before
    use within nominal; (3) least eviction cost (work since its last checkpoint, its restart
    and the work earlier evictions destroyed); (4) lower priority; (5) most recently started;
    (6) uid."""
    return (
        ranks.get(job.tier, 0),
        job.borrowed == 0,
        job.eviction_cost_device_s(now),
        job.priority,
        -job.started_at,
        job.uid,
    )
