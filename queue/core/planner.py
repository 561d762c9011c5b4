"""Cycles whose input did not change, answered from the last one.

The controller steps on every cache change and on a timer: in a busy cluster most steps see
pods of running gangs change state while the queue, the gangs holding devices and the
inventory stay as they were. `run_cycle` is pure, and between two instants its decisions
change only at times the input itself names: where the cycle said so
(`CycleResult.decide_again_at`: a reclaim or a grow starts to pay, a serving place frees), where
a tier's protection or preemption delay ends (`protection_ends`), and where a gang outlives
its predicted end or its eviction grace runs out, which moves the backfill plans
(`plans_move_at`). Before the first of those, an equal snapshot gets the last result back
instead of a cycle whose cost grows with the cluster (a few hundred milliseconds at 8,000
nodes, however short the queue), for at most `REUSE_LIMIT_S`. The simulator decides at its
events and those same instants only, with `run_cycle` itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gangq.queue.core import backfill, cycle
from gangq.queue.core.cel import DeviceMatcher
from gangq.queue.core.model import CycleResult, Policy, Snapshot, Tier

REUSE_LIMIT_S = 10.0
"""The longest an answer is reused, whatever the input says: twice the default cycle
interval. Its reasons count down to a reserved start or a reclaim ("starts in ~40m"), and a
few decisions move with time at instants no cycle names: a borrower that would end before
the devices owed to others free up stops doing so as its own end moves later (module
`borrowing`). Replaying three days of PAI seed 5 at load 1.15 with a minute here, 1 of 184
reused answers differed from a fresh cycle's, in a reservation; this bounds such a lag to
what the cycle interval always allowed."""


def protection_ends(snapshot: Snapshot, *, tiers: Mapping[str, Tier], now: float) -> float | None:
    """After `now`, when the first gang a pending job could preempt outgrows its tier's
    protection, or the first pending job has waited out its tier's preemption delay."""
    if not snapshot.pending:
        return None
    top = max(tiers[job.tier].rank for job in snapshot.pending)
    ends = [
        end
        for job in snapshot.running
        if tiers[job.tier].rank < top
        and (end := job.started_at + tiers[job.tier].min_runtime_before_preemption_s) > now
    ]
    for job in snapshot.pending:
        if (end := job.submitted_at + tiers[job.tier].preemption_delay_s) > now:
            ends.append(end)
    return min(ends, default=None)


def plans_move_at(snapshot: Snapshot, *, tiers: Mapping[str, Tier], now: float) -> float | None:
    """After `now`, when the first gang's expected end moves (`backfill.end_of`): it outlives
    its prediction, or an evicted gang's checkpoint grace ends."""
    first = math.inf
    for job in snapshot.running:
        end = backfill.end_of(job, tiers=tiers, now=now)
        if now < end < first:
            first = end
    return None if first == math.inf else first


@dataclass(slots=True)
class _Answer:
    snapshot: Snapshot
    policy: Policy
    decided_at: float
    result: CycleResult
    _until: float | None = None

    def holds_until(self) -> float:
        """The answer holds for an equal input before this instant. Found when first asked,
        so a cycle whose input changes by the next step (most of them, when jobs arrive)
        pays nothing for it: the walk over every gang and queued job is paid at an answer's
        first reuse, in place of a whole cycle."""
        if self._until is None:
            self._until = _until(self.snapshot, self.policy, self.decided_at, self.result)
        return self._until


class Planner:
    """`run_cycle` with the last answer kept: one per controller (or simulated world), like the
    `DeviceMatcher` it carries."""

    __slots__ = ("_last", "matcher", "reused")

    def __init__(self, matcher: DeviceMatcher | None = None) -> None:
        self.matcher = matcher if matcher is not None else DeviceMatcher()
        self._last: _Answer | None = None
        self.reused = 0
        """Cycles answered from the last one so far."""

    def run(self, *, snapshot: Snapshot, policy: Policy, now: float) -> CycleResult:
        last = self._last
        if (
            last is not None
            and last.decided_at <= now < last.decided_at + REUSE_LIMIT_S
            and last.policy == policy
            and last.snapshot == snapshot
            and now < last.holds_until()
        ):
            self.reused += 1
            return last.result
        result = cycle.run_cycle(snapshot=snapshot, policy=policy, now=now, matcher=self.matcher)
        self._last = _Answer(snapshot, policy, now, result)
        return result


def _until(snapshot: Snapshot, policy: Policy, now: float, result: CycleResult) -> float:
    tiers = {tier.name: tier for tier in policy.tiers}
    times = [
        result.decide_again_at,
        protection_ends(snapshot, tiers=tiers, now=now),
        plans_move_at(snapshot, tiers=tiers, now=now),
    ]
    return min((t for t in times if t is not None), default=math.inf)
