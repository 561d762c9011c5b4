"""What a borrower leaves to tenants under their nominal quota.

Owns the checks a job above its tenant's nominal quota passes before it may take free devices
(module `owed` keeps the demand they protect): it leaves as many free devices as other tenants
are owed, or ends before those tenants could use them; and, with `Policy.unsaved_borrow_s`, a
borrower without checkpoints leaves part of the others' unused nominal quota. The cycle acts on
the answers; nothing here admits or evicts.
"""

from __future__ import annotations

import heapq
import math

from gangq.queue.core import backfill, explain
from gangq.queue.core.model import PendingJob
from gangq.queue.core.state import CycleState


def leaves_owed(job: PendingJob, *, state: CycleState) -> bool:
    """A borrower leaves as many free devices as other tenants are owed, or ends before
    they could use them."""
    owed = state.owed.to_others(job.tenant, job.device_class)
    free = state.pool.free_count(job.device_class)
    if free - job.device_count >= owed:
        return True
    return ends_before_owed(job, owed=owed, free=free, state=state)


def ends_before_owed(job: PendingJob, *, owed: int, free: int, state: CycleState) -> bool:
    """A borrower predicted to end before the owed devices could all be free, even with its
    own, takes nothing the owed jobs could use sooner: like a job backfilled before a
    reservation, it may run on them. Counted over the predicted ends of running gangs (a
    lower bound on when the owed jobs could start; those that fit now keep their holds)."""
    end = state.end_if_admitted(job)
    if end == math.inf:
        return False
    memo_key = (job.device_class, owed, free, end)
    known = state.ends_before_owed.get(memo_key)
    if known is not None:
        return known
    coming = free
    for release_end, gang in heapq.merge(
        state.running_releases(), state.admitted_releases, key=backfill.release_order
    ):
        if release_end >= end or coming >= owed:
            break
        if gang.device_class == job.device_class and gang.key not in state.claimed:
            coming += gang.device_count
    found = state.ends_before_owed[memo_key] = coming < owed
    return found


def risks_reclaim(job: PendingJob, *, state: CycleState) -> bool:
    """With `Policy.unsaved_borrow_s`: a borrower without checkpoints takes devices other
    tenants may claim within nominal, and a reclaim then destroys its whole run or (rule 6,
    when that costs more than the reclaimer's wait) keeps that tenant from its nominal quota
    until it ends. The longer it runs, the likelier that is: it leaves free the share
    `run / unsaved_borrow_s` of their unused nominal quota. True (the reason recorded) when
    it must wait although it fits; a job that does not fit waits for capacity and gets its
    reservation as any other (it is judged again when it fits). Serving tiers restart
    without losing a run, so they are exempt."""
    horizon = state.policy.unsaved_borrow_s
    if horizon is None or job.checkpoint_interval_s is not None:
        return False
    if state.tiers[job.tier].long_running:
        return False
    run = state.end_if_admitted(job) - state.now
    unused = state.book.unused_nominal(job.device_class, besides=job.tenant)
    left = unused if run >= horizon else int(unused * run / horizon)
    free = state.pool.free_count(job.device_class)
    if free - job.device_count >= left:
        return False
    state.pending[job.key] = explain.unsaved_borrow(
        tenant=job.tenant,
        run_s=None if run == math.inf else run,
        needed=job.device_count,
        free=free,
        left=left,
        device_class=job.device_class,
    )
    return True


def owed_reason(job: PendingJob, *, state: CycleState) -> explain.PendingReason:
    return explain.owed(
        tenant=job.tenant,
        needed=job.device_count,
        free=state.pool.free_count(job.device_class),
        owed=state.owed.to_others(job.tenant, job.device_class),
        device_class=job.device_class,
    )
